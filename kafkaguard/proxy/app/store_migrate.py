"""``kafkaguard acls migrate`` and ``kafkaguard users migrate`` to and from the Kafka-topic
stores (docs/acl-store.md), both ways, idempotent.

The Kafka side is the topic of the proxy config ``--config`` names (``acl_store`` with
``type: kafka``, or the ``_kafkaguard-acls`` default; for users, the ``sasl.kafka`` topic of its
first ``scram_credentials: kafka`` listener, or ``_kafkaguard-users``), reached with its
``upstream:`` settings as the proxy reaches it. The other side is named by its own option
(``--acl-file`` / ``--file``, ``--zookeeper-connect``). Like the file ↔ ZooKeeper migration
(kafkaguard/policy/acls_cli.py), a migration adds what the target lacks and keeps what it
has: run twice, the second run copies nothing.

::

    kafkaguard acls migrate --from file --to kafka --config proxy.yaml --acl-file acls.yaml
    kafkaguard acls migrate --from kafka --to zookeeper --config proxy.yaml --zookeeper-connect zk
    kafkaguard users migrate --from zookeeper --to kafka --config proxy.yaml --zookeeper-connect zk
    kafkaguard users migrate --from kafka --to file --config proxy.yaml --file users.yaml
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy import acls_cli
from kafkaguard.policy.acls_args import UsageError
from kafkaguard.policy.config import AclStoreConfig, parse_policy_config
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.app import wire_admin
from kafkaguard.proxy.app.server import audit_connection
from kafkaguard.proxy.config import ProxyConfig, load_config
from kafkaguard.proxy.sasl import scram
from kafkaguard.proxy.sasl.config import SaslKafkaConfig
from kafkaguard.proxy.sasl.credentials import read_users_file, write_users_file
from kafkaguard.proxy.sasl.kafka_credentials import KafkaCredentialError, KafkaTopicCredentialStore
from kafkaguard.proxy.sasl.scram import CredentialFormatError, ScramCredential
from kafkaguard.proxy.sasl.zookeeper_credentials import ZooKeeperCredentialError

Credentials = dict[tuple[str, str], ScramCredential]
"""(user, mechanism) → credential: what a SCRAM migration copies."""


def _kafka_config(args: argparse.Namespace) -> ProxyConfig:
    if not args.config:
        raise UsageError("the kafka side is the topic of a proxy config: give --config")
    return load_config(args.config)


# -- ACLs ---------------------------------------------------------------------------------------


def _store_connection(args: argparse.Namespace) -> dict[str, Any] | None:
    """``acls --config`` naming a ``kafka`` store: the proxy's way to the cluster."""
    if not args.config:
        return None
    try:
        if parse_policy_config(ConfigSection.from_file(args.config)).acl_store.type != "kafka":
            return None
        return audit_connection(load_config(args.config).upstream)
    except ConfigError:
        return None  # acls_cli reports the config's error as for any other store


def run_acls(args: argparse.Namespace) -> int:
    """``kafkaguard acls``: a migration with a kafka side here, everything else in acls_cli."""
    kinds = (args.from_store, args.to_store)
    if args.acls_command != "migrate" or "kafka" not in kinds:
        return acls_cli.run(
            args, connection=_store_connection(args), reader=wire_admin.describe_acls
        )
    try:
        if args.from_store == args.to_store:
            raise UsageError("migrate needs --from and --to, two different stores")
        config = _kafka_config(args)
        configured = config.policy.acl_store
        kafka = acls_cli.KafkaTopicStore(
            audit_connection(config.upstream),
            configured if configured.type == "kafka" else AclStoreConfig(type="kafka"),
        )
        other = args.to_store if args.from_store == "kafka" else args.from_store
        opened = acls_cli.side_opener(acls_cli.option_stores(args), other)()
        try:
            source, target = (kafka, opened) if args.from_store == "kafka" else (opened, kafka)
            acls_cli.copy_acls(source, target, print)
        finally:
            opened.close()
    except UsageError as exc:
        sys.stderr.write(f"kafkaguard acls: {exc}\n")
        return 2
    except (AclStoreError, ConfigError, ValueError, OSError) as exc:
        sys.stderr.write(f"Error while executing ACL command: {exc}\n")
        return 1
    return 0


