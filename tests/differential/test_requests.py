"""Request frames read by the proxy's real path and by Apache Kafka 4.3.1's own readers.

``test_seeded_frames`` is the bulk run (:mod:`tests.support.fuzz.differential`): frames from
the fuzz generator, for every API key and version the proxy serves, valid and mutated. It
fails on any disagreement that is not a documented deviation (docs/deviations.md). The
targeted cases below each build the one frame that showed a disagreement once and assert
agreement: regression tests of the readers' fixes.
"""

from __future__ import annotations

import random
import struct
import uuid
from typing import Any

import pytest

from kafkaguard.protocol import codec
from tests.support.fuzz import differential
from tests.support.fuzz.differential import AGREE_ACCEPT, AGREE_REFUSE, Outcome
from tests.support.fuzz.frames import uvarint
from tests.support.kafka_referee import KafkaReferee

pytestmark = pytest.mark.kafka

SEEDED_FRAMES = 100_000
SEED = 24


def outcome(referee: KafkaReferee, frame: bytes) -> Outcome:
    harness = differential.principal_harness(dict(differential.TOPIC_IDS))
    return differential.compare(harness, frame, referee.request(frame))


def assert_agree(referee: KafkaReferee, frame: bytes, *, accepted: bool = True) -> None:
    """Both sides accept (refuse) ``frame`` and, accepted, read it alike."""
    result = outcome(referee, frame)
    expected = AGREE_ACCEPT if accepted else AGREE_REFUSE
    assert result.category == expected, f"{result.category}: {result.detail}"


def resized(data: bytes) -> bytes:
    return struct.pack(">i", len(data) - 4) + data[4:]


def request(api_key: int, version: int, client_id: str | None = "t", **values: Any) -> bytes:
    body = codec.make_entity(codec.request_schema(api_key, version), **values)
    return codec.encode_request(body, 7, client_id)


def metadata_v12(**values: Any) -> bytes:
    values.setdefault("topics", None)
    return request(3, 12, allow_auto_topic_creation=False, **values)


# -- the bulk run ----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_seeded_frames(kafka_reader: KafkaReferee) -> None:
    figures = differential.run_seeded(kafka_reader, SEED, SEEDED_FRAMES)
    print(figures.report())
    assert figures.frames == SEEDED_FRAMES
    assert figures.known["UNKNOWN"] == 0, figures.report()
    # The run reaches deep: thousands of frames both accept and compare field by field.
    assert figures.categories[AGREE_ACCEPT] > SEEDED_FRAMES // 10
    assert figures.categories[AGREE_REFUSE] > SEEDED_FRAMES // 10


def test_valid_frames_of_every_served_version_agree(kafka_reader: KafkaReferee) -> None:
    """Unmutated frames of every (api key, version) the proxy serves read the same (random
    enum values and zero topic ids included)."""
    from kafkaguard.proxy.handlers import REGISTRY
    from tests.support.fuzz.frames import FrameGenerator

    generator = FrameGenerator(SEED, differential.TOPIC_IDS)
    frames = [
        (f"{codec.API_NAMES[k]} v{v} #{variant}", generator.base(k, v, variant).frame)
        for k, handler in sorted(REGISTRY.items())
        for v in handler.versions
        for variant in range(4)
    ]
    figures = differential.run(kafka_reader, frames)
    assert figures.known["UNKNOWN"] == 0, figures.report()
    assert figures.categories[AGREE_ACCEPT] > len(frames) // 2


def test_a_body_alone_reads_as_in_its_frame(kafka_reader: KafkaReferee) -> None:
    frame = metadata_v12(topics=())
    body_start = 14 + 1 + 1  # the client id "t" and the header's tag section
    alone = kafka_reader.request_body(3, 12, frame[body_start:])
    whole = kafka_reader.request(frame)
    assert alone["ok"] and alone["body"] == whole["body"]
    assert alone["consumed"] == alone["size"] == len(frame) - body_start


def test_a_field_mismatch_is_seen(kafka_reader: KafkaReferee) -> None:
    """The comparison itself: a reading that differs in one field is a disagreement."""
    frame = metadata_v12(topics=())
    kafka = kafka_reader.request(frame)
    kafka["body"]["allowAutoTopicCreation"] = True
    harness = differential.principal_harness({})
    assert differential.compare(harness, frame, kafka).category == differential.FIELDS


def test_an_authorized_resource_kafka_did_not_read_is_seen(kafka_reader: KafkaReferee) -> None:
    """The comparison itself: a check on a resource named by no value of the request is a
    disagreement (a handler authorizing something else than what the broker will act on)."""
    frame = metadata_v12(topics=())
    harness = differential.principal_harness({})
    mine = differential.proxy_read(harness, frame)
    mine.checked.append(("DESCRIBE", "TOPIC", "elsewhere", "ALLOWED"))
    outcome = differential.compare(harness, frame, kafka_reader.request(frame), mine)
    assert outcome.category == differential.AUTHZ


