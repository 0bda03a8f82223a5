"""Steps of the share-group (KIP-932) scenarios (tests/conformance/test_share_groups.py).

A share group reads a partition only once its share-partition state exists: the group
coordinator initializes it when a member's subscription covers the topic
(``InitializeShareGroupState``), and it starts at the latest offset unless the group's
``share.auto.offset.reset`` says ``earliest``. :func:`prepare_group` does both as the super
user ``admin`` (a member of its own, subscribed to every topic), the same way on each side, so
the scenarios fetch records written before they start. Share sessions are per connection on
the proxy (and keyed by group and member id on the broker), so a scenario keeps one raw
connection per side and user (:class:`Connections`) and steps both sides in lockstep.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import timedelta
from typing import Any
from uuid import UUID

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kafkaguard.protocol.codec import ErrorCode
from tests.support.conformance.datapath import (
    BLANK,
    TIMEOUT_S,
    call,
    coordinator_ready,
    entities,
    ids_to_names,
)
from tests.support.conformance.harness import Side, normalize
from tests.support.raw_client import RawKafkaClient, build_request

SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ACCEPT, RENEW = 1, 4
"""``AcknowledgeType`` ids."""

Part = tuple[str, int]
"""A partition as a scenario names it: topic name and index (ids differ between sides)."""
Acks = dict[Part, Sequence[tuple[int, int, tuple[int, ...]]]]
"""Acknowledgement batches per partition: (first offset, last offset, types)."""


def member_id() -> str:
    """A member id as the Java share consumer makes one (``Uuid.randomUuid().toString()``)."""
    return str(uuid.uuid4())[:22]


def read_from_earliest(side: Side, group: str) -> None:
    """Set the share group's ``share.auto.offset.reset`` to ``earliest`` (as ``admin``)."""
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    admin = side.admin()  # kept alive until its futures are done
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)


def prepare_group(side: Side, group: str, topics: Sequence[str], partitions: int = 1) -> None:
    """Make ``group`` read ``topics`` from their earliest offset (:func:`read_from_earliest`),
    then subscribe an ``admin`` member until every partition's share state is initialized
    (DescribeShareGroupOffsets lists it)."""
    read_from_earliest(side, group)
    coordinator_ready(side, group, 0)
    member, epoch = member_id(), 0
    deadline = time.monotonic() + 2 * TIMEOUT_S
    while not _initialized(side, group, topics, partitions):
        assert time.monotonic() < deadline, f"{side.name}: share group {group} not initialized"
        beat = call(
            side,
            "admin",
            SHARE_GROUP_HEARTBEAT,
            1,
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            rack_id=None,
            subscribed_topic_names=tuple(topics) if epoch == 0 else None,
        )
        assert beat.error_code in (ErrorCode.none, ErrorCode.coordinator_load_in_progress), beat
        epoch = int(beat.member_epoch)
        time.sleep(0.3)


def _initialized(side: Side, group: str, topics: Sequence[str], partitions: int) -> bool:
    """Every partition's share state exists: the group's offsets list it (its start offset
    stays −1 until the first fetch loads the partition and applies the offset reset)."""
    mod = entities(DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    response = call(
        side,
        "admin",
        DESCRIBE_SHARE_GROUP_OFFSETS,
        1,
        groups=(mod.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),),
    )
    (described,) = response.groups
    listed = {
        (str(t.topic_name), int(p.partition_index))
        for t in described.topics
        for p in t.partitions
        if p.error_code == ErrorCode.none
    }
    return all((t, i) in listed for t in topics for i in range(partitions))


