"""``kafkaguard`` command line: run, demo, check-config, reload, acls, certs, users, explain.

Each sub-command is one ``add_parser`` in :func:`build_parser` whose ``handler`` default is
the function :func:`main` calls with the parsed arguments (returning the exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from kafkaguard.audit.config import LOG_ONLY
from kafkaguard.audit.spark import main as analyze_main  # imports pyspark only when run
from kafkaguard.certs import cli as certs_cli
from kafkaguard.config_tree import ConfigError
from kafkaguard.policy import acls_cli
from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import build_authorizer
from kafkaguard.policy.explain import (
    Explanation,
    decision_context,
    explain,
    explanation_json,
    render_text,
)
from kafkaguard.policy.model import CLUSTER_NAME, AclOperation, ResourcePattern, ResourceType
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.app import users_cli
from kafkaguard.proxy.app.log_format import configure_logging
from kafkaguard.proxy.app.server import (
    ProxyServer,
    install_event_loop_policy,
    raise_open_file_limit,
)
from kafkaguard.proxy.app.workers import Supervisor
from kafkaguard.proxy.config import (
    HostPort,
    ListenerConfig,
    ProxyConfig,
    UpstreamConfig,
    config_warnings,
    load_config,
)
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError
from kafkaguard.proxy.sasl.oauthbearer import KeyLoadError
from kafkaguard.proxy.sasl.scram import CredentialFormatError
from kafkaguard.proxy.sasl.zookeeper_credentials import ZooKeeperCredentialError

DEMO_FILES = Path(__file__).parent / "demo"

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
    if not config.upstream.bootstrap_servers:
        broker = TansuBroker()
        log.info("no upstream configured: starting the embedded Tansu broker on %s", broker.address)
        await broker.__aenter__()
        config = replace(
            config, upstream=UpstreamConfig((broker.address,), config.upstream.connect_timeout_s)
        )
    server = ProxyServer(config, embedded_upstream=broker is not None, worker=worker)
    try:
        await server.start()
        for listener in server.listeners if worker == 0 else ():
            print(  # noqa: T201 - the one line a user of the demo needs
                f"kafkaguard listener {listener.config.name}: bootstrap "
                f"{HostPort(listener.config.advertised_host, listener.bootstrap_port)}",
                flush=True,
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


def _run(config_path: Path, pid_file: Path | None = None) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"kafkaguard: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    configure_logging(config.log_level, config.log_format)
    raise_open_file_limit()
    loop_name = install_event_loop_policy()
    log.info("event loop: %s", loop_name)
    if config.workers == 1:
        return _run_process(config, pid_file)
    log.info("starting %d workers sharing each listener port", config.workers)

    def serve(worker: int, serving: Callable[[], None]) -> int:
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
        print(f"kafkaguard: cannot start: {exc}", file=sys.stderr)  # noqa: T201
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


def _check_config(config_path: Path) -> int:
    """Errors refuse the file (exit 2); warnings name what may still go wrong with a valid
    file (a ``broker_ports.base`` range reaching another port, ``config_warnings``)."""
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"kafkaguard: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    for warning in config_warnings(config):
        print(f"kafkaguard: warning: {config_path}: {warning}", file=sys.stderr)  # noqa: T201
    print(f"{config_path}: ok")  # noqa: T201
    return 0


# -- reload -------------------------------------------------------------------------------

_RELOAD_DESCRIPTION = """\
Check a configuration file as check-config does, then send SIGHUP to the running proxy
(kafkaguard run --pid-file P writes its process id to P). The proxy re-reads its ACL store
and the configuration file it was started with, which must be this file.

Applied without a restart: authorizer super_users, allow_everyone_if_no_acl_found and
extensions (per-listener overrides, host_cidr); enforcement, top level and per listener;
limits, except authentication_threads and authentication_queue_size; logging level and
format; shutdown_timeout_ms; listeners added (opened, then accepting) or removed (drained as
at shutdown; its port can be taken by a listener added in a later reload, not in the same).
New decisions on every connection follow the new authorizer settings and enforcement modes;
new connections get the new limits.

Kept until a restart (the proxy logs a WARNING naming each changed one): upstream; a
listener's bind_host, port, advertised_host, broker_ports, security_protocol, ssl and sasl;
admin, metrics, audit, acl_store; authorizer class and options; the two authentication pool
limits. Certificate and SASL credential files need no reload: they are re-read when they
change.

The proxy checks the file again: an invalid one is rejected, with the check-config error in
its log, and the running configuration stays. Outcomes are counted in
kafkaguard_config_reloads_total{result="applied"|"rejected"}.

