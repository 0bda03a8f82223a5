"""``kafkaguard acls``: kafka-acls.sh (``org.apache.kafka.tools.AclCommand``) for the ACL store.

Same options, same expansion of ``--producer``/``--consumer``/``--idempotent``, same output
lines, but it edits the configured store directly (the file store; a running proxy picks the
change up within ``poll_interval_s``) instead of talking to a broker. Wired into
``kafkaguard/cli/__init__.py`` via :func:`add_arguments` and :func:`run`; standalone:
``python -m kafkaguard.policy.acls_cli --acl-file acls.yaml --list``.

The options and what they mean (filters, entries, Kafka's checks) are
:mod:`kafkaguard.policy.acls_args`; this module opens the store they name and adds, removes,
lists or migrates ACLs there, printing what kafka-acls.sh prints.

Against ZooKeeper (issue 6) it edits Kafka's ``/kafka-acl`` znodes directly, with the same
conditional writes and change notifications as the proxies (which apply them within a second):
``--zookeeper-connect host:2181 [--zookeeper-chroot /kafka]`` or a ``--config`` whose
``acl_store.type`` is ``zookeeper``. --add/--remove/--list take exactly one of ``--config``,
``--acl-file`` and ``--zookeeper-connect``; ``--list`` also takes ``--bootstrap-server`` (a
running proxy's ACLs, read with the DescribeAcls reader :func:`run` is given: a refusal is an
error, never an empty list).

``kafkaguard acls migrate --from file --to zookeeper`` (or back) copies every ACL of one store
into the other (ACLs already there are kept). Each side is named by its own option
(``--acl-file``, ``--zookeeper-connect``) or by ``--config``: the proxy config's ``acl_store``
is the side of its type, so an operator points the command at the config the proxies run with
and names only the other store. Moving a fleet onto ZooKeeper (issue 14)::

    kafkaguard acls migrate --from file --to zookeeper --config proxy.yaml --acl-file acls.yaml

where ``proxy.yaml`` already has ``acl_store: {type: zookeeper, ...}``; with a file store in
the config, ``--from zookeeper --to file --config proxy.yaml --zookeeper-connect zk:2181/kafka``
fills its file from a cluster's ZooKeeper. A side named twice (``--config`` and that side's
option) or a config store that is neither (``memory``) is a usage error, so a migration never
guesses which of two stores was meant.

``kafkaguard acls apply -f FILE [--prune] [--dry-run]`` makes one store (or a running proxy,
through the Admin API) hold the ACLs a file declares: :mod:`kafkaguard.policy.acls_apply`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy import acls_apply
from kafkaguard.policy.acls_args import (
    UsageError,
    acls_to_add,
    add_arguments,
    check_args,
    filter_to_acls,
    principals,
    resource_filters,
    sorted_entries,
)
from kafkaguard.policy.config import AclStoreConfig, kafka_topic_settings, parse_policy_config
from kafkaguard.policy.model import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    InvalidAclBindingError,
    ResourcePattern,
)
from kafkaguard.policy.stores.acl_file_format import sort_key
from kafkaguard.policy.stores.base import AclStoreError, Snapshot
from kafkaguard.policy.stores.file import modify_acl_file, read_acl_file
from kafkaguard.policy.stores.kafka_topic import KafkaTopicAclStore

__all__ = ["add_arguments", "main", "run"]


def _entry_lines(entries: list[AccessControlEntry]) -> str:
    return "\n".join(f"\t{e}" for e in entries)


class AclSide(Protocol):
    """What the command needs from a store: read everything, locked read-modify-write."""

    description: str

    def read(self) -> Snapshot: ...

    def modify(self, change: Callable[[Snapshot], Snapshot]) -> Snapshot: ...

    def close(self) -> None: ...


class _FileStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.description = f"file {path}"

    def read(self) -> Snapshot:
        return read_acl_file(self.path)[0]

    def modify(self, change: Callable[[Snapshot], Snapshot]) -> Snapshot:
        return modify_acl_file(self.path, change, create=True)

    def close(self) -> None:
        pass


class _ZooKeeperStore:
    def __init__(
        self, connect: str, chroot: str, digest_file: str | Path | None, timeout_s: float
    ) -> None:
        from kafkaguard.policy.stores.zookeeper import ZkAclClient, read_digest_auth

        digest = read_digest_auth(digest_file) if digest_file else None
        self.client = ZkAclClient(
            connect, chroot=chroot, digest_auth=digest, session_timeout_s=timeout_s
        )
        self.description = self.client.description
        self.client.start()

    def read(self) -> Snapshot:
        return self.client.snapshot()

    def modify(self, change: Callable[[Snapshot], Snapshot]) -> Snapshot:
        return self.client.modify(change)

    def close(self) -> None:
        self.client.stop()


class KafkaTopicStore:
    """The Kafka-topic ACL store (docs/acl-store.md) behind the blocking interface of
    ``kafkaguard acls``: each call reads the topic to its end, then writes with ``acks=all``
    (one record per binding, so a concurrent change by a proxy is never lost)."""

    def __init__(self, connection: Mapping[str, Any], configured: AclStoreConfig) -> None:
        self.connection = connection
        self.settings = kafka_topic_settings(configured)
        self.description = f"kafka topic {configured.topic}"

    def _run(self, work: Callable[[KafkaTopicAclStore], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            store = KafkaTopicAclStore(self.connection, self.settings)
            try:
                await asyncio.wait_for(store.start(), self.settings.write_timeout_ms / 1000 + 20)
                return await work(store)
            except TimeoutError:
                raise AclStoreError(f"{self.description}: the cluster did not answer") from None
            finally:
                await store.close()

        return asyncio.run(main())

    def read(self) -> Snapshot:
        async def snapshot(store: KafkaTopicAclStore) -> Snapshot:
            return store.snapshot()

        result: Snapshot = self._run(snapshot)
        return result

    def modify(self, change: Callable[[Snapshot], Snapshot]) -> Snapshot:
        async def apply(store: KafkaTopicAclStore) -> Snapshot:
            current = store.snapshot()
            updated = change(current)
            await store.add(updated - current)
            await store.remove(current - updated)
            return store.snapshot()

        result: Snapshot = self._run(apply)
        return result

    def close(self) -> None:
        pass


class AdminApiStore:
    """A running proxy's (or broker's) ACLs for ``--list --bootstrap-server``, read with the
    DescribeAcls reader ``kafkaguard acls`` passes in (a refusal is an error, never an empty
    list: :data:`kafkaguard.policy.acls_apply.AclReader`). Read only: a running proxy's ACLs
    are changed with ``acls apply -f FILE --bootstrap-server``."""

    def __init__(
        self, bootstrap: str, properties: dict[str, str], reader: acls_apply.AclReader
    ) -> None:
        self.bootstrap, self.properties, self.reader = bootstrap, properties, reader
        self.description = f"Admin API at {bootstrap}"

    def read(self) -> Snapshot:
        return asyncio.run(self.reader(self.properties, self.bootstrap))

    def modify(self, change: Callable[[Snapshot], Snapshot]) -> Snapshot:
        raise UsageError("--bootstrap-server goes with --list and apply, not --add/--remove")

    def close(self) -> None:
        pass


AclSideOpener = Callable[[], AclSide]
"""Opens a store; chosen (and the options checked) before any store is opened."""

_SIDE_OPTIONS = {"file": "--acl-file", "zookeeper": "--zookeeper-connect"}


def option_stores(args: argparse.Namespace) -> dict[str, AclSideOpener]:
    """The stores the explicit options name, by kind (at most one file, one ZooKeeper)."""
    if (args.zookeeper_chroot or args.zookeeper_digest_auth_file) and not args.zookeeper_connect:
        # Not silently dropped: with a --config ZooKeeper store they would look like overrides.
        raise UsageError(
            "--zookeeper-chroot and --zookeeper-digest-auth-file go with --zookeeper-connect"
        )
    stores: dict[str, AclSideOpener] = {}
    if args.acl_file:
        path = Path(args.acl_file)
        stores["file"] = lambda: _FileStore(path)
    if args.zookeeper_connect:
        stores["zookeeper"] = lambda: _ZooKeeperStore(
            args.zookeeper_connect, args.zookeeper_chroot, args.zookeeper_digest_auth_file, 18.0
        )
    return stores


def _configured_store(
    args: argparse.Namespace, purpose: str, connection: Mapping[str, Any] | None = None
) -> tuple[str, AclSideOpener]:
    """The kind and opener of the ``acl_store`` of the proxy config ``--config`` names;
    ``connection``: the config's upstream settings, which a ``kafka`` store is reached with."""
    configured = parse_policy_config(ConfigSection.from_file(args.config)).acl_store
    path, connect = configured.path, configured.connect
    if configured.type == "kafka" and connection is not None:
        return "kafka", lambda: KafkaTopicStore(connection, configured)
    if configured.type == "file" and path is not None:
        return "file", lambda: _FileStore(path)
    if configured.type == "zookeeper" and connect:
        return "zookeeper", lambda: _ZooKeeperStore(
            connect,
            configured.chroot,
            configured.digest_auth_file,
            configured.session_timeout_s,
        )
    raise UsageError(f"{args.config}: acl_store.type is {configured.type!r}; {purpose}")


