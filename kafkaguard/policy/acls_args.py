"""The options of ``kafkaguard acls`` and what they mean, kept apart from the stores they act on.

kafka-acls.sh's options (``org.apache.kafka.tools.AclCommand.AclCommandOptions``) and the
translation ``AclCommand`` makes of them — resource filters (``getResourceFilter``), entries
(``getAcl``) and the ``--producer``/``--consumer``/``--idempotent`` expansions
(``getResourceFilterToAcls``) — checked the way Kafka checks them (``checkArgs``,
``validateOperation``). Nothing here reads or writes a store; :mod:`kafkaguard.policy.acls_cli`
applies the result to one. Mistakes are :class:`UsageError` (exit code 2, like
``printUsageAndExit``).
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Collection, Mapping

from kafkaguard.policy.model import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

Acls = dict[ResourcePatternFilter, set[AccessControlEntry]]
"""Resource filter → the entries to add or remove there (empty: every entry, for --remove)."""


class UsageError(Exception):
    """Bad option combination (kafka-acls.sh: ``printUsageAndExit``)."""


STORES_HELP = (
    "The store: --config (the proxy's acl_store: a file, ZooKeeper or a Kafka topic), "
    "--acl-file or --zookeeper-connect; one of them for --add/--remove/--list, or "
    "--bootstrap-server (with --command-config) for --list and apply: a running proxy's ACLs, "
    "read with DescribeAcls (a refusal is an error). migrate --from KIND --to KIND copies "
    "every ACL of one store into the other (two of file, zookeeper and kafka; ACLs already "
    "there are kept). Each side "
    "is named by its option (--acl-file, --zookeeper-connect) or by --config, whose acl_store "
    "is the side of its type: with a ZooKeeper-backed proxy config, 'migrate --from file --to "
    "zookeeper --config proxy.yaml --acl-file acls.yaml' loads an old ACL file into the "
    "fleet's ZooKeeper; with a file-backed one, 'migrate --from zookeeper --to file --config "
    "proxy.yaml --zookeeper-connect zk1:2181/kafka' brings a cluster's ZooKeeper ACLs into "
    "its file. Naming one side twice (--config and that side's option) is an error."
)
"""The epilog of ``kafkaguard acls --help``: how the options pick the store(s)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # `kafkaguard acls` prints it raw (RawDescriptionHelpFormatter): wrapped here, options whole
    parser.epilog = textwrap.fill(STORES_HELP, 100, break_on_hyphens=False)
    parser.add_argument(
        "acls_command",
        metavar="command",
        nargs="?",
        choices=["migrate", "apply"],
        help="migrate: copy every ACL of the --from store into the --to store; "
        "apply: make the store hold the ACLs of -f FILE",
    )
    parser.add_argument(
        "--config",
        help="the proxy's config file: its acl_store (file, zookeeper or kafka topic) is the "
        "store, or the migrate side of that type",
    )
    parser.add_argument("--acl-file", help="the YAML ACL file to edit directly (a file store)")
    parser.add_argument("--zookeeper-connect", help="host:port[,...][/chroot] of ZooKeeper")
    parser.add_argument(
        "--zookeeper-chroot", default="", help="chroot, e.g. /kafka (with --zookeeper-connect)"
    )
    parser.add_argument(
        "--zookeeper-digest-auth-file",
        help="'user:password' or JAAS file for ZooKeeper (with --zookeeper-connect)",
    )
    parser.add_argument(
        "--from",
        dest="from_store",
        choices=["file", "zookeeper", "kafka"],
        help="migrate: the source",
    )
    parser.add_argument(
        "--to", dest="to_store", choices=["file", "zookeeper", "kafka"], help="migrate: the target"
    )
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
    # apply (kafkaguard/policy/acls_apply.py)
    parser.add_argument(
        "-f",
        "--file",
        dest="apply_file",
        help="apply: the desired ACLs (a kafkaguard ACL file or Strimzi KafkaUser resources)",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help="apply: also remove the ACLs of the file's principals that the file does not hold",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="apply: print the difference, change nothing"
    )
    parser.add_argument(
        "--bootstrap-server",
        help="apply, --list: a running proxy (or broker) whose ACLs to change or list "
        "through the Admin API",
    )
    parser.add_argument(
        "--command-config",
        help="client properties for --bootstrap-server (security.protocol, "
        "sasl.mechanism, sasl.jaas.config, ssl.ca.location, ...)",
    )


def _pattern_type(text: str) -> PatternType:
    value = PatternType.from_string(text)
    if value == PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"Unknown resource-pattern-type: {text}")
    return value