# -- disagreements fixed: the frames that showed them --------------------------------------


@pytest.mark.parametrize("marker", [0x80, 0xFE])
def test_nullable_struct_marker(kafka_reader: KafkaReferee, marker: int) -> None:
    frame = request(75, 0, topics=(), response_partition_limit=10, cursor=None)
    assert frame[-2] == 0xFF  # the cursor's marker, then the body's tag section
    assert_agree(kafka_reader, resized(frame[:-2] + bytes([marker]) + frame[-1:]))


def test_unknown_tagged_field_in_body(kafka_reader: KafkaReferee) -> None:
    frame = metadata_v12(topics=())
    assert frame[-1] == 0  # the body's tag section
    tag = uvarint(7) + uvarint(1) + b"x"
    assert_agree(kafka_reader, resized(frame[:-1] + b"\x01" + tag))


def test_unknown_tagged_field_in_header(kafka_reader: KafkaReferee) -> None:
    frame = metadata_v12(topics=())
    end = 14 + 1  # the client id "t", then the header's tag section
    assert frame[end] == 0
    tag = uvarint(5) + uvarint(2) + b"xy"
    assert_agree(kafka_reader, resized(frame[:end] + b"\x01" + tag + frame[end + 1 :]))


def test_trailing_bytes_after_produce(kafka_reader: KafkaReferee) -> None:
    assert_agree(kafka_reader, resized(request(0, 9, acks=1, topic_data=()) + b"\0\0"))


def test_client_id_length_minus_two(kafka_reader: KafkaReferee) -> None:
    frame = metadata_v12(topics=())
    assert frame[12:15] == b"\x00\x01t"
    # Read as -1 is, a null client id: "" to RequestHeader.parse.
    assert_agree(kafka_reader, resized(frame[:12] + b"\xff\xfe" + frame[15:]))


def test_array_length_minus_two(kafka_reader: KafkaReferee) -> None:
    frame = request(3, 4, topics=None, allow_auto_topic_creation=False)
    at = 14 + 1  # topics (int32 count), after the client id "t"
    assert frame[at : at + 4] == b"\xff\xff\xff\xff"
    assert_agree(kafka_reader, frame[:at] + b"\xff\xff\xff\xfe" + frame[at + 4 :])


def test_client_id_not_utf8(kafka_reader: KafkaReferee) -> None:
    frame = metadata_v12(topics=())
    assert_agree(kafka_reader, frame[:14] + b"\xff" + frame[15:])


def test_varint_with_bits_beyond_32(kafka_reader: KafkaReferee) -> None:
    """``ByteUtils.readUnsignedVarint`` keeps 32 bits: FF FF FF FF 7F is -1, a null array."""
    frame = metadata_v12(topics=())
    at = 14 + 1 + 1  # the topics count, after the client id and the header's tag section
    assert frame[at] == 1
    assert_agree(kafka_reader, resized(frame[:at] + b"\xff\xff\xff\xff\x7f" + frame[at + 1 :]))


def test_produce_v13_zero_topic_id(kafka_reader: KafkaReferee) -> None:
    schema = codec.request_schema(0, 13)
    topic_type = codec.nested_type(schema, "topic_data")
    partition_type = codec.nested_type(topic_type, "partition_data")
    topic = codec.make_entity(
        topic_type,
        topic_id=uuid.UUID(int=0),
        partition_data=(codec.make_entity(partition_type, index=0, records=None),),
    )
    assert_agree(kafka_reader, request(0, 13, acks=1, topic_data=(topic,)))


# -- found by this suite, fixed -----------------------------------------------------------


def test_null_client_id(kafka_reader: KafkaReferee) -> None:
    """A null client id: ``RequestHeader.parse`` reads it as empty, so must the header peek."""
    assert_agree(kafka_reader, metadata_v12(topics=(), client_id=None))


def test_boolean_byte_two(kafka_reader: KafkaReferee) -> None:
    """A boolean byte other than 0/1 is true (``readByte() != 0``); kio takes only 0 and 1."""
    frame = metadata_v12(topics=())
    assert frame[-3:] == b"\x00\x00\x00"  # auto creation, authorized operations, tags
    assert_agree(kafka_reader, frame[:-3] + b"\x02" + frame[-2:])


def test_body_string_not_utf8(kafka_reader: KafkaReferee) -> None:
    """A body string not UTF-8 is read with U+FFFD, as ``readString`` does; kio refuses it."""
    frame = request(10, 2, key="g", key_type=0)
    at = frame.index(b"\x00\x01g")
    assert_agree(kafka_reader, frame[: at + 2] + b"\xff" + frame[at + 3 :])


