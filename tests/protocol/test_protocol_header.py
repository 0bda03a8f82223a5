"""Request-header peek (v1/v2) and response correlation-id peek, without sockets."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12

from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.framing import frame
from kafkaguard.protocol.header import peek_correlation_id, peek_request_header


def _header(api_key: int, version: int, corr: int, client_id: bytes | None) -> bytes:
    raw = struct.pack(">hhi", api_key, version, corr)
    raw += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id))
    return raw + (client_id or b"")


@pytest.mark.parametrize(
    ("body", "header_version"),
    [
        (MetadataRequestV1(topics=None), 1),
        (
            MetadataRequestV12(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
            2,
        ),
    ],
)
def test_peek_matches_kio_encoded_header(body: codec.RequestPayload, header_version: int) -> None:
    assert body.__header_schema__.__version__ == header_version
    data = codec.encode_request(body, 4242, "my-client")
    info = peek_request_header(data)
    assert (info.api_key, info.api_version, info.correlation_id) == (3, body.__version__, 4242)
    assert info.client_id == "my-client"
    assert info.client_id_end == 4 + 10 + len("my-client")
    # Same answer from a memoryview (the zero-copy framing path).
    assert peek_request_header(memoryview(data)) == info


def test_v2_header_tagged_fields_follow_the_client_id() -> None:
    body = MetadataRequestV12(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    data = codec.encode_request(body, 1, "c")
    info = peek_request_header(data)
    assert data[info.client_id_end] == 0  # the header's empty tagged-field buffer


def test_null_client_id_is_empty() -> None:
    """``RequestHeader.parse``: "we treat a null client ID as equivalent to an empty client
    ID"; so do the authorizer's request context, the audit and the logs."""
    info = peek_request_header(frame(_header(18, 3, 9, None) + b"\x00"))
    assert info.client_id == ""
    assert info.client_id_end == 14
    assert info.correlation_id == 9


def test_empty_client_id() -> None:
    info = peek_request_header(frame(_header(18, 3, 9, b"")))
    assert info.client_id == ""
    assert info.client_id_end == 14


def test_non_utf8_client_id_is_read_as_kafka_reads_it() -> None:
    # Kafka 4.3.1's RequestHeader reads b"\xc3\x28" as "\ufffd(" (new String(bytes, UTF_8)).
    info = peek_request_header(frame(_header(3, 1, 1, b"\xc3\x28")))
    assert info.client_id == "\ufffd("
    assert info.client_id_end == 16


def test_any_negative_client_id_length_is_null() -> None:
    # RequestHeaderData.read: readShort() < 0 is null, -2 as well as -1 (then "").
    data = frame(_header(3, 1, 1, None)[:-2] + b"\xff\xfe" + b"\xff\xff\xff\xff")
    info = peek_request_header(data)
    assert (info.client_id, info.client_id_end) == ("", 14)
    assert codec.decode_request(data, 3, 1).topics is None


@pytest.mark.parametrize("size", range(0, 8))
def test_shorter_than_a_header_is_malformed(size: int) -> None:
    with pytest.raises(MalformedFrame):
        peek_request_header(frame(_header(3, 1, 1, b"abc")[:size]))


def test_client_id_running_past_the_frame_is_malformed() -> None:
    data = frame(_header(3, 1, 1, b"abcdef")[:-2])
    with pytest.raises(MalformedFrame, match="client id"):
        peek_request_header(data)


@given(
    api_key=st.integers(-(2**15), 2**15 - 1),
    version=st.integers(-(2**15), 2**15 - 1),
    corr=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | st.text(max_size=40),
    tail=st.binary(max_size=20),
)
def test_peek_reads_any_header(
    api_key: int, version: int, corr: int, client_id: str | None, tail: bytes
) -> None:
    encoded = None if client_id is None else client_id.encode()
    info = peek_request_header(frame(_header(api_key, version, corr, encoded) + tail))
    assert (info.api_key, info.api_version, info.correlation_id) == (api_key, version, corr)
    assert info.client_id == ("" if client_id is None else client_id)
    assert info.client_id_end == 14 + (0 if encoded is None else len(encoded))


def test_response_correlation_id() -> None:
    assert peek_correlation_id(frame(struct.pack(">i", -7) + b"body")) == -7
    assert peek_correlation_id(memoryview(frame(struct.pack(">i", 77)))) == 77
    with pytest.raises(MalformedFrame):
        peek_correlation_id(frame(b"\x00\x01\x02"))
