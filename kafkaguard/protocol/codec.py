"""The one module that talks to kio: schemas, header versions, decode and encode.

Why one module: kio's reader API changed between releases (IO-based in 0.4, ``(buffer,
offset) -> (value, size)`` since 0.5, native code now). kio is pinned in ``pyproject.toml`` and
every call into it lives here, so an upgrade touches one file.

Frames passed in and returned always include the 4-byte size prefix (see :mod:`framing`).
Nothing here performs I/O.
"""

from __future__ import annotations

import io
import struct
import typing
import uuid
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from functools import cache
from types import NoneType, UnionType
from typing import Any, Final, TypeVar

from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

from kafkaguard.protocol import guard
from kafkaguard.protocol.errors import MalformedFrame, UnknownApiKey, UnsupportedVersion
from kafkaguard.protocol.framing import Frame

__all__ = [
    "API_NAMES",
    "Entity",
    "ErrorCode",
    "Millis",
    "make_entity",
    "nested_type",
    "RequestPayload",
    "ResponsePayload",
    "build_error_response",
    "codec_versions",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "replace",
    "request_schema",
    "response_header_version",
    "response_schema",
]

_T = TypeVar("_T")
_E = TypeVar("_E", bound=Entity)

API_NAMES: Final[Mapping[int, str]] = api_key_map
"""Every API key kio knows, to its snake_case name (``3 -> "metadata"``)."""


@cache
def codec_versions(api_key: int) -> range:
    """The contiguous range of versions kio can decode for ``api_key`` (empty if unknown)."""
    name = api_key_map.get(api_key)
    if name is None:
        return range(0)
    versions = sorted(schema_name_map[name])
    low = versions[0]
    high = low
    for version in versions[1:]:  # stop at the first gap: a hole must never be advertised
        if version != high + 1:
            break
        high = version
    return range(low, high + 1)


@cache
def request_schema(api_key: int, version: int) -> type[RequestPayload]:
    if api_key not in api_key_map:
        raise UnknownApiKey(f"unknown api key {api_key}")
    if version not in codec_versions(api_key):
        raise UnsupportedVersion(f"{api_key_map[api_key]} v{version} is not supported")
    try:
        return load_request_schema(api_key, version)
    except UnknownEntity as exc:  # pragma: no cover - guarded by codec_versions
        raise UnsupportedVersion(str(exc)) from exc


@cache
def response_schema(api_key: int, version: int) -> type[ResponsePayload]:
    request_schema(api_key, version)  # same validation and errors
    return load_response_schema(api_key, version)


def _request_header_type(api_key: int, version: int) -> type[RequestHeaderV1 | RequestHeaderV2]:
    header = request_schema(api_key, version).__header_schema__
    return RequestHeaderV2 if header.__version__ == 2 else RequestHeaderV1


@cache
def response_header_version(api_key: int, version: int) -> int:
    """0 or 1. ApiVersions responses always use v0 (KIP-511), which kio's schemas encode."""
    return int(response_schema(api_key, version).__header_schema__.__version__)


def _decode(frame: Frame, header_type: type[Any], schema: type[_E]) -> _E:
    """Guard, then decode the body: kio's reader only ever sees frames whose every length and
    count fits in the bytes present, handlers never see a null array the schema does not
    allow, and kio reads what Kafka's generated readers read (see :mod:`guard`). The header is
    not decoded (the peek in :mod:`header` read it, as ``RequestHeader`` does)."""
    try:
        reading = guard.check_frame(frame, header_type, schema)
    except MalformedFrame as exc:
        raise MalformedFrame(f"cannot decode {schema.__name__}: {exc}") from exc
    try:
        body: _E = _kio_read(frame, reading, schema)
    except Exception as exc:
        if _KIO_UTF8 not in str(exc):
            raise MalformedFrame(f"cannot decode {schema.__name__}: {exc}") from exc
        # Malformed UTF-8, which Kafka's readString replaces: read again, strings included
        # (only such frames pay for reading every string twice).
        try:
            reading = guard.check_frame(frame, header_type, schema, text=True)
            body = _kio_read(frame, reading, schema)
        except Exception as again:
            raise MalformedFrame(f"cannot decode {schema.__name__}: {again}") from again
    for offset, path, kafka_type in reading.out_of_range:
        body = _put(body, path, _int64_time(frame, offset, kafka_type))
    return body


_KIO_UTF8: Final = "Failed interpreting bytes as UTF-8"
"""kio's error for a string that is not UTF-8."""


