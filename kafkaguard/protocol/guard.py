"""Bounds-check a whole frame against its schema before kio's reader sees it.

Why: kio's native reader trusts every count it reads. An array count is turned into a
preallocation of that many slots *before* a single element is read, so a 20-byte Metadata v12
request whose topics array claims 2^32 elements aborts the whole process (the allocation fails
inside native code, no Python exception). kio is a pinned dependency, so the frame is walked
here first, by the same structure kio will follow, and refused with :class:`MalformedFrame`
as soon as a length, count or size read from the wire does not fit in the bytes present.

How: each entity class is compiled once (``functools.cache``) into one straight-line Python
function (generated source: nested loops for nested arrays, runs of fixed-size fields merged
into one skip, arrays of fixed-size elements skipped in one step). The walk runs on every
decoded request, Produce included, next to kio's native reader, so per-field closure calls
cost several times the decode itself; generated code keeps it to a fraction. A walker reads
only lengths, counts, tags and the few values it must inspect: record batches and strings are
skipped by length, never looked into, and nothing is allocated in proportion to a claimed
size. An array's count is checked against the remaining bytes divided by the element's
minimum encoded size before any element is walked. The generated source holds only names
and sizes taken from kio's schema classes, never bytes from the wire.

The walk follows kio's reader exactly, so that what kio reads afterwards is what was checked:

* the wire formats are those of ``org.apache.kafka.common.protocol.types.Type`` (int16/int32
  lengths and counts, -1 null) and, for flexible versions (KIP-482), the compact forms
  (unsigned varint N+1, 0 null) plus a tagged-field section ending every struct;
* ``RequestHeader.client_id`` is always a legacy nullable string (as in Kafka's
  ``RequestHeader.json``);
* a nullable struct (KIP-893) is an int8 marker, -1 for null, then the struct;
* a known tagged field is read in place, its declared size ignored; an unknown one is skipped
  by its size (and removed from kio's copy, kio refusing it), but a tag the same struct
  defines at other versions of its message is refused, as the generated readers refuse it
  ("Tag 1 is not valid for version 17");
* varints are at most 5 bytes (``ByteUtils.readUnsignedVarint``).

Trailing bytes after the body are not an error: Kafka's ``RequestContext.parseRequest`` and
``AbstractResponse.parseResponse`` do not check for them, and neither does kio, so refusing
them would break requests the proxy accepts today.

The walk also reports where ``datetime_i64`` and ``timedelta_i64`` fields hold values kio
cannot read or write back exactly (a timestamp that is negative, below -1 for nullable ones,
or past year 9999; a duration of 2^50 ms or more either way, which overflows ``timedelta`` or
re-encodes inexactly), so :mod:`codec` can decode them anyway: Kafka reads any int64 there
(it sends -1 for ``DescribeTransactionsResponse.transaction_start_time_ms`` of an Empty
transaction; a client may send ``OffsetCommitRequest.retention_time_ms`` of any value).

Sans-I/O: only bytes in, offsets out.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import struct
import typing
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Any, Final, TypeAlias

from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.strings import read_string

__all__ = ["Edit", "OutOfRange", "Path", "Reading", "check_frame", "uvarint_bytes"]

Buffer: TypeAlias = bytes | bytearray | memoryview
Path: TypeAlias = tuple[str | int, ...]
OutOfRange: TypeAlias = tuple[int, Path, str]
"""Offset in the frame of a ``datetime_i64`` or ``timedelta_i64`` kio cannot read (or write
back) exactly, its path in the decoded body, field names and array indices
(``("transaction_states", 0, "transaction_start_time")``), and its kafka type."""

Edit: TypeAlias = tuple[int, int, bytes]
"""``(start, stop, replacement)``: bytes of the frame kio must read differently, to read what
Kafka reads (a negative marker or length as null, an unknown tagged field as absent)."""

Walker: TypeAlias = Callable[[Buffer, int, int, list[OutOfRange], list[Edit], Path], int]
"""``walk(buf, pos, end, out, fix, path) -> new pos``; may run past ``end`` (checked by
callers)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Reading:
    """What :func:`check_frame` found: where the body starts, the int64 times kio cannot read,
    and what kio must be shown differently to read the frame as Kafka does (both usually
    empty)."""

    body_offset: int
    out_of_range: list[OutOfRange]
    edits: list[Edit]


