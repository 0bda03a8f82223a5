"""guard: the schema-driven bounds check that runs before kio's reader.

The sweep builds, for every API key and version kio knows, requests and responses with
empty and non-empty arrays, strings and tagged fields, then truncates and mutates every
length/count position it could hold. kio preallocates claimed array sizes in native code
(an allocation failure aborts the process), so the hostile part of the sweep runs in a
subprocess under ``RLIMIT_AS``: an abort or a huge allocation fails the test instead of
killing pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import subprocess
import sys
import typing
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

import pytest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.static.primitive import Records

from kafkaguard.protocol import codec, guard
from kafkaguard.protocol.errors import MalformedFrame

HOSTILE_METADATA = bytes.fromhex("00000010 0003 000c 00000001 ffff 00 feffffff07".replace(" ", ""))
"""Metadata v12 whose topics compact array claims 2^31 - 3 elements (20 bytes in all)."""


def _value(hint: Any, kafka_type: str | None, n: int) -> Any:
    if typing.get_origin(hint) in (UnionType, typing.Union):
        hint = next(a for a in typing.get_args(hint) if a is not NoneType)
    if typing.get_origin(hint) is tuple:
        return tuple(_value(typing.get_args(hint)[0], kafka_type, n) for _ in range(n))
    if dataclasses.is_dataclass(hint):
        return sample(typing.cast(type[Any], hint), n)
    return {
        "string": "ab",
        "bytes": b"xy",
        "records": Records(b"xyz"),
        "bool": True,
        "uuid": uuid.UUID(int=0x0123456789ABCDEF),
        "float64": 1.5,
        "timedelta_i32": timedelta(milliseconds=7),
        "timedelta_i64": timedelta(milliseconds=9),
        "datetime_i64": datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
        "error_code": codec.ErrorCode.none,
    }.get(kafka_type or "") or hint(1)


def sample(entity_type: type[Any], n: int) -> Any:
    """An instance with every array of ``n`` elements and every other field (tagged ones
    included) set to a non-default value."""
    hints = typing.get_type_hints(entity_type)
    return entity_type(
        **{
            f.name: _value(hints[f.name], f.metadata.get("kafka_type"), n)
            for f in dataclasses.fields(entity_type)
        }
    )


def all_versions() -> Iterator[tuple[int, int]]:
    for api_key in sorted(codec.API_NAMES):
        for version in codec.codec_versions(api_key):
            yield api_key, version


def frames(
    api_key: int, version: int, sizes: tuple[int, ...] = (1, 2)
) -> Iterator[tuple[bool, bytes, Any]]:
    """(is_request, frame, body) for an empty body and one with arrays of each of ``sizes``
    elements, each direction."""
    for is_request in (True, False):
        schema = (codec.request_schema if is_request else codec.response_schema)(api_key, version)
        for body in (codec.make_entity(schema), *(sample(schema, n) for n in sizes)):
            if is_request:
                yield True, codec.encode_request(body, 7, "client-1"), body
            else:
                yield False, codec.encode_response(body, 7), body


def header_type(is_request: bool, api_key: int, version: int) -> type[Any]:
    if is_request:
        return (
            RequestHeaderV2
            if codec.request_schema(api_key, version).__header_schema__.__version__ == 2
            else RequestHeaderV1
        )
    return ResponseHeaderV1 if codec.response_header_version(api_key, version) else ResponseHeaderV0


def decode(is_request: bool, frame: bytes, api_key: int, version: int) -> Any:
    if is_request:
        return codec.decode_request(frame, api_key, version)
    return codec.decode_response(frame, api_key, version)


_U32 = (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe")
_U16 = (b"\x80\x00", b"\xff\xfe", b"\x7f\xff")
_VARINTS = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\xfe\xff\xff\xff\x0f")


def mutations(frame: bytes) -> Iterator[bytes]:
    """Every truncation, and huge or negative values written at every offset as int32,
    int16 and 5-byte varint (overwritten, and inserted in place of one byte)."""
    for cut in range(4, len(frame)):
        yield (cut - 4).to_bytes(4, "big") + frame[4:cut]
    for offset in range(4, len(frame)):
        for value in (*_U32, *_U16, *_VARINTS):
            body = bytearray(frame[4:])
            body[offset - 4 : offset - 4 + len(value)] = value
            yield len(body).to_bytes(4, "big") + bytes(body)
        for value in _VARINTS:
            body = bytearray(frame[4:])
            body[offset - 4 : offset - 3] = value
            yield len(body).to_bytes(4, "big") + bytes(body)


def hostile_sweep() -> int:
    """Decode every mutation of every sample frame; only MalformedFrame may come out.

    Run in a subprocess by the test (``RLIMIT_AS``): returns how many frames were tried, and
    fails if the resident set grew by 100 MB or more.
    """
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tried = 0
    for api_key, version in all_versions():
        for is_request, frame, _ in frames(api_key, version, sizes=(1,)):
            for mutated in mutations(frame):
                tried += 1
                with contextlib.suppress(MalformedFrame):
                    decode(is_request, mutated, api_key, version)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024, f"decoding grew the resident set by {grown_kib} KiB"
    return tried


# -- tests ---------------------------------------------------------------------------------------


def test_hostile_metadata_frame_is_refused_by_the_guard() -> None:
    assert len(HOSTILE_METADATA) == 20
    with pytest.raises(MalformedFrame, match="topics: array of 2147483645 elements in 0 remaining"):
        guard.check_frame(HOSTILE_METADATA, RequestHeaderV2, codec.request_schema(3, 12))
    with pytest.raises(MalformedFrame, match="cannot decode MetadataRequest: topics: array of"):
        codec.decode_request(HOSTILE_METADATA, 3, 12)
    with pytest.raises(MalformedFrame, match="topics: array of"):
        codec.decode_request(memoryview(HOSTILE_METADATA), 3, 12)


def test_every_api_and_version_passes_the_guard_and_decodes() -> None:
    checked = 0
    for api_key, version in all_versions():
        for is_request, frame, body in frames(api_key, version):
            schema = type(body)
            reading = guard.check_frame(frame, header_type(is_request, api_key, version), schema)
            assert (reading.out_of_range, reading.edits) == ([], [])
            assert decode(is_request, frame, api_key, version) == body
            assert decode(is_request, memoryview(frame), api_key, version) == body
            checked += 1
    assert checked >= 6 * 300


def test_trailing_bytes_are_tolerated_like_kafka() -> None:
    body = sample(codec.request_schema(3, 12), 1)
    frame = codec.encode_request(body, 7, "c")
    padded = (len(frame) - 4 + 3).to_bytes(4, "big") + frame[4:] + b"\0\1\2"
    assert codec.decode_request(padded, 3, 12) == body


def _request(hex_body: str) -> tuple[bytes, int, int]:
    body = bytes.fromhex(hex_body.replace(" ", ""))
    api_key, version = int.from_bytes(body[0:2], "big"), int.from_bytes(body[2:4], "big")
    return len(body).to_bytes(4, "big") + body, api_key, version


@pytest.mark.parametrize(
    ("hex_body", "reason"),
    [
        # ApiVersions v3 request: header v2, then client_software_name compact string whose
        # varint reads 2^31 as a Java int, -2^31: length 2^31 - 1 (Kafka 4.3.1: "string field
        # clientSoftwareName had invalid length 2147483647").
        ("0012 0003 00000001 ffff 00 8080808008", "invalid length 2147483647"),
        # Metadata v4 (legacy): topics int32 count 0x7fffffff.
        ("0003 0004 00000001 ffff 7fffffff", "topics: array of 2147483647 elements"),
        # Metadata v12: header tagged fields claiming 2^28 entries.
        ("0003 000c 00000001 ffff 8080808001", "tagged fields in 0 remaining bytes"),
        # Metadata v12: a 6-byte varint.
        ("0003 000c 00000001 ffff 00 8080808080 01", "varint longer than 5 bytes"),
        # Metadata v4: a topic name length of -2 (Kafka 4.3.1: "non-nullable field name was
        # serialized as null").
        ("0003 0004 00000001 ffff 00000001 fffe", "non-nullable field name was serialized"),
        # Metadata v12: an unknown tagged field claiming more bytes than present.
        ("0003 000c 00000001 ffff 00 00 01 00 01 09 7f 616263", "tagged field 9 of 127 bytes"),
        # Metadata v12: an unknown tagged field of negative size (readUnknownTaggedField).
        ("0003 000c 00000001 ffff 00 00 01 00 01 09 ffffffff0f", "tagged field 9 of -1 bytes"),
    ],
)
def test_hand_built_hostile_requests(hex_body: str, reason: str) -> None:
    frame, api_key, version = _request(hex_body)
    with pytest.raises(MalformedFrame, match=reason):
        codec.decode_request(frame, api_key, version)


@pytest.mark.parametrize(
    ("hex_body", "expected"),
    [
        # Each read by Kafka 4.3.1's MetadataRequestData / RequestHeader as stated.
        # Metadata v4: a topics count of -2 is null (readInt() < 0).
        ("0003 0004 00000001 ffff fffffffe 00", {"topics": None}),
        # Metadata v4: a client id length of -2 is null (readShort() < 0).
        ("0003 0004 00000001 fffe 00000000 01", {"topics": (), "allow_auto_topic_creation": True}),
        # Metadata v12: header tagged-field count ffffffff0f is -1 as an int: no field.
        ("0003 000c 00000001 ffff ffffffff0f 01 00 00 00", {"topics": ()}),
        # Metadata v12: topics varint 8080808010 is 2^32, 0 as an int (bits beyond 32 are
        # dropped): null; 8180808010 is 1: empty.
        ("0003 000c 00000001 ffff 00 8080808010 01 00 00", {"topics": None}),
        ("0003 000c 00000001 ffff 00 8180808010 01 00 00", {"topics": ()}),
        # ... and ffffffff0f is -1 as an int: length -2, null.
        ("0003 000c 00000001 ffff 00 ffffffff0f 00 00 00", {"topics": None}),
        # Metadata v12: a bool byte of 2 is true (readByte() != 0).
        ("0003 000c 00000001 ffff 00 01 02 00 00", {"allow_auto_topic_creation": True}),
        # Metadata v12: unknown tagged fields are skipped, in the body and in the header
        # (how fields are added without a version bump, KIP-482).
        ("0003 000c 00000001 ffff 00 00 01 00 01 09 03 616263", {"topics": None}),
        ("0003 000c 00000001 ffff 02 09 03 616263 0a 00 00 01 00 00", {"topics": None}),
        # JoinGroup v6: group_instance_id's compact length in two bytes, 80 00: 0, null; the
        # walk must pass both bytes (it passed one, then read the protocols out of step).
        (
            "000b 0006 00000001 ffff 00 0267 00007530 00007530 01 8000 01 02 0261 01 00 00",
            {"group_instance_id": None, "protocol_type": ""},
        ),
        # ... and a tag varint of 2^32 + 9 is tag 9, unknown too.
        ("0003 000c 00000001 ffff 01 8980808010 00 00 01 00 00", {"topics": None}),
    ],
)
def test_requests_are_read_as_kafka_reads_them(hex_body: str, expected: dict[str, Any]) -> None:
    frame, api_key, version = _request(hex_body)
    body = codec.decode_request(frame, api_key, version)
    assert {name: getattr(body, name) for name in expected} == expected


def test_a_known_tagged_field_is_read_in_place_whatever_its_size() -> None:
    # ApiVersions v3 response: tagged field 1 is finalized_features_epoch, an int64. Kafka's
    # generated reader reads it in place and ignores the size (Kafka 4.3.1 reads this epoch 5).
    schema = codec.response_schema(18, 3)
    frame = codec.encode_response(codec.make_entity(schema, finalized_features_epoch=5), 7)
    assert frame.endswith(bytes.fromhex("01 01 08 0000000000000005".replace(" ", "")))
    grown = frame[:-9] + b"\x09" + frame[-8:] + b"\x00"  # size 9, one byte more
    grown = (len(grown) - 4).to_bytes(4, "big") + grown[4:]
    assert codec.decode_response(grown, 18, 3).finalized_features_epoch == 5


def test_unknown_tagged_fields_are_removed_from_kio_copy_only() -> None:
    # Metadata v12 request, topics null, allow_auto_topic_creation, include_topic_authorized_
    # operations, then one tagged field with unknown tag 9 of 3 bytes.
    frame, _, _ = _request("0003 000c 00000001 ffff 00 00 01 00 01 09 03 616263")
    reading = guard.check_frame(frame, RequestHeaderV2, codec.request_schema(3, 12))
    assert reading.body_offset == 15
    assert reading.edits == [(18, 19, b"\x00"), (19, 24, b"")]


def test_hostile_sweep_never_reaches_kio_with_oversized_claims() -> None:
    """Every truncation and length/count mutation of every sample frame, requests and
    responses, in a subprocess limited to 2 GB of address space."""
    script = (
        "import importlib.util, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        f"spec = importlib.util.spec_from_file_location('sweep', {str(Path(__file__))!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(module.hostile_sweep())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip()) > 100_000


def test_describe_topic_partitions_cursor_with_any_negative_marker_is_null() -> None:
    # DescribeTopicPartitions v0: topics ["t"], response_partition_limit 2000, cursor marker
    # 0x80. Kafka 4.3.1 reads cursor=null (readByte() < 0) and lists the partitions.
    frame, _, _ = _request("004b 0000 00000001 ffff 00 02 0274 00 000007d0 80 00")
    body: Any = codec.decode_request(frame, 75, 0)
    assert ([t.name for t in body.topics], body.cursor) == (["t"], None)


def _first_difference(a: bytes, b: bytes) -> int:
    return next(i for i in range(4, len(a)) if a[i] != b[i])  # after the size prefix


@pytest.mark.parametrize("marker", [0x80, 0xFE, 0xFF])
def test_streams_heartbeat_nullable_structs_with_any_negative_marker_are_null(marker: int) -> None:
    # StreamsGroupHeartbeat v0's topology and user_endpoint (KIP-1071) are nullable structs:
    # the coordinator reads any negative marker as null (readByte() < 0), so the proxy must too.
    full = sample(codec.request_schema(88, 0), 1)
    no_topology = dataclasses.replace(full, topology=None)
    neither = dataclasses.replace(no_topology, user_endpoint=None)
    frame = codec.encode_request(neither, 7, "c")
    topology_at = _first_difference(codec.encode_request(full, 7, "c"), frame)
    endpoint_at = _first_difference(codec.encode_request(no_topology, 7, "c"), frame)
    assert frame[topology_at] == frame[endpoint_at] == 0xFF
    data = bytearray(frame)
    data[topology_at] = data[endpoint_at] = marker
    body: Any = codec.decode_request(bytes(data), 88, 0)
    assert body == neither


@pytest.mark.parametrize(
    ("hex_body", "names"),
    [
        # Metadata v12 (compact strings) and v4 (int16 lengths): topic names c3 28 and
        # ff 61 e2 82, which Kafka 4.3.1 reads as "\ufffd(" and "\ufffda\ufffd".
        (
            "0003 000c 00000001 ffff 00 03 00000000000000000000000000000000 03c328 00"
            " 00000000000000000000000000000000 05ff61e282 00 01 00 00",
            ["\ufffd(", "\ufffda\ufffd"],
        ),
        ("0003 0004 00000001 ffff 00000002 0002c328 0004ff61e282 01", ["\ufffd(", "\ufffda\ufffd"]),
    ],
)
def test_malformed_utf8_is_replaced_as_kafka_replaces_it(hex_body: str, names: list[str]) -> None:
    frame, api_key, version = _request(hex_body)
    body: Any = codec.decode_request(frame, api_key, version)
    assert [t.name for t in body.topics] == names


def _resized(data: bytes) -> bytes:
    return (len(data) - 4).to_bytes(4, "big") + data[4:]


def test_a_tag_the_struct_defines_at_other_versions_is_refused() -> None:
    """``FetchPartition``'s tag 1 (HighWatermark, v18+) at v17: the generated reader throws
    ("Tag 1 is not valid for version 17"); an undefined tag is skipped."""
    schema = codec.request_schema(1, 17)
    topic_type = codec.nested_type(schema, "topics")
    partition = codec.make_entity(codec.nested_type(topic_type, "partitions"), partition=0)
    topic = codec.make_entity(topic_type, topic_id=uuid.UUID(int=1), partitions=(partition,))
    body = codec.make_entity(schema, max_bytes=1, topics=(topic,), forgotten_topics_data=())
    frame = codec.encode_request(body, 7, "c")
    at = frame.index(uuid.UUID(int=1).bytes) + 16 + 1 + 4 + 4 + 8 + 4 + 8 + 4
    assert frame[at] == 0  # the partition's tag section
    with pytest.raises(MalformedFrame, match="tag 1 is not valid"):
        codec.decode_request(_resized(frame[:at] + b"\x01\x01\x00" + frame[at + 1 :]), 1, 17)
    assert codec.decode_request(_resized(frame[:at] + b"\x01\x02\x00" + frame[at + 1 :]), 1, 17)


def test_a_tagged_nullable_field_sent_null_reads_null() -> None:
    """``FetchRequest.ClusterId`` (tag 0, nullable) written as null is null, not an error."""
    schema = codec.request_schema(1, 12)
    body = codec.make_entity(
        schema, cluster_id="x", max_bytes=1, topics=(), forgotten_topics_data=()
    )
    frame = codec.encode_request(body, 7, "c")
    at = frame.rindex(b"\x01\x00\x02\x02x")
    null = _resized(frame[:at] + b"\x01\x00\x01\x00" + frame[at + 5 :])
    decoded: Any = codec.decode_request(null, 1, 12)
    assert decoded.cluster_id is None
