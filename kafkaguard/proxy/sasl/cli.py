"""``kafkaguard users``: create and remove SASL credentials (PLAIN, SCRAM-SHA-256/512).

Like ``kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[iterations=8192,password=…]'
--entity-type users --entity-name alice``, but into the proxy's credentials file::

    kafkaguard users add --file users.yaml --user alice --mechanism SCRAM-SHA-512
    echo secret | kafkaguard users add --file users.yaml --user bob --mechanism PLAIN \\
        --mechanism SCRAM-SHA-256 --password-stdin
    kafkaguard users list --file users.yaml
    kafkaguard users remove --file users.yaml --user bob [--mechanism PLAIN]

``--config config.yaml [--listener NAME]`` uses the ``sasl.credentials_file`` of a SASL
listener instead of ``--file``. The password is prompted for (twice) on a terminal, or read as
one line from standard input; it is never accepted on the command line (it would end up in
shell history and ``ps``). Only salted hashes are written, with mode 0600.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from kafkaguard.config_tree import ConfigError
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.credentials import (
    CREDENTIAL_MECHANISMS,
    read_users_file,
    write_users_file,
)
from kafkaguard.proxy.sasl.scram import CredentialFormatError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="users_command", required=True)
    for name, text in (
        ("add", "add or replace a user's credentials"),
        ("remove", "remove a user (or some of its mechanisms)"),
        ("list", "list users and their mechanisms (never the hashes)"),
    ):
        sub = actions.add_parser(name, help=text)
        where = sub.add_mutually_exclusive_group(required=True)
        where.add_argument("--file", type=Path, help="the credentials file")
        where.add_argument("--config", type=Path, help="use a SASL listener's credentials_file")
        sub.add_argument("--listener", help="listener name (with --config; default: first SASL)")
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
    from kafkaguard.proxy.config import load_config

    config = load_config(args.config)
    for listener in config.listeners:
        if listener.sasl is None or (args.listener and listener.name != args.listener):
            continue
        if listener.sasl.credentials_file is not None:
            return listener.sasl.credentials_file
    raise ConfigError(f"{args.config}: no SASL listener with a credentials_file")


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


def run(args: argparse.Namespace) -> int:
    try:
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
    except (ConfigError, CredentialFormatError, ValueError, OSError) as exc:
        print(f"kafkaguard users: {exc}", file=sys.stderr)  # noqa: T201
        return 2
