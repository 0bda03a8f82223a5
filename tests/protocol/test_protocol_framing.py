"""FrameBuffer: Kafka's int32 length-prefixed framing, without sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaguard.protocol.errors import FrameTooLarge, MalformedFrame
from kafkaguard.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameBuffer,
    frame,
    int16_at,
    int32_at,
)


def _stream(payloads: list[bytes]) -> bytes:
    return b"".join(frame(p) for p in payloads)


@given(st.binary(min_size=4, max_size=12), st.data())
def test_integers_are_read_as_javas_signed_big_endian_from_bytes_and_views(
    data: bytes, draw: st.DataObject
) -> None:
    """``ByteBuffer.getInt``/``getShort``: two's complement, big-endian; the bytes path (by
    index) and the view path (struct) agree with ``int.from_bytes``."""
    pos = draw.draw(st.integers(0, len(data) - 4))
    for source in (data, memoryview(data)):
        assert int32_at(source, pos) == int.from_bytes(data[pos : pos + 4], "big", signed=True)
        assert int16_at(source, pos) == int.from_bytes(data[pos : pos + 2], "big", signed=True)
    assert int32_at(b"\x80\x00\x00\x00", 0) == -(2**31)
    assert int16_at(b"\x7f\xff", 0) == 2**15 - 1


def test_default_limit_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 104_857_600


def test_frame_prefixes_the_payload_size() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_many_frames_in_one_chunk_are_zero_copy_views_of_the_chunk() -> None:
    payloads = [b"a", b"bb" * 100, b"", b"ccc"]
    data = _stream(payloads)
    buf = FrameBuffer()
    frames = buf.feed(data)
    assert [bytes(f) for f in frames] == [frame(p) for p in payloads]
    for f in frames:
        assert isinstance(f, memoryview)
        assert f.obj is data  # a slice of the caller's bytes, not a copy
    assert buf.pending_bytes == 0


def test_trailing_partial_frame_is_held_and_completed_frames_are_copied() -> None:
    first, second = frame(b"x" * 10), frame(b"y" * 20)
    buf = FrameBuffer()
    got = buf.feed(first + second[:7])
    assert [bytes(f) for f in got] == [first]
    assert isinstance(got[0], memoryview)
    assert buf.pending_bytes == 7
    chunk = second[7:] + first
    got = buf.feed(chunk)
    # The pending frame is joined from its own bytes only; the frames after it in the same
    # read are views of the caller's (immutable) chunk, never copied.
    assert [bytes(f) for f in got] == [second, first]
    assert isinstance(got[0], bytes)
    assert isinstance(got[1], memoryview) and got[1].obj is chunk
    assert buf.pending_bytes == 0
    # The next chunk starts clean: zero-copy again, and a read that is exactly one frame is
    # handed out as itself.
    again = buf.feed(first)
    assert again == [first] and again[0] is first
    view = memoryview(first + first)[len(first) :]
    assert buf.feed(view)[0] is view


def test_frames_from_the_pending_path_survive_later_feeds() -> None:
    data = frame(b"hello") + frame(b"world")
    buf = FrameBuffer()
    assert buf.feed(data[:3]) == []
    first = buf.feed(data[3:12])
    assert first == [frame(b"hello")]
    buf.feed(data[12:])
    assert first == [frame(b"hello")]  # not overwritten by later buffering


@pytest.mark.parametrize("cut", range(1, 4))
def test_split_inside_the_size_prefix(cut: int) -> None:
    data = frame(b"payload")
    buf = FrameBuffer()
    assert buf.feed(data[:cut]) == []
    assert buf.pending_bytes == cut
    assert buf.feed(data[cut:]) == [data]
    assert buf.pending_bytes == 0


def test_byte_at_a_time() -> None:
    payloads = [b"one", b"", b"three" * 7]
    data = _stream(payloads)
    buf = FrameBuffer()
    out: list[bytes] = []
    for i in range(len(data)):
        out += [bytes(f) for f in buf.feed(data[i : i + 1])]
    assert out == [frame(p) for p in payloads]
    assert buf.pending_bytes == 0


def test_empty_feed_is_harmless() -> None:
    buf = FrameBuffer()
    assert buf.feed(b"") == []
    buf.feed(b"\x00\x00")
    assert buf.feed(b"") == []
    assert buf.pending_bytes == 2


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
)
def test_any_split_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = _stream(payloads)
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    buf = FrameBuffer(max_frame_bytes=300)
    out: list[bytes] = []
    for start, end in zip(points, points[1:], strict=False):
        out += [bytes(f) for f in buf.feed(data[start:end])]
    assert out == [frame(p) for p in payloads]
    assert buf.pending_bytes == 0


def test_exact_limit_is_accepted() -> None:
    buf = FrameBuffer(max_frame_bytes=16)
    assert buf.feed(frame(b"z" * 16)) == [frame(b"z" * 16)]


def test_one_byte_over_the_limit_is_rejected_with_size_and_limit() -> None:
    buf = FrameBuffer(max_frame_bytes=16)
    with pytest.raises(FrameTooLarge) as info:
        buf.feed(frame(b"z" * 17))
    assert (info.value.size, info.value.limit) == (17, 16)
    assert "17" in str(info.value) and "16" in str(info.value)


def test_oversized_prefix_is_rejected_before_any_byte_is_buffered() -> None:
    buf = FrameBuffer(max_frame_bytes=1024)
    huge = (2**31 - 1).to_bytes(4, "big")
    with pytest.raises(FrameTooLarge) as info:
        buf.feed(huge)  # the prefix alone suffices: nothing of the body has arrived
    assert info.value.size == 2**31 - 1
    assert info.value.limit == 1024
    assert buf.pending_bytes == 0


def test_oversized_prefix_after_a_good_frame_in_the_same_chunk() -> None:
    buf = FrameBuffer(max_frame_bytes=1024)
    with pytest.raises(FrameTooLarge):
        buf.feed(frame(b"ok") + (5000).to_bytes(4, "big") + b"x" * 2000)
    assert buf.pending_bytes == 0


def test_oversized_prefix_split_across_reads_is_rejected_once_complete() -> None:
    buf = FrameBuffer(max_frame_bytes=1024)
    prefix = (1025).to_bytes(4, "big")
    assert buf.feed(prefix[:2]) == []
    with pytest.raises(FrameTooLarge) as info:
        buf.feed(prefix[2:])
    assert info.value.size == 1025


@pytest.mark.parametrize("split", [False, True])
def test_negative_size_is_malformed(split: bool) -> None:
    data = (-1).to_bytes(4, "big", signed=True) + b"abcd"
    buf = FrameBuffer()
    with pytest.raises(MalformedFrame, match="negative"):
        if split:
            buf.feed(data[:1])
            buf.feed(data[1:])
        else:
            buf.feed(data)


def test_views_of_bytes_are_fed_as_bytes_are() -> None:
    """The exchange feeds the rest of a read as a memoryview after a streamed response ends
    (``Exchange.receive_broker``): the compiled module, which checks argument types, takes it
    as the Python source does."""
    data = _stream([b"one", b"two", b"three"])
    buf = FrameBuffer()
    got = buf.feed(memoryview(data)[:9]) + buf.feed(memoryview(data)[9:])
    assert [bytes(f) for f in got] == [frame(b"one"), frame(b"two"), frame(b"three")]
