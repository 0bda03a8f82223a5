"""codec: datetime_i64 and timedelta_i64 values kio refuses decode, and re-encode to the same
bytes (Kafka reads any int64 there).

Kafka 4.3 answers DescribeTransactions with transaction_start_time_ms = -1 for a
transactional id in state Empty; delegation-token timestamps are plain int64 too.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _describe_transactions(version: int, start: datetime) -> Any:
    schema = codec.response_schema(65, version)
    state = codec.make_entity(
        codec.nested_type(schema, "transaction_states"),
        transactional_id="tx",
        transaction_state="Empty",
        transaction_timeout=timedelta(seconds=60),
        transaction_start_time=start,
        producer_id=7,
    )
    return codec.make_entity(schema, transaction_states=(state, state))


def test_kio_writes_a_pre_epoch_datetime_as_its_exact_milliseconds() -> None:
    body = _describe_transactions(0, datetime.fromtimestamp(-0.001, UTC))
    assert codec.encode_response(body, 1).count(struct.pack(">q", -1)) == 2


def test_describe_transactions_v0_start_time_minus_one_round_trips() -> None:
    wire = codec.encode_response(_describe_transactions(0, EPOCH), 9)
    at = wire.index(struct.pack(">q", 0))
    patched = wire[:at] + struct.pack(">q", -1) + wire[at + 8 :]  # as Kafka 4.3 sends it
    body: Any = codec.decode_response(patched, 65, 0)
    first, second = body.transaction_states
    assert first.transaction_start_time == EPOCH - timedelta(milliseconds=1)
    assert second.transaction_start_time == EPOCH
    assert codec.encode_response(body, 9) == patched


@pytest.mark.parametrize("millis", [-1, -2, -999, -1000, -1001, -86_400_000, -62_135_596_800_000])
@pytest.mark.parametrize("version", list(codec.codec_versions(65)))
def test_every_negative_millisecond_from_year_one_round_trips(version: int, millis: int) -> None:
    wire = codec.encode_response(_describe_transactions(version, EPOCH), 9)
    patched = wire.replace(struct.pack(">q", 0), struct.pack(">q", millis))
    assert patched.count(struct.pack(">q", millis)) >= 2
    body: Any = codec.decode_response(patched, 65, version)
    for state in body.transaction_states:
        assert state.transaction_start_time == EPOCH + timedelta(milliseconds=millis)
    assert codec.encode_response(body, 9) == patched


@pytest.mark.parametrize("millis", [-(2**63), -62135596800001, 253402300800000, 2**63 - 1])
def test_timestamp_beyond_datetime_reads_as_kafka_reads_it(millis: int) -> None:
    """Before year 1 or after 9999: Kafka reads the int64, kio cannot; it reads as
    :class:`codec.Millis` and re-encodes to the same bytes."""
    wire = codec.encode_response(_describe_transactions(0, EPOCH), 9)
    patched = wire.replace(struct.pack(">q", 0), struct.pack(">q", millis), 1)
    body: Any = codec.decode_response(patched, 65, 0)
    assert body.transaction_states[0].transaction_start_time == codec.Millis(millis)
    assert codec.encode_response(body, 9) == patched


@pytest.mark.parametrize("millis", [-(2**63), -(2**50) - 1, 2**50 + 1, 9151314442816847882])
@pytest.mark.parametrize(
    ("api_key", "version", "field"), [(8, 2, "retention_time"), (38, 3, "max_lifetime")]
)
def test_duration_beyond_timedelta_reads_as_kafka_reads_it(
    api_key: int, version: int, field: str, millis: int
) -> None:
    """``OffsetCommitRequest.retention_time_ms`` and
    ``CreateDelegationTokenRequest.max_lifetime_ms`` are any int64 to Kafka; kio's
    ``timedelta`` overflows (or re-encodes inexactly) beyond 2^50 ms: they read as
    :class:`codec.Millis` and re-encode to the same bytes."""
    marker = timedelta(milliseconds=123456789)
    body = codec.make_entity(codec.request_schema(api_key, version), **{field: marker})
    wire = codec.encode_request(body, 4, "c")
    patched = wire.replace(struct.pack(">q", 123456789), struct.pack(">q", millis), 1)
    assert patched != wire
    decoded: Any = codec.decode_request(patched, api_key, version)
    assert getattr(decoded, field) == codec.Millis(millis)
    assert codec.encode_request(decoded, 4, "c") == patched


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(k, v) for k in (38, 39, 40) for v in codec.codec_versions(k)],
)
def test_delegation_token_timestamps(api_key: int, version: int) -> None:
    schema = codec.response_schema(api_key, version)
    values = {
        "expiry_timestamp": EPOCH - timedelta(milliseconds=1),
        **(
            {"issue_timestamp": EPOCH - timedelta(days=3), "max_timestamp": EPOCH}
            if api_key == 38
            else {}
        ),
    }
    wire = codec.encode_response(codec.make_entity(schema, **values), 5)
    body: Any = codec.decode_response(wire, api_key, version)
    assert {name: getattr(body, name) for name in values} == values
    assert codec.encode_response(body, 5) == wire


def test_nullable_timestamp_minus_one_stays_null() -> None:
    # ProduceResponse.log_append_time is nullable in kio: -1 is None, not a negative value.
    schema = codec.response_schema(0, 9)
    topic = codec.nested_type(schema, "responses")
    partition = codec.nested_type(topic, "partition_responses")
    body = codec.make_entity(
        schema,
        responses=(
            codec.make_entity(
                topic, name="t", partition_responses=(codec.make_entity(partition, index=0),)
            ),
        ),
    )
    wire = codec.encode_response(body, 3)
    decoded: Any = codec.decode_response(wire, 0, 9)
    assert decoded.responses[0].partition_responses[0].log_append_time is None
    below = wire.replace(struct.pack(">q", -1), struct.pack(">q", -5), 1)
    decoded = codec.decode_response(below, 0, 9)
    assert decoded.responses[0].partition_responses[0].log_append_time == EPOCH - timedelta(
        milliseconds=5
    )
    assert codec.encode_response(decoded, 3) == below
