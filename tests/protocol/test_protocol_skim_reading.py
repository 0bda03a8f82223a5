"""The primitive readers every skim reads by (kafkaguard/protocol/skim/reading.py), against
Kafka's ``ByteUtils.readUnsignedVarint`` and the generated readers' compact lengths. They run in
both passes of ``./dev test`` (tests/support/pure_python.py): the compiled module and its
source must read the same bytes as Kafka does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaguard.protocol.skim.reading import (
    Truncated,
    compact_end,
    length_at,
    tags_end,
    uv,
)


def unsigned_varint(value: int) -> bytes:
    """``ByteUtils.writeUnsignedVarint`` of a Java ``int`` (as its 32 bits, unsigned)."""
    value &= 0xFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@given(st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1), st.binary(max_size=3))
def test_a_varint_reads_back_as_the_java_int_written(value: int, tail: bytes) -> None:
    encoded = unsigned_varint(value)
    assert uv(encoded + tail, 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x00", 0),
        (b"\x7f", 127),
        (b"\x80\x01", 128),
        # The 5th byte is shifted left by 28 into a Java int: bit 31 is the sign, bits beyond
        # 32 are dropped (ByteUtils.readUnsignedVarint: `value |= i << 28`).
        (b"\x80\x80\x80\x80\x08", -(1 << 31)),
        (b"\xff\xff\xff\xff\x0f", -1),
        (b"\xff\xff\xff\xff\x7f", -1),
    ],
)
def test_varints_read_as_kafka_reads_them(data: bytes, expected: int) -> None:
    assert uv(data, 0) == (expected, len(data))


def test_a_sixth_varint_byte_is_refused_and_a_short_buffer_runs_out() -> None:
    with pytest.raises(Truncated):  # Kafka: "illegalVarintException"
        uv(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(IndexError):
        uv(b"\x80\x80", 0)


def test_compact_lengths_are_the_varint_minus_one_and_negative_is_null() -> None:
    assert length_at(b"\x00", 0) == (-1, 1)  # null
    assert length_at(b"\x01", 0) == (0, 1)
    assert length_at(b"\x80\x80\x80\x80\x08", 0) == ((1 << 31) - 1, 5)  # Java int wraps
    assert compact_end(b"\x04abc", 0, nullable=False) == 4
    assert compact_end(b"\x00", 0, nullable=True) == 1
    with pytest.raises(Truncated):
        compact_end(b"\x00", 0, nullable=False)


def test_tagged_fields_are_skipped_and_a_negative_size_refused() -> None:
    assert tags_end(b"\x00", 0) == 1
    # two fields: tag 0 of 2 bytes, tag 5 of 0 bytes
    assert tags_end(b"\x02\x00\x02ab\x05\x00", 0) == 7
    with pytest.raises(Truncated):
        tags_end(b"\x01\x00\xff\xff\xff\xff\x0f", 0)
