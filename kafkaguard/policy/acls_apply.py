"""``kafkaguard acls apply -f FILE [--prune] [--dry-run]``: make a store hold the ACLs a file
declares (issue 26).

The file is either kafkaguard's ACL file (:mod:`kafkaguard.policy.stores.acl_file_format`) or
Strimzi ``KafkaUser`` resources (``kafka.strimzi.io/v1`` or ``v1beta2``, several YAML documents;
other kinds are skipped with a note). Each ``KafkaUser`` names its principal: ``User:<name>``
(``spec.userName``, else ``metadata.name``), ``User:CN=<name>`` for ``tls`` and
``tls-external`` authentication, as Strimzi's User Operator writes them. Its
``spec.authorization`` (``type: simple``) ACL rules become bindings; a user without
``authorization`` has none.

The command reads the store, prints the difference in the ACL file's one-line notation (``+``
added, ``-`` removed), then applies it unless ``--dry-run``. Without ``--prune`` it only adds,
and says how many ACLs of the principals the file names the file does not hold (``--dry-run``
lists them, each as ``(--prune) - ...``): with ``--prune`` it also removes those; other
principals' ACLs are never touched. A read of the store that fails or is refused is an error
(exit 1), never an empty store. Applying the same file again changes and
prints nothing. The change is made in two steps so that no client ever holds more than the old
or the new ACLs allow: first the new DENY bindings are added and the stale ALLOW ones removed,
then the new ALLOW bindings are added and the stale DENY ones removed.

The store is any :class:`~kafkaguard.policy.stores.base.AclStore` that
:func:`~kafkaguard.policy.config.build_store` builds (``--config``'s ``acl_store``,
``--acl-file``, ``--zookeeper-connect``), or a running proxy (or broker) through the Admin API
(``--bootstrap-server`` with ``--command-config``: DescribeAcls sent by kafkaguard itself,
which sees a refusal such as 31 CLUSTER_AUTHORIZATION_FAILED; CreateAcls and DeleteAcls
through confluent-kafka).

Exit codes: 0 the store matches the file (changed or not, or ``--dry-run``); 1 the file is
invalid (``file:line`` named) or the store failed; 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Callable, Collection, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import yaml

from kafkaguard.config_tree import ConfigError, ConfigSection, java_properties
from kafkaguard.policy.acls_args import UsageError
from kafkaguard.policy.config import AclStoreConfig, build_store, parse_policy_config
from kafkaguard.policy.model import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclBindingError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import (
    AclFileError,
    acl_line,
    parse_acl_text,
    sort_key,
)
from kafkaguard.policy.stores.base import AclStoreError, Snapshot
from kafkaguard.policy.stores.file import FileAclStore

STRIMZI_API_VERSIONS = ("kafka.strimzi.io/v1", "kafka.strimzi.io/v1beta2")
_LEGACY_OPERATION = "kafka.strimzi.io/v1beta2"
"""Only v1beta2 still has the single ``operation`` of an ACL rule (v1 has ``operations``)."""
_STRIMZI_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.CLUSTER,
    "transactionalId": ResourceType.TRANSACTIONAL_ID,
}
_STRIMZI_PATTERNS = {"literal": PatternType.LITERAL, "prefix": PatternType.PREFIXED}
_STRIMZI_PERMISSIONS = {"allow": AclPermissionType.ALLOW, "deny": AclPermissionType.DENY}
_STRIMZI_OPERATIONS = {
    "Read": AclOperation.READ,
    "Write": AclOperation.WRITE,
    "Create": AclOperation.CREATE,
    "Delete": AclOperation.DELETE,
    "Alter": AclOperation.ALTER,
    "Describe": AclOperation.DESCRIBE,
    "ClusterAction": AclOperation.CLUSTER_ACTION,
    "AlterConfigs": AclOperation.ALTER_CONFIGS,
    "DescribeConfigs": AclOperation.DESCRIBE_CONFIGS,
    "IdempotentWrite": AclOperation.IDEMPOTENT_WRITE,
    "All": AclOperation.ALL,
}
_RULE_KEYS = ("type", "resource", "host", "operations", "operation")
_TLS_AUTHENTICATION = ("tls", "tls-external")
_ADMIN_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class DesiredAcls:
    """What a file declares: its bindings, the principals it speaks for, and notes."""

    bindings: Snapshot
    principals: frozenset[str]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AclDiff:
    added: Snapshot = frozenset()
    removed: Snapshot = frozenset()

    def lines(self) -> Iterator[str]:
        """``+``/``-`` lines in the ACL file's notation and in the order it writes bindings."""
        changes = [(b, "+") for b in self.added] + [(b, "-") for b in self.removed]
        for binding, sign in sorted(changes, key=lambda c: (sort_key(c[0]), c[1])):
            yield f"{sign} {acl_line(binding)}"