def test_describe_acls_unknown_operation(kafka_reader: KafkaReferee) -> None:
    """``DescribeAclsRequest`` refuses the UNKNOWN code when parsed and Kafka closes the
    connection; the proxy's handler closes it too: both refuse."""
    frame = request(29, 3, resource_type_filter=1, pattern_type_filter=1, operation=0)
    assert_agree(kafka_reader, frame, accepted=False)


def test_known_tagged_field_size(kafka_reader: KafkaReferee) -> None:
    """A known tagged field's size is ignored by Kafka's generated readers."""
    frame = request(1, 12, cluster_id="x", max_bytes=1, topics=(), forgotten_topics_data=())
    tag = b"\x01\x00\x02\x02x"  # one tagged field: tag 0 (cluster id), 2 bytes: "x"
    at = frame.rindex(tag)
    assert_agree(kafka_reader, resized(frame[:at] + b"\x01\x00\x03\x02x" + frame[at + 5 :] + b"\0"))


def test_a_tag_the_struct_defines_at_other_versions(kafka_reader: KafkaReferee) -> None:
    """``FetchPartition``'s tag 1 (HighWatermark) exists from v18: at v17 the generated
    reader refuses it ("Tag 1 is not valid for version 17"), where an unknown tag is skipped."""
    schema = codec.request_schema(1, 17)
    topic_type = codec.nested_type(schema, "topics")
    partition = codec.make_entity(codec.nested_type(topic_type, "partitions"), partition=0)
    topic = codec.make_entity(topic_type, topic_id=uuid.UUID(int=1), partitions=(partition,))
    frame = request(1, 17, max_bytes=1, topics=(topic,), forgotten_topics_data=())
    at = frame.index(uuid.UUID(int=1).bytes) + 16 + 1 + 4 + 4 + 8 + 4 + 8 + 4
    assert frame[at] == 0  # the partition's tag section (no replica directory id)
    for tag, accepted in ((1, False), (2, True)):
        appended = resized(frame[:at] + b"\x01" + uvarint(tag) + b"\x00" + frame[at + 1 :])
        assert_agree(kafka_reader, appended, accepted=accepted)


def test_a_tagged_nullable_field_sent_null(kafka_reader: KafkaReferee) -> None:
    """FetchRequest's ClusterId (tag 0) written as null: null to Kafka; kio, which reads a
    tagged field as non-nullable, is shown it absent (its null)."""
    frame = request(1, 12, cluster_id="x", max_bytes=1, topics=(), forgotten_topics_data=())
    tag = b"\x01\x00\x02\x02x"  # one tagged field: tag 0 (cluster id), 2 bytes: "x"
    at = frame.rindex(tag)
    assert_agree(kafka_reader, resized(frame[:at] + b"\x01\x00\x01\x00" + frame[at + 5 :]))


def test_malformed_utf8_is_replaced_as_java_replaces_it(kafka_reader: KafkaReferee) -> None:
    """Client ids of bytes around UTF-8's edges: the header peek's U+FFFDs are Java's."""
    rng = random.Random(SEED)
    edges = [0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED]
    edges += [0xEF, 0xF0, 0xF4, 0xF5, 0xF7, 0xF8, 0xFF]
    frame = metadata_v12(topics=())
    assert frame[12:15] == b"\x00\x01t"
    frames = []
    for _ in range(2000):
        raw = bytes(rng.choice(edges) for _ in range(rng.randrange(1, 8)))
        frames.append(
            (raw.hex(), resized(frame[:12] + struct.pack(">h", len(raw)) + raw + frame[15:]))
        )
    figures = differential.run(kafka_reader, frames)
    assert figures.categories[AGREE_ACCEPT] == len(frames), figures.report()


# -- the regex op another helper's test relies on --------------------------------------------


def test_regex(kafka_reader: KafkaReferee) -> None:
    assert kafka_reader.regex(r"CN=(\w+),O=(.*)", "CN=alice,O=acme", "$1@$2") == {
        "compiles": True,
        "error": None,
        "matches": True,
        "result": "alice@acme",
    }
    assert kafka_reader.regex(r"CN=(\w+)", "CN=alice,O=acme", "$1")["matches"] is False
    broken = kafka_reader.regex("(", "x", None)
    assert (broken["compiles"], broken["matches"], broken["result"]) == (False, False, None)
    assert "Unclosed group" in broken["error"]
    no_group = kafka_reader.regex("(a)", "a", "$2")
    assert (no_group["matches"], no_group["result"]) == (True, None)
    assert "No group 2" in no_group["error"]
