"""Skim a Fetch response frame without decoding it: does it carry ``node_endpoints``?

Fetch v16+ responses may end with the KIP-951 ``node_endpoints`` tagged field (tag 0), which
holds broker addresses the proxy must rewrite. Brokers only send it when a partition's leader
moved, yet a full decode of every response — record batches included — just to find out cost a
third more CPU per consumed message against Kafka 4 (bench/RESULTS.md). This module walks the
frame's structure by lengths (FetchResponse v12–v18 share one flexible layout), touching no
record bytes, and answers whether the top-level tagged fields hold tag 0.

It must never say "no" wrongly (a missed ``node_endpoints`` would leak a broker address), so
anything unexpected — a truncated frame, lengths running past the end, bytes left over —
answers ``True`` and the caller decodes as before. No I/O (sans-I/O, like the rest of
:mod:`kafkaguard.protocol`).
"""

from __future__ import annotations

from typing import Final

FIRST_SKIMMABLE_VERSION: Final = 12
"""FetchResponse's layout below is fixed from v12 (flexible, topic ids from v13) to v18."""
LAST_SKIMMABLE_VERSION: Final = 18

NODE_ENDPOINTS_TAG: Final = 0


class _Truncated(Exception):
    pass


class _Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise _Truncated
        self.pos += n

    def uvarint(self) -> int:
        result = shift = 0
        buf, pos = self.buf, self.pos
        while True:
            if pos >= self.end or shift > 28:
                raise _Truncated
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return result
            shift += 7

    def tagged_fields(self) -> list[int]:
        """Skip a tagged-field section, returning its tags."""
        tags = []
        for _ in range(self.uvarint()):
            tags.append(self.uvarint())
            self.skip(self.uvarint())
        return tags

    def compact_length(self) -> int:
        """A compact array/bytes length; −1 for null."""
        return self.uvarint() - 1


def fetch_response_has_node_endpoints(frame: bytes | memoryview, version: int) -> bool:
    """True unless the whole FetchResponse ``frame`` (size prefix included) of ``version``
    provably has no top-level tag-0 field."""
    if not FIRST_SKIMMABLE_VERSION <= version <= LAST_SKIMMABLE_VERSION:
        return True
    try:
        r = _Reader(frame, 4 + 4)  # size, correlation id
        r.tagged_fields()  # response header v1
        r.skip(4 + 2 + 4)  # throttle_time_ms, error_code, session_id
        for _ in range(max(r.compact_length(), 0)):  # responses
            if version >= 13:
                r.skip(16)  # topic_id
            else:
                r.skip(r.compact_length())  # topic name (compact string)
            for _ in range(max(r.compact_length(), 0)):  # partitions
                r.skip(4 + 2 + 8 + 8 + 8)  # index, error, hw, lso, log start
                for _ in range(max(r.compact_length(), 0)):  # aborted_transactions
                    r.skip(8 + 8)
                    r.tagged_fields()
                r.skip(4)  # preferred_read_replica
                records = r.compact_length()
                if records > 0:
                    r.skip(records)
                r.tagged_fields()  # diverging_epoch, current_leader, snapshot_id: no addresses
            r.tagged_fields()
        tags = r.tagged_fields()
        if r.pos != r.end:
            return True
    except _Truncated:
        return True
    return NODE_ENDPOINTS_TAG in tags