# -- SCRAM users --------------------------------------------------------------------------------


def add_users_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_store", required=True, choices=_USER_STORES)
    parser.add_argument("--to", dest="to_store", required=True, choices=_USER_STORES)
    parser.add_argument("--config", type=Path, help="proxy config: the kafka side's topic")
    parser.add_argument("--file", type=Path, help="the file side: a credentials file")
    parser.add_argument("--zookeeper-connect", help="the zookeeper side: host:port[/chroot]")
    parser.add_argument("--zookeeper-chroot", default="")
    parser.add_argument("--zookeeper-digest-auth-file", type=Path)


_USER_STORES = ("file", "zookeeper", "kafka")


def _users_kafka(config: ProxyConfig) -> tuple[dict[str, Any], SaslKafkaConfig]:
    for listener in config.listeners:
        sasl = listener.sasl
        if sasl is not None and sasl.scram_credentials == "kafka" and sasl.kafka is not None:
            return audit_connection(config.upstream), sasl.kafka
    return audit_connection(config.upstream), SaslKafkaConfig()


async def _kafka_users(
    config: ProxyConfig, work: Callable[[KafkaTopicCredentialStore], Any]
) -> Any:
    connection, kafka = _users_kafka(config)
    store = KafkaTopicCredentialStore(connection, kafka.settings())
    try:
        await asyncio.wait_for(store.start(), kafka.write_timeout_ms / 1000 + 20)
        return await work(store)
    except TimeoutError:
        raise KafkaCredentialError(f"{store.description}: the cluster did not answer") from None
    finally:
        await store.close()


def read_kafka_users(config: ProxyConfig) -> Credentials:
    async def read(store: KafkaTopicCredentialStore) -> Credentials:
        return {
            (user, m): c
            for user in store.users()
            for m in scram.MECHANISMS
            if (c := store.scram_credential(user, m)) is not None
        }

    result: Credentials = asyncio.run(_kafka_users(config, read))
    return result


def write_kafka_users(
    config: ProxyConfig,
    upserts: Credentials,
    deletions: list[tuple[str, str]] | None = None,
    *,
    keep_existing: bool = True,
) -> int:
    """Write ``upserts`` (those already there, with ``keep_existing``, are kept as they are)
    and ``deletions``; returns how many upserts were new."""

    async def write(store: KafkaTopicCredentialStore) -> int:
        new = [
            (user, m, c)
            for (user, m), c in upserts.items()
            if not keep_existing or store.scram_credential(user, m) is None
        ]
        await store.alter(new, deletions or [])
        return len(new)

    result: int = asyncio.run(_kafka_users(config, write))
    return result


def _zk_client(args: argparse.Namespace) -> Any:
    from kafkaguard.policy.stores.zookeeper import read_digest_auth
    from kafkaguard.proxy.sasl.zookeeper_credentials import ZkUserConfigClient

    digest = (
        read_digest_auth(args.zookeeper_digest_auth_file)
        if args.zookeeper_digest_auth_file
        else None
    )
    client = ZkUserConfigClient(
        args.zookeeper_connect, chroot=args.zookeeper_chroot, digest_auth=digest
    )
    client.start()
    return client


def _read_users(args: argparse.Namespace, kind: str) -> Credentials:
    if kind == "kafka":
        return read_kafka_users(_kafka_config(args))
    if kind == "file":
        users = read_users_file(args.file)
        return {
            (user, m): ScramCredential.from_kafka_string(text)
            for user, entry in users.items()
            for m, text in entry.items()
            if m in scram.MECHANISMS
        }
    client = _zk_client(args)
    try:
        return {(u, m): c for u, creds in client.load_all().items() for m, c in creds.items()}
    finally:
        client.stop()


