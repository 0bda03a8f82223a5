"""The top-level tagged fields of Fetch v12+ and Produce v9+ responses: where they start
(walked by lengths, on a buffered frame or as it streams), and the KIP-951 ``node_endpoints``
field in them rewritten in the tail alone (:class:`NodeEndpointsTail`, :class:`TailStream`).
See :mod:`kafkaguard.protocol.skim`."""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Final

from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.guard import uvarint_bytes
from kafkaguard.protocol.skim.reading import (
    I16,
    I32,
    Truncated,
    compact_end,
    java_int,
    minus_one,
    tags_end,
    uv,
)

FIRST_SKIMMABLE_VERSION: Final = 12
"""FetchResponse's layout below is fixed from v12 (flexible, topic ids from v13) to v18."""
LAST_SKIMMABLE_VERSION: Final = 18

FIRST_FETCH_HEAD_VERSION: Final = 7
"""FetchResponse carries ``error_code`` and ``session_id`` from v7 (KIP-227)."""

FIRST_PRODUCE_RESPONSE_VERSION: Final = 9
"""ProduceResponse is flexible from v9 (KIP-482); topic ids from v13 (KIP-516)."""
LAST_PRODUCE_RESPONSE_VERSION: Final = 13

NODE_ENDPOINTS_TAG: Final = 0
PAD_TAG: Final = 10_000
"""Tags of the unknown fields that pad a streamed tail rewritten shorter than it was: KIP-482
readers skip tags they do not know (Kafka's generated ``read`` keeps them as unknown tagged
fields, librdkafka's ``rd_kafka_buf_read_tags`` skips them)."""

AddressRewrite = Callable[[int, str, int], tuple[str, int]]
"""``(node_id, host, port) -> (host, port)`` the client may see (``advertise_node``)."""
_FETCH_HEAD = struct.Struct(">ihi")
"""FetchResponse v7+ after its header: throttle_time_ms, error_code, session_id."""

FetchHead = Callable[[int, int], None]
"""Told a FetchResponse's top-level ``(error_code, session_id)`` as soon as they are read."""


# A walker is a generator over a frame's structure: it yields ``n >= 0`` to skip n bytes, or
# ``-k`` to be sent the next k bytes; it returns at the start of the top-level tagged fields.
# It walks a frame as it streams (:class:`TailStream`), whatever the pieces it arrives in.
_Walker = Generator[int, bytes | None, None]


