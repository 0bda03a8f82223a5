"""The skim of a Fetch response's top-level error code and session id (issue 24: what confirms
a fetch session change), against kio: read at fixed offsets from a whole frame of every
session version, and told by the streaming walk however the frame arrives in pieces."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.skim.tails import (
    FIRST_SKIMMABLE_VERSION,
    NodeEndpointsTail,
    fetch_response_head,
)

SESSION_VERSIONS = [v for v in codec.codec_versions(1) if v >= 7]


def response(version: int, code: ErrorCode, session_id: int) -> bytes:
    schema = codec.response_schema(1, version)
    body = codec.make_entity(
        schema, code, throttle_time=timedelta(milliseconds=3), session_id=session_id, responses=()
    )
    return codec.encode_response(body, 42)


@pytest.mark.parametrize("version", SESSION_VERSIONS)
@pytest.mark.parametrize(
    ("code", "session_id"),
    [(ErrorCode.none, 2**31 - 1), (ErrorCode.invalid_fetch_session_epoch, 0), (ErrorCode.none, -5)],
)
def test_whole_frame_head_matches_kio(version: int, code: ErrorCode, session_id: int) -> None:
    frame = response(version, code, session_id)
    decoded = codec.decode_response(frame, 1, version)
    assert fetch_response_head(frame, version) == (decoded.error_code, decoded.session_id)


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_a_frame_too_short_for_the_head_is_refused(version: int) -> None:
    frame = response(version, ErrorCode.none, 7)
    with pytest.raises(MalformedFrame):
        fetch_response_head(frame[:15], version)


@given(
    version=st.sampled_from(SESSION_VERSIONS),
    session_id=st.integers(-(2**31), 2**31 - 1),
    cuts=st.lists(st.integers(1, 30), max_size=10),
)
def test_the_streamed_walk_tells_the_head_whatever_the_pieces(
    version: int, session_id: int, cuts: list[int]
) -> None:
    frame = response(version, ErrorCode.fetch_session_id_not_found, session_id)
    told: list[tuple[int, int]] = []
    tail = NodeEndpointsTail(1, version, lambda n, h, p: (h, p), bytes, lambda *h: told.append(h))
    assert tail.streamable  # v7–11 too: their head is at a fixed place, nothing held for it
    stream = tail.stream(len(frame))
    bounds = sorted({min(sum(cuts[: i + 1]), len(frame)) for i in range(len(cuts))} - {len(frame)})
    pieces = [frame[a:b] for a, b in zip([0, *bounds], [*bounds, len(frame)], strict=True)]
    out: list[bytes] = []
    for i, piece in enumerate(pieces):
        out += map(bytes, stream.feed(piece, i == len(pieces) - 1))
        if version < FIRST_SKIMMABLE_VERSION and len(b"".join(out)) >= 18:
            assert len(b"".join(out)) == sum(map(len, pieces[: i + 1]))  # no tail held back
    assert told == [(ErrorCode.fetch_session_id_not_found, session_id)]
    assert b"".join(out) == frame  # nothing else changed