def _write_users(args: argparse.Namespace, kind: str, credentials: Credentials) -> int:
    """Add what the target lacks; returns how many credentials were new."""
    if kind == "kafka":
        return write_kafka_users(_kafka_config(args), credentials)
    if kind == "file":
        users = read_users_file(args.file)
        new = 0
        for (user, m), c in sorted(credentials.items()):
            entry = users.setdefault(user, {})
            if m not in entry:
                entry[m] = c.to_kafka_string()
                new += 1
        write_users_file(args.file, users)
        return new
    client = _zk_client(args)
    try:
        present = {(u, m) for u, creds in client.load_all().items() for m in creds}
        missing = {k: c for k, c in credentials.items() if k not in present}
        for user in sorted({u for u, _ in missing}):
            client.update_user(
                user, {m: c.to_kafka_string() for (u, m), c in missing.items() if u == user}
            )
        return len(missing)
    finally:
        client.stop()


def run_users_migrate(args: argparse.Namespace) -> int:
    """``kafkaguard users migrate``: copy every SCRAM credential of one store into another."""
    try:
        if args.from_store == args.to_store:
            raise UsageError("migrate needs --from and --to, two different stores")
        for kind in (args.from_store, args.to_store):
            if kind == "file" and args.file is None:
                raise UsageError("give the file side with --file")
            if kind == "zookeeper" and not args.zookeeper_connect:
                raise UsageError("give the zookeeper side with --zookeeper-connect")
        credentials = _read_users(args, args.from_store)
        new = _write_users(args, args.to_store, credentials)
        print(  # noqa: T201
            f"Copied {len(credentials)} SCRAM credentials from {args.from_store} to "
            f"{args.to_store} ({new} new, {len(credentials) - new} already present)."
        )
    except UsageError as exc:
        print(f"kafkaguard users: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except (ConfigError, CredentialFormatError, ValueError, OSError, ZooKeeperCredentialError,
            KafkaCredentialError, AclStoreError) as exc:  # fmt: skip
        print(f"kafkaguard users: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


def run_users_on_kafka(args: argparse.Namespace, password: Callable[[], str]) -> int | None:
    """``kafkaguard users add|remove|list --config`` when the listener keeps SCRAM users in a
    Kafka topic (``scram_credentials: kafka``); None when it does not (the file is meant)."""
    if args.config is None or plain_requested(args):
        return None
    config = load_config(args.config)
    listener = next(
        (
            ls
            for ls in config.listeners
            if ls.sasl is not None and (not args.listener or ls.name == args.listener)
        ),
        None,
    )
    if listener is None or listener.sasl is None or listener.sasl.scram_credentials != "kafka":
        return None
    where = f"kafka topic {(listener.sasl.kafka or SaslKafkaConfig()).topic}"
    current = read_kafka_users(config)
    if args.users_command == "list":
        users: dict[str, list[str]] = {}
        for user, mechanism in sorted(current):
            users.setdefault(user, []).append(mechanism)
        for name, found in users.items():
            print(f"{name}: {', '.join(found)}")  # noqa: T201
        return 0
    mechanisms = args.mechanism or (
        list(scram.MECHANISMS) if args.users_command == "remove" else ["SCRAM-SHA-512"]
    )
    if args.users_command == "remove":
        doomed = [(args.user, m) for m in mechanisms if (args.user, m) in current]
        if not doomed:
            raise ValueError(f"no SCRAM credentials for {args.user!r} in {where}")
        write_kafka_users(config, {}, doomed)
        return 0
    secret = password()
    iterations = args.iterations or scram.MIN_ITERATIONS
    upserts = {
        (args.user, m): scram.make_credential(m, secret, iterations=iterations) for m in mechanisms
    }
    write_kafka_users(config, upserts, keep_existing=False)
    found = sorted({m for u, m in current if u == args.user} | set(mechanisms))
    print(f"{where}: {args.user}: {', '.join(found)}")  # noqa: T201
    return 0


def plain_requested(args: argparse.Namespace) -> bool:
    """PLAIN lives in the credentials file, never in the SCRAM topic."""
    return any(m not in scram.MECHANISMS for m in getattr(args, "mechanism", None) or [])
