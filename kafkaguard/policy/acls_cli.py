"""``kafkaguard acls``: kafka-acls.sh (``org.apache.kafka.tools.AclCommand``) for the ACL store.

Same options, same expansion of ``--producer``/``--consumer``/``--idempotent``, same output
lines, but it edits the configured store directly (the file store; a running proxy picks the
change up within ``poll_interval_s``) instead of talking to a broker. Wired into
``kafkaguard/cli.py`` via :func:`add_arguments` and :func:`run`; standalone:
``python -m kafkaguard.policy.acls_cli --acl-file acls.yaml --list``.

Against ZooKeeper (issue 6) it edits Kafka's ``/kafka-acl`` znodes directly, with the same
conditional writes and change notifications as the proxies (which apply them within a second):
``--zookeeper-connect host:2181 [--zookeeper-chroot /kafka]`` or a ``--config`` whose
``acl_store.type`` is ``zookeeper``. ``kafkaguard acls migrate --from file --to zookeeper``
(or back) copies every ACL of one store into the other (ACLs already there are kept).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import parse_policy_config
from kafkaguard.policy.model import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclBindingError,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import sort_key
from kafkaguard.policy.stores.base import AclStoreError, Snapshot
from kafkaguard.policy.stores.file import modify_acl_file, read_acl_file

Acls = dict[ResourcePatternFilter, set[AccessControlEntry]]


class UsageError(Exception):
    """Bad option combination (kafka-acls.sh: ``printUsageAndExit``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "acls_command",
        metavar="command",
        nargs="?",
        choices=["migrate"],
        help="migrate: copy ACLs between stores",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", help="the proxy's config file (its acl_store is used)")
    where.add_argument("--acl-file", help="the YAML ACL file to edit directly")
    parser.add_argument("--zookeeper-connect", help="host:port[,...][/chroot] of ZooKeeper")
    parser.add_argument("--zookeeper-chroot", default="", help="chroot, e.g. /kafka")
    parser.add_argument(
        "--zookeeper-digest-auth-file", help="'user:password' or JAAS file for ZooKeeper"
    )
    parser.add_argument("--from", dest="from_store", choices=["file", "zookeeper"])
    parser.add_argument("--to", dest="to_store", choices=["file", "zookeeper"])
    action = parser.add_mutually_exclusive_group(required=False)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")

    def many(flag: str, text: str) -> None:
        parser.add_argument(flag, action="append", default=[], help=text)

    many("--topic", "topic; '*' means all topics")
    many("--group", "consumer group; '*' means all")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    many("--transactional-id", "transactional id")
    many("--delegation-token", "delegation token id")
    many("--user-principal", "user principal as a resource")
    parser.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=_pattern_type,
        help="literal|prefixed (add), or also any|match (list/remove); default literal",
    )
    many("--operation", "operation (repeatable); default All")
    many("--allow-principal", "Type:name, e.g. User:alice")
    many("--deny-principal", "Type:name; DENY wins over ALLOW")
    many("--allow-host", "client IP for --allow-principal")
    many("--deny-host", "client IP for --deny-principal")
    many("--principal", "with --list: only this principal")
    parser.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on topic")
    parser.add_argument("--consumer", action="store_true", help="READ, DESCRIBE topic; READ group")
    parser.add_argument("--idempotent", action="store_true", help="with --producer")
    parser.add_argument("--force", action="store_true", help="do not ask for confirmation")


def _pattern_type(text: str) -> PatternType:
    value = PatternType.from_string(text)
    if value == PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"Unknown resource-pattern-type: {text}")
    return value


def _check_args(args: argparse.Namespace) -> None:
    """``AclCommandOptions.checkArgs``."""
    if args.list and (
        args.producer or args.consumer or args.allow_host or args.allow_principal
        or args.deny_host or args.deny_principal
    ):  # fmt: skip
        raise UsageError(
            "--list cannot be combined with --producer, --consumer, hosts or principals"
        )
    if (args.producer or args.consumer) and (
        args.operation or args.deny_principal or args.deny_host
    ):
        raise UsageError("--producer/--consumer cannot be combined with --operation or --deny-*")
    if args.principal and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )


def _resource_filters(args: argparse.Namespace, required: bool) -> list[ResourcePatternFilter]:
    """``getResourceFilter``."""
    ptype: PatternType = args.resource_pattern_type
    out: list[ResourcePatternFilter] = []
    out += [ResourcePatternFilter(ResourceType.TOPIC, t.strip(), ptype) for t in args.topic]
    if ptype == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append(ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    out += [ResourcePatternFilter(ResourceType.GROUP, g.strip(), ptype) for g in args.group]
    out += [
        ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, ptype)
        for t in args.transactional_id
    ]
    out += [
        ResourcePatternFilter(ResourceType.DELEGATION_TOKEN, t.strip(), ptype)
        for t in args.delegation_token
    ]
    out += [ResourcePatternFilter(ResourceType.USER, u.strip(), ptype) for u in args.user_principal]
    if required and not out:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --delegation-token <Delegation Token ID>"
        )
    return list(dict.fromkeys(out))


def _principals(values: list[str]) -> list[str]:
    out = []
    for value in values:
        out.append(str(KafkaPrincipal.parse(value.strip())))
    return out


def _entries(args: argparse.Namespace, operations: set[AclOperation]) -> set[AccessControlEntry]:
    """``getAcl``: principals x operations x hosts; hosts default to ``*``."""
    result: set[AccessControlEntry] = set()
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        if not principals:
            continue
        host_list = [h.strip() for h in hosts] or [WILDCARD_HOST]
        for principal in _principals(principals):
            for op in operations:
                for host in host_list:
                    result.add(AccessControlEntry(principal, host, op, permission))
    return result


def _filter_to_acls(args: argparse.Namespace) -> Acls:
    """``getResourceFilterToAcls`` with the producer/consumer expansions."""
    acls: Acls = {}
    filters = _resource_filters(args, True)
    if not args.producer and not args.consumer:
        ops = {AclOperation.parse(o) for o in (args.operation or ["All"])}
        for f in filters:
            acls[f] = _entries(args, ops)
    if args.producer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                acls[f] = _entries(
                    args, {AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE}
                )
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                acls[f] = _entries(args, {AclOperation.WRITE, AclOperation.DESCRIBE})
        if args.idempotent:
            cluster = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            acls[cluster] = _entries(args, {AclOperation.IDEMPOTENT_WRITE})
    if args.consumer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                acls.setdefault(f, set()).update(
                    _entries(args, {AclOperation.READ, AclOperation.DESCRIBE})
                )
            elif f.resource_type == ResourceType.GROUP:
                acls.setdefault(f, set()).update(_entries(args, {AclOperation.READ}))
    for f, entries in acls.items():  # validateOperation
        valid = set(SUPPORTED_OPERATIONS.get(f.resource_type, ())) | {AclOperation.ALL}
        if any(e.operation not in valid for e in entries):
            names = ", ".join(sorted(op.name for op in valid))
            raise UsageError(
                f"ResourceType {f.resource_type.name} only supports operations {names}"
            )
    return acls


def _pattern_of(f: ResourcePatternFilter) -> ResourcePattern:
    return ResourcePattern(f.resource_type, f.name or "", f.pattern_type)


def _entry_lines(entries: list[AccessControlEntry]) -> str:
    return "\n".join(f"\t{e}" for e in entries)


def _sorted(entries: set[AccessControlEntry]) -> list[AccessControlEntry]:
    return sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))


class _Store(Protocol):
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


def _open_store(args: argparse.Namespace, kind: str | None = None) -> _Store:
    """The store the options name; ``kind`` picks file or zookeeper (migrate's two sides)."""
    policy = parse_policy_config(ConfigSection.from_file(args.config)) if args.config else None
    configured = policy.acl_store if policy is not None else None
    if kind in (None, "file"):
        if args.acl_file:
            return _FileStore(Path(args.acl_file))
        if configured is not None and configured.type == "file" and configured.path:
            return _FileStore(configured.path)
    if kind in (None, "zookeeper"):
        if args.zookeeper_connect:
            return _ZooKeeperStore(
                args.zookeeper_connect,
                args.zookeeper_chroot,
                args.zookeeper_digest_auth_file,
                18.0,
            )
        if configured is not None and configured.type == "zookeeper" and configured.connect:
            return _ZooKeeperStore(
                configured.connect,
                configured.chroot,
                configured.digest_auth_file,
                configured.session_timeout_s,
            )
    if configured is not None:
        raise UsageError(
            f"{args.config}: acl_store.type is {configured.type!r}; "
            + (f"give the {kind} side with options" if kind else "it cannot be edited")
        )
    if kind == "file":
        raise UsageError("give the file side with --acl-file <file> or --config")
    if kind == "zookeeper":
        raise UsageError("give the ZooKeeper side with --zookeeper-connect or --config")
    raise UsageError("give --config <proxy config>, --acl-file <file> or --zookeeper-connect")


