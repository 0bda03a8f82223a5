"""Hostile request frames for the fuzz harness: pure, seeded, deterministic, fast.

Why structure-aware: random bytes die at the first check (frame size, header peek, api key),
so they never reach the decoders and handlers where a previous run found the crashes. Most
frames here start as a *valid* request of a random (api key, version) kio knows, built from
kio's schema with plausible values (the protected topic among the names, arrays of 0-3
elements, nullable fields sometimes null, tagged fields sometimes set) and encoded with
:func:`kafkaguard.protocol.codec.encode_request`. The schema is then walked a second time to
find where every length, count and integer sits in the bytes (:func:`layout`), and one of
them is set to a hostile value; byte-level mutations (truncate, duplicate, splice, tagged
sections appended or stripped, version changed, size prefix corrupted) may follow. The rest
are random frames with a valid or invalid size prefix.

Frame ``index`` of seed ``seed`` is a pure function of both (:meth:`FrameGenerator.frame`),
so a frame a run reports can be regenerated without replaying the run. No I/O.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import typing
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from types import EllipsisType, NoneType, UnionType
from typing import Any, Final

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode

PROTECTED_TOPIC: Final = "guarded"
ALLOWED_TOPICS: Final = ("fuzz-ok", "fuzz-a", "fuzz-b")
"""Topics the fuzzing principals may use (ACL prefix ``fuzz-``); created by the harness."""
TOPIC_NAMES: Final = (
    PROTECTED_TOPIC,
    PROTECTED_TOPIC,
    *ALLOWED_TOPICS,
    "fuzz-absent",
    "guarded ",
    "GUARDED",
    "guarde",
    "__consumer_offsets",
    "",
    "fuzz-ok\0guarded",
)
GROUP_IDS: Final = ("fuzz-group", "guarded", "", "fuzz-" + "g" * 200)
PRINCIPALS: Final = ("User:ANONYMOUS", "User:fuzzer", "User:*", "User:", "Group:x")
SASL_TOKENS: Final = (
    b"\0fuzzer\0wrong",
    b"\0\0",
    b"fuzzer\0fuzzer\0x",
    b"n,,n=fuzzer,r=abcdef",
    b"n,,\x01auth=Bearer e30.e30.\x01\x01",
)
SASL_KEYS: Final = (17, 18, 36)
"""SaslHandshake, ApiVersions, SaslAuthenticate: the only requests a SASL listener reads
before authentication, so they get a share of their own."""
DATA_KEYS: Final = (0, 1, 2, 3, 8, 9, 10, 11, 19, 22, 24, 32, 37, 47, 75)
"""Produce, Fetch, ListOffsets, Metadata, group and transaction APIs, CreateTopics,
DescribeConfigs, CreatePartitions, OffsetDelete, DescribeTopicPartitions: the APIs whose
handlers reduce, rewrite or merge, where a hostile field does the most damage."""
BASE_VARIANTS: Final = 4
"""Valid base requests kept per (api key, version); mutations make each frame different."""
MAX_CLAIMED_SIZE: Final = 4 * 1024 * 1024
"""A corrupted size prefix stays at or below this, so framing accepts it and the bytes that
follow reach the header and body decoders (the proxy's 100 MiB frame check is not the
point); 1 in 20 goes beyond."""

I16_EDGES: Final = (-32768, -2, -1, 0, 1, 2, 255, 256, 32767)
I32_EDGES: Final = (-(2**31), -2, -1, 0, 1, 2, 3, 0x7FFF, 0x10000, 1_000_000, 2**30, 2**31 - 1)
I64_EDGES: Final = (-(2**63), -1, 0, 1, 2**31, 2**32 + 1, 2**62, 2**63 - 1)
UVARINT_EDGES: Final = (0, 1, 2, 127, 128, 0x3FFF, 2**28, 2**31 - 1, 2**31, 2**32 - 1, 2**35)


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one integer of a frame sits: ``kind`` says how it is encoded and what it means.

    ``len16``/``len32``: legacy string/bytes length; ``count32``: legacy array count;
    ``ulen``: compact (uvarint, +1) string/bytes length or array count; ``tags``: the tag
    count of a flexible struct's tagged-field section, which ends at ``end``; ``tagsize``: a
    tagged field's size; ``int8``/``int16``/``int32``/``int64``: a plain integer field.
    """

    offset: int
    width: int
    kind: str
    value: int
    """The integer as encoded (a compact length is N+1, a legacy null -1)."""
    end: int = 0