def _uvarint() -> Generator[int, bytes | None, int]:
    result = shift = 0
    while True:
        if shift > 28:
            raise Truncated
        data = yield -1
        assert data is not None
        byte = data[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return java_int(result)
        shift += 7


def _compact_length() -> Generator[int, bytes | None, int]:
    """A compact array/bytes length; negative for null."""
    return minus_one((yield from _uvarint()))


def _skip_tags() -> Generator[int, bytes | None, None]:
    for _ in range((yield from _uvarint())):
        yield from _uvarint()  # tag
        size = yield from _uvarint()
        if size < 0:
            raise Truncated
        yield size


def _skip_compact(nullable: bool) -> Generator[int, bytes | None, None]:
    n = yield from _compact_length()
    if n < 0 and not nullable:
        raise Truncated
    if n > 0:
        yield n


def _fetch_walker(version: int, head: FetchHead | None = None) -> _Walker:
    """FetchResponse v12–v18 (``FetchResponse.json``), from the size prefix; ``head`` is told
    the top-level error code and session id as they pass."""
    yield 8  # size, correlation id
    yield from _skip_tags()  # response header v1
    if head is None:
        yield _FETCH_HEAD.size  # throttle_time_ms, error_code, session_id
    else:
        data = yield -_FETCH_HEAD.size
        assert data is not None
        _, error_code, session_id = _FETCH_HEAD.unpack(data)
        head(error_code, session_id)
    for _ in range(max((yield from _compact_length()), 0)):  # responses
        if version >= 13:
            yield 16  # topic_id
        else:
            yield from _skip_compact(False)  # topic
        for _ in range(max((yield from _compact_length()), 0)):  # partitions
            yield 4 + 2 + 8 + 8 + 8  # index, error, high watermark, last stable, log start
            for _ in range(max((yield from _compact_length()), 0)):  # aborted_transactions
                yield 8 + 8
                yield from _skip_tags()
            yield 4  # preferred_read_replica
            yield from _skip_compact(True)  # records
            yield from _skip_tags()  # diverging_epoch, current_leader, snapshot_id: no address
        yield from _skip_tags()


def _fetch_head_walker(frame_size: int, head: FetchHead) -> _Walker:
    """FetchResponse v7–v11 (response header v0, no tagged fields): the top-level error code
    and session id at their fixed place, told to ``head``; every other byte passes as it
    streams, and the tail is empty."""
    yield 8  # size, correlation id
    data = yield -_FETCH_HEAD.size
    assert data is not None
    _, error_code, session_id = _FETCH_HEAD.unpack(data)
    head(error_code, session_id)
    yield frame_size - 8 - _FETCH_HEAD.size


# The buffered walks below follow the walkers above field for field, as plain loops: a frame
# that is already whole is walked several times faster without a generator's round trips.
def _fetch_tail(buf: bytes | memoryview, version: int) -> int:
    pos = tags_end(buf, 8) + 4 + 2 + 4
    topics, pos = uv(buf, pos)
    for _ in range(topics - 1):
        pos = pos + 16 if version >= 13 else compact_end(buf, pos, False)
        partitions, pos = uv(buf, pos)
        for _ in range(partitions - 1):
            aborted, pos = uv(buf, pos + 30)
            for _ in range(aborted - 1):
                pos = tags_end(buf, pos + 16)
            pos = tags_end(buf, compact_end(buf, pos + 4, True))
        pos = tags_end(buf, pos)
    return pos


def _produce_tail(buf: bytes | memoryview, version: int) -> int:
    pos = tags_end(buf, 8)
    topics, pos = uv(buf, pos)
    for _ in range(topics - 1):
        pos = pos + 16 if version >= 13 else compact_end(buf, pos, False)
        partitions, pos = uv(buf, pos)
        for _ in range(partitions - 1):
            errors, pos = uv(buf, pos + 30)
            for _ in range(errors - 1):
                pos = tags_end(buf, compact_end(buf, pos + 4, True))
            pos = tags_end(buf, compact_end(buf, pos, True))
        pos = tags_end(buf, pos)
    return pos + 4


def fetch_response_tail(frame: bytes | memoryview, version: int) -> int | None:
    """Where the top-level tagged fields of a whole FetchResponse ``frame`` (size prefix
    included) start; ``None`` when the version is not walked or the frame makes no sense."""
    if not FIRST_SKIMMABLE_VERSION <= version <= LAST_SKIMMABLE_VERSION:
        return None
    try:
        pos = _fetch_tail(frame, version)
    except (Truncated, IndexError):
        return None
    return pos if pos <= len(frame) else None


def produce_response_tail(frame: bytes | memoryview, version: int) -> int | None:
    """:func:`fetch_response_tail` for a ProduceResponse."""
    if not FIRST_PRODUCE_RESPONSE_VERSION <= version <= LAST_PRODUCE_RESPONSE_VERSION:
        return None
    try:
        pos = _produce_tail(frame, version)
    except (Truncated, IndexError):
        return None
    return pos if pos <= len(frame) else None


def fetch_response_head(frame: bytes | memoryview, version: int) -> tuple[int, int]:
    """The top-level ``(error_code, session_id)`` of a whole FetchResponse ``frame`` of
    ``version`` (7+, size prefix included), at their fixed place after the response header:
    what confirms a fetch session change (``kafkaguard.proxy.handlers.fetch``) without
    decoding the records."""
    try:
        pos = tags_end(frame, 8) if version >= FIRST_SKIMMABLE_VERSION else 8
        _, error_code, session_id = _FETCH_HEAD.unpack_from(frame, pos)
    except (Truncated, IndexError, struct.error) as exc:
        raise MalformedFrame("a Fetch response too short for its session fields") from exc
    return error_code, session_id


def fetch_response_has_node_endpoints(frame: bytes | memoryview, version: int) -> bool:
    """True unless the whole FetchResponse ``frame`` (size prefix included) of ``version``
    provably has no top-level tag-0 field."""
    tail = fetch_response_tail(frame, version)
    if tail is None:
        return True
    fields = _parse_tags(frame[tail:])
    return fields is None or any(tag == NODE_ENDPOINTS_TAG for tag, _ in fields)


class _Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise Truncated
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos])

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise Truncated
        self.pos += n

    def uvarint(self) -> int:
        result = shift = 0
        buf, pos = self.buf, self.pos
        while True:
            if pos >= self.end or shift > 28:
                raise Truncated
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return java_int(result)
            shift += 7

    def int32(self) -> int:
        value: int = I32.unpack(self.take(4))[0]
        return value

    def int16(self) -> int:
        value: int = I16.unpack(self.take(2))[0]
        return value

    def compact_length(self) -> int:
        return minus_one(self.uvarint())

    def compact_string(self) -> str | None:
        n = self.compact_length()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Truncated from exc

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.skip(self.uvarint())

    @property
    def at_end(self) -> bool:
        return self.pos == self.end


