"""Kafka's length-prefixed framing, without I/O.

Every Kafka message on the wire is ``int32 size`` followed by ``size`` bytes. The buffer hands
out *whole frames including their 4-byte prefix*, so that a frame which needs no change can be
written to the other side exactly as it was received (forward the original bytes:
docs/design.md#decode-to-decide-forward-the-original-bytes).

Theory of operation (h11's ``ReceiveBuffer``, specialised):

* ``feed(data)`` returns every frame completed by ``data``, as zero-copy ``memoryview`` slices
  of ``data`` itself (``bytes`` from the transport: immutable, so the views stay valid), or
  ``data`` itself when it is exactly one frame (most reads: a client waits for each answer). A
  frame spanning several reads is kept as the list of chunks received and joined once, when
  its last byte arrives, from exactly its own bytes: one copy per such frame, and none of the
  frames that follow it in the same read (measured: growing and slicing a bytearray cost ~3 ms
  per MB).
* The size prefix is checked against ``max_frame_bytes`` *before* any byte of the frame is
  buffered, like the broker's ``socket.request.max.bytes`` (default 100 MiB), so a hostile
  length cannot make the proxy allocate.
"""

from __future__ import annotations

import struct
from typing import Final

from kafkaguard.protocol.errors import FrameTooLarge, MalformedFrame

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024
"""Kafka's ``socket.request.max.bytes`` default (104857600)."""

Frame = bytes | memoryview
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")


class FrameBuffer:
    """Splits a byte stream into Kafka frames; raises on a size the peer may not send.

    A frame spanning several reads is kept as the list of chunks received and joined once,
    when its last byte arrives (one copy, instead of growing and slicing a bytearray).
    """

    __slots__ = ("_chunks", "_have", "_max", "_need")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        self._chunks: list[bytes | memoryview] = []
        self._have = 0
        self._need = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held back (0 between frames: a clean EOF point)."""
        return self._have

    @property
    def partial_frame_size(self) -> int:
        """Size (prefix included) of the incomplete frame held back; 0 if none or unknown."""
        return self._need if self._need > 4 else 0

    def partial_head(self, n: int) -> bytes | memoryview:
        """The first ``n`` bytes (or fewer) of the incomplete frame held back."""
        first = self._chunks[0]
        return first[:n] if len(first) >= n else b"".join(self._chunks)[:n]

    def take_partial(self) -> tuple[list[bytes | memoryview], int]:
        """Hand over the incomplete frame (its size known): the chunks received so far and how
        many bytes are still to come. The buffer forgets it (cut-through, see
        :mod:`kafkaguard.proxy.net.connection`)."""
        chunks, remaining = self._chunks, self._need - self._have
        self._chunks, self._have, self._need = [], 0, 0
        return chunks, remaining

    def _check(self, size: int) -> None:
        if size < 0:
            raise MalformedFrame(f"negative frame size {size}")
        if size > self._max:
            raise FrameTooLarge(size, self._max)

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        """Absorb ``data`` (immutable, bytes or a view of bytes: frames may be views of it);
        return the frames it completes, each with its size prefix. A view is what the exchange
        passes after the end of a streamed response (the compiled module checks the type)."""
        end = len(data)
        if not self._chunks and end >= 4:
            size = int32_at(data, 0)
            if size == end - 4:  # one whole frame, the common read: itself, no view
                self._check(size)
                self._need = 0
                return [data]
        frames: list[Frame] = []
        view = memoryview(data)
        pos = 0
        if self._chunks:  # complete the pending frame: only its own bytes are joined
            if self._need <= 4:  # its size prefix itself spans reads
                missing = 4 - self._have
                if end < missing:
                    self._chunks.append(data)
                    self._have += end
                    return frames
                size = int.from_bytes(b"".join((*self._chunks, view[:missing])), "big", signed=True)
                self._check(size)
                self._need = 4 + size
            missing = self._need - self._have
            if end < missing:
                self._chunks.append(data)
                self._have += end
                return frames
            self._chunks.append(view[:missing])
            frames.append(b"".join(self._chunks))
            self._chunks = []
            self._have = 0
            pos = missing
        need = 0
        while end - pos >= 4:
            size = int32_at(data, pos)
            self._check(size)
            if end - pos - 4 < size:
                need = 4 + size
                break
            frames.append(view[pos : pos + 4 + size])
            pos += 4 + size
        if pos < end:
            self._chunks.append(view[pos:] if pos else data)
            self._have = end - pos
            self._need = need or 4
        else:
            self._need = 0
        return frames


def int32_at(data: bytes | memoryview, pos: int) -> int:
    """The big-endian ``int32`` at ``pos`` (the caller checked the 4 bytes are there). From
    ``bytes`` by index, which the compiled module reads natively (``int.from_bytes`` of a
    slice looks the method up, parses its keywords and copies the view: the largest leaf of
    the frame handling in a profile of the latency workload, bench/RESULTS.md, issue 39); from
    a view (a frame of a read holding several) without a copy."""
    if isinstance(data, bytes):
        value = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
        return value - 0x100000000 if value & 0x80000000 else value
    return int(_INT32.unpack_from(data, pos)[0])


def int16_at(data: bytes | memoryview, pos: int) -> int:
    """The big-endian ``int16`` at ``pos`` (the 2 bytes are there), as :func:`int32_at`."""
    if isinstance(data, bytes):
        value = data[pos] << 8 | data[pos + 1]
        return value - 0x10000 if value & 0x8000 else value
    return int(_INT16.unpack_from(data, pos)[0])


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return len(payload).to_bytes(4, "big") + payload