def _migrate(args: argparse.Namespace, out: Callable[[str], None]) -> None:
    if not args.from_store or not args.to_store or args.from_store == args.to_store:
        raise UsageError("migrate needs --from and --to, one 'file' and one 'zookeeper'")
    source = _open_store(args, args.from_store)
    try:
        target = _open_store(args, args.to_store)
        try:
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
        finally:
            target.close()
    finally:
        source.close()


def _add(args: argparse.Namespace, path: _Store, out: Callable[[str], None]) -> None:
    if not args.resource_pattern_type.is_specific:
        raise UsageError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type.name}' is not "
            "valid when adding acls."
        )
    acls = _filter_to_acls(args)
    if any(not entries for entries in acls.values()):
        raise UsageError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    plan: list[AclBinding] = []
    for f, entries in acls.items():
        for entry in _sorted(entries):
            binding = AclBinding(_pattern_of(f), entry)
            binding.validate()
            plan.append(binding)

    def change(current: Snapshot) -> Snapshot:
        for f, entries in acls.items():
            pattern = _pattern_of(f)
            new = [e for e in _sorted(entries) if AclBinding(pattern, e) not in current]
            for e in _sorted(entries):
                if AclBinding(pattern, e) in current:
                    out(f"Acl {AclBinding(pattern, e)} already exists.")
            if new:
                out(f"Adding ACLs for resource `{pattern}`: \n {_entry_lines(new)}\n")
        return current | frozenset(plan)

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


def _remove(args: argparse.Namespace, path: _Store, out: Callable[[str], None]) -> None:
    acls = _filter_to_acls(args)
    for f, entries in acls.items():
        if not entries:
            question = f"Are you sure you want to delete all ACLs for resource filter `{f}`? (y/n)"
            filters = [AclBindingFilter(f, AccessControlEntryFilter.ANY)]
        else:
            question = (
                f"Are you sure you want to remove ACLs: \n {_entry_lines(_sorted(entries))}\n"
                f" from resource filter `{f}`? (y/n)"
            )
            filters = [AclBindingFilter(f, e.to_filter()) for e in _sorted(entries)]
        if _confirm(args, question, out):
            path.modify(_without(filters))


def _list(args: argparse.Namespace, path: _Store, out: Callable[[str], None]) -> None:
    current = path.read()
    filters = _resource_filters(args, False)
    chosen = [b for b in current if not filters or any(f.matches(b.pattern) for f in filters)]
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in sorted(chosen, key=sort_key):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    principals = _principals(args.principal)
    groups: list[tuple[str | None, dict[ResourcePattern, list[AccessControlEntry]]]] = [
        (None, by_pattern)
    ]
    if principals:
        groups = [
            (p, {k: [e for e in v if e.principal == p] for k, v in by_pattern.items()})
            for p in principals
        ]
    for principal, patterns in groups:
        if principal is not None:
            out(f"ACLs for principal `{principal}`")
        for pattern, entries in patterns.items():
            if entries:
                out(f"Current ACLs for resource `{pattern}`:\n{_entry_lines(entries)}\n")


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")


def run(args: argparse.Namespace, out: Callable[[str], None] | None = None) -> int:
    """Execute; returns the process exit code (0 ok, 1 error, 2 usage)."""
    write = out or _print
    try:
        if args.acls_command == "migrate":
            _migrate(args, write)
            return 0
        if not (args.add or args.remove or args.list):
            raise UsageError("one of the arguments --add --remove --list (or migrate) is required")
        _check_args(args)
        path = _open_store(args)
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
