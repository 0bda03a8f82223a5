"""ZooKeeperAclStore: ACLs in ZooKeeper, in Kafka's own layout (AclAuthorizer, Kafka <= 3.9).

The shared store for a fleet of proxies; ACLs written by Kafka's tooling (``kafka-acls.sh``,
``kafka.security.authorizer.AclAuthorizer``) are read as they are and ours are readable by
Kafka (checked against Kafka 3.9 by tests/kafka/test_zookeeper_layout_kafka39.py).

Layout (optionally under a chroot)::

    /kafka-acl/<ResourceType>/<name>                    LITERAL    {"version":1,"acls":[...]}
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  PREFIXED
    /kafka-acl-changes/acl_changes_NNNNNNNNNN           "TOPIC:<name>"
    /kafka-acl-extended-changes/acl_changes_NNNNNNNNNN  {"version":1,"resourceType":...}

Theory of operation
-------------------
* Three layers: pure functions for Kafka's formats (paths, znode JSON, change payloads — no
  I/O); :class:`ZkAclClient`, a *blocking* kazoo client that loads, watches and writes (used
  by the CLI directly and by the store through worker threads); :class:`ZooKeeperAclStore`,
  the asyncio shell implementing :class:`~kafkaguard.policy.stores.base.AclStore`.
* kazoo runs watches and state callbacks on its own threads. They only *signal* the event
  loop (``loop.call_soon_threadsafe``); one sync task on the loop does the work, so the ACL
  state is only ever touched on the loop and all ZooKeeper reads and writes are serialised.
* ``start()`` connects, creates Kafka's paths (``createAclPaths``), arms the change watches,
  then walks both stores; it completes after that first full load (listeners open only then).
* A change notification names one resource; the sync task re-reads that znode and replaces
  its entry (Kafka's ``processAclChangeNotification``). Notifications older than 15 minutes
  are deleted, like Kafka's ``ZkNodeChangeNotificationListener``.
* Writes (``add``/``remove``) read the affected znodes and commit one ZooKeeper transaction
  of version-conditional ``setData``/``create``/``delete`` plus the change notifications —
  all-or-nothing (:meth:`kafkaguard.zk.ZkClientBase.commit`, shared with the SCRAM credential
  store); a conflicting concurrent writer (another proxy, Kafka's tool) fails the version
  check and the whole step is retried on fresh data, so no update is lost.
  A znode whose last ACL is removed is deleted.
* Outage: the ACLs in force are kept (never fail open), writes are refused with
  :class:`AclStoreError`, kazoo reconnects on its own, and on every reconnection the store
  resyncs in full (a change whose notification was missed is still picked up).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.base import AclStoreError, Snapshot, SnapshotPublisher
from kafkaguard.zk import ZkClientBase, ZkSyncShell, ZnodeWrite, sequence_number

log = logging.getLogger("kafkaguard.policy.store")

# -- Kafka's layout and formats (pure) -------------------------------------------------------

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
PREFIXED_ROOT = f"{EXTENDED_ROOT}/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
STORED_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN,
    ResourceType.USER,
)
_TYPE_BY_DIR = {t.pascal_name: t for t in STORED_TYPES}

RawEntry = Mapping[str, Any]


def store_root(pattern_type: PatternType) -> str:
    """``ZkAclStore.aclPath``: LITERAL under /kafka-acl, PREFIXED under the extended root."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ROOT
    if pattern_type == PatternType.PREFIXED:
        return PREFIXED_ROOT
    raise AclStoreError(f"pattern type {pattern_type.name} cannot be stored")


def change_root(pattern_type: PatternType) -> str:
    return LITERAL_CHANGES if pattern_type == PatternType.LITERAL else EXTENDED_CHANGES


def type_dir(resource_type: ResourceType) -> str:
    """``SecurityUtils.resourceTypeName``: ``Topic``, ``TransactionalId``, ..."""
    return resource_type.pascal_name


def resource_path(pattern: ResourcePattern) -> str:
    """``ResourceZNode.path``; refuses names ZooKeeper cannot hold as one child node."""
    name = pattern.name
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise AclStoreError(
            f"resource name {name!r} cannot be stored in ZooKeeper's ACL layout "
            "(empty, '.', '..', or contains '/' or NUL)"
        )
    if pattern.resource_type not in STORED_TYPES:
        raise AclStoreError(f"resource type {pattern.resource_type.name} cannot be stored")
    return f"{store_root(pattern.pattern_type)}/{type_dir(pattern.resource_type)}/{name}"