_FIXED: Final[dict[str, int]] = {
    "int8": 1,
    "bool": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "float64": 8,
    "uuid": 16,
}
"""Encoded sizes of ``org.apache.kafka.common.protocol.types.Type``'s fixed-size types."""

_MAX_VARINT_BYTES: Final = 5
_INT32_MIN: Final = -(1 << 31)
_INT16: Final = struct.Struct(">h")
_MAX_STRING: Final = 0x7FFF
"""The generated readers refuse a longer string ("had invalid length")."""
_INT32_MAX: Final = (1 << 31) - 1
_MAX_DATETIME_MS: Final = 253402300799999
"""``datetime.max`` (year 9999) in milliseconds since the epoch: kio refuses later times."""
_EXACT_DURATION_MS: Final = 1 << 50
"""kio's ``timedelta`` round trip (``round(total_seconds() * 1000)``) is exact below this."""


# -- helpers called by the generated walkers ---------------------------------------------------


def _uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """``ByteUtils.readUnsignedVarint`` exactly: at most 5 bytes, the 5th shifted left by 28
    into a Java ``int`` (its high bits dropped, bit 3 the sign); returns (value, new position)."""
    value = 0
    for i in range(_MAX_VARINT_BYTES - 1):
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    byte = buf[pos + 4]
    if byte & 0x80:
        raise MalformedFrame(f"varint longer than {_MAX_VARINT_BYTES} bytes")
    value = (value | byte << 28) & 0xFFFFFFFF
    return value - (1 << 32) if value > _INT32_MAX else value, pos + 5