def _kio_read(frame: Frame, reading: guard.Reading, schema: type[_E]) -> _E:
    """kio's reading of the body, from the frame or the copy :func:`_kio_copy` makes."""
    data: Frame = frame
    body_offset = reading.body_offset
    if reading.edits or reading.out_of_range:
        data, body_offset = _kio_copy(frame, reading)
    body: _E = entity_reader(schema)(data, body_offset)[0]
    return body


def _kio_copy(frame: Frame, reading: guard.Reading) -> tuple[bytes, int]:
    """The frame as kio must see it to read what Kafka reads, and where its body starts
    there: the guard's edits (null markers and lengths, unknown tagged fields removed) and the
    int64 times kio cannot read zeroed. The original bytes are still what is forwarded."""
    zeroed = ((offset, offset + 8, bytes(8)) for offset, _, _ in reading.out_of_range)
    edits = sorted([*reading.edits, *zeroed])
    parts: list[Frame] = []
    pos = 0
    body_offset = reading.body_offset
    for start, stop, replacement in edits:
        parts += (frame[pos:start], replacement)
        pos = stop
        if start < reading.body_offset:
            body_offset += len(replacement) - (stop - start)
    parts.append(frame[pos:])
    return b"".join(parts), body_offset


# -- int64 times kio cannot read ----------------------------------------------------------------
# kio reads datetime_i64 only as non-negative (or -1 for null where the field is nullable) up
# to year 9999, and timedelta_i64 only within ``timedelta``'s range, yet Kafka reads any int64
# there (DescribeTransactionsResponse.transaction_start_time_ms is -1 for an Empty
# transaction; OffsetCommitRequest.retention_time_ms is whatever the client sends). Such
# fields are zeroed in kio's copy of the frame, then set to the value Kafka reads: the exact
# pre-epoch datetime where ``datetime`` holds it (round(timestamp() * 1000) is exact for every
# millisecond from year 1 on), else :class:`Millis`, which kio's writer encodes back to the
# same int64.

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_INT64: Final = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class Millis:
    """An int64 duration or timestamp (milliseconds) beyond ``timedelta`` or ``datetime``, in
    place of one in a decoded entity. Handlers decide nothing on these fields; kio's writers
    call ``total_seconds()`` (durations) or ``timestamp()`` (timestamps) and multiply by
    1000, which a ``Fraction`` keeps exact."""

    millis: int

    def total_seconds(self) -> Fraction:
        return Fraction(self.millis, 1000)

    def timestamp(self) -> Fraction:
        return Fraction(self.millis, 1000)


def _int64_time(frame: Frame, offset: int, kafka_type: str) -> datetime | Millis:
    millis: int = _INT64.unpack_from(frame, offset)[0]
    if kafka_type == "datetime_i64":
        try:
            return _EPOCH + timedelta(milliseconds=millis)
        except OverflowError:
            pass
    return Millis(millis)


def _put(node: Any, path: guard.Path, value: Any) -> Any:
    """A copy of ``node`` (entity or tuple) with ``value`` at ``path`` (kio entities are frozen)."""
    key = path[0]
    if isinstance(key, int):
        child = value if len(path) == 1 else _put(node[key], path[1:], value)
        return (*node[:key], child, *node[key + 1 :])
    child = value if len(path) == 1 else _put(getattr(node, key), path[1:], value)
    return replace(node, **{key: child})


def decode_request(frame: Frame, api_key: int, version: int) -> RequestPayload:
    """Decode the body of a whole request frame whose header was already peeked."""
    schema = request_schema(api_key, version)
    body: RequestPayload = _decode(frame, _request_header_type(api_key, version), schema)
    if api_key == _PRODUCE and version >= _PRODUCE_TOPIC_IDS:
        body = _zero_topic_ids(body)
    return body


_PRODUCE: Final = 0
_PRODUCE_TOPIC_IDS: Final = 13
_ZERO_UUID: Final = uuid.UUID(int=0)


def _zero_topic_ids(body: Any) -> Any:
    """kio reads an all-zero uuid as ``None``; Kafka reads ``Uuid.ZERO_UUID`` (which the broker
    answers UNKNOWN_TOPIC_ID). A Produce request's topic ids are read as Kafka reads them, so
    that the decode agrees with :func:`~kafkaguard.protocol.skim.produce.skim_produce_request` (the
    skim's topics are matched against the decode's when a request is split)."""
    topics = body.topic_data
    if all(topic.topic_id is not None for topic in topics):
        return body
    return replace(
        body,
        topic_data=tuple(
            topic if topic.topic_id is not None else replace(topic, topic_id=_ZERO_UUID)
            for topic in topics
        ),
    )