def acl_paths() -> list[str]:
    """``createAclPaths``: both stores with one directory per type, and both change roots."""
    paths = [LITERAL_ROOT, EXTENDED_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES]
    for root in (LITERAL_ROOT, PREFIXED_ROOT):
        paths += [f"{root}/{type_dir(t)}" for t in STORED_TYPES]
    return paths


def entry_json(entry: AccessControlEntry) -> dict[str, Any]:
    """``AclEntry.toJsonCompatibleMap`` for one entry, keys in the order Kafka 3.9's
    AclAuthorizer writes them (observed: tests/kafka/test_zookeeper_layout_kafka39.py)."""
    return {
        "principal": entry.principal,
        "permissionType": entry.permission_type.pascal_name,
        "host": entry.host,
        "operation": entry.operation.pascal_name,
    }


def encode_acls(entries: Iterable[RawEntry]) -> bytes:
    """Znode data as Kafka's Jackson writes it: compact JSON, UTF-8, non-ASCII unescaped."""
    doc = {"acls": [dict(e) for e in entries], "version": 1}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_acls(data: bytes | None, where: str) -> list[RawEntry]:
    """``AclEntry.fromBytes`` up to the entry objects: empty data is no ACLs, version must be 1."""
    if not data:
        return []
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise AclStoreError(f"{where}: znode data is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise AclStoreError(f'{where}: expected an object with "version": 1')
    acls = doc.get("acls")
    if not isinstance(acls, list) or not all(isinstance(a, dict) for a in acls):
        raise AclStoreError(f'{where}: "acls" must be a list of objects')
    return list(acls)


def _kafka_name(enum_cls: Any, text: str) -> Any:
    """``SecurityUtils.valueFromMap``: the PascalCase name, or its upper case; else UNKNOWN."""
    for member in enum_cls:
        if member.value > 1 and text in (member.pascal_name, member.pascal_name.upper()):
            return member
    if text.upper() == "ANY":
        return enum_cls.ANY
    return enum_cls.UNKNOWN


def parse_entry(raw: RawEntry, where: str) -> AccessControlEntry | None:
    """One ``acls`` item → an entry; ``None`` when it can never match (UNKNOWN op/permission)."""
    try:
        principal, permission, operation, host = (
            raw["principal"],
            raw["permissionType"],
            raw["operation"],
            raw["host"],
        )
    except KeyError as exc:
        raise AclStoreError(f"{where}: ACL entry {dict(raw)!r} lacks {exc}") from exc
    if not all(isinstance(v, str) for v in (principal, permission, operation, host)):
        raise AclStoreError(f"{where}: ACL entry {dict(raw)!r} has a non-string field")
    try:
        KafkaPrincipal.parse(principal)
    except ValueError as exc:
        raise AclStoreError(f"{where}: {exc}") from exc
    op = _kafka_name(AclOperation, operation)
    perm = _kafka_name(AclPermissionType, permission)
    if op in (AclOperation.UNKNOWN, AclOperation.ANY) or perm not in (
        AclPermissionType.ALLOW,
        AclPermissionType.DENY,
    ):
        log.warning("%s: ignoring ACL entry %r (unknown operation or permission)", where, raw)
        return None
    return AccessControlEntry(principal, host, op, perm)


def node_bindings(pattern: ResourcePattern, raw: Sequence[RawEntry], where: str) -> Snapshot:
    entries = (parse_entry(r, where) for r in raw)
    return frozenset(AclBinding(pattern, e) for e in entries if e is not None)


def updated_entries(
    raw: Sequence[RawEntry],
    add: Collection[AccessControlEntry],
    remove: Collection[AccessControlEntry],
    where: str,
) -> list[RawEntry]:
    """The znode's entries after the change: order kept, entries we cannot parse kept as-is."""
    out: list[RawEntry] = []
    present: set[AccessControlEntry] = set()
    for item in raw:
        entry = parse_entry(item, where)
        if entry is not None and (entry in remove or entry in present):
            continue
        if entry is not None:
            present.add(entry)
        out.append(item)
    for entry in sorted(add, key=lambda e: (e.principal, e.host, e.operation, e.permission_type)):
        if entry not in present and entry not in remove:
            present.add(entry)
            out.append(entry_json(entry))
    return out


def encode_change(pattern: ResourcePattern) -> bytes:
    """The change notification payload of ``LiteralAclChangeStore``/``ExtendedAclChangeStore``."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    event = {
        "version": 1,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_change(root: str, data: bytes) -> ResourcePattern:
    """Decode a notification under ``root``; raises ValueError like Kafka's decoders."""
    text = data.decode("utf-8")
    if root == LITERAL_CHANGES:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(
                f"expected a string in format ResourceType:ResourceName but got {text}"
            )
        return ResourcePattern(ResourceType.from_string(kind), name, PatternType.LITERAL)
    event = json.loads(text)
    if not isinstance(event, dict) or not isinstance(event.get("version"), int):
        raise ValueError(f"not an ACL change event: {text}")
    if event["version"] > 1:
        raise ValueError(f"Acl change event received for unsupported version: {event['version']}")
    return ResourcePattern(
        ResourceType.from_string(str(event.get("resourceType"))),
        str(event.get("name")),
        PatternType.from_string(str(event.get("patternType"))),
    )


def change_seq(child: str) -> int:
    """The sequence number of ``acl_changes_0000000042``; -1 for other children."""
    return sequence_number(CHANGE_PREFIX, child)


def read_digest_auth(path: str | Path) -> str:
    """:func:`kafkaguard.zk.read_digest_auth` failing with :class:`AclStoreError`, which the
    commands that open this store (``kafkaguard acls``, ``users``, ``analyze``) report."""
    return ZkAclClient.read_digest_auth(path)


# -- blocking client --------------------------------------------------------------------------

_MAX_WRITE_ATTEMPTS = 30
_TXN_BYTES = 900_000
"""Below ZooKeeper's default ``jute.maxbuffer`` (1 MiB) per request."""


@dataclass
class _Pending:
    add: set[AccessControlEntry]
    remove: set[AccessControlEntry]


class ZkAclClient(ZkClientBase):
    """Blocking access to Kafka's ACL znodes; see the module docstring. Not thread-safe for
    concurrent calls — the store serialises them."""

    error = AclStoreError
    log = log
    read_label = "read ACL znodes"

    def _init_state(self, digest_auth: str | None) -> None:
        self.last_seq: dict[str, int] = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}

    @property
    def failure_prefix(self) -> str:
        return f"ZooKeeper {self.hosts}{self.chroot}"

    def ensure_paths(self) -> None:
        from kazoo.exceptions import NodeExistsError

        if self.chroot:
            self._call(lambda: self.zk.ensure_path(self.chroot, acl=self._acl), "create chroot")
        for path in acl_paths():
            full = self._p(path)
            if self._call(functools.partial(self.zk.exists, full), f"check {full}") is None:
                with contextlib.suppress(NodeExistsError):
                    self._call(functools.partial(self.zk.create, full, b""), f"create {full}")

    # reads

    def read_resources(
        self, patterns: Sequence[ResourcePattern]
    ) -> dict[ResourcePattern, Snapshot]:
        paths = [resource_path(p) for p in patterns]
        out: dict[ResourcePattern, Snapshot] = {}
        for pattern, path, (data, _) in zip(patterns, paths, self._get_many(paths), strict=True):
            out[pattern] = node_bindings(pattern, decode_acls(data, path), path)
        return out

    def arm_watches(self, watch: Callable[[Any], None] | None) -> dict[str, list[str]]:
        return {root: self._children(root, watch) for root in (LITERAL_CHANGES, EXTENDED_CHANGES)}

    def load_all(
        self, watch: Callable[[Any], None] | None = None
    ) -> dict[ResourcePattern, Snapshot]:
        """``loadAllAcls``; the change watches are armed first so nothing falls in between."""
        for root, children in self.arm_watches(watch).items():
            self.last_seq[root] = max((change_seq(c) for c in children), default=-1)
        patterns: list[ResourcePattern] = []
        for root, ptype in (
            (LITERAL_ROOT, PatternType.LITERAL),
            (PREFIXED_ROOT, PatternType.PREFIXED),
        ):
            for tdir in sorted(self._children(root)):
                rtype = _TYPE_BY_DIR.get(tdir)
                if rtype is None:
                    log.warning("ignoring unknown resource type directory %s/%s", root, tdir)
                    continue
                for name in self._children(f"{root}/{tdir}"):
                    patterns.append(ResourcePattern(rtype, name, ptype))
        return self.read_resources(patterns)

    def poll_changes(self, watch: Callable[[Any], None] | None) -> dict[ResourcePattern, Snapshot]:
        """Process notifications newer than the last seen; re-arms the watches. Raises
        :class:`AclStoreError` when a notification cannot be decoded (caller resyncs)."""
        changed: dict[ResourcePattern, None] = {}
        now = time.time()
        for root, children in self.arm_watches(watch).items():
            for seq, child, data in self._notifications(
                root, children, self.last_seq[root], change_seq
            ):
                self.last_seq[root] = max(self.last_seq[root], seq)
                if data is None:
                    continue  # purged meanwhile; the resync after a gap covers it
                try:
                    pattern = decode_change(root, data)
                except (ValueError, UnicodeDecodeError) as exc:
                    raise AclStoreError(f"{root}/{child}: bad change notification: {exc}") from exc
                if pattern.resource_type in STORED_TYPES and pattern.pattern_type.is_specific:
                    changed[pattern] = None
            self._purge(now)
        return self.read_resources(list(changed))

    def snapshot(self) -> Snapshot:
        """Everything stored now (CLI, migration)."""
        out: set[AclBinding] = set()
        for bindings in self.load_all().values():
            out |= bindings
        return frozenset(out)

    # writes
    def write(
        self, add: Collection[AclBinding], remove: Collection[AclBinding]
    ) -> dict[ResourcePattern, Snapshot]:
        """Apply the change with version-conditional transactions; returns the new contents
        of every touched resource. Raises :class:`AclStoreError` (nothing of a failed
        transaction is applied)."""
        pending: dict[ResourcePattern, _Pending] = {}
        for b in add:
            pending.setdefault(b.pattern, _Pending(set(), set())).add.add(b.entry)
        for b in remove:
            pending.setdefault(b.pattern, _Pending(set(), set())).remove.add(b.entry)
        for pattern in pending:
            resource_path(pattern)  # refuse unstorable names before writing anything
        if not self.connected:
            raise AclStoreError(
                f"ZooKeeper {self.hosts}{self.chroot} is not connected; ACL changes are refused "
                "until it is back (the ACLs in force are kept)"
            )
        result: dict[ResourcePattern, Snapshot] = {}
        attempts = 0
        while pending:
            attempts += 1
            if attempts > _MAX_WRITE_ATTEMPTS:
                raise AclStoreError(
                    f"gave up after {_MAX_WRITE_ATTEMPTS} attempts: the ACL znodes kept "
                    "changing under concurrent writers"
                )
            if not self._write_step(pending, result):
                time.sleep(random.uniform(0.005, 0.05))
        return result

    def _write_step(
        self, pending: dict[ResourcePattern, _Pending], result: dict[ResourcePattern, Snapshot]
    ) -> bool:
        """One read + transactions; returns False on a version conflict (retry)."""
        patterns = sorted(pending, key=lambda p: (p.pattern_type, p.resource_type, p.name))
        paths = [resource_path(p) for p in patterns]
        ops: list[tuple[ResourcePattern, str, bytes | None, int | None, Snapshot]] = []
        for pattern, path, (data, stat) in zip(patterns, paths, self._get_many(paths), strict=True):
            raw = decode_acls(data, path)
            want = pending[pattern]
            new_raw = updated_entries(raw, want.add, want.remove, path)
            bindings = node_bindings(pattern, new_raw, path)
            if new_raw == raw:
                result[pattern] = bindings
                del pending[pattern]
                continue
            version = None if stat is None else stat.version
            value = encode_acls(new_raw) if new_raw else None
            ops.append((pattern, path, value, version, bindings))
        chunk: list[tuple[ResourcePattern, str, bytes | None, int | None, Snapshot]] = []
        size = 0
        for op in ops:
            cost = len(op[2] or b"") + len(op[1]) * 2 + len(op[0].name) + 200
            if chunk and size + cost > _TXN_BYTES:
                if not self._commit_chunk(chunk, pending, result):
                    return False
                chunk, size = [], 0
            chunk.append(op)
            size += cost
        return not chunk or self._commit_chunk(chunk, pending, result)

    def _commit_chunk(
        self,
        chunk: list[tuple[ResourcePattern, str, bytes | None, int | None, Snapshot]],
        pending: dict[ResourcePattern, _Pending],
        result: dict[ResourcePattern, Snapshot],
    ) -> bool:
        """One transaction for ``chunk``; False when a concurrent writer won (retry)."""
        from kazoo.exceptions import NotEmptyError

        failures = self.commit(
            [
                ZnodeWrite(path, value, version, self._acl)
                for _pattern, path, value, version, _ in chunk
                if version is not None or value is not None  # absent and stays absent
            ],
            [
                (f"{change_root(pattern.pattern_type)}/{CHANGE_PREFIX}", encode_change(pattern))
                for pattern, *_ in chunk
            ],
            what="writing ACLs",
            if_unknown="the change may or may not have been applied — list the ACLs to check",
            conflicts=(NotEmptyError,),
        )
        if failures:
            log.debug("ACL write conflict (%s), retrying", type(failures[0]).__name__)
            return False
        for pattern, *_, bindings in chunk:
            result[pattern] = bindings
            del pending[pattern]
        return True

    def modify(self, change: Callable[[Snapshot], Snapshot]) -> Snapshot:
        """CLI read-modify-write: the difference is applied per resource, conditionally."""
        current = self.snapshot()
        updated = change(current)
        self.write(updated - current, current - updated)
        return updated