def uvarint_bytes(value: int) -> bytes:
    """``ByteUtils.writeUnsignedVarint``."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _java_int(buf: Buffer, start: int, stop: int) -> bool:
    """Whether the varint at ``start:stop`` reads differently as a Java ``int`` (Kafka) than
    as an unbounded unsigned number (kio): a 5th byte with bits beyond bit 2."""
    return stop - start == _MAX_VARINT_BYTES and buf[stop - 1] > 7


def _compact_length(buf: Buffer, pos: int, fix: list[Edit]) -> tuple[int, int]:
    """A compact array/string/bytes length as the generated readers compute it,
    ``readUnsignedVarint() - 1`` in ``int`` arithmetic (negative: null). A varint kio would
    read otherwise is rewritten for kio to its canonical encoding."""
    start = pos
    value, pos = _uvarint(buf, pos)
    length = _INT32_MAX if value == _INT32_MIN else value - 1
    if _java_int(buf, start, pos):
        fix.append((start, pos, b"\0" if length < 0 else uvarint_bytes(length + 1)))
    return length, pos


def _count_error(name: str, count: int, remaining: int) -> MalformedFrame:
    return MalformedFrame(
        f"{name}: array of {count} elements in {max(remaining, 0)} remaining bytes"
    )


def _length_error(name: str, length: int) -> MalformedFrame:
    return MalformedFrame(f"{name}: invalid length {length}")


def _null_error(name: str) -> MalformedFrame:
    # The message of Kafka's generated XxxRequestData.read.
    return MalformedFrame(f"non-nullable field {name} was serialized as null")


def _tagged_fields(
    buf: Buffer,
    pos: int,
    end: int,
    out: list[OutOfRange],
    fix: list[Edit],
    path: Path,
    known: dict[int, Walker],
    foreign: frozenset[int],
    nulls: frozenset[int],
) -> int:
    """A KIP-482 tagged-field section as the generated readers read it: uvarint count (a
    negative ``int`` reads no field), then per field uvarint tag and size. A known field is
    read in place whatever its size says; an unknown one is skipped by its size
    (``readUnknownTaggedField``) and, since kio refuses unknown tags, removed from kio's copy;
    one of ``foreign`` (defined at other versions only) is refused. A field of ``nulls`` sent
    as null is null to Kafka, and absent (its null) to kio, which refuses it written null."""
    start = pos
    count = buf[pos]
    if count < 128:  # one-byte varints (counts, tags, sizes) nearly always: read inline
        pos += 1
    else:
        count, pos = _uvarint(buf, pos)
    count_end = pos
    if count * 2 > end - pos:
        raise MalformedFrame(f"{count} tagged fields in {max(end - pos, 0)} remaining bytes")
    removed: list[Edit] = []
    for _ in range(count):
        field_start = pos
        edits = len(fix)
        tag = buf[pos]
        if tag < 128:
            pos += 1
        else:
            tag, pos = _long_tag(buf, pos, fix, known)
        size = buf[pos]
        if size < 128:
            pos += 1
        else:
            size, pos = _uvarint(buf, pos)
        walker = known.get(tag)
        null = _null_end(buf, pos) if tag in nulls else 0
        if walker is not None and not null:
            pos = walker(buf, pos, end, out, fix, path)
            continue
        pos = null or _skip_unknown(tag, size, pos, end, foreign)
        del fix[edits:]  # a long tag's own edit: the whole field goes
        removed.append((field_start, pos, b""))
    if removed or count < 0 or _java_int(buf, start, count_end):
        fix.append((start, count_end, uvarint_bytes(max(count, 0) - len(removed))))
        fix.extend(removed)
    return pos


def _null_end(buf: Buffer, pos: int) -> int:
    """Past a compact length that is null (``readUnsignedVarint() - 1 < 0`` in ``int``
    arithmetic), or 0 if it is not."""
    value, end = _uvarint(buf, pos)
    return end if value <= 0 and value != _INT32_MIN else 0


def _skip_unknown(tag: int, size: int, pos: int, end: int, foreign: frozenset[int]) -> int:
    """Past a tagged field the struct does not define at this version
    (``readUnknownTaggedField``), unless it defines it at another: the generated readers'
    ``case`` for that tag throws ("Tag 1 is not valid for version 17")."""
    if tag in foreign:
        raise MalformedFrame(f"tag {tag} is not valid for this version")
    if size < 0 or pos + size > end:
        raise MalformedFrame(f"tagged field {tag} of {size} bytes in {end - pos} remaining bytes")
    return pos + size


def _long_tag(buf: Buffer, pos: int, fix: list[Edit], known: dict[int, Walker]) -> tuple[int, int]:
    """A tag of more than one byte; a known one kio would read otherwise (a 5-byte varint
    with bits beyond 32) is shown to kio in its canonical encoding."""
    start = pos
    tag, pos = _uvarint(buf, pos)
    if tag in known and _java_int(buf, start, pos):
        fix.append((start, pos, uvarint_bytes(tag)))
    return tag, pos


def _text(buf: Buffer, pos: int, fix: list[Edit], flexible: bool, nullable: bool, name: str) -> int:
    """A string field read as ``Readable.readString`` reads it, ``new String(bytes, UTF_8)``:
    malformed UTF-8 becomes U+FFFD, which kio (refusing it) is shown re-encoded. Only walks
    of frames kio refused run this (:func:`check_frame` with ``text``)."""
    start = pos
    prefix: list[Edit] = []
    if flexible:
        length, pos = _compact_length(buf, pos, prefix)
    else:
        length = _INT16.unpack_from(buf, pos)[0]
        pos += 2
        if length < -1:
            prefix.append((start, pos, b"\xff\xff"))
    if length < 0 and not nullable:
        raise _null_error(name)
    if length > _MAX_STRING:
        raise _length_error(name, length)
    stop = pos + max(length, 0)
    raw = bytes(buf[pos:stop])
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        text = read_string(raw).encode("utf-8")
        if len(text) > _MAX_STRING:
            raise MalformedFrame(
                f"{name}: {len(text)} bytes once malformed UTF-8 is replaced"
            ) from None
        size = uvarint_bytes(len(text) + 1) if flexible else _INT16.pack(len(text))
        fix.append((start, stop, size + text))
        return stop
    fix += prefix
    return stop


_HELPERS: Final[dict[str, Any]] = {
    "_uv": _uvarint,
    "_cl": _compact_length,
    "_tags": _tagged_fields,
    "_text": _text,
    "_count": _count_error,
    "_length": _length_error,
    "_null": _null_error,
    "_h": struct.Struct(">h").unpack_from,
    "_i": struct.Struct(">i").unpack_from,
    "_q": struct.Struct(">q").unpack_from,
}


# -- code generation ----------------------------------------------------------------------------


def _flexible(entity: type) -> bool:
    flexible: Any = entity
    return bool(flexible.__flexible__)


def _optional(hint: Any) -> tuple[Any, bool]:
    """(inner type, nullable) of a field's type hint, as ``kio.serial._introspect`` reads it."""
    if typing.get_origin(hint) in (UnionType, typing.Union) and NoneType in typing.get_args(hint):
        return next(a for a in typing.get_args(hint) if a is not NoneType), True
    return hint, False


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    """One field of an entity, classified the way kio's native reader classifies it."""

    name: str
    kafka_type: str
    """A primitive's kafka type, or ``"struct"``."""
    entity: type | None
    flexible: bool
    """Compact encodings (KIP-482) for strings, bytes and arrays."""
    array: bool
    nullable: bool
    tag: int | None


