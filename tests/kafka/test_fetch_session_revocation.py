"""Issue 24, end to end against Apache Kafka 4.3.1: a revoked READ ends a fetch session's data
even after the client sent an incremental Fetch the broker refused.

Kafka's ``FetchManager.newContext`` answers a wrong epoch INVALID_FETCH_SESSION_EPOCH (71) and
leaves its session unchanged, so a mirror that applied the refused request's
``forgotten_topics_data`` stopped checking a partition the broker kept serving: after READ was
removed from the ACL file, correct-epoch incremental Fetches naming nothing kept returning its
records. Raw Kafka frames (Fetch v17, topic ids) on one connection through kafkaguard, with a
file ACL store it reloads.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import BrokerPorts, HostPort
from kafkaguard.tansu import free_base
from tests.support.conformance.datapath import ids_behind
from tests.support.handler_harness import acl
from tests.support.kafka_broker import KafkaBroker
from tests.support.proxy_fixture import (
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient, build_request, schema_module

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

FETCH_VERSION = 17
KAFKA_NODE_ID = 1
TIMEOUT_S = 30


def fetch(topic_id: UUID, *, session_id: int, epoch: int, named: bool, forget: bool) -> Any:
    """Fetch v17 of partition 0 of ``topic_id`` from offset 0 (``named``) and/or forgetting it."""
    mod = schema_module(1, FETCH_VERSION)
    partition = mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return build_request(
        1,
        FETCH_VERSION,
        replica_state=mod.ReplicaState(replica_id=-1),
        max_wait=timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session_id,
        session_epoch=epoch,
        topics=(mod.FetchTopic(topic_id=topic_id, partitions=(partition,)),) if named else (),
        forgotten_topics_data=(
            (mod.ForgottenTopic(topic_id=topic_id, partitions=(0,)),) if forget else ()
        ),
    )


def partitions(response: Any) -> list[tuple[UUID, int, int, bool]]:
    """(topic id, partition, error code, carries records) of each partition answered."""
    return [
        (t.topic_id, int(p.partition_index), int(p.error_code), bool(p.records))
        for t in response.responses
        for p in t.partitions
    ]


def create_and_seed(bootstrap: str, topic: str) -> None:
    """``topic`` on the upstream, with one record in partition 0."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": "20000"})
    producer.produce(topic, b"secret", on_delivery=lambda err, _msg: delivered.append(err))
    producer.flush(TIMEOUT_S)
    assert delivered == [None], delivered


def test_revoked_read_ends_session_data_after_a_refused_incremental_fetch(
    kafka_upstream: KafkaBroker, tmp_path: Path
) -> None:
    topic = unique_name("fetch-session")
    create_and_seed(kafka_upstream.bootstrap, topic)
    topic_id = ids_behind(kafka_upstream.bootstrap, topic)[topic]
    acl_file = tmp_path / "acls.yaml"
    acl_file.write_text(
        format_acl_text([acl("User:ANONYMOUS", "READ", "TOPIC", topic)]), encoding="utf-8"
    )
    policy = PolicyConfig(
        authorizer=AuthorizerConfig(),
        acl_store=AclStoreConfig(type="file", path=acl_file, poll_interval_s=0.1),
    )
    running = start_proxy_thread(
        proxy_config(
            HostPort("127.0.0.1", kafka_upstream.port),
            broker_ports=BrokerPorts(free_base([KAFKA_NODE_ID]), {}),
            policy=policy,
        )
    )
    host, port = running.bootstrap.rsplit(":", 1)
    try:
        with RawKafkaClient(host, int(port), timeout_s=TIMEOUT_S) as client:
            # 1. READ on the topic: a session on partition 0, its record delivered
            _, opened = client.request(
                fetch(topic_id, session_id=0, epoch=0, named=True, forget=False)
            )
            assert opened.error_code == ErrorCode.none and opened.session_id, opened
            assert partitions(opened) == [(topic_id, 0, 0, True)]
            session_id = int(opened.session_id)

            # 2. a wrong epoch forgetting the partition: refused, Kafka's session unchanged
            _, refused = client.request(
                fetch(topic_id, session_id=session_id, epoch=5, named=False, forget=True)
            )
            assert refused.error_code == ErrorCode.invalid_fetch_session_epoch, refused
            assert refused.responses == ()

            # 3. READ removed from the ACL file: once reloaded, a new connection is denied
            acl_file.write_text(format_acl_text([]), encoding="utf-8")
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                with RawKafkaClient(host, int(port), timeout_s=TIMEOUT_S) as other:
                    _, probe = other.request(
                        fetch(topic_id, session_id=0, epoch=-1, named=True, forget=False)
                    )
                if partitions(probe) == [
                    (topic_id, 0, ErrorCode.topic_authorization_failed, False)
                ]:
                    break
                assert time.monotonic() < deadline, f"the ACL file was not reloaded: {probe}"
                time.sleep(0.1)

            # 4. correct-epoch incremental fetches naming nothing: no record of the topic
            for epoch in (1, 2):
                _, answer = client.request(
                    fetch(topic_id, session_id=session_id, epoch=epoch, named=False, forget=False)
                )
                carried = [p for p in partitions(answer) if p[3]]
                assert not carried, f"records of a topic no longer readable: {answer}"
                if epoch == 1:  # the session's partition is answered as Kafka re-authorizes it
                    assert partitions(answer) == [
                        (topic_id, 0, ErrorCode.topic_authorization_failed, False)
                    ], answer
    finally:
        stop_proxy_thread(running)