@dataclass(frozen=True, slots=True)
class Base:
    api_key: int
    version: int
    frame: bytes
    slots: tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class FuzzFrame:
    index: int
    description: str
    data: bytes
    """One or more frames (a duplicated frame is sent twice), to write as they are."""


# -- encoding with a layout ------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        chunk = value & 0x7F
        value >>= 7
        if not value:
            out.append(chunk)
            return bytes(out)
        out.append(0x80 | chunk)


_INT_FORMATS: Final = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H"}


class _Layout:
    """Kafka's encoding of a kio entity, recording every length, count and integer.

    It follows kio's writer rule for rule (legacy vs compact strings, arrays and bytes;
    KIP-893 nullable structs; tagged fields sorted, default-valued ones skipped), so its
    bytes equal :func:`codec.encode_request`'s: test_fuzz_seeded checks that for every
    request schema.
    """

    def __init__(self, base: int) -> None:
        self.base = base
        self.out = bytearray()
        self.slots: list[Slot] = []

    @property
    def pos(self) -> int:
        return self.base + len(self.out)

    def _mark(self, kind: str, data: bytes, value: int) -> None:
        self.slots.append(Slot(self.pos, len(data), kind, value))
        self.out += data

    def _length(self, flexible: bool, legacy_kind: str, value: int | None) -> None:
        if flexible:
            raw = 0 if value is None else value + 1
            self._mark("ulen", uvarint(raw), raw)
        else:
            raw = -1 if value is None else value
            fmt = ">h" if legacy_kind == "len16" else ">i"
            self._mark(legacy_kind, struct.pack(fmt, raw), raw)

    def entity(self, entity_type: type[Any], value: Any) -> None:
        flexible = bool(entity_type.__flexible__)
        tagged: list[tuple[int, dataclasses.Field[Any]]] = []
        for f in dataclasses.fields(entity_type):
            if "tag" in f.metadata:
                tagged.append((int(f.metadata["tag"]), f))
            else:
                self.field(f, getattr(value, f.name), flexible, tagged=False)
        if not flexible:
            return
        section = _Layout(0)
        count = 0
        for tag, f in sorted(tagged, key=lambda item: item[0]):
            field_value = getattr(value, f.name)
            if field_value == f.default:
                continue
            inner = _Layout(0)
            inner.field(f, field_value, flexible, tagged=True)
            section.out += uvarint(tag)
            section._mark("tagsize", uvarint(len(inner.out)), len(inner.out))
            section.splice(inner)
            count += 1
        start = self.pos
        count_bytes = uvarint(count)
        end = start + len(count_bytes) + len(section.out)
        self.slots.append(Slot(start, len(count_bytes), "tags", count, end))
        self.out += count_bytes
        self.splice(section)

    def splice(self, other: _Layout) -> None:
        shift = self.pos - other.base
        self.slots += [
            dataclasses.replace(s, offset=s.offset + shift, end=s.end + shift if s.end else 0)
            for s in other.slots
        ]
        self.out += other.out

    def field(self, f: dataclasses.Field[Any], value: Any, flexible: bool, tagged: bool) -> None:
        element, is_array, optional = shape(f.type)
        kafka_type = f.metadata.get("kafka_type", "")
        if is_array:
            self._length(flexible, "count32", None if value is None else len(value))
            for item in value or ():
                self.scalar(element, kafka_type, item, flexible, optional=False)
        else:
            self.scalar(element, kafka_type, value, flexible, optional and not tagged)

    def scalar(  # noqa: C901 - one branch per kio wire type, like kio's serializers
        self, element: Any, kafka_type: str, value: Any, flexible: bool, optional: bool
    ) -> None:
        if dataclasses.is_dataclass(element):
            if optional:  # KIP-893: an int8 marker
                self._mark(
                    "int8", b"\xff" if value is None else b"\x01", -1 if value is None else 1
                )
                if value is None:
                    return
            self.entity(element, value)
        elif kafka_type in _INT_FORMATS:
            self._mark(kafka_type, struct.pack(_INT_FORMATS[kafka_type], value), int(value))
        elif kafka_type == "error_code":
            self._mark("int16", struct.pack(">h", value.value), value.value)
        elif kafka_type == "datetime_i64":
            millis = -1 if value is None else round(value.timestamp() * 1000)
            self._mark("int64", struct.pack(">q", millis), millis)
        elif kafka_type == "bool":
            self.out += b"\x01" if value else b"\x00"
        elif kafka_type == "float64":
            self.out += struct.pack(">d", value)
        elif kafka_type == "uuid":
            self.out += (value or uuid.UUID(int=0)).bytes
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            millis = round(value.total_seconds() * 1000)
            fmt, kind = (">i", "int32") if kafka_type == "timedelta_i32" else (">q", "int64")
            self._mark(kind, struct.pack(fmt, millis), millis)
        elif kafka_type == "string":
            data = None if value is None else value.encode()
            self._length(flexible, "len16", None if data is None else len(data))
            self.out += data or b""
        elif kafka_type in ("bytes", "records"):
            self._length(flexible, "len32", None if value is None else len(value))
            self.out += value or b""
        else:
            raise TypeError(f"kafka type {kafka_type!r} is not used by any schema")


