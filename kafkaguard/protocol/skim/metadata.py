"""Metadata requests skimmed for the handler (:func:`skim_metadata_request`), and Metadata
responses walked by lengths and rebuilt from their own bytes: the broker entries with the
proxy's addresses spliced in, the topic entries the client may see copied as the broker sent
them (:func:`walk_metadata_response`, :meth:`MetadataWalk.splice`). See
:mod:`kafkaguard.protocol.skim`.

Why. A Metadata request the proxy lets through whole (every named topic allowed, no
auto-creation to hold back, nothing to synthesize) changes only a few fields of the broker's
answer: each broker's host and port, and the KIP-430 ``*_authorized_operations`` integers.
Decoding the answer with kio, rewriting it and encoding it again cost most of the proxy's CPU
per Metadata round trip (issue 39); walking it by lengths finds the same fields.

The layout is ``MetadataResponse.json`` v0–v13 (flexible from v9, response header v1 then),
read as ``MetadataResponseData.read`` reads it: a negative length or count is null, refused
where the field is not nullable (a broker's host, ``brokers``, ``topics``, ``partitions``, the
replica lists; a topic's name before v12); compact lengths are ``readUnsignedVarint() - 1``
(:mod:`.reading`). What the walk does not take on, the caller decodes whole as before
(``None``): a tagged field anywhere (no version defines one, so any is unknown, which the
decoded path drops), a string that is not UTF-8 or is longer than Kafka's readers accept, bytes
after the body, a length running past the frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final
from uuid import UUID

from kafkaguard.protocol.guard import uvarint_bytes
from kafkaguard.protocol.skim.reading import (
    I16,
    I32,
    Truncated,
    size_at,
    string_span,
    tags_end,
)

LAST_WALKED_VERSION: Final = 13
FIRST_FLEXIBLE_VERSION: Final = 9
NOT_REQUESTED: Final = -2147483648
"""``Int.MinValue``: the KIP-430 fields' default, "not requested"."""

AddressRewrite = Callable[[int, str, int], tuple[str, int]]
"""``(node_id, host, port) -> (host, port)`` the client may see (``advertise_node``)."""

_ZERO_ID: Final = bytes(16)


