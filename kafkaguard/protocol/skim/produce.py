"""Produce requests skimmed for authorization: the transactional id, ``acks``, topics (by
name or id) and partition indexes, with the record batches left as views of the client's
frame (:func:`skim_produce_request`). See :mod:`kafkaguard.protocol.skim`."""

from __future__ import annotations

import struct
from typing import Final
from uuid import UUID

from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.skim.reading import (
    I16,
    I32,
    Truncated,
    length_at,
    size_at,
    string_span,
    tags_end,
)
from kafkaguard.protocol.strings import read_string


class ProducePartitionSkim:
    """``PartitionProduceData``: the index and a view of the record batches."""

    __slots__ = ("index", "records")

    def __init__(self, index: int, records: memoryview | None) -> None:
        self.index = index
        self.records = records


class NamedTopicSkim:
    """``TopicProduceData`` up to v12 (by name)."""

    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: tuple[ProducePartitionSkim, ...]) -> None:
        self.name = name
        self.partition_data = partition_data


class IdTopicSkim:
    """``TopicProduceData`` from v13 (by topic id, KIP-516)."""

    __slots__ = ("partition_data", "topic_id")

    def __init__(self, topic_id: UUID, partition_data: tuple[ProducePartitionSkim, ...]) -> None:
        self.topic_id = topic_id
        self.partition_data = partition_data


class ProduceRequestSkim:
    """What authorization reads of a ProduceRequest, with the kio body's field names."""

    __slots__ = ("acks", "topic_data", "transactional_id")

    def __init__(
        self,
        transactional_id: str | None,
        acks: int,
        topic_data: tuple[NamedTopicSkim | IdTopicSkim, ...],
    ) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.topic_data = topic_data


FIRST_SKIMMED_PRODUCE_VERSION: Final = 3
LAST_SKIMMED_PRODUCE_VERSION: Final = 13


def skim_produce_request(
    frame: bytes | memoryview, version: int, client_id_end: int
) -> ProduceRequestSkim | None:
    """Read a whole ProduceRequest ``frame`` (``ProduceRequest.json`` v3–v13) after its client
    id, as ``ProduceRequestData.read`` reads it; ``None`` for another version.

    The rules are the generated reader's: any negative length or count is null (refused
    where the field is not nullable), compact lengths are ``readUnsignedVarint() - 1`` in Java
    ``int`` arithmetic, strings longer than 32767 bytes are refused, malformed UTF-8 is
    replaced by U+FFFD (``new String(bytes, UTF_8)``), an all-zero topic id is
    ``Uuid.ZERO_UUID`` and unknown tagged fields are skipped. Bytes after the body are ignored
    (``RequestContext.parseRequest`` does not look for them). Every length is checked against
    the frame: raises :class:`MalformedFrame` otherwise, as Kafka refuses the request."""
    if not FIRST_SKIMMED_PRODUCE_VERSION <= version <= LAST_SKIMMED_PRODUCE_VERSION:
        return None
    view = memoryview(frame)
    end = len(view)
    try:
        if version >= 9:
            transactional_id, pos = _compact_string(view, tags_end(view, client_id_end))
            acks = I16.unpack_from(view, pos)[0]
            count, pos = length_at(view, pos + 6)  # after acks, timeout_ms
        else:
            transactional_id, pos = _string(view, client_id_end, nullable=True)
            acks, count = _ACKS_COUNT.unpack_from(view, pos)
            pos += 10
        if count < 0:  # ``ProduceRequestData.read`` refuses a null array
            raise MalformedFrame("non-nullable field topic_data was serialized as null")
        if count > end - pos:  # every entry takes a byte at least: a hostile count
            raise Truncated
        topics = []
        for _ in range(count):
            topic, pos = _produce_topic(view, pos, version)
            topics.append(topic)
        if version >= 9:
            pos = tags_end(view, pos)
    except (Truncated, IndexError, struct.error) as exc:
        raise MalformedFrame(
            f"cannot decode ProduceRequest v{version}: its lengths run past the frame"
        ) from exc
    if pos > end:
        raise MalformedFrame(
            f"cannot decode ProduceRequest v{version}: its lengths run past the frame"
        )
    return ProduceRequestSkim(transactional_id, acks, tuple(topics))


_ACKS_COUNT = struct.Struct(">h4xi")  # acks, timeout_ms, topic_data count


def _produce_topic(
    view: memoryview, pos: int, version: int
) -> tuple[NamedTopicSkim | IdTopicSkim, int]:
    flexible = version >= 9
    name: str | None = None
    if version >= 13:
        if pos + 16 > len(view):
            raise Truncated
        topic_id = UUID(bytes=bytes(view[pos : pos + 16]))
        pos += 16
    elif flexible:
        name, pos = _compact_string(view, pos)
    else:
        name, pos = _string(view, pos, nullable=False)
    partitions, pos = _produce_partitions(view, pos, flexible)
    if flexible:
        pos = tags_end(view, pos)
    if version >= 13:
        return IdTopicSkim(topic_id, partitions), pos
    if name is None:
        raise Truncated
    return NamedTopicSkim(name, partitions), pos


def _produce_partitions(
    view: memoryview, pos: int, flexible: bool
) -> tuple[tuple[ProducePartitionSkim, ...], int]:
    count, pos = size_at(view, pos, flexible, wide=True)
    if count < 0:
        raise MalformedFrame("non-nullable field partition_data was serialized as null")
    if count > len(view) - pos:
        raise Truncated
    partitions = []
    for _ in range(count):
        index = I32.unpack_from(view, pos)[0]
        if flexible:
            size, pos = length_at(view, pos + 4)
        else:
            size = I32.unpack_from(view, pos + 4)[0]
            pos += 8
        records = None
        if size >= 0:
            if pos + size > len(view):
                raise Truncated
            records = view[pos : pos + size]
            pos += size
        if flexible:
            pos = tags_end(view, pos)
        partitions.append(ProducePartitionSkim(index, records))
    return tuple(partitions), pos


def _compact_string(view: memoryview, pos: int) -> tuple[str | None, int]:
    start, stop = string_span(view, pos, True, True)
    return (None if start < 0 else read_string(bytes(view[start:stop]))), stop


def _string(view: memoryview, pos: int, nullable: bool) -> tuple[str | None, int]:
    start, stop = string_span(view, pos, False, nullable)
    return (None if start < 0 else read_string(bytes(view[start:stop]))), stop
