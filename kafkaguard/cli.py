"""``kafkaguard`` command line: run, demo, check-config (and acls, explain as they arrive)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from kafkaguard.certs import cli as certs_cli
from kafkaguard.config_tree import ConfigError
from kafkaguard.policy import acls_cli
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.config import HostPort, ProxyConfig, UpstreamConfig, load_config
from kafkaguard.proxy.sasl import cli as users_cli
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError
from kafkaguard.proxy.sasl.oauthbearer import KeyLoadError
from kafkaguard.proxy.sasl.scram import CredentialFormatError
from kafkaguard.proxy.sasl.zookeeper_credentials import ZooKeeperCredentialError
from kafkaguard.proxy.server import ProxyServer, install_event_loop_policy, raise_open_file_limit

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


async def _serve(config: ProxyConfig) -> None:
    from kafkaguard.tansu import TansuBroker

    broker: TansuBroker | None = None
    if not config.upstream.bootstrap_servers:
        broker = TansuBroker()
        log.info("no upstream configured: starting the embedded Tansu broker on %s", broker.address)
        await broker.__aenter__()
        config = replace(
            config, upstream=UpstreamConfig((broker.address,), config.upstream.connect_timeout_s)
        )
    server = ProxyServer(config)
    try:
        await server.start()
        for listener in server.listeners:
            print(  # noqa: T201 - the one line a user of the demo needs
                f"kafkaguard listener {listener.config.name}: bootstrap "
                f"{HostPort(listener.config.advertised_host, listener.bootstrap_port)}",
                flush=True,
            )
        await server.serve_forever()
    finally:
        await server.close()
        if broker is not None:
            broker.stop()


def _run(config_path: Path) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"kafkaguard: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    raise_open_file_limit()
    loop_name = install_event_loop_policy()
    log.info("event loop: %s", loop_name)
    try:
        asyncio.run(_serve(config))
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
    try:
        load_config(config_path)
    except ConfigError as exc:
        print(f"kafkaguard: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    print(f"{config_path}: ok")  # noqa: T201
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkaguard", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the proxy")
    run.add_argument("--config", type=Path, required=True, help="YAML configuration")
    demo = commands.add_parser(
        "demo", help="embedded Tansu broker + the proxy with the sample config and ACLs"
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=Path("kafkaguard-demo"),
        help="where the sample config.yaml and acls.yaml are copied (kept if present)",
    )
    acls = commands.add_parser(
        "acls", help="add, remove and list ACLs in the configured store (like kafka-acls.sh)"
    )
    acls_cli.add_arguments(acls)
    certs = commands.add_parser(
        "certs", help="mint a development CA, server and client certificates (TLS listeners)"
    )
    certs_cli.add_arguments(certs)
    users = commands.add_parser(
        "users", help="add, remove and list SASL credentials (PLAIN, SCRAM-SHA-256/512)"
    )
    users_cli.add_arguments(users)
    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("--config", type=Path, required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return _run(args.config)
    if args.command == "demo":
        return _run(prepare_demo(args.dir))
    if args.command == "acls":
        return acls_cli.run(args)
    if args.command == "certs":
        return certs_cli.run(args)
    if args.command == "users":
        return users_cli.run(args)
    if args.command == "check-config":
        return _check_config(args.config)
    raise AssertionError(args.command)  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
