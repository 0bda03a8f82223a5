"""codec: kio round trips, header versions, version ranges and error responses."""

from __future__ import annotations

import dataclasses
import typing
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map
from kio.static.primitive import Records

from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import MalformedFrame, UnknownApiKey, UnsupportedVersion
from kafkaguard.protocol.header import peek_correlation_id, peek_request_header

st.register_type_strategy(Records, st.binary(max_size=200).map(Records))

_ROUND_TRIP = [
    (3, 0),
    (3, 4),
    (3, 9),  # first flexible Metadata
    (3, 12),
    (3, 13),
    (10, 0),
    (10, 3),  # last single-coordinator FindCoordinator
    (10, 4),  # first batched
    (10, 6),
    (0, 3),
    (0, 9),
    (0, 13),
    (60, 1),
    (18, 3),
]
_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("api_key", "version"), _ROUND_TRIP)
@_SETTINGS
@given(data=st.data(), corr=st.integers(-(2**31), 2**31 - 1))
def test_request_round_trip(api_key: int, version: int, data: st.DataObject, corr: int) -> None:
    body = data.draw(st.from_type(codec.request_schema(api_key, version)))
    client_id = data.draw(st.none() | st.text(max_size=20))
    frame = codec.encode_request(body, corr, client_id)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    info = peek_request_header(frame)
    assert (info.api_key, info.api_version, info.correlation_id) == (api_key, version, corr)
    assert info.client_id == (client_id or "")  # RequestHeader.parse: null is ""
    if api_key == 0 and version >= 13:  # kio writes None as the zero uuid, Kafka's ZERO_UUID
        body = codec.replace(
            body,
            topic_data=tuple(
                codec.replace(t, topic_id=t.topic_id or uuid.UUID(int=0)) for t in body.topic_data
            ),
        )
    assert codec.decode_request(frame, api_key, version) == body
    assert codec.decode_request(memoryview(frame), api_key, version) == body


@pytest.mark.parametrize(("api_key", "version"), _ROUND_TRIP)
@_SETTINGS
@given(data=st.data(), corr=st.integers(-(2**31), 2**31 - 1))
def test_response_round_trip(api_key: int, version: int, data: st.DataObject, corr: int) -> None:
    body = data.draw(st.from_type(codec.response_schema(api_key, version)))
    frame = codec.encode_response(body, corr)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert peek_correlation_id(frame) == corr
    assert codec.decode_response(frame, api_key, version) == body


def _all_versions() -> list[tuple[int, int]]:
    return [(k, v) for k in sorted(api_key_map) for v in codec.codec_versions(k)]


def test_api_versions_responses_use_header_v0_at_every_version() -> None:
    versions = codec.codec_versions(18)
    assert versions == range(0, 5)
    for version in versions:
        assert codec.response_header_version(18, version) == 0
        body = codec.build_error_response(18, version, codec.ErrorCode.none)
        frame = codec.encode_response(body, 99)
        # Header v0 is the correlation id alone: the body's error_code follows at once, even
        # for the flexible v3/v4 bodies (no header tagged-field byte).
        assert frame[8:10] == b"\x00\x00"
        assert len(frame) == 4 + 4 + len(_body_bytes(body))


def _body_bytes(body: codec.ResponsePayload) -> bytes:
    """The body alone, as kio writes it (to compare with what follows the header)."""
    import io

    from kio.serial import entity_writer

    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    return out.getvalue()


@pytest.mark.parametrize(("api_key", "version"), _all_versions())
def test_response_header_v1_exactly_for_flexible_apis_other_than_api_versions(
    api_key: int, version: int
) -> None:
    flexible = codec.response_schema(api_key, version).__flexible__
    expected = 1 if flexible and api_key != 18 else 0
    assert codec.response_header_version(api_key, version) == expected
    body = codec.build_error_response(api_key, version, codec.ErrorCode.unsupported_version)
    frame = codec.encode_response(body, 5)
    assert len(frame) == 4 + 4 + expected + len(_body_bytes(body))
    if expected:
        assert frame[8] == 0  # empty tagged fields of response header v1


@pytest.mark.parametrize(("api_key", "version"), _all_versions())
def test_build_error_response_for_every_api_and_version(api_key: int, version: int) -> None:
    code = codec.ErrorCode.unsupported_version
    body = codec.build_error_response(api_key, version, code)
    assert type(body) is codec.response_schema(api_key, version)
    decoded = codec.decode_response(codec.encode_response(body, 1234), api_key, version)
    assert decoded == body
    codes = list(_error_codes(decoded))
    assert all(c == code for c in codes)
    top_level = {f.name for f in dataclasses.fields(body)}
    if "error_code" in top_level:
        assert codes, "a top-level error_code must be set"
        assert decoded.error_code == code  # type: ignore[attr-defined]


def _error_codes(entity: Any) -> typing.Iterator[Any]:
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            yield value
        elif dataclasses.is_dataclass(value):
            yield from _error_codes(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    yield from _error_codes(item)


def test_every_api_with_a_top_level_error_code_is_covered() -> None:
    # Guard against the walk above silently checking nothing.
    with_code = [
        (k, v)
        for k, v in _all_versions()
        if "error_code" in {f.name for f in dataclasses.fields(codec.response_schema(k, v))}
    ]
    assert (18, 0) in with_code and (10, 0) in with_code and len(with_code) > 100


def test_codec_versions_are_contiguous_and_decodable() -> None:
    for api_key, name in api_key_map.items():
        versions = codec.codec_versions(api_key)
        assert versions.step == 1
        assert len(versions) > 0
        assert set(versions) <= set(schema_name_map[name])
        for version in versions:
            codec.request_schema(api_key, version)
    assert codec.codec_versions(999) == range(0)
    assert codec.codec_versions(-1) == range(0)


def test_codec_versions_stop_at_the_first_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "schema_name_map", {"metadata": {1: 0, 2: 0, 3: 0, 5: 0, 6: 0}})
    assert codec.codec_versions.__wrapped__(3) == range(1, 4)


def test_unknown_key_and_unsupported_version() -> None:
    with pytest.raises(UnknownApiKey):
        codec.request_schema(999, 0)
    with pytest.raises(UnknownApiKey):
        codec.response_schema(999, 0)
    with pytest.raises(UnsupportedVersion):
        codec.request_schema(3, 14)
    with pytest.raises(UnsupportedVersion):
        codec.request_schema(0, 2)  # Produce v0-v2 are not in kio
    with pytest.raises(UnsupportedVersion):
        codec.build_error_response(3, 99, codec.ErrorCode.unsupported_version)


def test_garbage_bodies_are_malformed_frames() -> None:
    header_only = b"\x00\x00\x00\x0c" + b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x00" + b"\xff\xff"
    with pytest.raises(MalformedFrame, match="MetadataRequest"):
        codec.decode_request(header_only, 3, 12)
    with pytest.raises(MalformedFrame, match="MetadataResponse"):
        codec.decode_response(b"\x00\x00\x00\x06\x00\x00\x00\x01\xff\xff", 3, 1)
    good = codec.encode_response(codec.build_error_response(60, 1, codec.ErrorCode.none), 1)
    with pytest.raises(MalformedFrame):
        codec.decode_response(good[:-3], 60, 1)
