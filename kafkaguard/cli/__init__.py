"""``kafkaguard`` command line: run, demo, check-config, doctor, config-schema, reload, acls,
certs, users, explain, analyze.

Each sub-command is one ``add_parser`` in :func:`build_parser` whose ``handler`` default is
the function :func:`main` calls with the parsed arguments (returning the exit code). Each
command group has its module: ``serve`` (run, demo, check-config), ``doctor``, ``reload``,
``explain``; ``acls``, ``certs``, ``users`` and ``analyze`` live with what they administer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kafkaguard import version
from kafkaguard.audit.spark import main as analyze_main  # imports pyspark only when run
from kafkaguard.certs import cli as certs_cli
from kafkaguard.cli import config_schema, doctor, explain, reload, serve
from kafkaguard.policy import acls_cli
from kafkaguard.protocol import IMPLEMENTATION
from kafkaguard.proxy.app import store_migrate, users_cli

DESCRIPTION = """\
kafkaguard: a Kafka wire-protocol proxy that enforces Kafka's ACLs (principals, resources,
operations, as StandardAuthorizer) in front of a Kafka cluster that has none of its own."""

EPILOG = """\
Start with: kafkaguard check-config --config config.yaml, kafkaguard doctor --config
config.yaml (the upstream and ACL store as run would meet them), then kafkaguard run --config
config.yaml. Every key is documented in config.example.yaml; "kafkaguard demo" runs the
proxy in front of an in-memory broker with sample ACLs. Help on one command:
kafkaguard COMMAND --help."""


CONFIG_SCHEMA_DESCRIPTION = """\
Print a JSON Schema (draft 2020-12) of kafkaguard's configuration file on stdout: every key,
its type, choices, range (minimum, maximum) and default. Point your editor at it for
completion and validation, e.g. with the YAML language server:

  kafkaguard config-schema > kafkaguard.schema.json
  # first line of config.yaml:
  # yaml-language-server: $schema=./kafkaguard.schema.json

The schema checks keys and types; kafkaguard check-config remains the authority (it also
checks combinations of keys, values such as host:port, and every file the configuration
names)."""


DESCRIPTIONS = {
    "run": """\
Run the proxy with a configuration file (every key: config.example.yaml) until stopped.
SIGHUP reloads the configuration and the ACL store (prefer kafkaguard reload, which checks
the file first); SIGTERM or SIGINT stops accepting, lets requests in flight finish for up to
shutdown_timeout_ms, then exits (a second signal exits at once).
Exit status: 0 after a stop, 1 when the proxy cannot start (the reason on one line), 2 for an
invalid configuration.""",
    "demo": """\
Try kafkaguard without a Kafka cluster: copies a sample configuration and ACL file into
--dir (kept if already there, so your edits survive) and runs the proxy in front of an
in-memory broker on 127.0.0.1:9192. Everything written is lost at exit. Change the ACLs
with kafkaguard acls --config DIR/config.yaml while it runs.""",
    "acls": """\
Add, remove and list ACLs in the store a configuration names (acl_store: a file,
ZooKeeper or the _kafkaguard-acls topic), with kafka-acls.sh's options and meaning; copy
every ACL from one store to another (migrate --from/--to); or make a store, or a running
proxy, hold exactly the ACLs of a file of kafkaguard ACLs or Strimzi KafkaUser resources
(apply -f FILE [--prune] [--dry-run]). A running proxy picks changes up by itself.""",
    "certs": """\
Mint certificates for trying TLS listeners: a development CA, server certificates (with
the names clients connect to) and client certificates (whose subject becomes the principal).
For development and tests; use your own PKI in production.""",
    "users": """\
Manage the SASL users of a listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512): add or replace a
user's credentials, remove a user, list users. Only salted hashes are stored, in Kafka's SCRAM
format (a credentials file, ZooKeeper as Kafka keeps them, or the _kafkaguard-users topic).
A running proxy picks changes up by itself.""",
    "check-config": """\
Check a configuration file as run and reload would: every key and value, and every file it
names (certificates and keys, CA files, the ACL file, credentials, JWKS). Every error of the
file is reported, each naming the file, line and key, the value found and what is allowed.
Exit status: 0 valid (warnings may be printed), 2 invalid.""",
    "explain": """\
Tell why a principal may or may not perform an operation on a resource under the ACLs the
configuration's store holds now, the way the proxy decides: the ACLs that matched, super
users, allow_everyone_if_no_acl_found, and the CREATE a topic that does not exist also needs
(auto-creation). --ask-upstream asks the configuration's upstream whether the topic exists.
Exit status: 0 allowed, 1 denied, 2 error, 3 allowed only if the topic exists (not asked).""",
    "analyze": """\