def shape(hint: Any) -> tuple[Any, bool, bool]:
    """(element type, is an array, is nullable) of a kio field type."""
    optional = False
    if typing.get_origin(hint) in (UnionType, typing.Union):
        args = typing.get_args(hint)
        optional = NoneType in args
        hint = next(a for a in args if a is not NoneType)
    if typing.get_origin(hint) is tuple:
        element, ellipsis = typing.get_args(hint)
        assert isinstance(ellipsis, EllipsisType)
        if typing.get_origin(element) in (UnionType, typing.Union):
            element = next(a for a in typing.get_args(element) if a is not NoneType)
        return element, True, optional
    return hint, False, optional


def layout(body: Any, correlation_id: int, client_id: str) -> tuple[bytes, tuple[Slot, ...]]:
    """The frame of ``body`` as :func:`codec.encode_request` encodes it, and its slots."""
    header_version = body.__header_schema__.__version__
    client = client_id.encode()
    head = struct.pack(">ihhih", 0, body.__api_key__, body.__version__, correlation_id, len(client))
    slots = [Slot(12, 2, "len16", len(client))]
    out = _Layout(len(head) + len(client))
    if header_version >= 2:
        slots.append(Slot(out.pos, 1, "tags", 0, out.pos + 1))
        out.out += b"\x00"
    out.entity(type(body), body)
    data = bytearray(head + client + out.out)
    data[0:4] = struct.pack(">i", len(data) - 4)
    return bytes(data), (*slots, *out.slots)


def response_layout(body: Any, correlation_id: int) -> tuple[bytes, tuple[Slot, ...]]:
    """The frame of ``body`` as :func:`codec.encode_response` encodes it, and its slots."""
    out = _Layout(8)
    if body.__header_schema__.__version__ >= 1:
        out.slots.append(Slot(out.pos, 1, "tags", 0, out.pos + 1))
        out.out += b"\x00"
    out.entity(type(body), body)
    data = struct.pack(">ii", 8 - 4 + len(out.out), correlation_id) + bytes(out.out)
    return data, tuple(out.slots)


# -- plausible values ------------------------------------------------------------------------