class BrokerEntry:
    """A ``MetadataResponseBroker``: its address, and where its rack starts and it ends."""

    __slots__ = ("end", "host", "node_id", "port", "rest")

    def __init__(self, node_id: int, host: str, port: int, rest: int, end: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.rest = rest
        """The offset of what follows the port (rack, tagged fields), copied as it is."""
        self.end = end


class TopicEntry:
    """A ``MetadataResponseTopic``: the fields the proxy reads, with kio's names, and its
    place in the frame."""

    __slots__ = ("end", "error_code", "name", "ops_at", "start", "topic_id")

    def __init__(
        self,
        error_code: int,
        name: str | None,
        topic_id: UUID | None,
        start: int,
        ops_at: int,
        end: int,
    ) -> None:
        self.error_code = error_code
        self.name = name
        self.topic_id = topic_id
        """``None`` before v10 and for the zero id (kio reads the zero id as ``None`` too)."""
        self.start = start
        self.ops_at = ops_at
        """The offset of ``topic_authorized_operations`` (v8+), else -1."""
        self.end = end


class MetadataWalk:
    """Where the parts of one whole MetadataResponse frame are (size prefix included)."""

    __slots__ = (
        "brokers",
        "brokers_end",
        "brokers_start",
        "cluster_ops_at",
        "topics",
        "topics_count_at",
        "topics_end",
        "topics_start",
        "version",
    )

    def __init__(self, version: int) -> None:
        self.version = version
        self.brokers_start = 0
        """The offset of the first broker entry (after the array's count)."""
        self.brokers: list[BrokerEntry] = []
        self.brokers_end = 0
        self.topics_count_at = 0
        """The offset of the ``topics`` count; ``topics_start`` that of the first entry."""
        self.topics_start = 0
        self.topics: list[TopicEntry] = []
        self.topics_end = 0
        self.cluster_ops_at = -1
        """The offset of ``cluster_authorized_operations`` (v8–v10), else -1."""

    def splice(
        self,
        frame: bytes | memoryview,
        advertise: AddressRewrite,
        topics: Sequence[TopicEntry],
        topic_ops: Sequence[int],
        cluster_ops: int,
    ) -> bytes:
        """The frame the client receives: every broker at the address ``advertise`` answers,
        then ``topics`` (entries of this walk, in the order given) each with its
        ``topic_ops`` (v8+), and ``cluster_ops`` (v8–v10); every other byte the broker's."""
        flexible = self.version >= FIRST_FLEXIBLE_VERSION
        parts: list[bytes | memoryview] = [b"", frame[4 : self.brokers_start]]
        for broker in self.brokers:
            host, port = advertise(broker.node_id, broker.host, broker.port)
            raw = host.encode("utf-8")
            size = uvarint_bytes(len(raw) + 1) if flexible else I16.pack(len(raw))
            parts += (I32.pack(broker.node_id), size, raw, I32.pack(port))
            parts.append(frame[broker.rest : broker.end])
        parts.append(frame[self.brokers_end : self.topics_count_at])
        parts.append(uvarint_bytes(len(topics) + 1) if flexible else I32.pack(len(topics)))
        for topic, ops in zip(topics, topic_ops, strict=True):
            if topic.ops_at < 0:
                parts.append(frame[topic.start : topic.end])
            else:
                parts += (frame[topic.start : topic.ops_at], I32.pack(ops))
                parts.append(frame[topic.ops_at + 4 : topic.end])
        tail = self.topics_end
        if self.cluster_ops_at >= 0:
            parts += (frame[tail : self.cluster_ops_at], I32.pack(cluster_ops))
            tail = self.cluster_ops_at + 4
        parts.append(frame[tail:])
        parts[0] = I32.pack(sum(map(len, parts)))  # the size prefix: what follows it
        return b"".join(parts)


def walk_metadata_response(frame: bytes | memoryview, version: int) -> MetadataWalk | None:
    """The walk of a whole MetadataResponse ``frame`` of ``version`` (size prefix included);
    ``None`` when the version is not walked or the frame is not one the walk takes on (see the
    module's docstring): the caller then decodes it."""
    if not 0 <= version <= LAST_WALKED_VERSION:
        return None
    try:
        walk = _walk(memoryview(frame), version)
    except (Truncated, IndexError, struct.error, UnicodeDecodeError):
        return None
    return walk


def _walk(view: memoryview, version: int) -> MetadataWalk:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    walk = MetadataWalk(version)
    pos = _no_tags(view, 8) if flexible else 8  # size, correlation id, response header v1
    if version >= 3:
        pos += 4  # throttle_time_ms
    count, pos = _count(view, pos, flexible)
    walk.brokers_start = pos
    for _ in range(count):
        broker = _broker(view, pos, version)
        walk.brokers.append(broker)
        pos = broker.end
    walk.brokers_end = pos
    if version >= 2:
        _, pos = _string(view, pos, flexible, nullable=True)  # cluster_id
    if version >= 1:
        pos += 4  # controller_id
    walk.topics_count_at = pos
    count, pos = _count(view, pos, flexible)
    walk.topics_start = pos
    for _ in range(count):
        topic, pos = _topic(view, pos, version)
        walk.topics.append(topic)
    walk.topics_end = pos
    if 8 <= version <= 10:
        walk.cluster_ops_at = pos
        pos += 4
    if version >= 13:
        pos += 2  # error_code
    if flexible:
        pos = _no_tags(view, pos)
    if pos != len(view):
        raise Truncated
    return walk


def _broker(view: memoryview, pos: int, version: int) -> BrokerEntry:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    node_id = _int32(view, pos)
    host, pos = _string(view, pos + 4, flexible, nullable=False)
    assert host is not None  # (not nullable)
    port = _int32(view, pos)
    rest = pos = pos + 4
    if version >= 1:
        _, pos = _string(view, pos, flexible, nullable=True)  # rack
    if flexible:
        pos = _no_tags(view, pos)
    return BrokerEntry(node_id, host, port, rest, pos)


def _topic(view: memoryview, pos: int, version: int) -> tuple[TopicEntry, int]:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    start = pos
    error_code = I16.unpack_from(view, pos)[0]
    name, pos = _string(view, pos + 2, flexible, nullable=version >= 12)
    topic_id: UUID | None = None
    if version >= 10:
        topic_id = _uuid(view, pos)
        pos += 16
    if version >= 1:
        pos += 1  # is_internal
    partitions, pos = _count(view, pos, flexible)
    for _ in range(partitions):
        pos += 14 if version >= 7 else 10  # error, index, leader (, leader epoch)
        pos = _int32s(view, pos, flexible)  # replica_nodes
        pos = _int32s(view, pos, flexible)  # isr_nodes
        if version >= 5:
            pos = _int32s(view, pos, flexible)  # offline_replicas
        if flexible:
            pos = _no_tags(view, pos)
    ops_at = -1
    if version >= 8:
        ops_at = pos
        pos += 4
    if flexible:
        pos = _no_tags(view, pos)
    return TopicEntry(error_code, name, topic_id, start, ops_at, pos), pos


def _int32(view: memoryview, pos: int) -> int:
    value: int = I32.unpack_from(view, pos)[0]
    return value


def _no_tags(view: memoryview, pos: int) -> int:
    """The offset after an empty tagged-fields section at ``pos``; any field is not taken on."""
    if view[pos]:
        raise Truncated
    return pos + 1


def _count(view: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """A non-nullable array's count (null refused), bounded by the bytes left (every entry
    takes one at least: a hostile count)."""
    count, pos = size_at(view, pos, flexible, wide=True)
    if count < 0 or count > len(view) - pos:
        raise Truncated
    return count, pos


def _int32s(view: memoryview, pos: int, flexible: bool) -> int:
    """The offset after a non-nullable array of int32."""
    count, pos = _count(view, pos, flexible)
    return pos + 4 * count


def _string(
    view: memoryview, pos: int, flexible: bool, *, nullable: bool
) -> tuple[str | None, int]:
    """The string at ``pos``: UTF-8 only (another is decoded whole, as Kafka reads it)."""
    start, stop = string_span(view, pos, flexible, nullable)
    return (None if start < 0 else bytes(view[start:stop]).decode("utf-8")), stop


# -- requests --------------------------------------------------------------------------------


class MetadataRequestTopicSkim:
    """A ``MetadataRequestTopic``, with kio's field names."""

    __slots__ = ("name", "topic_id")

    def __init__(self, name: str | None, topic_id: UUID | None) -> None:
        self.name = name
        self.topic_id = topic_id
        """``None`` before v10 and for the zero id (as kio reads it)."""


class MetadataRequestSkim:
    """What the Metadata handler reads of a ``MetadataRequest``, with kio's field names; a
    flag the version lacks at the schema's default (the handler reads it only where the
    version has it)."""

    __slots__ = (
        "allow_auto_topic_creation",
        "include_cluster_authorized_operations",
        "include_topic_authorized_operations",
        "topics",
    )

    def __init__(
        self,
        topics: tuple[MetadataRequestTopicSkim, ...] | None,
        allow_auto_topic_creation: bool,
        include_cluster_authorized_operations: bool,
        include_topic_authorized_operations: bool,
    ) -> None:
        self.topics = topics
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.include_cluster_authorized_operations = include_cluster_authorized_operations
        self.include_topic_authorized_operations = include_topic_authorized_operations


def skim_metadata_request(
    frame: bytes | memoryview, version: int, client_id_end: int
) -> MetadataRequestSkim | None:
    """A whole MetadataRequest ``frame`` (``MetadataRequest.json`` v0–v13) read after its
    client id as ``MetadataRequestData.read`` reads it: ``topics`` nullable from v1, a name
    nullable from v10, unknown tagged fields skipped, bytes after the body ignored
    (``RequestContext.parseRequest`` does not look for them). ``None`` for another version and
    for a frame the skim does not take on (a length past the frame, a null the version does
    not allow, a name that is not UTF-8, a boolean byte other than 0 or 1): kio's decode then
    reads it, refusing what Kafka refuses."""
    if not 0 <= version <= LAST_WALKED_VERSION:
        return None
    try:
        return _skim_request(memoryview(frame), version, client_id_end)
    except (Truncated, IndexError, struct.error, UnicodeDecodeError):
        return None


def _skim_request(view: memoryview, version: int, pos: int) -> MetadataRequestSkim:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    topics, pos = _request_topics(view, tags_end(view, pos) if flexible else pos, version)
    auto = True
    if version >= 4:
        auto, pos = _bool(view, pos)
    cluster_ops = topic_ops = False
    if 8 <= version <= 10:
        cluster_ops, pos = _bool(view, pos)
    if version >= 8:
        topic_ops, pos = _bool(view, pos)
    if flexible:
        pos = tags_end(view, pos)
    if pos > len(view):
        raise Truncated
    return MetadataRequestSkim(topics, auto, cluster_ops, topic_ops)


def _request_topics(
    view: memoryview, pos: int, version: int
) -> tuple[tuple[MetadataRequestTopicSkim, ...] | None, int]:
    """``topics``: nullable from v1 (a negative count), refused as null in v0."""
    count, pos = size_at(view, pos, version >= FIRST_FLEXIBLE_VERSION, wide=True)
    if count < 0:
        if version == 0:
            raise Truncated
        return None, pos
    if count > len(view) - pos:
        raise Truncated
    entries = []
    for _ in range(count):
        entry, pos = _request_topic(view, pos, version)
        entries.append(entry)
    return tuple(entries), pos


def _request_topic(
    view: memoryview, pos: int, version: int
) -> tuple[MetadataRequestTopicSkim, int]:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    topic_id: UUID | None = None
    if version >= 10:
        topic_id = _uuid(view, pos)
        pos += 16
    name, pos = _string(view, pos, flexible, nullable=version >= 10)
    if flexible:
        pos = tags_end(view, pos)
    return MetadataRequestTopicSkim(name, topic_id), pos


def _uuid(view: memoryview, pos: int) -> UUID | None:
    """The uuid at ``pos``; ``None`` for the zero id (as kio reads it)."""
    raw = bytes(view[pos : pos + 16])
    if len(raw) != 16:
        raise Truncated
    return None if raw == _ZERO_ID else UUID(bytes=raw)


def _bool(view: memoryview, pos: int) -> tuple[bool, int]:
    byte = view[pos]
    if byte > 1:
        raise Truncated
    return byte == 1, pos + 1