def _open_store(
    args: argparse.Namespace,
    connection: Mapping[str, Any] | None,
    reader: acls_apply.AclReader | None = None,
) -> AclSide:
    """The one store --add/--remove/--list act on (``AclCommandOptions.checkArgs`` likewise
    refuses two ways to reach the ACLs, e.g. --bootstrap-server with --bootstrap-controller).
    ``reader``: how ``--list --bootstrap-server`` reads a running proxy's ACLs."""
    given = [
        flag
        for flag, value in (
            ("--config", args.config),
            ("--acl-file", args.acl_file),
            ("--zookeeper-connect", args.zookeeper_connect),
            ("--bootstrap-server", args.bootstrap_server),
        )
        if value
    ]
    if len(given) > 1:
        raise UsageError(f"give one store, not {' and '.join(given)}")
    if args.command_config and not args.bootstrap_server:
        raise UsageError("--command-config goes with --bootstrap-server")
    if args.bootstrap_server:
        if not args.list:
            raise UsageError(
                "--bootstrap-server goes with --list and apply: change a running proxy's "
                "ACLs with apply -f FILE"
            )
        if reader is None:
            raise UsageError("--bootstrap-server is read by `kafkaguard acls`, not this module")
        path = Path(args.command_config) if args.command_config else None
        properties = acls_apply.client_properties(path) if path else {}
        return AdminApiStore(args.bootstrap_server, properties, reader)
    stores = option_stores(args)
    if args.config:
        return _configured_store(args, "it cannot be edited", connection)[1]()
    if not stores:
        raise UsageError("give --config <proxy config>, --acl-file <file> or --zookeeper-connect")
    (opener,) = stores.values()
    return opener()