def _compact_string_bytes(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode("utf-8")
    return uvarint_bytes(len(raw) + 1) + raw


def _parse_tags(tail: bytes | memoryview) -> list[tuple[int, bytes]] | None:
    """The fields of a tagged-fields section that fills ``tail`` exactly; None otherwise."""
    r = _Reader(tail)
    try:
        fields = []
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            fields.append((tag, r.take(r.uvarint())))
    except Truncated:
        return None
    return fields if r.at_end else None


def _encode_tags(fields: list[tuple[int, bytes]]) -> bytes:
    parts = [uvarint_bytes(len(fields))]
    for tag, data in fields:
        parts += (uvarint_bytes(tag), uvarint_bytes(len(data)), data)
    return b"".join(parts)


def _rewrite_endpoints(data: bytes, advertise: AddressRewrite) -> bytes:
    """``node_endpoints`` (``NodeEndpoint``: node id, host, port, rack, tagged fields) with each
    host/port replaced by what ``advertise`` answers."""
    r = _Reader(data)
    out = []
    count = r.compact_length()
    if count < 0:
        raise Truncated
    out.append(uvarint_bytes(count + 1))
    for _ in range(count):
        node_id = r.int32()
        host = r.compact_string()
        port = r.int32()
        if host is None:
            raise Truncated
        rest = r.pos
        r.compact_string()  # rack
        r.skip_tags()
        host, port = advertise(node_id, host, port)
        out += (I32.pack(node_id), _compact_string_bytes(host), I32.pack(port))
        out.append(bytes(data[rest : r.pos]))
    if not r.at_end:
        raise Truncated
    return b"".join(out)


def rewrite_node_endpoints(
    tail: bytes | memoryview, advertise: AddressRewrite
) -> list[tuple[int, bytes]] | None:
    """The tail's tagged fields with ``node_endpoints`` rewritten; ``None`` when there is no
    ``node_endpoints`` (nothing to change). Raises :class:`MalformedFrame` on a tail that is
    not a well-formed tagged-fields section."""
    fields = _parse_tags(tail)
    if fields is None:
        raise MalformedFrame("response ends with a malformed tagged-fields section")
    if not any(tag == NODE_ENDPOINTS_TAG for tag, _ in fields):
        return None
    try:
        return [
            (tag, _rewrite_endpoints(data, advertise) if tag == NODE_ENDPOINTS_TAG else data)
            for tag, data in fields
        ]
    except Truncated as exc:
        raise MalformedFrame("malformed node_endpoints in a response") from exc


def _pads(length: int) -> Iterator[tuple[int, bytes]]:
    """Unknown tagged fields (tags from :data:`PAD_TAG`, 2-byte varints) that encode to
    exactly ``length`` bytes (at least 3)."""
    tag = PAD_TAG
    while length:
        if length < 3:
            raise MalformedFrame(f"cannot pad a tail by {length} bytes")
        if length <= 130:  # tag (2) + size (1) + data
            data = length - 3
        elif length == 131:  # 2 + 1 + 128 cannot be: a 2-byte size; an empty field first
            data = 0
        else:  # tag (2) + size (2) + data, leaving no remainder too small for a field
            data = min(length - 4, 16_383)
            if 0 < length - 4 - data < 3:
                data -= 3
        yield tag, bytes(data)
        tag += 1
        length -= 2 + len(uvarint_bytes(data)) + data


def fit_tail(fields: list[tuple[int, bytes]], length: int) -> bytes:
    """Encode ``fields`` as a tagged-fields section of exactly ``length`` bytes: the frame's
    size was sent before its tail was known (cut-through). A shorter encoding is padded with
    unknown tagged fields; one that cannot fit drops ``node_endpoints`` altogether — the client
    then finds the new leader's address with a Metadata request, as before KIP-951 — so no
    broker address is ever sent."""
    tail = _encode_tags(fields)
    if len(tail) != length and not 3 <= length - len(tail) <= 16_383 * 64:
        fields = [(tag, data) for tag, data in fields if tag != NODE_ENDPOINTS_TAG]
        tail = _encode_tags(fields)
    if len(tail) < length:
        tail = _encode_tags(fields + list(_pads(length - len(tail))))
    if len(tail) != length:
        raise MalformedFrame(f"cannot fit a rewritten tail of {len(tail)} bytes into {length}")
    return tail


@dataclass(frozen=True, slots=True)
class NodeEndpointsTail:
    """The raw-frame transform for a Fetch v16+ or Produce v10+ response: ``node_endpoints``
    (KIP-951) rewritten in the tail, every other byte the broker's. ``fallback`` handles a
    frame that cannot be walked (decode, rewrite, re-encode). A Fetch response's ``head``
    (:data:`FetchHead`) is told its error code and session id first, streamed or not."""

    api_key: int
    version: int
    advertise: AddressRewrite
    fallback: Callable[[bytes | memoryview], bytes | memoryview]
    head: FetchHead | None = None

    @property
    def streamable(self) -> bool:
        """Fetch responses are walked as they stream (cut-through): v12+ to their tail, v7–11
        of a session only to their head."""
        if self.api_key != 1:
            return False
        if self.version < FIRST_SKIMMABLE_VERSION:
            return self.head is not None and self.version >= FIRST_FETCH_HEAD_VERSION
        return self.version <= LAST_SKIMMABLE_VERSION

    def __call__(self, frame: bytes | memoryview) -> bytes | memoryview:
        if self.head is not None:
            self.head(*fetch_response_head(frame, self.version))
        tail_at = (
            fetch_response_tail(frame, self.version)
            if self.api_key == 1
            else produce_response_tail(frame, self.version)
        )
        if tail_at is None:
            return self.fallback(frame)
        if tail_at == len(frame) - 1 and not frame[tail_at]:  # no tagged field at all
            return frame
        try:
            fields = rewrite_node_endpoints(frame[tail_at:], self.advertise)
        except MalformedFrame:
            return self.fallback(frame)
        if fields is None:
            return frame
        tail = _encode_tags(fields)
        size = tail_at - 4 + len(tail)
        return b"".join((I32.pack(size), frame[4:tail_at], tail))

    def stream(self, frame_size: int) -> TailStream:
        """Walk a response of ``frame_size`` bytes (size prefix included) as it streams."""
        if self.version < FIRST_SKIMMABLE_VERSION:
            assert self.head is not None
            walker = _fetch_head_walker(frame_size, self.head)
            return TailStream(walker, frame_size, lambda tail: tail)
        return TailStream(_fetch_walker(self.version, self.head), frame_size, self._finish)

    def _finish(self, tail: bytes) -> bytes:
        fields = rewrite_node_endpoints(tail, self.advertise)
        return tail if fields is None else fit_tail(fields, len(tail))


class TailStream:
    """A response streamed to the client while a walker finds its tail (cut-through).

    :meth:`feed` takes the frame's bytes as they arrive, from its size prefix on, and returns
    what may be sent now: every byte the walker has passed, up to the start of the top-level
    tagged fields. The tail is held back until the frame's last byte, then ``finish`` turns it
    into what is sent instead (same length). Raises :class:`MalformedFrame` when the frame
    does not have the structure the walker expects; nothing of the tail has left then.
    """

    __slots__ = ("_end", "_finish", "_held", "_partial", "_pos", "_step", "_walker")

    def __init__(self, walker: _Walker, frame_size: int, finish: Callable[[bytes], bytes]) -> None:
        self._walker: _Walker | None = walker
        self._end = frame_size
        self._finish = finish
        self._pos = 0
        self._held: list[bytes | memoryview] = []
        self._partial = bytearray()
        self._step = 0
        self._next(None, first=True)

    def _next(self, data: bytes | None, first: bool = False) -> None:
        walker = self._walker
        assert walker is not None
        try:
            step = next(walker) if first else walker.send(data)
        except StopIteration:
            self._walker = None
            return
        except Truncated as exc:
            raise MalformedFrame("a streamed response does not have its API's layout") from exc
        if self._pos + abs(step) > self._end:
            raise MalformedFrame("a streamed response's lengths run past its end")
        self._step = step

    def feed(self, data: bytes | memoryview, last: bool) -> list[bytes | memoryview]:
        """The bytes of ``data`` that may go to the client now (``last``: the frame's last
        bytes, which releases the rewritten tail)."""
        view = memoryview(data)
        n = len(view)
        i = self._walk(view) if self._walker is not None else 0
        out: list[bytes | memoryview] = []
        if self._walker is not None:
            if i:
                out.append(view)
        else:
            if i:
                out.append(view[:i])
            if i < n:
                self._held.append(view[i:])
        if last:
            if self._walker is not None:
                raise MalformedFrame("a streamed response ended before its tagged fields")
            out.append(self._finish(b"".join(self._held)))
            self._held = []
        return out

    def _walk(self, view: memoryview) -> int:
        """Give the walker the bytes of ``view`` it asks for; how many it took."""
        n = len(view)
        i = 0
        while self._walker is not None and i < n:
            step = self._step
            if step >= 0:
                take = min(step, n - i)
                i += take
                self._pos += take
                if take == step:
                    self._next(None)
                else:
                    self._step = step - take
            else:
                partial = self._partial
                take = min(-step - len(partial), n - i)
                partial += view[i : i + take]
                i += take
                self._pos += take
                if len(partial) == -step:
                    chunk = bytes(partial)
                    partial.clear()
                    self._next(chunk)
        return i
