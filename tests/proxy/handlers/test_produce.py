"""Produce authorization (KafkaApis.handleProduceRequest) driven without sockets."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as req9
from kio.schema.produce.v9 import response as resp9

from kafkaguard.proxy.handlers.produce import has_transactional_batches
from kafkaguard.proxy.handlers.support.base import Close, Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl


# A minimal v2 record batch header: baseOffset, batchLength, epoch, magic=2, crc, attributes.
def batch(transactional: bool) -> bytes:
    attributes = 0x10 if transactional else 0
    body = (
        (0).to_bytes(4, "big") + bytes([2]) + (0).to_bytes(4, "big") + attributes.to_bytes(2, "big")
    )
    body += bytes(40)
    return (0).to_bytes(8, "big") + len(body).to_bytes(4, "big") + body


def produce(
    *topics: str, acks: int = -1, transactional_id: str | None = None, txn: bool = False
) -> Any:
    from datetime import timedelta

    return req9.ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout=timedelta(seconds=30),
        topic_data=tuple(
            req9.TopicProduceData(
                name=t,
                partition_data=(
                    req9.PartitionProduceData(index=0, records=batch(txn)),
                    req9.PartitionProduceData(index=1, records=batch(txn)),
                ),
            )
            for t in topics
        ),
    )


def broker_reply(*topics: str) -> Any:
    from datetime import timedelta

    return resp9.ProduceResponse(
        responses=tuple(
            resp9.TopicProduceResponse(
                name=t,
                partition_responses=tuple(
                    resp9.PartitionProduceResponse(
                        index=i,
                        error_code=ErrorCode.none,
                        base_offset=10,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    )
                    for i in (0, 1)
                ),
            )
            for t in topics
        ),
        throttle_time=timedelta(0),
    )


def errors(response: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.index, int(p.error_code))
        for t in response.responses
        for p in t.partition_responses
    ]


WRITE_ORDERS = acl("User:alice", "WRITE", "TOPIC", "orders")


def test_allowed_produce_forwards_the_original_bytes() -> None:
    h = HandlerHarness([WRITE_ORDERS])
    verdict = h.send(produce("orders"))
    assert isinstance(verdict, Forward) and verdict.request is None
    assert h.checked() == [("WRITE", "TOPIC", "orders", "ALLOWED")]


def test_partially_denied_produce_forwards_only_allowed_topics_and_merges_in_order() -> None:
    h = HandlerHarness([WRITE_ORDERS])
    verdict = h.send(produce("secret", "orders"))
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, None).topic_data] == ["orders"]
    response = h.complete(verdict, broker_reply("orders"))
    assert errors(response) == [
        ("secret", 0, 29),
        ("secret", 1, 29),
        ("orders", 0, 0),
        ("orders", 1, 0),
    ]
    denied = response.responses[0].partition_responses[0]
    assert denied.base_offset == -1


def test_fully_denied_produce_is_answered_without_the_broker() -> None:
    h = HandlerHarness([])
    verdict = h.send(produce("orders"))
    assert isinstance(verdict, Respond)
    assert errors(verdict.response) == [("orders", 0, 29), ("orders", 1, 29)]


def test_acks0_with_a_denied_topic_closes_the_connection() -> None:
    h = HandlerHarness([WRITE_ORDERS])
    assert isinstance(h.send(produce("orders", "secret", acks=0)), Close)
    allowed = h.send(produce("orders", acks=0))
    assert isinstance(allowed, Forward) and not allowed.expects_response


def test_transactional_batches_need_write_on_the_transactional_id_first() -> None:
    h = HandlerHarness([WRITE_ORDERS])
    verdict = h.send(produce("orders", transactional_id="tx", txn=True))
    assert isinstance(verdict, Respond)
    assert {code for _, _, code in errors(verdict.response)} == {53}
    assert h.checked() == [("WRITE", "TRANSACTIONAL_ID", "tx", "DENIED")]
    h2 = HandlerHarness([WRITE_ORDERS, acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "tx")])
    assert isinstance(h2.send(produce("orders", transactional_id="tx", txn=True)), Forward)


def test_non_transactional_batches_skip_the_transactional_id_check() -> None:
    h = HandlerHarness([WRITE_ORDERS])
    assert isinstance(h.send(produce("orders", transactional_id="tx", txn=False)), Forward)
    assert h.checked() == [("WRITE", "TOPIC", "orders", "ALLOWED")]


@pytest.mark.parametrize("txn", [True, False])
def test_batch_header_peek(txn: bool) -> None:
    assert has_transactional_batches(produce("a", txn=txn)) is txn


def test_a_zero_topic_id_is_denied_and_never_forwarded_in_a_split() -> None:
    """Produce v13: Kafka reads an all-zero topic id as ``Uuid.ZERO_UUID`` (answered
    UNKNOWN_TOPIC_ID); the skim and the decode the split re-encodes read it alike, so the
    entry is answered by the proxy and only the known topic goes to the broker."""
    from datetime import timedelta
    from uuid import UUID

    from kio.schema.produce.v13 import request as req13

    orders = UUID(int=0x1234)
    h = HandlerHarness([WRITE_ORDERS], topic_ids={orders: "orders"})
    body = req13.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=timedelta(seconds=30),
        topic_data=tuple(
            req13.TopicProduceData(
                topic_id=topic_id,
                partition_data=(req13.PartitionProduceData(index=0, records=batch(False)),),
            )
            for topic_id in (None, orders)  # kio writes None as the zero uuid
        ),
    )
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.topic_id for t in h.forwarded_body(verdict, None).topic_data] == [orders]