def side_opener(sides: Mapping[str, AclSideOpener], kind: str, hint: str = "") -> AclSideOpener:
    """The opener of the ``kind`` side of a migration, or the usage error that names the
    option giving it (``hint``: the other way to give it, e.g. a ``--config``)."""
    if kind not in sides:
        raise UsageError(f"give the {kind} side with {_SIDE_OPTIONS[kind]}{hint}")
    return sides[kind]


def _migration(args: argparse.Namespace) -> tuple[AclSideOpener, AclSideOpener]:
    """Source and target: each side from its option, or from --config's ``acl_store`` when that
    store is of the side's kind; a side named twice, or not at all, is a usage error."""
    if not args.from_store or not args.to_store or args.from_store == args.to_store:
        raise UsageError("migrate needs --from and --to, one 'file' and one 'zookeeper'")
    sides = option_stores(args)
    if args.config:
        kind, opener = _configured_store(
            args, "migrate copies between a file and a zookeeper store"
        )
        if kind in sides:
            raise UsageError(
                f"{args.config} (acl_store.type {kind}) is already the {kind} side: "
                f"drop {_SIDE_OPTIONS[kind]} or --config"
            )
        sides[kind] = opener
    hint = {k: f" or a --config whose acl_store.type is {k}" for k in _SIDE_OPTIONS}
    return (
        side_opener(sides, args.from_store, hint[args.from_store]),
        side_opener(sides, args.to_store, hint[args.to_store]),
    )


def copy_acls(source: AclSide, target: AclSide, out: Callable[[str], None]) -> None:
    """Add to ``target`` what it lacks of ``source`` and keep what it has (run twice, the
    second run copies nothing), then say how many were new."""
    acls = source.read()
    added: list[int] = []

    def change(current: Snapshot) -> Snapshot:
        added.append(len(acls - current))
        return current | acls

    target.modify(change)
    out(
        f"Copied {len(acls)} ACLs from {source.description} to {target.description} "
        f"({added[-1]} new, {len(acls) - added[-1]} already present)."
    )