@cache
def record_batch() -> bytes:
    """One valid v2 record batch: a Produce that authorization let through would land."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 16,
    )
    builder.append(0, timestamp=1_700_000_000_000, key=b"fuzz", value=b"fuzz-write", headers=[])
    return bytes(builder.build())


class _Values:
    """Random plausible field values, chosen by kafka type and field name."""

    def __init__(self, rng: random.Random, topic_ids: Sequence[uuid.UUID]) -> None:
        self.rng = rng
        self.topic_ids = topic_ids

    def entity(self, entity_type: type[Any], depth: int = 0) -> Any:
        rng = self.rng
        values: dict[str, Any] = {}
        for f in dataclasses.fields(entity_type):
            tagged = "tag" in f.metadata
            if tagged and rng.random() < 0.7:
                continue  # left at its default: kio does not write it
            element, is_array, optional = shape(f.type)
            if optional and not tagged and rng.random() < 0.15:
                values[f.name] = None
                continue
            if not tagged and f.default is not MISSING and rng.random() < 0.3:
                continue
            kafka_type = f.metadata.get("kafka_type", "")
            if is_array:
                n = rng.randrange(4) if depth < 3 else rng.randrange(2)
                values[f.name] = tuple(
                    self.value(element, kafka_type, f.name, depth + 1) for _ in range(n)
                )
            else:
                value = self.value(element, kafka_type, f.name, depth + 1)
                if tagged and value == f.default:
                    continue
                values[f.name] = value
        return entity_type(**values)

    def value(self, element: Any, kafka_type: str, name: str, depth: int) -> Any:  # noqa: C901 - one branch per kio field type, with its edge values
        rng = self.rng
        if dataclasses.is_dataclass(element):
            return self.entity(element, depth)  # type: ignore[arg-type]
        if kafka_type == "string":
            return self.string(name)
        if kafka_type in ("bytes", "records"):
            if kafka_type == "records" or name == "records":
                return rng.choice((b"", record_batch(), record_batch(), rng.randbytes(20)))
            if name == "auth_bytes":
                return rng.choice(SASL_TOKENS)
            return rng.randbytes(rng.choice((0, 1, 8, 33)))
        if kafka_type == "uuid":
            if self.topic_ids and rng.random() < 0.6:
                return rng.choice(self.topic_ids)
            return rng.choice((uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))))
        if kafka_type == "bool":
            return rng.random() < 0.5
        if kafka_type == "float64":
            return rng.choice((0.0, 1.5, -1.0, 1e308, float("inf"), float("nan")))
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            # Short: a long max_wait/session timeout only parks the connection.
            return timedelta(milliseconds=rng.choice((0, 1, 10, 100, 500)))
        if kafka_type == "error_code":  # responses (the differential's)
            return rng.choice((ErrorCode.none, ErrorCode.none, rng.choice(tuple(ErrorCode))))
        if kafka_type == "datetime_i64":
            # -1 ms too: DescribeTransactionsResponse's start time of an Empty transaction.
            millis = rng.choice((-1, 0, 1_700_000_000_000, 4_102_444_800_000))
            return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
        return self.integer(kafka_type, name)

    def integer(self, kafka_type: str, name: str) -> int:
        rng = self.rng
        if kafka_type == "int8":
            return rng.choice((-128, -1, 0, 1, 2, 3, 127))
        if kafka_type in ("int16", "uint16"):
            # Small values only: a random 16-bit value echoed in a response could look like
            # the broker's port (the harness looks for it in every response).
            low = 0 if kafka_type == "uint16" else -1
            return rng.choice((low, 0, 1, 2, 3, 12, rng.randrange(low, 100)))
        if kafka_type == "int32":
            if "partition" in name or "index" in name:
                return rng.choice((0, 0, 1, 2, -1, 99, 2**31 - 1))
            if "bytes" in name:
                return rng.choice((0, 1, 1024, 1 << 20, 2**31 - 1, -1))
            if "acks" in name:
                return rng.choice((-1, 0, 1, 2))
            return rng.choice((*I32_EDGES, rng.getrandbits(32) - 2**31))
        return rng.choice((*I64_EDGES, rng.getrandbits(64) - 2**63))

    def string(self, name: str) -> str:
        rng = self.rng
        if "topic" in name or name in ("name", "resource_name"):
            return rng.choice(TOPIC_NAMES)
        if "group" in name or "member" in name:
            return rng.choice(GROUP_IDS)
        if "transactional" in name:
            return rng.choice(("fuzz-tx", PROTECTED_TOPIC, ""))
        if "principal" in name:
            return rng.choice(PRINCIPALS)
        if name == "mechanism":
            return rng.choice(("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI", ""))
        return rng.choice(("", "x", "fuzz", "ü\u2603", "a" * 300, rng.randbytes(6).hex()))


def plausible(entity_type: type[Any], seed: str, topic_ids: Sequence[uuid.UUID] = ()) -> Any:
    """A random plausible ``entity_type`` (a request or response schema), a pure function of
    ``seed``: the differential's responses are built with it."""
    return _Values(random.Random(seed), topic_ids).entity(entity_type)


