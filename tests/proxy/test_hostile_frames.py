"""Hostile frames at the socket, and broker frames kio cannot read alone.

A frame whose array claims more elements than it has bytes used to abort the whole process
(kio preallocates the claimed size in native code); now the guard refuses it and only that
client's connection is closed. DescribeTransactions answers with a -1 start time (an Empty
transaction) used to close the client's connection; now they decode, and pass through
the handler unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.handlers.support.base import Forward
from tests.support.fake_broker import FakeBroker, RawClient, proxy_in_front, request
from tests.support.handler_harness import HandlerHarness, acl

pytestmark = pytest.mark.timeout(60)

LOGGER = "kafkaguard"
METADATA = request(3, 12, topics=None)
HOSTILE_METADATA = bytes.fromhex("00000010 0003 000c 00000001 ffff 00 ffffffff07".replace(" ", ""))
"""Metadata v12 whose topics compact array claims 2^31 - 2 elements (20 bytes in all): the
largest count ``ByteUtils.readUnsignedVarint`` reads as a positive Java int (a varint of 2^31
or more is negative, so null, as Kafka reads it)."""


@dataclass
class Env:
    fake: FakeBroker
    proxy: ProxyServer

    async def connect(self) -> RawClient:
        host, port = self.proxy.bootstrap().rsplit(":", 1)
        return await RawClient.connect(host, int(port))


@pytest.fixture
async def env(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Env]:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    versions = {k: codec.codec_versions(k) for k in codec.API_NAMES}
    async with FakeBroker((1,), versions=versions) as fake, proxy_in_front(fake) as proxy:
        yield Env(fake, proxy)
    assert not fake.errors


async def test_huge_array_claim_closes_only_that_connection(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    neighbour = await env.connect()
    assert (await neighbour.roundtrip(METADATA, correlation_id=1)).brokers
    client = await env.connect()
    seen_before = len(env.fake.seen)
    caplog.clear()
    client.writer.write(HOSTILE_METADATA)
    try:
        assert await client.closed_by_peer(wait_s=5), "the proxy kept the connection open"
    finally:
        await client.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "topics: array of 2147483646 elements in 0 remaining bytes" in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert len(env.fake.seen) == seen_before  # never forwarded
    # The neighbour opened before keeps working.
    assert (await neighbour.roundtrip(METADATA, correlation_id=2)).brokers
    await neighbour.close()


# -- DescribeTransactions with an Empty transaction (start time -1) ------------------------------

ALICE = "User:alice"
BEFORE_EPOCH = datetime.fromtimestamp(-0.001, UTC)  # -1 on the wire


def _state(txn: str, state: str, start: datetime) -> Any:
    schema = codec.response_schema(65, 0)
    return codec.make_entity(
        codec.nested_type(schema, "transaction_states"),
        transactional_id=txn,
        transaction_state=state,
        transaction_timeout=timedelta(seconds=60),
        transaction_start_time=start,
        producer_id=7,
        producer_epoch=0,
    )


def _broker_frame(*states: Any) -> bytes:
    body = codec.make_entity(codec.response_schema(65, 0), transaction_states=states)
    return codec.encode_response(body, 7)


def test_describe_transactions_all_authorized_forwards_the_minus_one_untouched() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "TRANSACTIONAL_ID", "*")])
    verdict = h.send(request(65, 0, transactional_ids=("empty", "ongoing")))
    assert isinstance(verdict, Forward) and verdict.request is None
    wire = _broker_frame(
        _state("empty", "Empty", BEFORE_EPOCH),
        _state("ongoing", "Ongoing", datetime.fromtimestamp(1700000000, UTC)),
    )
    assert (-1).to_bytes(8, "big", signed=True) in wire
    broker = codec.decode_response(wire, 65, 0)
    response = h.complete(verdict, broker)
    assert response is broker  # the connection forwards the broker's bytes
    assert codec.encode_response(response, 7) == wire


def test_describe_transactions_denied_id_merges_with_a_minus_one_entry() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "TRANSACTIONAL_ID", "empty")])
    verdict = h.send(request(65, 0, transactional_ids=("secret", "empty")))
    assert isinstance(verdict, Forward)
    assert h.forwarded_body(verdict, None).transactional_ids == ("empty",)
    wire = _broker_frame(_state("empty", "Empty", BEFORE_EPOCH))
    response = h.complete(verdict, codec.decode_response(wire, 65, 0))
    states = response.transaction_states
    assert [(s.transactional_id, int(s.error_code)) for s in states] == [
        ("secret", int(ErrorCode.transactional_id_authorization_failed)),
        ("empty", 0),
    ]
    assert states[1].transaction_start_time == BEFORE_EPOCH
    # Re-encoded, the broker's entry is byte for byte what the broker sent.
    merged = codec.encode_response(response, 7)
    expected = codec.encode_response(
        codec.make_entity(
            codec.response_schema(65, 0),
            transaction_states=(states[0], _state("empty", "Empty", BEFORE_EPOCH)),
        ),
        7,
    )
    assert merged == expected
    entry = wire[wire.index(b"\x06empty") :]  # the broker's entry and the body's end
    assert merged.endswith(entry) and (-1).to_bytes(8, "big", signed=True) in entry