def _migrate(args: argparse.Namespace, out: Callable[[str], None]) -> None:
    open_source, open_target = _migration(args)
    source = open_source()
    try:
        target = open_target()
        try:
            copy_acls(source, target, out)
        finally:
            target.close()
    finally:
        source.close()


def _add(args: argparse.Namespace, path: AclSide, out: Callable[[str], None]) -> None:
    plan = acls_to_add(args)
    bindings = frozenset(AclBinding(p, e) for p, entries in plan.items() for e in entries)

    def change(current: Snapshot) -> Snapshot:
        for pattern, entries in plan.items():
            new = [e for e in entries if AclBinding(pattern, e) not in current]
            for e in entries:
                if AclBinding(pattern, e) in current:
                    out(f"Acl {AclBinding(pattern, e)} already exists.")
            if new:
                out(f"Adding ACLs for resource `{pattern}`: \n {_entry_lines(new)}\n")
        return current | bindings

    path.modify(change)


def _confirm(args: argparse.Namespace, message: str, out: Callable[[str], None]) -> bool:
    if args.force:
        return True
    out(message)
    try:
        return input().strip().lower() == "y"
    except EOFError:
        return False


def _without(filters: list[AclBindingFilter]) -> Callable[[Snapshot], Snapshot]:
    def change(current: Snapshot) -> Snapshot:
        return frozenset(b for b in current if not any(f.matches(b) for f in filters))

    return change


def _remove(args: argparse.Namespace, path: AclSide, out: Callable[[str], None]) -> None:
    acls = filter_to_acls(args)
    for f, entries in acls.items():
        if not entries:
            question = f"Are you sure you want to delete all ACLs for resource filter `{f}`? (y/n)"
            filters = [AclBindingFilter(f, AccessControlEntryFilter.ANY)]
        else:
            chosen = sorted_entries(entries)
            question = (
                f"Are you sure you want to remove ACLs: \n {_entry_lines(chosen)}\n"
                f" from resource filter `{f}`? (y/n)"
            )
            filters = [AclBindingFilter(f, e.to_filter()) for e in chosen]
        if _confirm(args, question, out):
            path.modify(_without(filters))


def _list(args: argparse.Namespace, path: AclSide, out: Callable[[str], None]) -> None:
    current = path.read()
    filters = resource_filters(args, False)
    chosen = [b for b in current if not filters or any(f.matches(b.pattern) for f in filters)]
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in sorted(chosen, key=sort_key):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    only = principals(args.principal)
    groups: list[tuple[str | None, dict[ResourcePattern, list[AccessControlEntry]]]] = [
        (None, by_pattern)
    ]
    if only:
        groups = [
            (p, {k: [e for e in v if e.principal == p] for k, v in by_pattern.items()})
            for p in only
        ]
    for principal, patterns in groups:
        if principal is not None:
            out(f"ACLs for principal `{principal}`")
        for pattern, entries in patterns.items():
            if entries:
                out(f"Current ACLs for resource `{pattern}`:\n{_entry_lines(entries)}\n")


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")


def run(
    args: argparse.Namespace,
    out: Callable[[str], None] | None = None,
    connection: Mapping[str, Any] | None = None,
    reader: acls_apply.AclReader | None = None,
) -> int:
    """Execute; returns the process exit code (0 ok, 1 error, 2 usage). ``connection``: the
    upstream settings a ``kafka`` store of ``--config`` is reached with; ``reader``: how a
    running proxy's ACLs are read through ``--bootstrap-server`` (DescribeAcls over the wire,
    which this package cannot speak: the command line passes it)."""
    write = out or _print
    try:
        if args.acls_command == "migrate":
            _migrate(args, write)
            return 0
        if args.acls_command == "apply":
            acls_apply.run(args, write, connection, reader)
            return 0
        check_args(args)
        path = _open_store(args, connection, reader)
        try:
            if args.add:
                _add(args, path, write)
            elif args.remove:
                _remove(args, path, write)
            else:
                _list(args, path, write)
        finally:
            path.close()
    except UsageError as exc:
        sys.stderr.write(f"kafkaguard acls: {exc}\n")
        return 2
    except (AclStoreError, ConfigError, InvalidAclBindingError, ValueError, OSError) as exc:
        sys.stderr.write(f"Error while executing ACL command: {exc}\n")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkaguard acls", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
