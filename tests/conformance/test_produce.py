"""Differential scenarios: producing — plain, acks=0, idempotent and transactional.

Each test is one scenario run against Kafka's own authorizer (the referee) and against
kafkaguard in front of an unsecured Kafka; every step must give the same answer on both
(:func:`~conformance.datapath.compare`). Raw requests pin exact per-partition codes at the
oldest interesting and the newest common version; real confluent-kafka producers check what a
client sees.

Kafka builds Produce and AddPartitionsToTxn answers from hash maps (``handleProduceRequest``'s
``mergedResponseStatus``, ``AddPartitionsToTxnResponse.resultForTransaction``), so their entry
order carries no meaning: those steps compare entries sorted by topic (and partition).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support.conformance.datapath import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    API_VERSIONS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
    acl,
    build,
    call,
    call_retrying,
    compare,
    coordinator_ready,
    create_topics,
    end_offsets,
    entities,
    ids_to_names,
    produce_request,
    record_batch,
    sorted_deep,
    sorted_entries,
    topic_ids,
)
from tests.support.conformance.harness import Side, scenario_name
from tests.support.raw_client import build_request

pytestmark = pytest.mark.kafka


def produce_sorted(side: Side, user: str, version: int, batches: list[tuple[str, bytes]]) -> Any:
    with side.raw(user) as client:
        _, response = client.request(produce_request(version, batches))
    return sorted_entries(response, "responses", "name")


def delivery(side: Side, user: str, topic: str, **config: Any) -> list[str]:
    """What a real producer's delivery report says for one message to ``topic``."""
    producer = Producer(side.client_config(user, **{"message.timeout.ms": 20000, **config}))
    reports: list[str] = []
    producer.produce(
        topic, b"v", on_delivery=lambda err, _: reports.append(err.name() if err else "ok")
    )
    producer.flush(25)
    return reports


def test_produce_needs_write_per_topic(sides: list[Side]) -> None:
    """WRITE TOPIC per topic: 29 for denied topics (existing or not — existence is never
    revealed), 3 for an authorized topic that does not exist, v13 topic ids: 100 for an id
    nobody knows. Nothing reaches a denied topic."""
    t, u, miss = scenario_name("pw-t"), scenario_name("pw-u"), scenario_name("pw-miss")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "WRITE", "TOPIC", t),
                acl("User:alice", "WRITE", "TOPIC", "pw-miss", pattern="PREFIXED"),
            ]
        )
        create_topics(side, t, u)
    batches = [(t, record_batch(b"a")), (u, record_batch(b"b")), (miss, record_batch(b"c"))]
    batches.append(("zz" + miss, record_batch(b"d")))  # missing and not authorized
    for version in (3, 9, 12):
        compare(sides, lambda s, v=version: produce_sorted(s, "alice", v, batches))

    unknown = uuid.uuid4()

    def by_id(side: Side) -> Any:
        ids = topic_ids(side, [t, u])
        request = produce_request(
            13,
            [
                (ids[t], record_batch(b"a")),
                (ids[u], record_batch(b"b")),
                (unknown, record_batch(b"c")),
            ],
        )
        with side.raw("alice") as client:
            _, response = client.request(request)
        names = {v: k for k, v in ids.items()}
        return sorted_entries(ids_to_names(response, names), "responses", "topic_id")

    compare(sides, by_id)
    compare(sides, lambda s: delivery(s, "alice", t))
    compare(sides, lambda s: delivery(s, "alice", u))
    assert compare(sides, lambda s: end_offsets(s, t, u)) == {t: 5, u: 0}


def test_produce_acks_0_closes_the_connection_on_any_error(sides: list[Side]) -> None:
    """acks=0 has no response; when anything fails Kafka closes the connection
    (``handleProduceRequest``: ``closeConnection``), so the next request meets a closed
    socket. A denied acks=0 write leaves the log untouched."""
    t, u, miss = scenario_name("p0-t"), scenario_name("p0-u"), scenario_name("p0-miss")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "WRITE", "TOPIC", t),
                acl("User:alice", "WRITE", "TOPIC", "p0-miss", pattern="PREFIXED"),
            ]
        )
        create_topics(side, t, u)

    def acks0_then_api_versions(side: Side, topic: str) -> Any:
        with side.raw("alice") as client:
            client.send(produce_request(9, [(topic, record_batch(b"z"))], acks=0))
            try:
                _, answer = client.request(
                    build_request(
                        API_VERSIONS, 3, client_software_name="t", client_software_version="1"
                    )
                )
            except (EOFError, ConnectionResetError):
                return "closed"
            return ("open", answer.error_code)

    assert compare(sides, lambda s: acks0_then_api_versions(s, u)) == "closed"
    assert compare(sides, lambda s: acks0_then_api_versions(s, miss)) == "closed"
    assert compare(sides, lambda s: acks0_then_api_versions(s, t)) == ["open", "none"]
    assert compare(sides, lambda s: end_offsets(s, t, u)) == {t: 1, u: 0}


