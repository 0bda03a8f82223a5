"""``kafkaguard run``, ``demo`` and ``check-config``: start the proxy (one process, or a
supervisor and its workers) from a configuration file, or check that file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from logging import ERROR
from pathlib import Path

import yaml

from kafkaguard.config_tree import ConfigError, collecting
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.app.config_files import check_files, check_store_topics
from kafkaguard.proxy.app.log_format import SUPERVISOR, configure_logging, console, set_worker
from kafkaguard.proxy.app.server import (
    ProxyServer,
    install_event_loop_policy,
    raise_open_file_limit,
)
from kafkaguard.proxy.app.workers import Supervisor
from kafkaguard.proxy.config import (
    LOG_FORMATS,
    HostPort,
    ProxyConfig,
    config_warnings,
    load_config,
)
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError
from kafkaguard.proxy.sasl.oauthbearer import KeyLoadError
from kafkaguard.proxy.sasl.scram import CredentialFormatError
from kafkaguard.proxy.sasl.zookeeper_credentials import ZooKeeperCredentialError

DEMO_FILES = Path(__file__).parents[1] / "demo"

log = logging.getLogger("kafkaguard")

_STARTUP_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConfigError,
    AclStoreError,
    UpstreamAuthenticationError,
    ZooKeeperCredentialError,
    KeyLoadError,
    CredentialFormatError,
)


async def _serve(
    config: ProxyConfig,
    pid_file: Path | None = None,
    *,
    worker: int = 0,
    serving: Callable[[], None] | None = None,
) -> None:
    """One proxy process: the only one, or worker ``worker`` (then ``serving`` tells the
    supervisor it serves, and the supervisor keeps the pid file)."""
    from kafkaguard.tansu import TansuBroker

    broker: TansuBroker | None = None
    if config.upstream.embedded:
        broker = TansuBroker()
        log.warning(
            "upstream.embedded: starting the in-memory Tansu broker on %s (demo only: every "
            "write is lost at exit)",
            broker.address,
        )
        await broker.__aenter__()
        config = replace(
            config,
            upstream=replace(config.upstream, bootstrap_servers=(broker.address,)),
        )
    server = ProxyServer(config, embedded_upstream=broker is not None, worker=worker)
    try:
        await server.start()
        for listener in server.listeners if worker == 0 else ():
            console(  # the one line a user of the demo needs
                f"kafkaguard listener {listener.config.name}: bootstrap "
                f"{HostPort(listener.config.advertised_host, listener.bootstrap_port)}",
                config.log_format,
            )
        # Until SIGTERM/SIGINT, then the graceful drain (requests in flight answered for up to
        # shutdown_timeout_ms; a second signal cuts it short). close() then flushes the audit
        # trail; the process exits 0. SIGHUP reloads (kafkaguard/proxy/app/reload.py); the pid
        # file is written once it can.
        if pid_file is not None:
            serving = partial(_write_pid_file, pid_file)
        await server.serve_forever(serving=serving)
    finally:
        await server.close()
        if broker is not None:
            broker.stop()
        if pid_file is not None:
            _remove_pid_file(pid_file)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="YAML configuration")
    parser.add_argument(
        "--pid-file",
        type=Path,
        help="write the process id here once serving (for kafkaguard reload); removed at exit",
    )


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path("kafkaguard-demo"),
        help="where the sample config.yaml and acls.yaml are copied (kept if present)",
    )


def run(config_path: Path, pid_file: Path | None = None) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        fmt = _declared_log_format(config_path)
        console(f"kafkaguard: configuration error: {exc}", fmt, level=ERROR, error=True)
        return 2
    configure_logging(config.log_level, config.log_format)
    raise_open_file_limit()
    loop_name = install_event_loop_policy()
    if config.workers > 1:
        set_worker(SUPERVISOR)  # before its first line: the workers' lines say 0, 1, ...
    log.info("event loop: %s", loop_name)
    if config.workers == 1:
        return _run_process(config, pid_file)
    log.info("starting %d workers sharing each listener port", config.workers)

    def serve(worker: int, serving: Callable[[], None]) -> int:
        set_worker(worker)
        return _run_process(_worker_config(config_path, config), worker=worker, serving=serving)

    supervisor = Supervisor(
        config.workers,
        serve,
        serving=None if pid_file is None else partial(_write_pid_file, pid_file),
    )
    try:
        return supervisor.run()
    finally:
        if pid_file is not None:
            _remove_pid_file(pid_file)


def _declared_log_format(path: Path) -> str:
    """``logging.format`` as a file that does not load states it, for the line saying why:
    a log pipeline reading JSON lines gets that one as JSON too. ``text`` when the file does
    not say or cannot be read."""
    try:
        with path.open(encoding="utf-8") as file:
            fmt = yaml.safe_load(file)["logging"]["format"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return "text"
    return fmt if fmt in LOG_FORMATS else "text"


def _worker_config(path: Path, launched: ProxyConfig) -> ProxyConfig:
    """The file as it is when a worker starts (a worker started again after a reload runs the
    reloaded file); the one read at launch if it is no longer valid."""
    try:
        return load_config(path)
    except ConfigError as exc:
        log.error(
            "%s is not valid any more (%s): the worker runs the launch configuration", path, exc
        )
        return launched


def _run_process(
    config: ProxyConfig,
    pid_file: Path | None = None,
    *,
    worker: int = 0,
    serving: Callable[[], None] | None = None,
) -> int:
    """Serve until stopped (0), or fail to start (1)."""
    try:
        asyncio.run(_serve(config, pid_file, worker=worker, serving=serving))
    except _STARTUP_ERRORS as exc:
        # Expected start failures (unreachable upstream, refused upstream credentials, ACL
        # store or credential source not loadable, key files): one clear line, no traceback.
        log.debug("start failed", exc_info=True)
        console(f"kafkaguard: cannot start: {exc}", config.log_format, level=ERROR, error=True)
        return 1
    return 0


def prepare_demo(directory: Path) -> Path:
    """Copy the sample config and ACLs into ``directory`` (never overwriting an edited copy),
    so the demo's ACL file can be changed with ``kafkaguard acls`` and reloads live."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "acls.yaml"):
        target = directory / name
        if not target.exists():
            shutil.copyfile(DEMO_FILES / name, target)
    return directory / "config.yaml"


def check_config(config_path: Path) -> int:
    """Errors refuse the file (exit 2), a referenced file ``run`` would refuse included
    (kafkaguard/proxy/app/config_files.py); warnings name what may still go wrong with a
    valid file (a ``broker_ports.base`` range reaching another port, ``config_warnings``)."""
    try:
        config = load_config(config_path)
        with collecting():  # every file that run would refuse, not only the first
            check_files(config)
        store_warnings = check_store_topics(config)
    except ConfigError as exc:
        print(f"kafkaguard: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    for warning in [*config_warnings(config), *store_warnings]:
        print(f"kafkaguard: warning: {config_path}: {warning}", file=sys.stderr)  # noqa: T201
    print(f"{config_path}: ok")  # noqa: T201
    return 0


def _write_pid_file(path: Path) -> None:
    """Written whole or not at all: a reader never sees half a number."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(f"{os.getpid()}\n", encoding="ascii")
    partial.replace(path)


def _remove_pid_file(path: Path) -> None:
    """Remove the pid file if it still names this process (a newer proxy may have taken it)."""
    try:
        if path.read_text(encoding="ascii").strip() == str(os.getpid()):
            path.unlink()
    except OSError:
        pass
