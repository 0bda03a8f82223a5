"""Kafka's length-prefixed framing, without I/O.

Every Kafka message on the wire is ``int32 size`` followed by ``size`` bytes. The buffer hands
out *whole frames including their 4-byte prefix*, so that a frame which needs no change can be
written to the other side exactly as it was received (principle 1: forward the original bytes).

Theory of operation (h11's ``ReceiveBuffer``, specialised):

* ``feed(data)`` returns every frame completed by ``data``. When nothing is pending, frames are
  handed out as zero-copy ``memoryview`` slices of ``data`` itself; only a trailing partial frame
  is copied into the pending ``bytearray``. Frames completed from the pending buffer are copied
  out once (a ``bytes``), because a memoryview would pin the resizable buffer.
* The size prefix is checked against ``max_frame_bytes`` *before* any byte of the frame is
  buffered, like the broker's ``socket.request.max.bytes`` (default 100 MiB), so a hostile
  length cannot make the proxy allocate.
"""

from __future__ import annotations

from typing import Final

from kafkaguard.protocol.errors import FrameTooLarge, MalformedFrame

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024
"""Kafka's ``socket.request.max.bytes`` default (104857600)."""

Frame = bytes | memoryview


class FrameBuffer:
    """Splits a byte stream into Kafka frames; raises on a size the peer may not send."""

    __slots__ = ("_max", "_pending")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        self._pending = bytearray()

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held back (0 between frames: a clean EOF point)."""
        return len(self._pending)

    def _check(self, size: int) -> None:
        if size < 0:
            raise MalformedFrame(f"negative frame size {size}")
        if size > self._max:
            raise FrameTooLarge(size, self._max)

    def feed(self, data: bytes) -> list[Frame]:
        """Absorb ``data``; return the frames it completes, each with its size prefix."""
        if self._pending:
            self._pending += data
            return self._drain_pending()
        frames: list[Frame] = []
        view = memoryview(data)
        end = len(data)
        pos = 0
        while end - pos >= 4:
            size = int.from_bytes(view[pos : pos + 4], "big", signed=True)
            self._check(size)
            if end - pos - 4 < size:
                break
            frames.append(view[pos : pos + 4 + size])
            pos += 4 + size
        if pos < end:
            self._pending += view[pos:]
        return frames

    def _drain_pending(self) -> list[Frame]:
        buf = self._pending
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            self._check(size)
            if end - pos - 4 < size:
                break
            frames.append(bytes(buf[pos : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return len(payload).to_bytes(4, "big") + payload