def test_idempotent_producer_needs_idempotent_write_or_write_on_any_topic(
    sides: list[Side],
) -> None:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE on
    any topic (KIP-679, ``authorizeByResourceType``); else 31. Kafka 4 producers are idempotent
    by default, so a principal with neither cannot produce at all."""
    t = scenario_name("pi-t")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "WRITE", "TOPIC", "pi-", pattern="PREFIXED"),
                acl("User:carol", "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster"),
            ]
        )
        create_topics(side, t)
        coordinator_ready(side, t, 1)
    for user in ("alice", "bob", "carol"):
        for version in (0, 5):
            compare(
                sides,
                lambda s, user=user, v=version: call_retrying(
                    s,
                    user,
                    INIT_PRODUCER_ID,
                    v,
                    transactional_id=None,
                    transaction_timeout=timedelta(seconds=60),
                    producer_id=-1,
                    producer_epoch=-1,
                ),
            )
        compare(sides, lambda s, u=user: delivery(s, u, t, **{"enable.idempotence": True}))
    assert compare(sides, lambda s: end_offsets(s, t)) == {t: 1}


def _step(action: Any) -> str:
    try:
        action()
    except KafkaException as exc:
        return str(exc.args[0].name())
    return "ok"


def transactional_flow(side: Side, user: str, txn: str, topic: str, group: str) -> list[Any]:
    """init → begin → produce → send offsets → commit (abort when commit fails), as a real
    transactional producer does; the error each step raises."""
    producer = Producer(
        side.client_config(
            user,
            **{
                "transactional.id": txn,
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 20000,
            },
        )
    )
    steps: list[Any] = [_step(lambda: producer.init_transactions(20))]
    if steps[-1] != "ok":
        return steps
    steps.append(_step(producer.begin_transaction))
    reports: list[str] = []
    producer.produce(
        topic, b"txn", on_delivery=lambda err, _: reports.append(err.name() if err else "ok")
    )
    producer.flush(25)
    steps.append(reports)
    consumer = Consumer(side.client_config(user, **{"group.id": group}))
    try:
        metadata = consumer.consumer_group_metadata()
        offsets = [TopicPartition(topic, 0, 1)]
        steps.append(_step(lambda: producer.send_offsets_to_transaction(offsets, metadata, 20)))
    finally:
        consumer.close()
    steps.append(_step(lambda: producer.commit_transaction(20)))
    if steps[-1] != "ok":
        steps.append(_step(lambda: producer.abort_transaction(20)))
    return steps


def test_transactional_producer(sides: list[Side]) -> None:
    """A real transactional producer: WRITE on its TransactionalId (53 from InitProducerId),
    WRITE on each topic it adds (AddPartitionsToTxn 29 → the transaction aborts), READ on the
    group it commits offsets for (AddOffsetsToTxn 30)."""
    t, u = scenario_name("pt-t"), scenario_name("pt-u")
    txn, g = scenario_name("pt-txn"), scenario_name("pt-g")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "WRITE", "TRANSACTIONAL_ID", txn),
                acl("User:alice", "WRITE", "TOPIC", t),
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:alice", "READ", "GROUP", g),
                acl("User:bob", "DESCRIBE", "TRANSACTIONAL_ID", txn),
            ]
        )
        create_topics(side, t, u)
        coordinator_ready(side, txn, 1)
        coordinator_ready(side, g, 0)
    assert compare(sides, lambda s: transactional_flow(s, "alice", txn, t, g)) == [
        "ok",
        "ok",
        ["ok"],
        "ok",
        "ok",
    ]
    compare(sides, lambda s: transactional_flow(s, "bob", txn, t, g))
    compare(sides, lambda s: transactional_flow(s, "alice", txn, u, g))
    compare(sides, lambda s: transactional_flow(s, "alice", txn, t, "other-" + g))
    assert compare(sides, lambda s: end_offsets(s, u)) == {u: 0}


def test_transaction_apis_per_entry(sides: list[Side]) -> None:  # noqa: C901 - one transaction walk; nested request builders
    """The transaction APIs request by request, with a real producer id: FindCoordinator
    (DESCRIBE TRANSACTIONAL_ID per key, 53; WRITE implies it), AddPartitionsToTxn
    (53 everywhere / 29 on denied, 3 on authorized-but-missing, 55 on the rest; internal
    topics never authorized), AddOffsetsToTxn (53, then 30), TxnOffsetCommit (53, 30, then
    per topic 29/3), EndTxn (53), and a transactional Produce batch (53 when the id is null
    or not writable)."""
    t, u, miss = scenario_name("px-t"), scenario_name("px-u"), scenario_name("px-miss")
    txn, g = scenario_name("px-txn"), scenario_name("px-g")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "WRITE", "TRANSACTIONAL_ID", txn),
                acl("User:alice", "WRITE", "TOPIC", t),
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:alice", "WRITE", "TOPIC", "px-miss", pattern="PREFIXED"),
                acl("User:alice", "READ", "TOPIC", "px-miss", pattern="PREFIXED"),
                acl("User:alice", "WRITE", "TOPIC", "__consumer_offsets"),
                acl("User:alice", "READ", "GROUP", g),
                acl("User:bob", "DESCRIBE", "TRANSACTIONAL_ID", txn),
            ]
        )
        create_topics(side, t, u)
        coordinator_ready(side, txn, 1)
        coordinator_ready(side, g, 0)
    for user in ("alice", "bob", "carol"):  # FindCoordinator: DESCRIBE TRANSACTIONAL_ID (53)
        for version in (3, 4):
            keys = {"key": txn, "coordinator_keys": (txn, "other-" + txn)}
            find = partial(call, api_key=FIND_COORDINATOR, version=version, key_type=1, **keys)
            compare(sides, partial(find, user=user))
    producer: dict[str, tuple[int, int]] = {}
    for side in sides:
        init = call_retrying(
            side,
            "alice",
            INIT_PRODUCER_ID,
            4,
            transactional_id=txn,
            transaction_timeout=timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        producer[side.name] = (int(init.producer_id), int(init.producer_epoch))

    def add_partitions(side: Side, user: str, version: int, topics: list[Any]) -> Any:
        mod = entities(ADD_PARTITIONS_TO_TXN, version)
        pid, epoch = producer[side.name]
        response = call(
            side,
            user,
            ADD_PARTITIONS_TO_TXN,
            version,
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(
                mod.AddPartitionsToTxnTopic(name=n, partitions=tuple(p)) for n, p in topics
            ),
        )
        return sorted_deep(
            response,
            "results_by_topic_v3_and_below",
            "name",
            "results_by_partition",
            "partition_index",
        )

    cases = [
        [(t, [0]), (u, [0])],
        [(t, [0]), ("__consumer_offsets", [0])],
        [(t, [0]), (miss, [0]), (u, [0])],
        [(t, [0, 7]), (u, [0])],
        [(t, [0, 7])],
    ]
    for topics in cases:
        for version in (0, 3):
            compare(sides, lambda s, v=version, ts=topics: add_partitions(s, "alice", v, ts))
    compare(sides, lambda s: add_partitions(s, "bob", 3, [(t, [0]), (u, [0])]))

    def add_offsets(side: Side, user: str, group: str) -> Any:
        pid, epoch = producer[side.name]
        return call(
            side,
            user,
            ADD_OFFSETS_TO_TXN,
            3,
            transactional_id=txn,
            producer_id=pid,
            producer_epoch=epoch,
            group_id=group,
        )

    for user, group in (("bob", g), ("alice", "other-" + g), ("alice", g)):
        compare(sides, partial(add_offsets, user=user, group=group))

    def txn_offset_commit(side: Side, user: str, group: str, version: int, topics: Any) -> Any:
        mod = entities(TXN_OFFSET_COMMIT, version)
        pid, epoch = producer[side.name]
        return call(
            side,
            user,
            TXN_OFFSET_COMMIT,
            version,
            transactional_id=txn,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=tuple(
                mod.TxnOffsetCommitRequestTopic(
                    name=n,
                    partitions=tuple(
                        build(
                            mod.TxnOffsetCommitRequestPartition,
                            partition_index=i,
                            committed_offset=0,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for i in p
                    ),
                )
                for n, p in topics
            ),
        )

    mixed = [(t, [0]), (u, [0]), (miss, [0]), (t + "-x", [1]), (t, [5])]
    for user, group, topics in (
        ("bob", g, [(t, [0]), (u, [0])]),
        ("alice", "other-" + g, [(t, [0])]),
        ("alice", g, [(u, [0]), (u, [1])]),
        ("alice", g, mixed),
    ):
        for version in (0, 3):
            run = partial(txn_offset_commit, user=user, group=group, version=version, topics=topics)
            compare(sides, run)

    def transactional_produce(side: Side, txn_id: str | None) -> Any:
        pid, epoch = producer[side.name]
        batch = record_batch(
            b"x", transactional=True, producer_id=pid, producer_epoch=epoch, base_sequence=0
        )
        with side.raw("alice") as client:
            _, response = client.request(produce_request(9, [(t, batch)], transactional_id=txn_id))
        return response

    compare(sides, lambda s: transactional_produce(s, None))
    compare(sides, lambda s: transactional_produce(s, "other-" + txn))

    def end_txn(side: Side, user: str) -> Any:
        pid, epoch = producer[side.name]
        return call(
            side,
            user,
            END_TXN,
            3,
            transactional_id=txn,
            producer_id=pid,
            producer_epoch=epoch,
            committed=False,
        )

    compare(sides, lambda s: end_txn(s, "bob"))
    compare(sides, lambda s: end_txn(s, "alice"))