# -- the asyncio store ------------------------------------------------------------------------


class ZooKeeperAclStore(ZkSyncShell[ZkAclClient], SnapshotPublisher):
    """:class:`AclStore` over :class:`ZkAclClient`; see the module docstring."""

    error = AclStoreError
    log = log
    contents = "ACLs"

    def __init__(
        self,
        connect: str,
        *,
        chroot: str = "",
        digest_auth_file: str | Path | None = None,
        session_timeout_s: float = 18.0,
    ) -> None:
        SnapshotPublisher.__init__(self)
        self._init_shell(connect, chroot, digest_auth_file, session_timeout_s, ZkAclClient.split)
        self._resources: dict[ResourcePattern, Snapshot] = {}
        self._lock = asyncio.Lock()

    def _log_disconnected(self, state: str) -> None:
        log.warning(
            "%s: connection %s; keeping the %d ACLs in force, ACL changes refused",
            self.description, state, len(self.snapshot()),
        )  # fmt: skip

    # lifecycle
    async def start(self) -> None:
        if self.client is not None:
            return
        client = await self._connect(ZkAclClient)
        try:
            async with self._lock:
                resources = await asyncio.to_thread(client.load_all, self._watch)
                self._install(resources, full=True)
        except BaseException:
            await self.close()
            raise
        log.info("loaded %d ACLs from %s", len(self.snapshot()), self.description)
        self._need_resync = False
        self._start_sync("acl-zk-sync")

    def _sync_guard(self) -> asyncio.Lock:
        return self._lock

    async def _resync(self, client: ZkAclClient) -> None:
        resources = await asyncio.to_thread(client.load_all, self._watch)
        self._install(resources, full=True)
        log.info("resynced %d ACLs from %s", len(self.snapshot()), self.description)

    async def _poll(self, client: ZkAclClient) -> None:
        changed = await asyncio.to_thread(client.poll_changes, self._watch)
        self._install(changed, full=False)

    # state
    def _install(self, resources: Mapping[ResourcePattern, Snapshot], *, full: bool) -> None:
        if full:
            self._resources = {p: b for p, b in resources.items() if b}
        else:
            for pattern, bindings in resources.items():
                if bindings:
                    self._resources[pattern] = bindings
                else:
                    self._resources.pop(pattern, None)
        merged: set[AclBinding] = set()
        for bindings in self._resources.values():
            merged |= bindings
        self.publish(frozenset(merged))

    # writes
    async def _write(self, add: Collection[AclBinding], remove: Collection[AclBinding]) -> None:
        client = self.client
        if client is None:
            raise AclStoreError(f"{self.description}: the store is not started")
        if not self.connected:
            raise AclStoreError(
                f"{self.description}: ZooKeeper is not connected; ACL changes are refused until "
                "it is back (the ACLs in force are kept)"
            )
        async with self._lock:
            written = await asyncio.to_thread(client.write, add, remove)
            self._install(written, full=False)

    async def add(self, bindings: Collection[AclBinding]) -> None:
        await self._write(bindings, ())

    async def remove(self, bindings: Collection[AclBinding]) -> None:
        await self._write((), bindings)
