"""What every skim reads by: Kafka's primitive types at a position in a buffer, read as the
generated readers read them (``ByteUtils.readUnsignedVarint`` into a Java ``int``, compact
lengths ``readUnsignedVarint() - 1``, negative lengths null), and :class:`Truncated` for a
buffer that ends first. Shared by the Produce request skim, the response tails and the share
response skim (:mod:`kafkaguard.protocol.skim`)."""

from __future__ import annotations

import struct
from typing import Final

I32 = struct.Struct(">i")
I16 = struct.Struct(">h")


class Truncated(Exception):
    pass


_INT32_MIN: Final = -(1 << 31)


def java_int(value: int) -> int:
    """A varint's value of up to 35 bits as ``ByteUtils.readUnsignedVarint`` returns it: the
    5th byte shifted left by 28 into a Java ``int`` (bits beyond 32 dropped, bit 31 the sign)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def minus_one(value: int) -> int:
    """``value - 1`` in Java ``int`` arithmetic: a compact length (negative: null)."""
    return -_INT32_MIN - 1 if value == _INT32_MIN else value - 1


def uv(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos`` read as ``ByteUtils.readUnsignedVarint`` reads it: at most
    5 bytes, the 5th shifted left by 28 into a Java ``int`` (high bits dropped, bit 3 the
    sign): (value, the offset after it). IndexError past the end."""
    byte = buf[pos]
    if byte < 0x80:  # nearly every length and count of the data path
        return byte, pos + 1
    result = 0
    for shift in (0, 7, 14, 21):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
    byte = buf[pos]
    if byte > 0x7F:
        raise Truncated
    return java_int(result | byte << 28), pos + 1


def length_at(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact array/string/bytes length as the generated readers compute it,
    ``readUnsignedVarint() - 1`` in Java ``int`` arithmetic: negative is null."""
    value, pos = uv(buf, pos)
    return minus_one(value), pos


def tags_end(buf: bytes | memoryview, pos: int) -> int:
    """The offset after the tagged-fields section at ``pos`` (a negative count reads no
    field, a negative size is refused, as ``readUnknownTaggedField`` does)."""
    if not buf[pos]:  # none: nearly always
        return pos + 1
    count, pos = uv(buf, pos)
    for _ in range(count):
        _, pos = uv(buf, pos)
        size, pos = uv(buf, pos)
        if size < 0:
            raise Truncated
        pos += size
    return pos


def size_at(buf: bytes | memoryview, pos: int, flexible: bool, *, wide: bool) -> tuple[int, int]:
    """A length or count at ``pos`` and the offset after it: compact (``flexible``), else an
    ``int32`` (``wide``: an array's count, a bytes length) or an ``int16`` (a string's length);
    negative is null."""
    if flexible:
        return length_at(buf, pos)
    if wide:
        value: int = I32.unpack_from(buf, pos)[0]
        return value, pos + 4
    value = I16.unpack_from(buf, pos)[0]
    return value, pos + 2


MAX_STRING: Final = 0x7FFF
"""The generated readers refuse a longer string ("had invalid length")."""


def string_span(
    buf: bytes | memoryview, pos: int, flexible: bool, nullable: bool
) -> tuple[int, int]:
    """Where the string at ``pos`` lies, compact (``flexible``) or after an ``int16`` length:
    ``(start, stop)``, ``start`` -1 for null (refused where not ``nullable``, as a string longer
    than :data:`MAX_STRING` or past the end of ``buf`` is)."""
    length, pos = size_at(buf, pos, flexible, wide=False)
    if length < 0:
        if not nullable:
            raise Truncated
        return -1, pos
    stop = pos + length
    if length > MAX_STRING or stop > len(buf):
        raise Truncated
    return pos, stop


def compact_end(buf: bytes | memoryview, pos: int, nullable: bool) -> int:
    """The offset after the compact string/bytes at ``pos``."""
    length, pos = length_at(buf, pos)
    if length < 0:
        if not nullable:
            raise Truncated
        return pos
    return pos + length
