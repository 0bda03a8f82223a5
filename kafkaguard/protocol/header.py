"""Request-header peek: the few fields every routing decision needs, read without kio.

Why not kio here: the peek runs for every frame, including multi-megabyte Produce requests that
may be forwarded untouched, and it needs only fixed offsets plus the client id. Request header
v1 and v2 share these fields (v2 only appends tagged fields, which :mod:`guard` walks when a
body is decoded, unknown ones skipped as Kafka skips them); header v0 (ControlledShutdown v0
only) has no client id and is refused by the registry before the client id would matter. The
client id is read as ``RequestHeader.parse`` reads it: any negative length is null
(``RequestHeaderData``), which it then makes empty ("we treat a null client ID as equivalent
to an empty client ID"), and malformed UTF-8 becomes U+FFFD (``new String(bytes, UTF_8)``),
never an error. So every use of the client id (KIP-504 request context, audit, logs) sees the
string the broker sees.
"""

from __future__ import annotations

from typing import Final

from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.framing import int16_at, int32_at
from kafkaguard.protocol.strings import read_string


class RequestHeaderInfo:
    """The routing fields of a request header (Kafka's RequestHeader v1/v2).

    Immutable and compared by value, as a frozen dataclass would be, but a plain slots class:
    one is built for every request, and compiled (kafkaguard/protocol/build.py) a frozen
    dataclass's ``__init__`` is still the ``dataclasses`` module's Python, setting each field
    through ``object.__setattr__`` (0.9 µs, more than half of the peek), where this one is
    compiled (``Final`` attributes are read-only on the compiled class)."""

    __slots__ = ("api_key", "api_version", "client_id", "client_id_end", "correlation_id")

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str,
        client_id_end: int,
    ) -> None:
        self.api_key: Final = api_key
        self.api_version: Final = api_version
        self.correlation_id: Final = correlation_id
        self.client_id: Final = client_id
        """Never null: ``RequestHeader.parse`` reads a null client id as empty."""
        self.client_id_end: Final = client_id_end
        """Offset in the frame (size prefix included) just past the client id."""

    def _fields(self) -> tuple[int, int, int, str, int]:
        return (
            self.api_key,
            self.api_version,
            self.correlation_id,
            self.client_id,
            self.client_id_end,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestHeaderInfo):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"RequestHeaderInfo(api_key={self.api_key}, api_version={self.api_version}, "
            f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, "
            f"client_id_end={self.client_id_end})"
        )


def peek_request_header(frame: bytes | memoryview) -> RequestHeaderInfo:
    """Read api key, version, correlation id and client id from a whole frame.

    >>> f = bytes.fromhex("0000000e 0003 000c 00000007 0004 6b636174".replace(" ", ""))
    >>> h = peek_request_header(f)
    >>> (h.api_key, h.api_version, h.correlation_id, h.client_id, h.client_id_end)
    (3, 12, 7, 'kcat', 18)
    """
    if len(frame) < 12:
        raise MalformedFrame(f"request of {len(frame) - 4} bytes is shorter than a header")
    # int32 size, int16 api key, int16 api version, int32 correlation id
    api_key, api_version = int16_at(frame, 4), int16_at(frame, 6)
    correlation_id = int32_at(frame, 8)
    if len(frame) < 14:
        # Header v0 (no client id) only exists for ControlledShutdown v0, which is refused.
        return RequestHeaderInfo(api_key, api_version, correlation_id, "", 12)
    length = int16_at(frame, 12)
    if length < 0:
        # Any negative length is null (``readShort() < 0`` in ``RequestHeaderData``), and
        # ``RequestHeader.parse`` makes a null client id empty.
        return RequestHeaderInfo(api_key, api_version, correlation_id, "", 14)
    end = 14 + length
    if end > len(frame):
        raise MalformedFrame("client id runs past the end of the request")
    # ``Readable.readString``: ``new String(bytes, UTF_8)``, malformed input replaced by
    # U+FFFD as Java replaces it, never refused.
    client_id = read_string(bytes(frame[14:end]))
    return RequestHeaderInfo(api_key, api_version, correlation_id, client_id, end)


def peek_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id of a response frame (the first field of every response header)."""
    if len(frame) < 8:
        raise MalformedFrame("response is shorter than its correlation id")
    return int32_at(frame, 4)
