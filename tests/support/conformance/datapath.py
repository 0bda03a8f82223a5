"""Helpers shared by the data-path scenarios (produce, consume, groups, offsets, transactions).

Everything here acts on one :class:`~tests.support.conformance.harness.Side` at a time, the
same way on both, so a scenario can run it inside
:func:`~tests.support.conformance.harness.differential` or as set-up (as the super user
``admin``, whom neither side ever denies).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkaguard.protocol.codec import ErrorCode
from tests.support.conformance.harness import BLANKED, Side, differential, normalize
from tests.support.handler_harness import acl as acl  # re-exported for the scenarios
from tests.support.raw_client import RawKafkaClient, build_request, schema_module

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS = 18
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS = 15, 16
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 22, 23
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DELETE_GROUPS, OFFSET_DELETE = 42, 47
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69

TIMEOUT_S = 15.0
RECORD_TIMESTAMP_MS = 1_700_000_000_000
"""Every raw record gets this create time, so fetched batches are byte-identical on both sides."""


ID_FIELDS = ("member_id", "leader", "producer_id")
"""Ids two clusters assign differently: compared only as "set or not" (see :func:`compare`)."""

BLANK = {k: v for k, v in BLANKED.items() if k not in ID_FIELDS} | {"throttle_time": 0}
"""The harness' blanks (kio names the throttle ``throttle_time``), minus :data:`ID_FIELDS`."""


def blank_ids(value: Any) -> Any:
    """A normalised value with every :data:`ID_FIELDS` value that is set (not "", -1 or null)
    replaced by a placeholder: whether an id was assigned is part of the answer, its value
    is not."""
    if isinstance(value, dict):
        return {
            k: f"<{k}>" if k in ID_FIELDS and v not in ("", -1, None) else blank_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [blank_ids(v) for v in value]
    return value


def compare(sides: Sequence[Side], run: Callable[[Side], Any], **blank: Any) -> Any:
    """:func:`differential` with :data:`BLANK` (plus ``blank``) and :func:`blank_ids`."""
    blanks = BLANK | blank
    return differential(sides, lambda side: blank_ids(normalize(run(side), blanks)), blank=blanks)


def call(side: Side, user: str, api_key: int, version: int, **fields: Any) -> Any:
    """One raw request as ``user`` on its own connection; the decoded response."""
    with side.raw(user) as client:
        _, response = client.request(build_request(api_key, version, **fields))
    return response


RETRIABLE = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.concurrent_transactions,
    }
)
"""Errors a Kafka client retries (a coordinator still loading its partition after start-up or
after the first use of ``__consumer_offsets``/``__transaction_state``): never an answer to
compare, so :func:`call_retrying` asks again."""


def call_retrying(side: Side, user: str, api_key: int, version: int, **fields: Any) -> Any:
    """:func:`call` until the top-level error is not :data:`RETRIABLE` (bounded wait)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        response = call(side, user, api_key, version, **fields)
        if getattr(response, "error_code", ErrorCode.none) not in RETRIABLE:
            return response
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: still {response.error_code} after retries")
        time.sleep(0.2)


def coordinator_ready(side: Side, key: str, key_type: int) -> None:
    """Wait, as the super user, until the coordinator of ``key`` (a group, ``key_type`` 0, or a
    transactional id, 1) answers: the first FindCoordinator creates ``__consumer_offsets`` /
    ``__transaction_state``, and a freshly led partition answers COORDINATOR_LOAD_IN_PROGRESS
    for a while — a retriable error a client hides, never an answer to compare."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        response = call(
            side, "admin", FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=(key,)
        )
        code = response.coordinators[0].error_code
        if code == ErrorCode.none:
            code = _coordinator_state(side, key, key_type)
        if code == ErrorCode.none:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: coordinator for {key!r} not ready: {code}")
        time.sleep(0.1)


def _coordinator_state(side: Side, key: str, key_type: int) -> ErrorCode:
    """NONE once the coordinator serves ``key`` (a read that changes nothing)."""
    if key_type == 1:
        described = call(side, "admin", DESCRIBE_TRANSACTIONS, 0, transactional_ids=(key,))
        code = described.transaction_states[0].error_code
        return ErrorCode.none if code == ErrorCode.transactional_id_not_found else code
    mod = entities(OFFSET_FETCH, 8)
    fetched = call(
        side,
        "admin",
        OFFSET_FETCH,
        8,
        require_stable=False,
        groups=(mod.OffsetFetchRequestGroup(group_id=key, topics=()),),
    )
    return ErrorCode(fetched.groups[0].error_code)


def entities(api_key: int, version: int) -> Any:
    """The kio module of a request schema, for building its nested entities."""
    return schema_module(api_key, version)


def build(entity_type: type[Any], **values: Any) -> Any:
    """A nested request entity from ``values``, ignoring names its version lacks (like
    ``build_request`` for the top level), so one call serves every version."""
    names = {f.name for f in dataclasses.fields(entity_type)}
    return entity_type(**{k: v for k, v in values.items() if k in names})


def create_topics(side: Side, *names: str, partitions: int = 1) -> None:
    """Create ``names`` as the super user and wait until the leader is known."""
    admin = side.admin()
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
        operation_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        metadata = admin.list_topics(timeout=TIMEOUT_S)
        ready = [
            n
            for n in names
            if n in metadata.topics
            and metadata.topics[n].error is None
            and all(p.leader >= 0 for p in metadata.topics[n].partitions.values())
            and len(metadata.topics[n].partitions) == partitions
        ]
        if len(ready) == len(names):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: topics not ready: {names}")
        time.sleep(0.05)


