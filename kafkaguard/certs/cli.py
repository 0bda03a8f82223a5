"""``kafkaguard certs``: a development CA and certificates for TLS listeners.

kafkaguard certs init-ca                                  # certs/ca.pem, certs/ca-key.pem
kafkaguard certs server --host proxy.example --ip 127.0.0.1
kafkaguard certs client --cn alice --ou eng --o Acme      # certs/alice.pem, alice-key.pem
kafkaguard certs show certs/alice.pem
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kafkaguard.certs import tooling


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="certs_command", required=True)

    def common(sub: argparse.ArgumentParser, days: int) -> None:
        sub.add_argument(
            "--dir",
            type=Path,
            default=tooling.DEFAULT_DIR,
            help="directory of the CA and the files written (default: certs/)",
        )
        sub.add_argument("--days", type=int, default=days, help=f"validity (default {days})")
        sub.add_argument("--force", action="store_true", help="replace existing files")

    ca = commands.add_parser("init-ca", help="create a self-signed development CA")
    common(ca, 3650)
    ca.add_argument("--cn", default="kafkaguard dev CA", help="the CA's common name")

    server = commands.add_parser("server", help="a server certificate signed by the CA")
    common(server, 825)
    server.add_argument(
        "--host", action="append", default=[], help="DNS name clients connect to (repeatable)"
    )
    server.add_argument(
        "--ip", action="append", default=[], help="IP address clients connect to (repeatable)"
    )
    server.add_argument("--name", default="server", help="file name stem (default: server)")

    client = commands.add_parser("client", help="a client certificate signed by the CA")
    common(client, 825)
    client.add_argument("--cn", required=True, help="common name (e.g. the user name)")
    client.add_argument("--ou", action="append", default=[], help="organizational unit")
    client.add_argument("--o", dest="organization", help="organization")
    client.add_argument("--c", dest="country", help="two-letter country code")
    client.add_argument("--name", help="file name stem (default: the CN)")

    show = commands.add_parser("show", help="print a PEM certificate's subject, SANs, validity")
    show.add_argument("file", type=Path)


def run(args: argparse.Namespace) -> int:
    try:
        if args.certs_command == "show":
            print(tooling.describe(args.file))  # noqa: T201
            return 0
        if args.certs_command == "init-ca":
            issued = tooling.init_ca(
                args.dir, common_name=args.cn, days=args.days, force=args.force
            )
        elif args.certs_command == "server":
            hosts = args.host or ([] if args.ip else ["localhost"])
            ips = args.ip or ([] if args.host else ["127.0.0.1"])
            issued = tooling.issue_server(
                args.dir, hosts=hosts, ips=ips, name=args.name, days=args.days, force=args.force
            )
        elif args.certs_command == "client":
            issued = tooling.issue_client(
                args.dir,
                common_name=args.cn,
                organizational_units=args.ou,
                organization=args.organization,
                country=args.country,
                name=args.name,
                days=args.days,
                force=args.force,
            )
        else:  # pragma: no cover - argparse enforces the choices
            raise AssertionError(args.certs_command)
    except tooling.CertToolError as exc:
        print(f"kafkaguard certs: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    print(f"wrote {issued.cert_path} and {issued.key_path} (key: mode 0600)")  # noqa: T201
    print(f"subject: {issued.subject}")  # noqa: T201
    return 0