Audit analytics on Spark (pip install 'kafkaguard[analytics]', Java 17 or newer): compact
the audit trail into Parquet, report on it, propose least-privilege ACLs, find unused ACLs,
replay a window against other ACLs, or watch the audit topic. kafkaguard analyze JOB --help
describes each job.""",
}
"""Each command's ``--help`` text, for the people running it."""


def _described(name: str) -> dict[str, Any]:
    """``add_parser`` arguments giving command ``name`` its :data:`DESCRIPTIONS` text."""
    return {
        "description": DESCRIPTIONS[name],
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def _print_config_schema(helm_values: Path | None) -> int:
    if helm_values is None:
        schema = config_schema.config_schema()
    else:
        try:
            values = yaml.safe_load(helm_values.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            print(f"kafkaguard: cannot read {helm_values}: {exc}", file=sys.stderr)  # noqa: T201
            return 2
        if not isinstance(values, dict):
            print(f"kafkaguard: {helm_values}: not a mapping of values", file=sys.stderr)  # noqa: T201
            return 2
        schema = config_schema.helm_values_schema(values)
    print(json.dumps(schema, indent=2))  # noqa: T201
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkaguard", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--version",
        action="version",
        version=f"kafkaguard {version()} (protocol: {IMPLEMENTATION})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", **_described("run"), help="run the proxy (SIGHUP reloads, SIGTERM drains and stops)"
    )
    serve.add_run_arguments(run)
    run.set_defaults(handler=lambda args: serve.run(args.config, args.pid_file))
    demo = commands.add_parser(
        "demo",
        **_described("demo"),
        help="embedded Tansu broker + the proxy with the sample config and ACLs",
    )
    serve.add_demo_arguments(demo)
    demo.set_defaults(handler=lambda args: serve.run(serve.prepare_demo(args.dir)))
    acls = commands.add_parser(
        "acls",
        **_described("acls"),
        help="add, remove and list ACLs in the configured store (like kafka-acls.sh)",
    )
    acls_cli.add_arguments(acls)
    acls.set_defaults(handler=store_migrate.run_acls)  # the kafka side of migrate, else acls_cli
    certs = commands.add_parser(
        "certs",
        **_described("certs"),
        help="mint a development CA, server and client certificates (TLS listeners)",
    )
    certs_cli.add_arguments(certs)
    certs.set_defaults(handler=certs_cli.run)
    users = commands.add_parser(
        "users",
        **_described("users"),
        help="add, remove and list SASL credentials (PLAIN, SCRAM-SHA-256/512)",
    )
    users_cli.add_arguments(users)
    users.set_defaults(handler=users_cli.run)
    check = commands.add_parser(
        "check-config",
        **_described("check-config"),
        help="validate a configuration file (exit 0 valid, 2 invalid), as run and reload do",
    )
    check.add_argument("--config", type=Path, required=True, help="YAML configuration")
    check.set_defaults(handler=lambda args: serve.check_config(args.config))
    doctor_parser = commands.add_parser(
        "doctor",
        help="check a configuration against the upstream and the ACL store, as run would "
        "meet them (exit 0 nothing wrong, 1 a failure or warning)",
        description=doctor.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_arguments(doctor_parser)
    doctor_parser.set_defaults(handler=doctor.run)
    schema = commands.add_parser(
        "config-schema",
        help="print the JSON Schema of the configuration file (for editors and CI)",
        description=CONFIG_SCHEMA_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    schema.add_argument(
        "--helm-values",
        type=Path,
        metavar="VALUES_YAML",
        help="print the Helm chart's values.schema.json instead: the chart's values.yaml given "
        "here, its config value validated by the configuration's schema",
    )
    schema.set_defaults(handler=lambda args: _print_config_schema(args.helm_values))
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
        **_described("explain"),
        help="why a request is allowed or denied (exit 0 allowed, 1 denied, 2 error, 3 it "
        "depends on whether the topic exists)",
    )
    explain.add_arguments(explain_parser)
    explain_parser.set_defaults(handler=explain.run)
    analyze = commands.add_parser(
        "analyze",
        **_described("analyze"),
        help="audit analytics on Spark: compact (JSON to Parquet), report (HTML), propose "
        "ACLs, unused ACLs, whatif, watch (the audit topic, live)",
    )
    analyze_main.add_arguments(analyze)
    analyze.set_defaults(handler=analyze_main.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code