def plan(current: Snapshot, desired: DesiredAcls, *, prune: bool) -> AclDiff:
    """What to add, and with ``prune`` what to remove: only bindings of the named principals."""
    removed = frozenset(
        b for b in current - desired.bindings if prune and b.entry.principal in desired.principals
    )
    return AclDiff(desired.bindings - current, removed)


# -- reading the file ----------------------------------------------------------------------------


def load_desired(path: Path) -> DesiredAcls:
    """The file's ACLs; :class:`AclFileError` names ``file:line`` of the first mistake."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AclFileError(f"{file}: cannot read: {exc.strerror}") from exc
    try:
        documents = [d for d in yaml.compose_all(text, Loader=yaml.SafeLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise AclFileError(f"{file}: not valid YAML: {exc}") from exc
    if not any(_is_resource(d) for d in documents):
        acls = parse_acl_text(text, file)
        return DesiredAcls(acls, frozenset(b.entry.principal for b in acls))
    bindings: set[AclBinding] = set()
    principals: set[str] = set()
    notes: list[str] = []
    for document in documents:
        if not _is_resource(document):
            raise AclFileError(
                f"{_where(file, document)} not a Kubernetes resource (no apiVersion/kind); "
                "a file holds either kafkaguard ACLs or resources, not both"
            )
        _read_resource(file, document, bindings, principals, notes)
    return DesiredAcls(frozenset(bindings), frozenset(principals), tuple(notes))


def _is_resource(node: yaml.Node) -> bool:
    return isinstance(node, yaml.MappingNode) and any(
        k.value in ("apiVersion", "kind") for k, _ in node.value
    )


def _where(file: str, node: yaml.Node) -> str:
    return f"{file}:{node.start_mark.line + 1}"


def _fields(file: str, node: yaml.Node, what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise AclFileError(f"{_where(file, node)} {what} must be a mapping")
    return {str(k.value): v for k, v in node.value}


def _text(file: str, node: yaml.Node, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
        raise AclFileError(f"{_where(file, node)} {what} must be a string (quote it)")
    return str(node.value)


def _read_resource(
    file: str,
    document: yaml.Node,
    bindings: set[AclBinding],
    principals: set[str],
    notes: list[str],
) -> None:
    """One ``KafkaUser`` (``spec.authorization.acls``); any other kind is noted and skipped."""
    top = _fields(file, document, "a resource")
    kind = _text(file, top["kind"], "kind") if "kind" in top else ""
    if kind != "KafkaUser":
        notes.append(f"{_where(file, document)} kind {kind or '(none)'} ignored")
        return
    api_version = _text(file, top["apiVersion"], "apiVersion") if "apiVersion" in top else ""
    if api_version not in STRIMZI_API_VERSIONS:
        raise AclFileError(
            f"{_where(file, document)} KafkaUser apiVersion {api_version or '(none)'} is not "
            f"one of {', '.join(STRIMZI_API_VERSIONS)}"
        )
    name, principal, spec = _user(file, document, top)
    principals.add(principal)
    if "authorization" not in spec:
        notes.append(f"{_where(file, document)} KafkaUser {name}: no authorization, no ACLs")
        return
    authorization = _fields(file, spec["authorization"], "spec.authorization")
    kind_node = authorization.get("type")
    if kind_node is None or _text(file, kind_node, "authorization.type") != "simple":
        raise AclFileError(
            f"{_where(file, spec['authorization'])} authorization.type must be 'simple'"
        )
    rules = authorization.get("acls")
    if not isinstance(rules, yaml.SequenceNode):
        raise AclFileError(
            f"{_where(file, spec['authorization'])} authorization.acls must be a list"
        )
    for index, rule in enumerate(rules.value):
        try:
            bindings.update(_rule_bindings(file, rule, principal, api_version))
        except (ValueError, InvalidAclBindingError) as exc:
            if isinstance(exc, AclFileError):
                raise
            raise AclFileError(f"{_where(file, rule)} {name} acls[{index}]: {exc}") from exc


def _user(
    file: str, document: yaml.Node, top: dict[str, yaml.Node]
) -> tuple[str, str, dict[str, yaml.Node]]:
    """A KafkaUser's name, principal and spec: ``spec.userName`` or ``metadata.name``, and
    ``User:CN=<name>`` under TLS authentication (the User Operator's principal)."""
    metadata = _fields(file, top.get("metadata", document), "metadata")
    if "name" not in metadata:
        raise AclFileError(f"{_where(file, document)} KafkaUser without metadata.name")
    name = _text(file, metadata["name"], "metadata.name")
    if "spec" not in top:
        raise AclFileError(f"{_where(file, document)} KafkaUser {name} without spec")
    spec = _fields(file, top["spec"], "spec")
    if "userName" in spec:
        name = _text(file, spec["userName"], "spec.userName")
    auth_type = ""
    if "authentication" in spec:
        auth = _fields(file, spec["authentication"], "spec.authentication")
        auth_type = _text(file, auth["type"], "authentication.type") if "type" in auth else ""
    principal = f"User:CN={name}" if auth_type in _TLS_AUTHENTICATION else f"User:{name}"
    return name, principal, spec


def _rule_bindings(
    file: str, rule: yaml.Node, principal: str, api_version: str
) -> list[AclBinding]:
    """One Strimzi ``AclRule``: its operations on its resource, for ``principal``."""
    fields = _fields(file, rule, "an ACL rule")
    unknown = sorted(set(fields) - set(_RULE_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (expected {', '.join(_RULE_KEYS[:4])})")
    if "resource" not in fields:
        raise ValueError("resource is required")
    resource = _fields(file, fields["resource"], "resource")
    resource_type = _choice(file, resource.get("type"), "resource.type", _STRIMZI_RESOURCES)
    pattern_type = _choice(
        file, resource.get("patternType"), "resource.patternType", _STRIMZI_PATTERNS, "literal"
    )
    if resource_type is ResourceType.CLUSTER:
        name = CLUSTER_NAME
    elif "name" in resource:
        name = _text(file, resource["name"], "resource.name")
    else:
        raise ValueError(f"resource.name is required for a {resource_type.name.lower()}")
    permission = _choice(file, fields.get("type"), "type", _STRIMZI_PERMISSIONS, "allow")
    host = _text(file, fields["host"], "host") if "host" in fields else WILDCARD_HOST
    operations = _operations(file, fields, api_version)
    pattern = ResourcePattern(resource_type, name, pattern_type)
    out = []
    for operation in operations:
        binding = AclBinding(pattern, AccessControlEntry(principal, host, operation, permission))
        binding.validate()
        out.append(binding)
    return out


def _choice(
    file: str, node: yaml.Node | None, what: str, values: dict[str, Any], default: str = ""
) -> Any:
    text = _text(file, node, what) if node is not None else default
    if text not in values:
        raise ValueError(f"{what} must be one of {', '.join(values)}, got {text or '(none)'!r}")
    return values[text]


def _operations(file: str, fields: dict[str, yaml.Node], api_version: str) -> list[AclOperation]:
    """``operations`` (v1, v1beta2) or, in v1beta2 only, the older single ``operation``."""
    if "operation" in fields and api_version != _LEGACY_OPERATION:
        raise ValueError(f"{api_version} has no 'operation': list them under 'operations'")
    if "operations" in fields:
        node = fields["operations"]
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise ValueError("operations must be a non-empty list")
        names = [_text(file, n, "an operation") for n in node.value]
    elif "operation" in fields:
        names = [_text(file, fields["operation"], "operation")]
    else:
        raise ValueError("operations is required")
    unknown = [n for n in names if n not in _STRIMZI_OPERATIONS]
    if unknown:
        raise ValueError(f"operation {unknown[0]!r} is not one of {', '.join(_STRIMZI_OPERATIONS)}")
    return [_STRIMZI_OPERATIONS[n] for n in names]


# -- the store -----------------------------------------------------------------------------------


class AclTarget(Protocol):
    """What ``apply`` needs of a store: the :class:`~kafkaguard.policy.stores.base.AclStore`
    calls it uses (every store is one), also met by the Admin API of a running proxy."""

    @property
    def description(self) -> str: ...

    async def start(self) -> None: ...

    def snapshot(self) -> Snapshot: ...

    async def add(self, bindings: Collection[AclBinding]) -> None: ...

    async def remove(self, bindings: Collection[AclBinding]) -> None: ...

    async def close(self) -> None: ...


AclReader = Callable[[Mapping[str, str], str], Coroutine[Any, Any, Snapshot]]
"""Reads every ACL of a running proxy or broker (``properties``, ``bootstrap``) with
DescribeAcls, and raises :class:`AclStoreError` on any error code of the answer. It speaks the
wire protocol, which this package may not: the command line passes
:func:`kafkaguard.proxy.app.wire_admin.describe_acls`."""


@dataclass
class AdminApiAcls:
    """The ACLs of a running proxy (or broker) through the Admin API: read with ``reader``
    (librdkafka's ``describe_acls`` answers an empty list when DescribeAcls is refused with 31
    CLUSTER_AUTHORIZATION_FAILED, so it is never used to read), changed with confluent-kafka's
    ``create_acls``/``delete_acls``, which report each binding's error."""

    bootstrap: str
    properties: dict[str, str] = field(default_factory=dict)
    reader: AclReader | None = None
    _admin: Any = None
    _snapshot: Snapshot = frozenset()

    @property
    def description(self) -> str:
        return f"Admin API at {self.bootstrap}"

    async def start(self) -> None:
        if self.reader is None:
            raise AclStoreError(
                "--bootstrap-server needs the DescribeAcls reader of `kafkaguard acls`"
            )
        self._snapshot = await self.reader(self.properties, self.bootstrap)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def _client(self) -> Any:
        if self._admin is None:
            try:
                from confluent_kafka.admin import AdminClient
            except ImportError as exc:
                raise AclStoreError(
                    "changing ACLs through --bootstrap-server needs confluent-kafka: "
                    "pip install 'kafkaguard[kafka]'"
                ) from exc
            self._admin = AdminClient({**self.properties, "bootstrap.servers": self.bootstrap})
        return self._admin

    async def add(self, bindings: Collection[AclBinding]) -> None:
        if bindings:
            await asyncio.to_thread(self._change, "create_acls", bindings)

    async def remove(self, bindings: Collection[AclBinding]) -> None:
        if bindings:
            await asyncio.to_thread(self._change, "delete_acls", bindings)

    def _change(self, call: str, bindings: Collection[AclBinding]) -> None:
        """CreateAcls with the bindings, or DeleteAcls with one exact filter per binding."""
        from confluent_kafka.admin._acl import AclBinding as Binding
        from confluent_kafka.admin._acl import AclBindingFilter

        kind = Binding if call == "create_acls" else AclBindingFilter
        ordered = sorted(bindings, key=sort_key)
        wire = [
            kind(
                b.pattern.resource_type.value,
                b.pattern.name,
                b.pattern.pattern_type.value,
                b.entry.principal,
                b.entry.host,
                b.entry.operation.value,
                b.entry.permission_type.value,
            )
            for b in ordered
        ]
        futures = getattr(self._client(), call)(wire, request_timeout=_ADMIN_TIMEOUT_S)
        for binding, item in zip(ordered, wire, strict=True):
            try:
                _result(futures[item])
            except AclStoreError as exc:
                raise AclStoreError(f"{acl_line(binding)}: {exc}") from exc

    async def close(self) -> None:
        self._admin = None


def _result(future: Any) -> Any:
    from confluent_kafka import KafkaException

    try:
        return future.result(_ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise AclStoreError(str(exc.args[0])) from exc


_JAAS_CREDENTIALS = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_MODULES = ("PlainLoginModule", "ScramLoginModule")


def client_properties(path: Path) -> dict[str, str]:
    """A Kafka client properties file (kafka-acls.sh's ``--command-config``) as librdkafka
    settings: the keys pass as they are (librdkafka knows ``security.protocol``,
    ``sasl.mechanism``, ``ssl.ca.location``, ...), and a PLAIN or SCRAM ``sasl.jaas.config``
    becomes ``sasl.username``/``sasl.password``. Java key stores cannot be read by librdkafka:
    refused with the keys to use."""
    try:
        properties = java_properties(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--command-config {path}: {exc.strerror}") from exc
    stores = sorted(k for k in properties if k.startswith(("ssl.truststore.", "ssl.keystore.")))
    if stores:
        raise UsageError(
            f"--command-config {path}: {stores[0]} is a Java key store; give PEM files with "
            "ssl.ca.location, ssl.certificate.location and ssl.key.location"
        )
    jaas = properties.pop("sasl.jaas.config", None)
    if jaas is not None:
        if not any(module in jaas for module in _JAAS_MODULES):
            raise UsageError(
                f"--command-config {path}: only PLAIN and SCRAM sasl.jaas.config are understood"
            )
        for key, value in _JAAS_CREDENTIALS.findall(jaas):
            properties[f"sasl.{key}"] = re.sub(r"\\(.)", r"\1", value)
    return properties


def _target(
    args: argparse.Namespace,
    connection: Mapping[str, Any] | None,
    reader: AclReader | None = None,
) -> AclTarget:
    """The one store ``apply`` changes: named by exactly one of the store options.
    ``connection``: the librdkafka settings of ``--config``'s upstream, which a ``kafka`` store
    needs (kafkaguard/proxy/app/store_migrate.py gives them); ``reader``: how a running proxy's
    ACLs are read (:data:`AclReader`)."""
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
    if len(given) != 1:
        not_these = f", not {' and '.join(given)}" if given else ""
        raise UsageError(
            "apply needs one store: --config, --acl-file, --zookeeper-connect or "
            f"--bootstrap-server{not_these}"
        )
    if args.command_config and not args.bootstrap_server:
        raise UsageError("--command-config goes with --bootstrap-server")
    if args.bootstrap_server:
        properties = client_properties(Path(args.command_config)) if args.command_config else {}
        return AdminApiAcls(args.bootstrap_server, properties, reader)
    if args.config:
        store = parse_policy_config(ConfigSection.from_file(args.config)).acl_store
        if store.type == "memory":
            raise UsageError(f"{args.config}: acl_store.type is 'memory'; nothing to apply to")
        store = replace(store, poll_interval_s=0.0)  # one read, no poller
    elif args.acl_file:  # created when missing (not by a dry run), as ``acls --add`` does
        path = Path(args.acl_file)
        return FileAclStore(path, poll_interval_s=0.0, create_if_missing=not args.dry_run)
    else:
        store = AclStoreConfig(
            type="zookeeper",
            connect=args.zookeeper_connect,
            chroot=args.zookeeper_chroot,
            digest_auth_file=(
                Path(args.zookeeper_digest_auth_file) if args.zookeeper_digest_auth_file else None
            ),
        )
    return build_store(store, connection)


# -- the command ---------------------------------------------------------------------------------


async def apply_acls(
    target: AclTarget,
    desired: DesiredAcls,
    *,
    prune: bool,
    dry_run: bool,
    out: Callable[[str], None],
) -> AclDiff:
    """Print the difference between ``target`` and ``desired``, then apply it (not on
    ``dry_run``), never letting a client hold more than the old or the new ACLs allow."""
    await target.start()
    try:
        current = target.snapshot()
        diff = plan(current, desired, prune=prune)
        for line in diff.lines():
            out(line)
        if not prune:
            _report_unpruned(plan(current, desired, prune=True).removed, dry_run, out)
        if not diff.added and not diff.removed:
            out(f"No changes: {target.description} holds every ACL of the file.")
            return diff
        counts = f"{len(diff.added)} to add, {len(diff.removed)} to remove"
        if dry_run:
            out(f"Dry run: {counts} in {target.description}; nothing changed.")
            return diff
        deny = AclPermissionType.DENY
        await target.add([b for b in diff.added if b.entry.permission_type is deny])
        await target.remove([b for b in diff.removed if b.entry.permission_type is not deny])
        await target.add([b for b in diff.added if b.entry.permission_type is not deny])
        await target.remove([b for b in diff.removed if b.entry.permission_type is deny])
        out(f"Applied: {counts} in {target.description}.")
        return diff
    finally:
        await target.close()


def _report_unpruned(stale: Snapshot, dry_run: bool, out: Callable[[str], None]) -> None:
    """What only ``--prune`` would remove: ACLs of the file's principals the file lacks. Said
    even when nothing else changes (a Strimzi user expects the User Operator's reconcile, which
    removes them); listed with ``--dry-run``."""
    if not stale:
        return
    if dry_run:
        for line in AclDiff(removed=stale).lines():
            out(f"  (--prune) {line}")
    count = f"{len(stale)} ACL{'s' if len(stale) != 1 else ''}"
    listed = "" if dry_run else " (--dry-run lists them)"
    out(
        f"Kept: {count} of the file's principals that the file does not hold; "
        f"--prune would remove them{listed}."
    )


def run(
    args: argparse.Namespace,
    out: Callable[[str], None],
    connection: Mapping[str, Any] | None = None,
    reader: AclReader | None = None,
) -> None:
    """``acls apply``; errors propagate to :func:`kafkaguard.policy.acls_cli.run` (exit 1/2)."""
    if not args.apply_file:
        raise UsageError("apply needs -f FILE (kafkaguard ACLs or Strimzi KafkaUser resources)")
    desired = load_desired(Path(args.apply_file))
    for note in desired.notes:
        out(f"Note: {note}")
    target = _target(args, connection, reader)
    try:
        asyncio.run(apply_acls(target, desired, prune=args.prune, dry_run=args.dry_run, out=out))
    except ConfigError as exc:
        raise AclStoreError(str(exc)) from exc