def check_args(args: argparse.Namespace) -> None:
    """``AclCommandOptions.checkArgs`` for --add/--remove/--list (``migrate`` has its own)."""
    if not (args.add or args.remove or args.list):
        raise UsageError("one of the arguments --add --remove --list (or migrate) is required")
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


def resource_filters(args: argparse.Namespace, required: bool) -> list[ResourcePatternFilter]:
    """``getResourceFilter``: the resources the options name, in Kafka's order, once each."""
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


def principals(values: list[str]) -> list[str]:
    """``Type:name`` options, checked and normalised (``KafkaPrincipal`` parsing)."""
    return [str(KafkaPrincipal.parse(value.strip())) for value in values]


def entries(
    args: argparse.Namespace, operations: Collection[AclOperation]
) -> set[AccessControlEntry]:
    """``getAcl``: principals x operations x hosts; hosts default to ``*``."""
    result: set[AccessControlEntry] = set()
    for principal_values, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        if not principal_values:
            continue
        host_list = [h.strip() for h in hosts] or [WILDCARD_HOST]
        for principal in principals(principal_values):
            for op in operations:
                for host in host_list:
                    result.add(AccessControlEntry(principal, host, op, permission))
    return result


_PRODUCER_OPERATIONS: Mapping[ResourceType, frozenset[AclOperation]] = {
    # AclCommand.getProducerResourceFilterToAcls
    ResourceType.TOPIC: frozenset({AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.WRITE, AclOperation.DESCRIBE}),
}
_CONSUMER_OPERATIONS: Mapping[ResourceType, frozenset[AclOperation]] = {
    # AclCommand.getConsumerResourceFilterToAcls
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.DESCRIBE}),
    ResourceType.GROUP: frozenset({AclOperation.READ}),
}
_CLUSTER = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)


def filter_to_acls(args: argparse.Namespace) -> Acls:
    """``getResourceFilterToAcls``: the entries per resource filter, with the --producer and
    --consumer expansions (both may be given: their entries add up), each entry's operation
    checked against what its resource type supports."""
    filters = resource_filters(args, True)
    acls: Acls = {}
    if not args.producer and not args.consumer:
        operations = {AclOperation.parse(o) for o in (args.operation or ["All"])}
        acls = {f: entries(args, operations) for f in filters}
    if args.producer:
        _expand(args, filters, _PRODUCER_OPERATIONS, acls)
        if args.idempotent:
            acls[_CLUSTER] = entries(args, {AclOperation.IDEMPOTENT_WRITE})
    if args.consumer:
        _expand(args, filters, _CONSUMER_OPERATIONS, acls)
    _validate_operations(acls)
    return acls


def _expand(
    args: argparse.Namespace,
    filters: list[ResourcePatternFilter],
    operations: Mapping[ResourceType, Collection[AclOperation]],
    acls: Acls,
) -> None:
    """Add the entries a --producer/--consumer shorthand means to the filters of the resource
    types it covers (the others get nothing from it)."""
    for f in filters:
        ops = operations.get(f.resource_type)
        if ops is not None:
            acls.setdefault(f, set()).update(entries(args, ops))


def _validate_operations(acls: Acls) -> None:
    """``validateOperation``: e.g. no ``Alter`` on a group, as Kafka refuses it."""
    for f, found in acls.items():
        valid = set(SUPPORTED_OPERATIONS.get(f.resource_type, ())) | {AclOperation.ALL}
        if any(e.operation not in valid for e in found):
            names = ", ".join(sorted(op.name for op in valid))
            raise UsageError(
                f"ResourceType {f.resource_type.name} only supports operations {names}"
            )


def sorted_entries(found: Collection[AccessControlEntry]) -> list[AccessControlEntry]:
    """Entries in the order the command prints and writes them (stable output)."""
    return sorted(found, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))


def pattern_of(f: ResourcePatternFilter) -> ResourcePattern:
    """The pattern an --add filter names (its pattern type is LITERAL or PREFIXED)."""
    return ResourcePattern(f.resource_type, f.name or "", f.pattern_type)


def acls_to_add(args: argparse.Namespace) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """What --add adds: every binding validated (``AclBinding.validate``) before the store is
    touched, so that a bad one adds nothing."""
    if not args.resource_pattern_type.is_specific:
        raise UsageError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type.name}' is not "
            "valid when adding acls."
        )
    acls = filter_to_acls(args)
    if any(not found for found in acls.values()):
        raise UsageError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    plan: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for f, found in acls.items():
        pattern = pattern_of(f)
        plan[pattern] = sorted_entries(found)
        for entry in plan[pattern]:
            AclBinding(pattern, entry).validate()
    return plan
