"""KafkaTopicAclStore: ACLs in a compacted topic on the protected cluster (``_kafkaguard-acls``).

The shared store of a fleet of proxies when the cluster has no ZooKeeper (Kafka 4); the
record format is docs/acl-store.md:

* key: the binding in its canonical form (:func:`binding_key`), compact JSON of its seven
  fields in a fixed order, so every writer gives one binding one key;
* value: ``{"version":1, ...the same fields}`` (:func:`encode_binding`), readable with any
  console consumer; a tombstone (null value) deletes the binding.

Theory of operation: the topic is read and written by :class:`kafkaguard.topic_table.
TopicTable` (first full read before :meth:`start` returns, then following; writes
acknowledged by ``acks=all`` and applied locally before they are answered). This module maps
records to bindings and publishes whole snapshots, as the other stores do, for
``StandardAuthorizer``'s swap. A record that is not a binding (unknown version, bad JSON) is
logged and left out, like an invalid ZooKeeper znode entry; it never disables the rest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Final

from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.base import AclStoreError, SnapshotPublisher
from kafkaguard.topic_table import Changes, TopicSettings, TopicTable, TopicTableError

log = logging.getLogger("kafkaguard.policy.store")

DEFAULT_TOPIC: Final = "_kafkaguard-acls"
VERSION: Final = 1
"""The value format's version (docs/acl-store.md); a reader skips versions it does not know."""
CLIENT_ID: Final = "kafkaguard-acls"


def _fields(binding: AclBinding) -> dict[str, Any]:
    pattern, entry = binding.pattern, binding.entry
    return {
        "resourceType": pattern.resource_type.name,
        "patternType": pattern.pattern_type.name,
        "name": pattern.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.name,
        "permissionType": entry.permission_type.name,
    }


def _json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def binding_key(binding: AclBinding) -> bytes:
    """The record key: one binding, one key, whoever writes it."""
    return _json(_fields(binding))


def encode_binding(binding: AclBinding) -> bytes:
    """The record value (format version 1)."""
    return _json({"version": VERSION, **_fields(binding)})


def decode_binding(value: bytes) -> AclBinding:
    """A record value; raises ValueError (bad JSON, unknown version, unknown names)."""
    document = json.loads(value.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    version = document.get("version")
    if version != VERSION:
        raise ValueError(f"unsupported version {version!r} (this reader knows {VERSION})")
    try:
        pattern = ResourcePattern(
            ResourceType.from_string(str(document["resourceType"])),
            str(document["name"]),
            PatternType.from_string(str(document["patternType"])),
        )
        entry = AccessControlEntry(
            str(document["principal"]),
            str(document["host"]),
            AclOperation.from_string(str(document["operation"])),
            AclPermissionType.from_string(str(document["permissionType"])),
        )
    except KeyError as exc:
        raise ValueError(f"missing field {exc}") from None
    binding = AclBinding(pattern, entry)
    binding.validate()  # InvalidAclBindingError is a ValueError
    return binding


class KafkaTopicAclStore(SnapshotPublisher):
    """:class:`~kafkaguard.policy.stores.base.AclStore` over a compacted topic."""

    def __init__(self, connection: Mapping[str, Any], settings: TopicSettings) -> None:
        """``connection``: librdkafka settings reaching the protected cluster the way the
        proxy does (its upstream TLS and SASL settings)."""
        super().__init__()
        try:
            self.table = TopicTable(
                connection, settings, client_id=CLIENT_ID, on_change=self._changed
            )
        except TopicTableError as exc:
            raise AclStoreError(str(exc)) from exc
        self._by_key: dict[bytes, AclBinding] = {}

    @property
    def description(self) -> str:
        return f"kafka {self.table.description}"

    async def start(self) -> None:
        try:
            await self.table.start()
        except TopicTableError as exc:
            raise AclStoreError(str(exc)) from exc
        log.info("loaded %d ACLs from %s", len(self.snapshot()), self.description)

    def _changed(self, changes: Changes) -> None:
        for key, value in changes.items():
            if value is None:
                self._by_key.pop(key, None)
                continue
            try:
                self._by_key[key] = decode_binding(value)
            except (ValueError, UnicodeDecodeError) as exc:
                log.error("%s: record %r left out: %s", self.description, key, exc)
                self._by_key.pop(key, None)
        self.publish(frozenset(self._by_key.values()))

    async def add(self, bindings: Collection[AclBinding]) -> None:
        present = set(self._by_key.values())
        records: list[tuple[bytes, bytes | None]] = [
            (binding_key(b), encode_binding(b)) for b in bindings if b not in present
        ]
        await self._write(records)

    async def remove(self, bindings: Collection[AclBinding]) -> None:
        doomed = frozenset(bindings)
        # Tombstone every key that holds one of them (a hand-written key too).
        records: list[tuple[bytes, bytes | None]] = [
            (key, None) for key, binding in self._by_key.items() if binding in doomed
        ]
        await self._write(records)

    async def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        try:
            await self.table.write(records)
        except TopicTableError as exc:
            raise AclStoreError(str(exc)) from exc

    def not_ready(self) -> Iterator[str]:
        """``/readyz``: first read, reachability, compaction."""
        return self.table.not_ready()

    @property
    def reachable(self) -> bool:
        return self.table.reachable

    async def close(self) -> None:
        await self.table.close()