Exit status: 0 signalled, 1 no such kafkaguard process, 2 invalid configuration (nothing is
signalled)."""


def _add_reload_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        required=True,
        help="the configuration file the proxy runs with, edited",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int, help="process id of kafkaguard run")
    target.add_argument("--pid-file", type=Path, help="the file kafkaguard run --pid-file wrote")


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


def _read_pid(path: Path) -> int:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the pid file {path}: {exc}") from exc
    if not text.isdigit():
        raise ValueError(f"the pid file {path} holds no process id")
    return int(text)


def _kafkaguard_config(argv: Sequence[str]) -> Path | None:
    """The configuration file of a ``kafkaguard run``/``demo`` command line; None for any
    other command line."""
    for index, word in enumerate(argv[1:], start=1):
        if word in ("run", "demo") and "kafkaguard" in Path(argv[index - 1]).name:
            try:
                args, _ = build_parser().parse_known_args(argv[index:])
            except SystemExit:  # argparse's way of refusing a command line
                return None
            return Path(args.config) if word == "run" else Path(args.dir) / "config.yaml"
    return None


def _check_target(pid: int, config_path: Path) -> None:
    """Refuse to signal a process that is not a proxy reading ``config_path``: SIGHUP ends a
    process that does not handle it. Linux only (``/proc``); elsewhere nothing is checked."""
    proc = Path("/proc") / str(pid)
    try:
        argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        cwd = Path(os.readlink(proc / "cwd"))
    except FileNotFoundError as exc:
        raise ProcessLookupError(f"no process {pid}") from exc
    except OSError:
        return  # no /proc, or another user's process: os.kill decides
    running = _kafkaguard_config([a for a in argv if a])
    if running is None:
        raise ValueError(f"process {pid} is not kafkaguard run: {' '.join(argv).strip()[:200]}")
    if (cwd / running).resolve() != config_path.resolve():
        raise ValueError(
            f"process {pid} runs with {cwd / running}, not {config_path}: it re-reads its own file"
        )


def _reload(args: argparse.Namespace) -> int:
    """``kafkaguard reload``: exit 0 once signalled, 1 no such process, 2 invalid file."""
    code = _check_config(args.config)
    if code != 0:
        return code
    try:
        pid: int = args.pid if args.pid is not None else _read_pid(args.pid_file)
        _check_target(pid, args.config)
        os.kill(pid, signal.SIGHUP)
    except (OSError, ValueError) as exc:
        print(f"kafkaguard reload: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    print(  # noqa: T201
        f"sent SIGHUP to process {pid}: it reloads {args.config} and its ACL store "
        "(the outcome is in its log and in kafkaguard_config_reloads_total)"
    )
    return 0


# -- explain ------------------------------------------------------------------------------

_EXPLAIN_RESOURCES: tuple[tuple[str, ResourceType], ...] = (
    ("topic", ResourceType.TOPIC),
    ("group", ResourceType.GROUP),
    ("cluster", ResourceType.CLUSTER),
    ("transactional_id", ResourceType.TRANSACTIONAL_ID),
    ("delegation_token", ResourceType.DELEGATION_TOKEN),
    ("user", ResourceType.USER),
)
_EXPLAIN_LOAD_TIMEOUT_S = 60.0
_EXPLAIN_ANY_HOST = "0.0.0.0"
"""The host ``explain`` assumes without ``--host``: no client has it, so only ACLs whose host is
``*`` match it (most ACLs are)."""


def _add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="the proxy's configuration")
    parser.add_argument("--principal", required=True, help="e.g. User:alice")
    parser.add_argument(
        "--host",
        default=None,
        help=f"the client's IP address (default {_EXPLAIN_ANY_HOST}: only ACLs for host * match)",
    )
    parser.add_argument("--listener", help="listener name (default: the first configured)")
    parser.add_argument("--operation", required=True, help="e.g. READ, WRITE, DescribeConfigs")
    resource = parser.add_mutually_exclusive_group(required=True)
    resource.add_argument("--topic")
    resource.add_argument("--group")
    resource.add_argument("--cluster", action="store_const", const=CLUSTER_NAME)
    resource.add_argument("--transactional-id")
    resource.add_argument("--delegation-token")
    resource.add_argument("--user")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _explain_request(
    config: ProxyConfig, args: argparse.Namespace
) -> tuple[ListenerConfig, RequestContext, Action]:
    """The listener, KIP-504 context and action the arguments describe (ValueError if bad)."""
    listener = config.listeners[0]
    if args.listener is not None:
        names = [ls.name for ls in config.listeners]
        if args.listener not in names:
            raise ValueError(f"no listener {args.listener!r} (configured: {', '.join(names)})")
        listener = config.listeners[names.index(args.listener)]
    operation = AclOperation.parse(args.operation)
    if operation in (AclOperation.ANY, AclOperation.ALL):
        raise ValueError(f"{operation.name} is not an operation a request performs")
    resource_type, name = next(
        (kind, getattr(args, attr)) for attr, kind in _EXPLAIN_RESOURCES if getattr(args, attr)
    )
    context = decision_context(
        args.principal,
        args.host or _EXPLAIN_ANY_HOST,
        listener.name,
        SecurityProtocol(listener.security_protocol),
    )
    return listener, context, Action(operation, ResourcePattern(resource_type, name))


async def _explain_decision(
    config: ProxyConfig, listener: str, context: RequestContext, action: Action
) -> Explanation:
    """Load the authorizer and ACL store as ``kafkaguard run`` does, decide once, close."""
    authorizer = build_authorizer(config.policy)
    try:
        if not isinstance(authorizer, StandardAuthorizer):
            class_path = config.policy.authorizer.class_path
            raise ValueError(f"explain needs kafkaguard's StandardAuthorizer, not {class_path}")
        ready = authorizer.start([listener])
        await asyncio.wait_for(ready[listener], _EXPLAIN_LOAD_TIMEOUT_S)
        return explain(authorizer, context, action)
    finally:
        await authorizer.close()


def _explain(args: argparse.Namespace) -> int:
    """Exit 0 if the request would be allowed, 1 if denied, 2 on errors."""
    try:
        config = load_config(args.config)
        listener, context, action = _explain_request(config, args)
        explanation = asyncio.run(_explain_decision(config, listener.name, context, action))
    except (ConfigError, ValueError, AclStoreError, OSError, TimeoutError) as exc:
        print(f"kafkaguard explain: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    enforcement = config.listener_enforcement(listener)
    if args.json:
        document = explanation_json(explanation, context, action)
        document["listener_enforcement"] = enforcement
        print(json.dumps(document, indent=2))  # noqa: T201
    else:
        for line in render_text(explanation, context, action, config.policy.authorizer):
            print(line)  # noqa: T201
        if args.host is None:
            print(  # noqa: T201
                f"No --host given: assumed {_EXPLAIN_ANY_HOST}, which only ACLs for host * match"
            )
        if enforcement == LOG_ONLY:
            print(  # noqa: T201
                f"Listener {listener.name} is in log_only mode: the proxy forwards the request "
                "even when denied (audited with would_deny)"
            )
    return 0 if explanation.result is AuthorizationResult.ALLOWED else 1


# -- the command table ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkaguard", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the proxy")
    run.add_argument("--config", type=Path, required=True, help="YAML configuration")
    run.add_argument(
        "--pid-file",
        type=Path,
        help="write the process id here once serving (for kafkaguard reload); removed at exit",
    )
    run.set_defaults(handler=lambda args: _run(args.config, args.pid_file))
    demo = commands.add_parser(
        "demo", help="embedded Tansu broker + the proxy with the sample config and ACLs"
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=Path("kafkaguard-demo"),
        help="where the sample config.yaml and acls.yaml are copied (kept if present)",
    )
    demo.set_defaults(handler=lambda args: _run(prepare_demo(args.dir)))
    acls = commands.add_parser(
        "acls", help="add, remove and list ACLs in the configured store (like kafka-acls.sh)"
    )
    acls_cli.add_arguments(acls)
    acls.set_defaults(handler=acls_cli.run)
    certs = commands.add_parser(
        "certs", help="mint a development CA, server and client certificates (TLS listeners)"
    )
    certs_cli.add_arguments(certs)
    certs.set_defaults(handler=certs_cli.run)
    users = commands.add_parser(
        "users", help="add, remove and list SASL credentials (PLAIN, SCRAM-SHA-256/512)"
    )
    users_cli.add_arguments(users)
    users.set_defaults(handler=users_cli.run)
    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("--config", type=Path, required=True)
    check.set_defaults(handler=lambda args: _check_config(args.config))
    reload = commands.add_parser(
        "reload",
        help="check a configuration file, then have the running proxy reload it (SIGHUP)",
        description=_RELOAD_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_reload_arguments(reload)
    reload.set_defaults(handler=_reload)
    explain_parser = commands.add_parser(
        "explain",
        help="why a request is allowed or denied (exit 0 allowed, 1 denied, 2 error)",
    )
    _add_explain_arguments(explain_parser)
    explain_parser.set_defaults(handler=_explain)
    analyze = commands.add_parser(
        "analyze",
        help="audit analytics on Spark: compact (JSON to Parquet), report (HTML), propose "
        "ACLs, unused ACLs, whatif",
    )
    analyze_main.add_arguments(analyze)
    analyze.set_defaults(handler=analyze_main.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