# -- mutations -------------------------------------------------------------------------------

_LENGTH_KINDS: Final = frozenset({"len16", "len32", "count32", "ulen", "tags", "tagsize"})
_INT_KINDS: Final = frozenset({"int8", "int16", "int32", "int64"})


def _with_size(data: bytes | bytearray) -> bytes:
    """``data`` with its size prefix made to match its length."""
    return struct.pack(">i", len(data) - 4) + bytes(data[4:])


def _encode_slot(kind: str, value: int) -> bytes:
    if kind in ("ulen", "tags", "tagsize"):
        return uvarint(value)
    fmt = {"len16": ">h", "int16": ">h", "int8": ">b", "int64": ">q"}.get(kind, ">i")
    bits = struct.calcsize(fmt) * 8
    value = (value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)  # wrap into range
    return struct.pack(fmt, value)


def _hostile_value(rng: random.Random, slot: Slot) -> int:
    off_by_one = (slot.value - 1, slot.value + 1, slot.value * 2 + 7)
    if slot.kind in ("ulen", "tags", "tagsize"):
        return rng.choice((*UVARINT_EDGES, *(max(v, 0) for v in off_by_one)))
    if slot.kind in ("len16", "int16", "int8"):
        return rng.choice((*I16_EDGES, *off_by_one))
    if slot.kind == "int64":
        return rng.choice(I64_EDGES)
    return rng.choice((*I32_EDGES, *off_by_one))


def _mutate_slot(rng: random.Random, base: Base, kinds: frozenset[str]) -> tuple[bytes, str]:
    candidates = [s for s in base.slots if s.kind in kinds]
    if not candidates:
        return base.frame, "unmutated"
    slot = rng.choice(candidates)
    value = _hostile_value(rng, slot)
    data = base.frame
    encoded = _encode_slot(slot.kind, value)
    if slot.kind in ("ulen", "tags", "tagsize") and rng.random() < 0.2:
        encoded = b"\xff" * rng.choice((5, 6, 10)) + b"\x01"  # overlong varint
    data = data[: slot.offset] + encoded + data[slot.offset + slot.width :]
    return _with_size(data), f"{slot.kind}@{slot.offset}={value}"


def _tag_section(rng: random.Random, base: Base) -> tuple[bytes, str]:
    sections = [s for s in base.slots if s.kind == "tags"]
    if not sections:
        return base.frame, "unmutated"
    s = rng.choice(sections)
    data = base.frame
    if rng.random() < 0.4:  # strip the section: the struct ends early
        return _with_size(data[: s.offset] + data[s.end :]), f"strip-tags@{s.offset}"
    tag = rng.choice((0, 1, 2, 7, 127, 128, 2**31 - 1, 2**32))
    payload = rng.randbytes(rng.choice((0, 1, 4, 16)))
    claimed = rng.choice((len(payload), len(payload) + 1, 2**31 - 1, 2**20))
    added = uvarint(tag) + uvarint(claimed) + payload
    count = uvarint(s.value + 1)
    data = data[: s.offset] + count + data[s.offset + s.width : s.end] + added + data[s.end :]
    return _with_size(data), f"append-tag@{s.offset}:tag={tag},size={claimed}"


def _version(rng: random.Random, frame: bytes, api_key: int) -> tuple[bytes, str]:
    versions = codec.codec_versions(api_key)
    version = rng.choice(
        (-1, versions.stop, versions.stop + 1, 0x7FFF, rng.choice(versions), versions.start - 1)
    )
    return frame[:6] + struct.pack(">h", version) + frame[8:], f"version={version}"


def _truncate(rng: random.Random, frame: bytes) -> tuple[bytes, str]:
    cut = rng.randrange(4, max(5, len(frame)))
    return _with_size(frame[:cut]), f"truncate@{cut}"


def _duplicate_region(rng: random.Random, frame: bytes) -> tuple[bytes, str]:
    start = rng.randrange(12, max(13, len(frame)))
    end = min(len(frame), start + rng.choice((1, 4, 16, 64)))
    return _with_size(frame[:end] + frame[start:end] + frame[end:]), f"dup[{start}:{end}]"