@cache
def _fields(entity: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(entity)
    flexible = _flexible(entity)
    result = []
    for field in dataclasses.fields(entity):
        raw_tag = field.metadata.get("tag")
        tag = None if raw_tag is None else int(raw_tag)
        hint, nullable = _optional(hints[field.name])
        array = typing.get_origin(hint) is tuple
        if array:
            hint = typing.get_args(hint)[0]
        if entity.__name__ == "RequestHeader" and field.name == "client_id":
            # Always a legacy nullable string (Kafka's RequestHeader.json).
            result.append(_Field(field.name, "string", None, False, False, True, None))
        elif dataclasses.is_dataclass(hint):
            struct_type = typing.cast(type, hint)
            result.append(_Field(field.name, "struct", struct_type, flexible, array, nullable, tag))
        else:
            # kio reads a tagged primitive as non-nullable: an absent tag is its null.
            kafka_type = field.metadata["kafka_type"]
            nullable = nullable and tag is None
            result.append(_Field(field.name, kafka_type, None, flexible, array, nullable, tag))
    return tuple(result)


def _value_min(field: _Field, nullable: bool) -> int:
    """Fewest bytes one value of ``field`` (one element, for an array) takes on the wire."""
    if field.entity is not None:
        return _min_size(field.entity, nullable)
    if field.kafka_type in _FIXED:
        return _FIXED[field.kafka_type]
    if field.kafka_type == "datetime_i64":
        return 8
    if field.flexible:
        return 1
    return 2 if field.kafka_type == "string" else 4


def _field_min(field: _Field) -> int:
    if field.array:
        return 1 if field.flexible else 4
    return _value_min(field, field.nullable)


@cache
def _min_size(entity: type, nullable: bool) -> int:
    """Fewest bytes an instance of ``entity`` takes (KIP-893 marker included if nullable)."""
    if nullable:
        return 1
    size = sum(_field_min(f) for f in _fields(entity) if f.tag is None)
    return size + 1 if _flexible(entity) else size


def _fixed_size(field: _Field, nullable: bool) -> int | None:
    """The exact size of one value of ``field`` if every encoding has it, else None."""
    if field.entity is not None:
        return _fixed_entity_size(field.entity) if not nullable else None
    if field.kafka_type == "timedelta_i64":  # its value is looked at
        return None
    return _FIXED.get(field.kafka_type)


@cache
def _fixed_entity_size(entity: type) -> int | None:
    if _flexible(entity):
        return None  # the tagged-field section varies
    size = 0
    for field in _fields(entity):
        fixed = None if field.array else _fixed_size(field, field.nullable)
        if fixed is None or field.kafka_type == "bool":  # a bool's byte is looked at
            return None
        size += fixed
    return size


class _Source:
    """The source of one walker function and the constants it refers to."""

    def __init__(self, text: bool) -> None:
        self.text = text
        """Strings are read (:func:`_text`), not skipped."""
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.depth = 0

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def entity(self, entity: type, indent: int, path: list[str]) -> None:
        """Walk a (non-null) instance of ``entity``."""
        pending = 0
        for field in _fields(entity):
            if field.tag is not None:
                continue
            fixed = None if field.array else _fixed_size(field, field.nullable)
            if fixed is not None:
                if field.kafka_type == "bool":
                    self.boolean(indent, f"p + {pending}")
                pending += fixed  # runs of fixed-size fields become one skip
                continue
            if pending:
                self.emit(indent, f"p += {pending}")
                pending = 0
            self.field(field, indent, path)
        if pending:
            self.emit(indent, f"p += {pending}")
        if _flexible(entity):
            known = {
                f.tag: _field_walker(entity, f.name, self.text)
                for f in _fields(entity)
                if f.tag is not None
            }
            foreign = self.constant(_other_tags(entity) - known.keys())
            tags = f"{self.constant(known)}, {foreign}, {self.constant(_nullable_tags(entity))}"
            self.emit(indent, "if buf[p]:")
            self.emit(indent + 1, f"p = _tags(buf, p, end, out, fix, ({', '.join(path)},), {tags})")
            self.emit(indent, "else:")
            self.emit(indent + 1, "p += 1")

    def field(self, field: _Field, indent: int, path: list[str]) -> None:
        name = repr(field.name)
        if field.array:
            self.array(field, indent, path)
        elif field.entity is None:
            self.primitive(field, field.nullable, indent, path)
        elif field.nullable:
            # The KIP-893 marker: any negative byte is null (``readByte() < 0`` in the
            # generated readers); kio takes only -1 for null, so it is shown -1.
            self.emit(indent, "p += 1")
            self.emit(indent, "if buf[p - 1] < 128:")
            self.entity(field.entity, indent + 1, [*path, name])
            self.emit(indent, "elif buf[p - 1] != 255:")
            self.emit(indent + 1, 'fix.append((p - 1, p, b"\\xff"))')
        else:
            self.entity(field.entity, indent, [*path, name])

    def array(self, field: _Field, indent: int, path: list[str]) -> None:
        """``Type.ARRAY`` (int32 count) or ``CompactArrayOf`` (uvarint N+1), any negative
        count null as in the generated readers: the count is checked against the bytes left
        before any element is walked."""
        name = repr(field.name)
        self.depth += 1
        n, i = f"n{self.depth}", f"i{self.depth}"
        if field.flexible:
            self.emit(indent, f"{n} = buf[p]")
            self.emit(indent, f"if {n} < 128:")
            self.emit(indent + 1, "p += 1")
            self.emit(indent + 1, f"{n} -= 1")
            self.emit(indent, "else:")
            self.emit(indent + 1, f"{n}, p = _cl(buf, p, fix)")
        else:
            self.emit(indent, f"{n} = _i(buf, p)[0]")
            self.emit(indent, "p += 4")
        if not field.nullable:  # Kafka: "non-nullable field ... was serialized as null"
            self.emit(indent, f"if {n} < 0:")
            self.emit(indent + 1, f"raise _null({name})")
        elif not field.flexible:
            self.emit(indent, f"if {n} < -1:")  # null to Kafka, an error to kio: shown -1
            self.emit(indent + 1, 'fix.append((p - 4, p, b"\\xff\\xff\\xff\\xff"))')
        self.emit(indent, f"if {n} > 0:")
        size = max(_value_min(field, False), 1)
        self.emit(indent + 1, f"if {n} * {size} > end - p:")
        self.emit(indent + 2, f"raise _count({name}, {n}, end - p)")
        fixed = _fixed_size(field, False)
        if fixed is not None:
            self.emit(indent + 1, f"p += {n} * {fixed}")
        else:
            self.emit(indent + 1, f"for {i} in range({n}):")
            if field.entity is not None:
                self.entity(field.entity, indent + 2, [*path, name, i])
            else:
                self.primitive(field, False, indent + 2, path)
        self.depth -= 1

    def primitive(self, field: _Field, nullable: bool, indent: int, path: list[str]) -> None:
        name = repr(field.name)
        kafka_type = field.kafka_type
        if kafka_type == "string" and self.text:
            flexible = field.flexible
            self.emit(indent, f"p = _text(buf, p, fix, {flexible}, {nullable}, {name})")
        elif kafka_type in ("datetime_i64", "timedelta_i64"):
            # Values kio cannot read or write back exactly are reported (see the module's doc).
            if kafka_type == "datetime_i64":  # -1 is null where nullable
                low, high = (-1 if nullable else 0), _MAX_DATETIME_MS
            else:
                low, high = -_EXACT_DURATION_MS, _EXACT_DURATION_MS
            self.emit(indent, f"if not {low} <= _q(buf, p)[0] <= {high}:")
            where = f"({', '.join([*path, name])},)"
            self.emit(indent + 1, f"out.append((p, {where}, {kafka_type!r}))")
            self.emit(indent, "p += 8")
        elif kafka_type == "bool":
            self.boolean(indent, "p")
            self.emit(indent, "p += 1")
        elif kafka_type in _FIXED:
            self.emit(indent, f"p += {_FIXED[kafka_type]}")
        elif field.flexible:  # COMPACT_STRING / COMPACT_BYTES / COMPACT_RECORDS: N+1, 0 null
            # Prefix and data together: 1 + (b - 1) bytes, or 1 for null (b = 0); for a
            # two-byte prefix 2 + (b - 1), or 2 for null (80 00 is 0 too).
            self.emit(indent, "b = buf[p]")
            self.emit(indent, "if b < 128:")
            self.emit(indent + 1, "p += b or 1")
            self.emit(indent, "elif buf[p + 1] < 128:")
            self.emit(indent + 1, "p += 1 + (((b & 127) | buf[p + 1] << 7) or 1)")
            self.emit(indent, "else:")
            self.emit(indent + 1, "b, p = _cl(buf, p, fix)")
            if kafka_type == "string":  # the generated readers' "had invalid length"
                self.emit(indent + 1, f"if b > {_MAX_STRING}:")
                self.emit(indent + 2, f"raise _length({name}, b)")
            self.emit(indent + 1, "if b > 0:")
            self.emit(indent + 2, "p += b")
        else:  # STRING: int16 length; BYTES / RECORDS: int32 length; any negative null
            read, width = ("_h", 2) if kafka_type == "string" else ("_i", 4)
            self.emit(indent, f"b = {read}(buf, p)[0]")
            self.emit(indent, f"p += {width}")
            self.emit(indent, "if b > 0:")
            self.emit(indent + 1, "p += b")
            self.emit(indent, "elif b < -1:")
            if nullable:  # null to Kafka, an error to kio: shown -1
                self.emit(indent + 1, f"fix.append((p - {width}, p, {bytes([255] * width)!r}))")
            else:
                self.emit(indent + 1, f"raise _null({name})")

    def boolean(self, indent: int, at: str) -> None:
        """``readByte() != 0`` is true; kio takes only 0 and 1, so it is shown 1."""
        self.emit(indent, f"if buf[{at}] > 1:")
        self.emit(indent + 1, f'fix.append(({at}, {at} + 1, b"\\x01"))')

    def compile(self, label: str) -> Walker:
        source = (
            "def walk(buf, p, end, out, fix, path):\n" + "\n".join(self.lines) + "\n    return p\n"
        )
        namespace = {**_HELPERS, **self.constants}
        exec(compile(source, f"<guard {label}>", "exec"), namespace)
        return typing.cast(Walker, namespace["walk"])


@cache
def _nullable_tags(entity: type) -> frozenset[int]:
    """The tags of ``entity``'s fields that are nullable and length-prefixed (strings, bytes,
    arrays): kio types them optional, reading an absent field as null."""
    hints = typing.get_type_hints(entity)
    tags = set()
    for field in dataclasses.fields(entity):
        hint, nullable = _optional(hints[field.name])
        if (
            "tag" in field.metadata
            and nullable
            and (
                typing.get_origin(hint) is tuple
                or field.metadata.get("kafka_type") in ("string", "bytes", "records")
            )
        ):
            tags.add(int(field.metadata["tag"]))
    return frozenset(tags)


_VERSION_MODULE: Final = re.compile(r"v\d+")


@cache
def _other_tags(entity: type) -> frozenset[int]:
    """The tags ``entity``'s struct defines at any version of its message: kio has one module
    per version (``kio.schema.fetch.v17.request``), each defining the struct by the same name,
    as Kafka's message JSON does (struct names are unique within a message)."""
    parts = entity.__module__.split(".")
    at = next((i for i, part in enumerate(parts) if _VERSION_MODULE.fullmatch(part)), None)
    if at is None:
        return frozenset()
    package = importlib.import_module(".".join(parts[:at]))
    tags: set[int] = set()
    for version in pkgutil.iter_modules(package.__path__):
        if not _VERSION_MODULE.fullmatch(version.name):
            continue
        name = ".".join([*parts[:at], version.name, *parts[at + 1 :]])
        try:
            sibling = getattr(importlib.import_module(name), entity.__name__, None)
        except ImportError:
            continue
        if dataclasses.is_dataclass(sibling):
            tags.update(
                int(f.metadata["tag"]) for f in dataclasses.fields(sibling) if "tag" in f.metadata
            )
    return frozenset(tags)


@cache
def _entity_walker(entity: type, text: bool) -> Walker:
    """The walker of a header or a body."""
    source = _Source(text)
    source.entity(entity, 1, ["*path"])
    return source.compile(entity.__name__)


@cache
def _field_walker(entity: type, name: str, text: bool) -> Walker:
    """The walker of one tagged field, called on its data by ``_tagged_fields``."""
    source = _Source(text)
    source.field(next(f for f in _fields(entity) if f.name == name), 1, ["*path"])
    return source.compile(f"{entity.__name__}.{name}")


def check_frame(frame: Buffer, header: type, body: type, *, text: bool = False) -> Reading:
    """Walk a whole frame (size prefix included): ``header`` (request header v1/v2 or response
    header v0/v1), then ``body``. A null array the schema does not allow is malformed, as
    Kafka's generated readers have it ("non-nullable field ... was serialized as null"; for a
    request, ``RequestContext.parseRequest`` then closes the connection).

    Returns where the body starts, the int64 times kio cannot read and the edits kio
    needs to read what Kafka reads (usually none); raises :class:`MalformedFrame` if any
    length, count or size does not fit in the frame. With ``text``, strings are also read
    as Kafka reads them (malformed UTF-8 replaced), for a frame kio refused: the common walk
    skips them unread.
    """
    out: list[OutOfRange] = []
    fix: list[Edit] = []
    end = len(frame)
    try:
        body_offset = _entity_walker(header, text)(frame, 4, end, out, fix, ())
        pos = _entity_walker(body, text)(frame, body_offset, end, out, fix, ())
    except (IndexError, struct.error):
        body_offset = pos = end + 1
    # The walkers read past ``end`` only into bytes they then treat as overrun: positions
    # only grow, so one check at the end covers every fixed-size and length-prefixed field.
    if pos > end or body_offset > end:
        raise MalformedFrame(f"a length or field runs past the end of the {end - 4}-byte frame")
    return Reading(body_offset, out, fix)