class Connections:
    """One raw SASL connection per (side, user), kept for a whole scenario: share sessions
    live on a connection."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._open: dict[tuple[str, str], RawKafkaClient] = {}

    def get(self, side: Side, user: str) -> RawKafkaClient:
        key = (side.name, user)
        if key not in self._open:
            self._open[key] = self._stack.enter_context(side.raw(user))
        return self._open[key]

    def drop(self, side: Side, user: str) -> None:
        client = self._open.pop((side.name, user), None)
        if client is not None:
            client.close()


def share_fetch(
    ids: dict[str, UUID],
    group: str,
    member: str,
    epoch: int,
    parts: Sequence[Part] = (),
    *,
    forget: Sequence[Part] = (),
    acks: Acks | None = None,
    version: int = 1,
    wait_ms: int = 0,
    unknown: Sequence[tuple[UUID, int]] = (),
    **fields: Any,
) -> Any:
    """A ShareFetch naming ``parts`` (by this side's ``ids``) and the ``unknown`` id
    partitions, acknowledging ``acks``. ``wait_ms`` > 0 waits for one byte at least."""
    mod = entities(SHARE_FETCH, version)
    named = [(ids[t], i) for t, i in parts] + list(unknown)
    batches = {(ids[t], i): b for (t, i), b in (acks or {}).items()}
    grouped: dict[UUID, list[Any]] = {}
    for topic_id, index in named:
        grouped.setdefault(topic_id, []).append(
            mod.FetchPartition(
                partition_index=index,
                acknowledgement_batches=tuple(
                    mod.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=k)
                    for f, last, k in batches.get((topic_id, index), ())
                ),
            )
        )
    forgotten: dict[UUID, list[int]] = {}
    for t, i in forget:
        forgotten.setdefault(ids[t], []).append(i)
    values: dict[str, Any] = {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait": timedelta(milliseconds=wait_ms),
        "min_bytes": 1 if wait_ms else 0,
        "max_bytes": 1 << 20,
        "max_records": 500,
        "batch_size": 500,
        "share_acquire_mode": 0,
        "is_renew_ack": False,
        "topics": tuple(
            mod.FetchTopic(topic_id=t, partitions=tuple(p)) for t, p in grouped.items()
        ),
        "forgotten_topics_data": tuple(
            mod.ForgottenTopic(topic_id=t, partitions=tuple(p)) for t, p in forgotten.items()
        ),
    } | fields
    return build_request(SHARE_FETCH, version, **values)


def share_acknowledge(
    ids: dict[str, UUID],
    group: str,
    member: str,
    epoch: int,
    acks: Acks,
    *,
    version: int = 1,
    unknown: Sequence[tuple[UUID, int]] = (),
) -> Any:
    mod = entities(SHARE_ACKNOWLEDGE, version)
    grouped: dict[UUID, list[Any]] = {}
    entries = [((ids[t], i), b) for (t, i), b in acks.items()]
    entries += [(key, ((0, 0, (ACCEPT,)),)) for key in unknown]
    for (topic_id, index), batches in entries:
        grouped.setdefault(topic_id, []).append(
            mod.AcknowledgePartition(
                partition_index=index,
                acknowledgement_batches=tuple(
                    mod.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=k)
                    for f, last, k in batches
                ),
            )
        )
    return build_request(
        SHARE_ACKNOWLEDGE,
        version,
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        is_renew_ack=False,
        topics=tuple(
            mod.AcknowledgeTopic(topic_id=t, partitions=tuple(p)) for t, p in grouped.items()
        ),
    )


def shaped(response: Any, ids: dict[str, UUID]) -> Any:
    """A comparable view of a ShareFetch/ShareAcknowledge answer: topic ids as ``id:<name>``
    (they differ between the sides), harness blanks, and topics and partitions sorted — Kafka
    builds both answers from hash maps (``handleShareFetchRequest`` combines the fetch and
    acknowledgement maps), so their order carries no meaning."""
    out = normalize(ids_to_names(response, {v: k for k, v in ids.items()}), BLANK)
    out["responses"] = sorted(out["responses"], key=lambda t: str(t["topic_id"]))
    for topic in out["responses"]:
        topic["partitions"] = sorted(topic["partitions"], key=lambda p: p["partition_index"])
    return out


def outcome(answer: Any) -> list[tuple[str, int, str, int, int]]:
    """(topic name, partition, error, acknowledge error, records acquired) of each entry of a
    shaped answer, in its (sorted) order."""
    return [
        (
            str(t["topic_id"]).removeprefix("id:"),
            p["partition_index"],
            p["error_code"],
            p.get("acknowledge_error_code", 0),
            sum(r["last_offset"] - r["first_offset"] + 1 for r in p.get("acquired_records", [])),
        )
        for t in answer["responses"]
        for p in t["partitions"]
    ]
