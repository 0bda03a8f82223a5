"""``kafkaguard users``: create and remove SASL credentials (PLAIN, SCRAM-SHA-256/512).

Like ``kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[iterations=8192,password=…]'
--entity-type users --entity-name alice``, but into the proxy's credentials file::

    kafkaguard users add --file users.yaml --user alice --mechanism SCRAM-SHA-512
    echo secret | kafkaguard users add --file users.yaml --user bob --mechanism PLAIN \\
        --mechanism SCRAM-SHA-256 --password-stdin
    kafkaguard users list --file users.yaml
    kafkaguard users remove --file users.yaml --user bob [--mechanism PLAIN]

``--config config.yaml [--listener NAME]`` uses the ``sasl.credentials_file`` of a SASL
listener instead of ``--file`` — or, for SCRAM mechanisms of a listener with
``scram_credentials: zookeeper``, its ZooKeeper. ``--zookeeper-connect HOST:PORT[/chroot]
[--zookeeper-chroot /x] [--zookeeper-digest-auth-file F]`` writes SCRAM credentials straight
into ZooKeeper in Kafka's format (``/config/users/<name>`` plus a ``/config/changes``
notification), exactly as ``kafka-configs.sh --zookeeper … --alter --add-config
'SCRAM-SHA-512=[iterations=4096,password=…]' --entity-type users --entity-name alice`` does;
other configs of the user (quotas) are kept. Kafka keeps no PLAIN credentials in ZooKeeper.

The password is prompted for (twice) on a terminal, or read as one line from standard input;
it is never accepted on the command line (it would end up in shell history and ``ps``). Only
salted hashes are written, with mode 0600.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from kafkaguard.config_tree import ConfigError
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.config import load_config
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.config import SaslZooKeeperConfig
from kafkaguard.proxy.sasl.credentials import (
    CREDENTIAL_MECHANISMS,
    read_users_file,
    write_users_file,
)
from kafkaguard.proxy.sasl.kafka_credentials import KafkaCredentialError
from kafkaguard.proxy.sasl.scram import CredentialFormatError
from kafkaguard.proxy.sasl.zookeeper_credentials import ZooKeeperCredentialError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="users_command", required=True)
    from kafkaguard.proxy.app.store_migrate import add_users_migrate_arguments

    add_users_migrate_arguments(
        actions.add_parser("migrate", help="copy every SCRAM credential into another store")
    )
    for name, text in (
        ("add", "add or replace a user's credentials"),
        ("remove", "remove a user (or some of its mechanisms)"),
        ("list", "list users and their mechanisms (never the hashes)"),
    ):
        sub = actions.add_parser(name, help=text)
        where = sub.add_mutually_exclusive_group(required=True)
        where.add_argument("--file", type=Path, help="the credentials file")
        where.add_argument("--config", type=Path, help="use a SASL listener's credentials_file")
        where.add_argument(
            "--zookeeper-connect",
            help="SCRAM credentials in ZooKeeper, Kafka's format (host:port[,...][/chroot])",
        )
        sub.add_argument("--listener", help="listener name (with --config; default: first SASL)")
        sub.add_argument("--zookeeper-chroot", default="", help="with --zookeeper-connect")
        sub.add_argument(
            "--zookeeper-digest-auth-file",
            type=Path,
            help="with --zookeeper-connect: JAAS Client section or 'user:password' file",
        )
        if name == "list":
            continue
        sub.add_argument("--user", required=True)
        sub.add_argument(
            "--mechanism",
            action="append",
            choices=CREDENTIAL_MECHANISMS,
            help="repeatable; add defaults to SCRAM-SHA-512, remove to all mechanisms",
        )
        if name == "add":
            sub.add_argument(
                "--iterations",
                type=int,
                help=f"PBKDF2 iterations (SCRAM default {scram.MIN_ITERATIONS}, minimum "
                f"{scram.MIN_ITERATIONS}; PLAIN default {plain.DEFAULT_ITERATIONS})",
            )
            sub.add_argument(
                "--password-stdin", action="store_true", help="read the password from stdin"
            )


def _credentials_path(args: argparse.Namespace) -> Path:
    if args.file is not None:
        return Path(args.file)
    config = load_config(args.config)
    for listener in config.listeners:
        if listener.sasl is None or (args.listener and listener.name != args.listener):
            continue
        if listener.sasl.credentials_file is not None:
            return listener.sasl.credentials_file
    raise ConfigError(f"{args.config}: no SASL listener with a credentials_file")


def _zookeeper_target(args: argparse.Namespace) -> SaslZooKeeperConfig | None:
    """The ZooKeeper to write SCRAM credentials to, if the command targets one."""
    if args.zookeeper_connect:
        return SaslZooKeeperConfig(
            connect=args.zookeeper_connect,
            chroot=args.zookeeper_chroot or "",
            digest_auth_file=args.zookeeper_digest_auth_file,
        )
    if args.config is None:
        return None
    mechanisms = getattr(args, "mechanism", None) or []
    if any(m == plain.MECHANISM for m in mechanisms):
        return None  # PLAIN lives in the credentials file
    for listener in load_config(args.config).listeners:
        if listener.sasl is None or (args.listener and listener.name != args.listener):
            continue
        if listener.sasl.scram_credentials == "zookeeper":
            return listener.sasl.zookeeper
        return None
    return None


def _run_zookeeper(args: argparse.Namespace, target: SaslZooKeeperConfig) -> int:
    from kafkaguard.policy.stores.zookeeper import read_digest_auth
    from kafkaguard.proxy.sasl.zookeeper_credentials import ZkUserConfigClient

    mechanisms = getattr(args, "mechanism", None)
    if mechanisms and plain.MECHANISM in mechanisms:
        raise ValueError(
            "Kafka keeps only SCRAM credentials in ZooKeeper; add PLAIN users with --file"
        )
    digest = read_digest_auth(target.digest_auth_file) if target.digest_auth_file else None
    password = None
    if args.users_command == "add":
        password = _read_password(args.password_stdin)  # before connecting: prompt first
    client = ZkUserConfigClient(
        target.connect,
        chroot=target.chroot,
        digest_auth=digest,
        session_timeout_s=target.session_timeout_s,
    )
    client.start()
    try:
        where = client.description
        if args.users_command == "list":
            for name, found in sorted(client.list_users().items()):
                print(f"{name}: {', '.join(found)}")  # noqa: T201
            return 0
        if args.users_command == "remove":
            removed = mechanisms or list(scram.MECHANISMS)
            if not client.list_users().get(args.user):
                raise ValueError(f"no SCRAM credentials for {args.user!r} in {where}")
            client.update_user(args.user, dict.fromkeys(removed))
            return 0
        assert password is not None
        iterations = args.iterations or scram.MIN_ITERATIONS
        updates: dict[str, str | None] = {
            m: scram.make_credential(m, password, iterations=iterations).to_kafka_string()
            for m in mechanisms or ["SCRAM-SHA-512"]
        }
        config = client.update_user(args.user, updates)
        found = sorted(k for k in config if k in scram.MECHANISMS)
        print(f"{where}: {args.user}: {', '.join(found)}")  # noqa: T201
        return 0
    finally:
        client.stop()


def _read_password(from_stdin: bool) -> str:
    if from_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Repeat password: ") != password:
            raise ValueError("the passwords differ")
    if not password:
        raise ValueError("empty password")
    return password


def run(args: argparse.Namespace) -> int:  # noqa: C901 - one branch per kafka-configs.sh action and error
    if args.users_command == "migrate":
        from kafkaguard.proxy.app.store_migrate import run_users_migrate

        return run_users_migrate(args)
    try:
        from kafkaguard.proxy.app.store_migrate import run_users_on_kafka

        on_kafka = run_users_on_kafka(args, lambda: _read_password(args.password_stdin))
        if on_kafka is not None:
            return on_kafka
        target = _zookeeper_target(args)
        if target is not None:
            return _run_zookeeper(args, target)
        path = _credentials_path(args)
        users = read_users_file(path)
        if args.users_command == "list":
            for name in sorted(users):
                print(f"{name}: {', '.join(sorted(users[name]))}")  # noqa: T201
            return 0
        if args.users_command == "remove":
            entry = users.get(args.user)
            if entry is None:
                raise ValueError(f"no user {args.user!r} in {path}")
            for mechanism in args.mechanism or list(entry):
                entry.pop(mechanism, None)
            if not entry:
                del users[args.user]
            write_users_file(path, users)
            return 0
        mechanisms = args.mechanism or ["SCRAM-SHA-512"]
        password = _read_password(args.password_stdin)
        entry = users.setdefault(args.user, {})
        for mechanism in mechanisms:
            if mechanism == plain.MECHANISM:
                iterations = args.iterations or plain.DEFAULT_ITERATIONS
                entry[mechanism] = plain.make_credential(
                    password, iterations=iterations
                ).to_string()
            else:
                iterations = args.iterations or scram.MIN_ITERATIONS
                entry[mechanism] = scram.make_credential(
                    mechanism, password, iterations=iterations
                ).to_kafka_string()
        write_users_file(path, users)
        print(f"{path}: {args.user}: {', '.join(sorted(entry))}")  # noqa: T201
        return 0
    except (ConfigError, CredentialFormatError, ValueError, OSError, ZooKeeperCredentialError,
            AclStoreError, KafkaCredentialError) as exc:  # fmt: skip
        print(f"kafkaguard users: {exc}", file=sys.stderr)  # noqa: T201
        return 2
