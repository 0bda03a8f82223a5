"""ShareFetch and ShareAcknowledge responses skimmed (KIP-932): their partitions, error
codes and whether they carry ``NodeEndpoints``, so that one is decoded only when the proxy must
change it (:func:`skim_share_response`). See :mod:`kafkaguard.protocol.skim`."""

from __future__ import annotations

import struct
from typing import Final
from uuid import UUID

from kafkaguard.protocol.skim.reading import (
    I16,
    I32,
    Truncated,
    compact_end,
    tags_end,
    uv,
)

SHARE_FETCH: Final = 78
SHARE_ACKNOWLEDGE: Final = 79
SHARE_RESPONSE_VERSIONS: Final = range(1, 3)
"""``ShareFetchResponse.json`` / ``ShareAcknowledgeResponse.json`` v1–v2 (KIP-932)."""


class ShareResponseSkim:
    """What the share-session handlers check of a response before passing its bytes on."""

    __slots__ = ("error_code", "has_node_endpoints", "partitions")

    def __init__(
        self, error_code: int, partitions: list[tuple[UUID, int]], has_node_endpoints: bool
    ) -> None:
        self.error_code = error_code
        self.partitions = partitions
        """(topic id, partition index) of every partition entry, in order."""
        self.has_node_endpoints = has_node_endpoints


def skim_share_response(
    frame: bytes | memoryview, api_key: int, version: int
) -> ShareResponseSkim | None:
    """Walk a whole ShareFetch or ShareAcknowledge response by its lengths, records unread;
    ``None`` for another version or a frame the walk cannot follow exactly to its end."""
    if version not in SHARE_RESPONSE_VERSIONS:
        return None
    fetch = api_key == SHARE_FETCH
    try:
        pos = tags_end(frame, 8) + 4  # header, throttle_time_ms
        error_code = I16.unpack_from(frame, pos)[0]
        pos = compact_end(frame, pos + 2, True)  # error_message
        if fetch or version >= 2:
            pos += 4  # acquisition_lock_timeout_ms
        partitions: list[tuple[UUID, int]] = []
        topics, pos = uv(frame, pos)
        for _ in range(topics - 1):
            if pos + 16 > len(frame):
                raise Truncated
            topic_id = UUID(bytes=bytes(frame[pos : pos + 16]))
            pos = _share_partitions(frame, pos + 16, fetch, topic_id, partitions)
        endpoints, pos = uv(frame, pos)
        for _ in range(endpoints - 1):  # node id, host, port, rack, tagged fields
            pos = tags_end(frame, compact_end(frame, compact_end(frame, pos + 4, False) + 4, True))
        pos = tags_end(frame, pos)
    except (Truncated, IndexError, struct.error):
        return None
    if pos != len(frame):
        return None
    return ShareResponseSkim(error_code, partitions, endpoints > 1)


def _share_partitions(
    frame: bytes | memoryview,
    pos: int,
    fetch: bool,
    topic_id: UUID,
    out: list[tuple[UUID, int]],
) -> int:
    count, pos = uv(frame, pos)
    for _ in range(count - 1):
        out.append((topic_id, I32.unpack_from(frame, pos)[0]))
        pos = compact_end(frame, pos + 6, True)  # index, error_code, error_message
        if fetch:
            pos = compact_end(frame, pos + 2, True)  # acknowledge error code and message
        pos = tags_end(frame, pos + 8)  # current_leader: leader id, epoch (no address)
        if fetch:
            pos = compact_end(frame, pos, True)  # records
            acquired, pos = uv(frame, pos)
            for _ in range(acquired - 1):  # first offset, last offset, delivery count
                pos = tags_end(frame, pos + 18)
        pos = tags_end(frame, pos)
    return tags_end(frame, pos)
