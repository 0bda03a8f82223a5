"""``kafkaguard`` command line: run, demo, check-config, reload, acls, certs, users, explain.

Each sub-command is one ``add_parser`` in :func:`build_parser` whose ``handler`` default is
the function :func:`main` calls with the parsed arguments (returning the exit code). Each
command group has its module: ``serve`` (run, demo, check-config), ``reload``, ``explain``;
``acls``, ``certs``, ``users`` and ``analyze`` live with what they administer.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from kafkaguard import version
from kafkaguard.audit.spark import main as analyze_main  # imports pyspark only when run
from kafkaguard.certs import cli as certs_cli
from kafkaguard.cli import explain, reload, serve
from kafkaguard.policy import acls_cli
from kafkaguard.protocol import IMPLEMENTATION
from kafkaguard.proxy.app import users_cli

DESCRIPTION = """\
kafkaguard: a Kafka wire-protocol proxy that enforces Kafka's ACLs (principals, resources,
operations, as StandardAuthorizer) in front of a Kafka cluster that has none of its own."""

EPILOG = """\
Start with: kafkaguard check-config --config config.yaml, then kafkaguard run --config
config.yaml. Every key is documented in config.example.yaml; "kafkaguard demo" runs the
proxy in front of an in-memory broker with sample ACLs. Help on one command:
kafkaguard COMMAND --help."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkaguard", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--version",
        action="version",
        version=f"kafkaguard {version()} (protocol: {IMPLEMENTATION})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="run the proxy (SIGHUP reloads, SIGTERM drains and stops)"
    )
    serve.add_run_arguments(run)
    run.set_defaults(handler=lambda args: serve.run(args.config, args.pid_file))
    demo = commands.add_parser(
        "demo", help="embedded Tansu broker + the proxy with the sample config and ACLs"
    )
    serve.add_demo_arguments(demo)
    demo.set_defaults(handler=lambda args: serve.run(serve.prepare_demo(args.dir)))
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
    check = commands.add_parser(
        "check-config",
        help="validate a configuration file (exit 0 valid, 2 invalid), as run and reload do",
    )
    check.add_argument("--config", type=Path, required=True, help="YAML configuration")
    check.set_defaults(handler=lambda args: serve.check_config(args.config))
    reload_parser = commands.add_parser(
        "reload",
        help="check a configuration file, then have the running proxy reload it (SIGHUP)",
        description=reload.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reload.add_arguments(reload_parser)
    reload_parser.set_defaults(handler=reload.run)
    explain_parser = commands.add_parser(
        "explain",
        help="why a request is allowed or denied (exit 0 allowed, 1 denied, 2 error)",
    )
    explain.add_arguments(explain_parser)
    explain_parser.set_defaults(handler=explain.run)
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