def topic_ids(side: Side, names: Iterable[str]) -> dict[str, UUID]:
    """Each topic's id on ``side`` (they differ between the two clusters)."""
    mod = entities(METADATA, 12)
    response = call(
        side,
        "admin",
        METADATA,
        12,
        topics=tuple(mod.MetadataRequestTopic(name=n, topic_id=UUID(int=0)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    ids = {str(t.name): t.topic_id for t in response.topics if t.error_code == ErrorCode.none}
    assert set(ids) == set(names), f"{side.name}: no id for {set(names) - set(ids)}"
    return ids


def record_batch(
    *values: bytes,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One v2 record batch of ``values`` (built by kafka-python, not by the code under test)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=RECORD_TIMESTAMP_MS, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(
    version: int,
    topics: Sequence[tuple[str | UUID, bytes]],
    *,
    acks: int = -1,
    transactional_id: str | None = None,
) -> Any:
    """A Produce request writing one batch to partition 0 of each topic (name or id)."""
    mod = entities(PRODUCE, version)
    key = "topic_id" if version >= 13 else "name"
    return build_request(
        PRODUCE,
        version,
        transactional_id=transactional_id,
        acks=acks,
        timeout=timedelta(seconds=10),
        topic_data=tuple(
            mod.TopicProduceData(
                **{key: t}, partition_data=(mod.PartitionProduceData(index=0, records=batch),)
            )
            for t, batch in topics
        ),
    )


def seed(side: Side, batches: dict[str, bytes]) -> None:
    """Write one batch to partition 0 of each topic as the super user, retrying until every
    partition took it (just after CreateTopics a partition may still answer
    NOT_LEADER_OR_FOLLOWER while its leadership is being applied)."""
    pending = dict(batches)
    deadline = time.monotonic() + TIMEOUT_S
    while pending:
        with side.raw("admin") as client:
            _, response = client.request(produce_request(9, list(pending.items())))
        for t in response.responses:
            (p,) = t.partition_responses
            if p.error_code == ErrorCode.none:
                pending.pop(str(t.name), None)
            elif p.error_code not in SEED_RETRIABLE:
                raise AssertionError(f"{side.name}: seeding {t.name} failed: {p}")
        if pending and time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: could not seed {sorted(pending)}")
        if pending:
            time.sleep(0.1)


SEED_RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
    }
)


def end_offsets(side: Side, *names: str) -> dict[str, int]:
    """The log end offset of partition 0 of each topic, asked as the super user."""
    mod = entities(LIST_OFFSETS, 7)
    response = call(
        side,
        "admin",
        LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=tuple(
            mod.ListOffsetsTopic(
                name=n,
                partitions=(
                    mod.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=-1
                    ),
                ),
            )
            for n in names
        ),
    )
    out = {}
    for t in response.topics:
        (p,) = t.partitions
        assert p.error_code == ErrorCode.none, (side.name, t)
        out[str(t.name)] = int(p.offset)
    return out


def kafka_error(exc: BaseException) -> str:
    """The Kafka error name a client call failed with (``KafkaException``), for comparing."""
    if isinstance(exc, KafkaException):
        return str(exc.args[0].name())
    raise exc


def ids_to_names(value: Any, names: dict[UUID, str]) -> Any:
    """``value`` (a decoded response) with every topic id found in ``names`` replaced by
    ``"id:<name>"``: topic ids differ between the two clusters, the topics they name do not."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: ids_to_names(getattr(value, f.name), names) for f in dataclasses.fields(value)
        }
    if isinstance(value, list | tuple):
        return [ids_to_names(v, names) for v in value]
    if isinstance(value, UUID) and value in names:
        return f"id:{names[value]}"
    return value


def sorted_entries(value: Any, field: str, key: str) -> Any:
    """A normalised response whose ``field`` list is sorted by each entry's ``key``: Kafka
    builds some responses from hash maps, so their order carries no meaning."""
    out = normalize(value)
    out[field] = sorted(out[field], key=lambda e: str(e[key]))
    return out


def sorted_head(value: Any, field: str, key: str, *, denied: int) -> Any:
    """:func:`sorted_entries` for answers Kafka builds as "the broker's hash-map answer, then
    the ``denied`` entries the handler appended": only the broker's part is sorted."""
    out = normalize(value)
    entries = out[field]
    cut = len(entries) - denied
    out[field] = sorted(entries[:cut], key=lambda e: str(e[key])) + entries[cut:]
    return out


def sorted_deep(value: Any, field: str, key: str, partitions: str, partition_key: str) -> Any:
    """:func:`sorted_entries`, with each entry's ``partitions`` list sorted by
    ``partition_key`` too (for answers Kafka builds from a hash map of partitions)."""
    out = sorted_entries(value, field, key)
    for entry in out[field]:
        entry[partitions] = sorted(entry[partitions], key=lambda p: p[partition_key])
    return out


def ids_behind(upstream_bootstrap: str, *names: str) -> dict[str, UUID]:
    """The topics' ids straight from the upstream (``host:port``), never through the proxy;
    waits until the upstream's metadata knows every one of them."""
    host, port = upstream_bootstrap.rsplit(":", 1)
    mod = entities(3, 12)
    request = build_request(
        3,
        12,
        topics=tuple(mod.MetadataRequestTopic(name=n, topic_id=UUID(int=0)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with RawKafkaClient(host, int(port), timeout_s=TIMEOUT_S) as upstream:
            _, answer = upstream.request(request)
        ids = {t.name: t.topic_id for t in answer.topics if t.error_code == ErrorCode.none}
        if set(names) <= ids.keys():
            return ids
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