def encode_request(body: RequestPayload, correlation_id: int, client_id: str | None) -> bytes:
    """A whole request frame for ``body`` (used only when a request must be rewritten)."""
    api_key = int(body.__api_key__)
    version = int(body.__version__)
    header_type = _request_header_type(api_key, version)
    header = header_type(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_type)(out, header)
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    data[0:4] = (len(data) - 4).to_bytes(4, "big")
    return out.getvalue()


def decode_response(frame: Frame, api_key: int, version: int) -> ResponsePayload:
    """Decode the body of a whole response frame to a request of (api_key, version)."""
    schema = response_schema(api_key, version)
    header_type = (
        ResponseHeaderV0 if response_header_version(api_key, version) == 0 else (ResponseHeaderV1)
    )
    return _decode(frame, header_type, schema)


def encode_response(body: ResponsePayload, correlation_id: int) -> bytes:
    """A whole response frame, header version taken from the schema (v0 for ApiVersions)."""
    header_type = body.__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_type)(out, header_type(correlation_id=i32(correlation_id)))
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    data[0:4] = (len(data) - 4).to_bytes(4, "big")
    return out.getvalue()


# -- error responses built from the schema ---------------------------------------------------

_ZERO: Final[dict[str, Any]] = {
    "bool": False,
    "string": "",
    "bytes": b"",
    "uuid": uuid.UUID(int=0),
    "float64": 0.0,
    "timedelta_i32": timedelta(0),
    "timedelta_i64": timedelta(0),
    # 0, the default of Kafka's generated int64 fields. Some error responses carry -1 instead
    # (CreateDelegationTokenResponse.prepareResponse): datetime.fromtimestamp(-0.001, UTC).
    "datetime_i64": datetime.fromtimestamp(0, UTC),
    "records": None,
}


def _zero_value(field_type: Any, kafka_type: str, error_code: ErrorCode) -> Any:
    origin = typing.get_origin(field_type)
    if origin is tuple:
        return ()
    if (origin is UnionType or origin is typing.Union) and NoneType in typing.get_args(field_type):
        return None
    if isinstance(field_type, type) and is_dataclass(field_type):
        return make_entity(field_type, error_code)
    if kafka_type == "error_code":
        return error_code
    if kafka_type in _ZERO:
        return _ZERO[kafka_type]
    return field_type(0)  # the integer primitives (i8 … i64, BrokerId, …)


def make_entity(entity_type: type[_T], error_code: ErrorCode = ErrorCode.none, **values: Any) -> _T:
    """An instance of a kio entity: ``values`` as given, every ``error_code`` field set to
    ``error_code``, other required fields zero/empty, defaulted fields left at their defaults.

    Handlers use it to synthesize per-item error entries for whatever version the client
    speaks, without one constructor call per schema version.
    """
    hints = _type_hints(entity_type)
    for f in fields(entity_type):  # type: ignore[arg-type]
        if f.name in values:
            continue
        if f.metadata.get("kafka_type") == "error_code":
            values[f.name] = error_code
        elif f.default is MISSING and f.default_factory is MISSING:
            values[f.name] = _zero_value(
                hints[f.name], f.metadata.get("kafka_type", ""), error_code
            )
    return entity_type(**values)


def nested_type(entity_type: type[Any], field_name: str) -> type[Any]:
    """The entity class of ``field_name`` (the element class for an array field)."""
    hint = _type_hints(entity_type)[field_name]
    if typing.get_origin(hint) in (UnionType, typing.Union):
        hint = next(a for a in typing.get_args(hint) if a is not NoneType)
    if typing.get_origin(hint) is tuple:
        hint = typing.get_args(hint)[0]
    if not (isinstance(hint, type) and is_dataclass(hint)):
        raise TypeError(f"{entity_type.__name__}.{field_name} is not an entity field")
    return hint


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _type_hints(entity_type: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(entity_type)
    if hints is None:
        hints = _HINTS[entity_type] = typing.get_type_hints(entity_type)
    return hints


def build_error_response(api_key: int, version: int, error_code: ErrorCode) -> ResponsePayload:
    """The API's response with every ``error_code`` set and every list empty.

    This is the shape Kafka's ``AbstractRequest.getErrorResponse`` produces for whole-request
    failures when there are no entities to echo (per-entity answers are built by handlers).
    """
    return make_entity(response_schema(api_key, version), error_code)