def _bytes(rng: random.Random, base: Base, frame: bytes) -> tuple[bytes, str]:
    """Overwrite a few bytes, biased to where integers sit."""
    data = bytearray(frame)
    offsets = [s.offset for s in base.slots if s.offset < len(data)]
    changed = []
    for _ in range(rng.choice((1, 1, 2, 4))):
        if offsets and rng.random() < 0.6:
            at = rng.choice(offsets) + rng.randrange(4)
        else:
            at = rng.randrange(4, len(data)) if len(data) > 4 else 4
        if at < len(data):
            data[at] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            changed.append(at)
    return bytes(data), f"bytes@{changed}"


def _size_prefix(rng: random.Random, frame: bytes) -> tuple[bytes, str]:
    actual = len(frame) - 4
    if rng.random() < 0.05:
        claimed = rng.choice((2**31 - 1, 200 * 1024 * 1024, -(2**31)))
    else:
        claimed = rng.choice(
            (actual - 1, actual + 1, 0, 1, 7, -1, actual // 2, rng.randrange(MAX_CLAIMED_SIZE))
        )
    return struct.pack(">i", claimed) + frame[4:], f"size={claimed}"


# -- the generator ---------------------------------------------------------------------------


class FrameGenerator:
    """``frame(index)``: the index-th hostile frame of this seed (pure, deterministic)."""

    def __init__(self, seed: int, topic_ids: Iterable[uuid.UUID] = ()) -> None:
        self.seed = seed
        self.topic_ids = tuple(topic_ids)
        self.api_keys = tuple(k for k in sorted(codec.API_NAMES) if codec.codec_versions(k))
        self._bases: dict[tuple[int, int, int], Base] = {}

    def base(self, api_key: int, version: int, variant: int) -> Base:
        """A valid request; the same for the same arguments (built once, then cached)."""
        key = (api_key, version, variant)
        cached = self._bases.get(key)
        if cached is None:
            rng = random.Random(f"{self.seed}/{api_key}/{version}/{variant}")
            body = _Values(rng, self.topic_ids).entity(codec.request_schema(api_key, version))
            correlation_id = rng.getrandbits(31)
            client_id = rng.choice(("fuzz", "", "rdkafka", "x" * 100))
            data = codec.encode_request(body, correlation_id, client_id)
            framed, slots = layout(body, correlation_id, client_id)
            if framed != data:  # the layout would point at the wrong bytes
                slots = ()
            cached = self._bases[key] = Base(api_key, version, data, slots)
        return cached

    def _pick_base(self, rng: random.Random) -> Base:
        roll = rng.random()
        if roll < 0.15:
            api_key = rng.choice(SASL_KEYS)
        elif roll < 0.45:
            api_key = rng.choice(DATA_KEYS)
        else:
            api_key = rng.choice(self.api_keys)
        version = rng.choice(codec.codec_versions(api_key))
        return self.base(api_key, version, rng.randrange(BASE_VARIANTS))

    def frame(self, index: int) -> FuzzFrame:
        rng = random.Random(self.seed * 1_000_003 + index)
        if rng.random() < 0.15:
            description, data = _random_frame(rng, self.api_keys)
            return FuzzFrame(index, description, data)
        return self._structured(rng, index)

    def _structured(self, rng: random.Random, index: int) -> FuzzFrame:
        base = self._pick_base(rng)
        name = f"{codec.API_NAMES[base.api_key]} v{base.version}"
        if rng.random() < 0.08:
            return FuzzFrame(index, f"{name} valid", base.frame)
        steps: list[str] = []
        roll = rng.random()
        if roll < 0.45:
            data, step = _mutate_slot(rng, base, _LENGTH_KINDS)
        elif roll < 0.6:
            data, step = _mutate_slot(rng, base, _INT_KINDS)
        elif roll < 0.72:
            data, step = _tag_section(rng, base)
        elif roll < 0.8:
            data, step = _version(rng, base.frame, base.api_key)
        else:
            data, step = base.frame, "base"
        steps.append(step)
        byte_level: tuple[Callable[[], tuple[bytes, str]], ...] = (
            lambda: _truncate(rng, data),
            lambda: _duplicate_region(rng, data),
            lambda: _bytes(rng, base, data),
            lambda: self._splice(rng, data),
        )
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            data, step = rng.choice(byte_level)()
            steps.append(step)
        if rng.random() < 0.1:
            data, step = _size_prefix(rng, data)
            steps.append(step)
        if rng.random() < 0.05:
            data, step = data + data, "twice"
            steps.append(step)
        return FuzzFrame(index, f"{name} {'+'.join(steps)}", data)

    def _splice(self, rng: random.Random, frame: bytes) -> tuple[bytes, str]:
        other = self._pick_base(rng).frame
        cut = rng.randrange(4, max(5, len(frame)))
        other_cut = rng.randrange(4, max(5, len(other)))
        return _with_size(frame[:cut] + other[other_cut:]), f"splice@{cut}/{other_cut}"


class ResponseGenerator:
    """``frame(index)``: the index-th hostile response of this seed to one of ``versions``
    (api key → versions), with its api key and version (a response does not name them):
    a plausible broker response with one length, count, tag section or integer made hostile,
    then byte-level mutations, as :class:`FrameGenerator` does to requests."""

    def __init__(
        self, seed: int, versions: dict[int, range], topic_ids: Iterable[uuid.UUID] = ()
    ) -> None:
        self.seed = seed
        self.versions = [(k, v) for k, served in sorted(versions.items()) for v in served]
        self.topic_ids = tuple(topic_ids)
        self._bases: dict[tuple[int, int, int], Base] = {}

    def base(self, api_key: int, version: int, variant: int) -> Base:
        key = (api_key, version, variant)
        cached = self._bases.get(key)
        if cached is None:
            schema = codec.response_schema(api_key, version)
            seed = f"{self.seed}/{api_key}/{version}/{variant}"
            body = plausible(schema, seed, self.topic_ids)
            data = codec.encode_response(body, variant)
            framed, slots = response_layout(body, variant)
            if framed != data:  # the layout would point at the wrong bytes
                slots = ()
            cached = self._bases[key] = Base(api_key, version, data, slots)
        return cached

    def frame(self, index: int) -> tuple[str, int, int, bytes]:
        rng = random.Random(self.seed * 1_000_003 + index)
        api_key, version = rng.choice(self.versions)
        base = self.base(api_key, version, rng.randrange(BASE_VARIANTS))
        roll = rng.random()
        if roll < 0.1:
            data, step = base.frame, "valid"
        elif roll < 0.55:
            data, step = _mutate_slot(rng, base, _LENGTH_KINDS)
        elif roll < 0.75:
            data, step = _mutate_slot(rng, base, _INT_KINDS)
        elif roll < 0.9:
            data, step = _tag_section(rng, base)
        else:
            data, step = _truncate(rng, base.frame)
        steps = [step]
        if rng.random() < 0.25:
            if rng.random() < 0.5:
                data, step = _bytes(rng, base, data)
            else:
                data, step = _duplicate_region(rng, data)
            steps.append(step)
        name = f"#{index} {codec.API_NAMES[api_key]} v{version}"
        return f"{name} {'+'.join(steps)}", api_key, version, data


def _random_frame(rng: random.Random, api_keys: Sequence[int]) -> tuple[str, bytes]:
    """Random bytes behind a valid size prefix, a plausible header or a hostile prefix."""
    body = rng.randbytes(rng.choice((0, 1, 3, 8, 10, 24, 64, 500)))
    roll = rng.random()
    if roll < 0.4:  # a plausible header, random body
        header = struct.pack(
            ">hhi", rng.choice(api_keys), rng.randrange(-1, 20), rng.getrandbits(31)
        )
        client = rng.choice((b"\x00\x04fuzz", b"\xff\xff", b"\x7f\xff", b"\x00\x02\xff\xfe"))
        return "random header", _with_size(b"\0\0\0\0" + header + client + body)
    if roll < 0.8:
        return "random body", _with_size(b"\0\0\0\0" + body)
    claimed = rng.choice((-1, -(2**31), 0, 2, rng.randrange(MAX_CLAIMED_SIZE)))
    return f"random size={claimed}", struct.pack(">i", claimed) + body
