"""A streamed Fetch response's rewritten tail, read by Kafka's own client code: the padding
fields are skipped as unknown tagged fields (KIP-482) and the node endpoints are the proxy's.
Kafka 4.3.1's ``FetchResponseData`` (kafka-clients, the Java client's reader) parses the very
bytes the proxy sends; skipped when Java or the jars are missing (as the ``kafka`` tests)."""

from __future__ import annotations

import subprocess
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.skim.tails import NodeEndpointsTail
from tests.support.kafka_broker import require_kafka

READER = """
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.protocol.ByteBufferAccessor;

public class ReadFetch {
    public static void main(String[] args) throws Exception {
        short version = Short.parseShort(args[1]);
        ByteBuffer buf = ByteBuffer.wrap(Files.readAllBytes(Path.of(args[0])));
        FetchResponseData data = new FetchResponseData(new ByteBufferAccessor(buf), version);
        System.out.println("remaining=" + buf.remaining());
        System.out.println("unknown=" + data.unknownTaggedFields().size());
        for (FetchResponseData.NodeEndpoint e : data.nodeEndpoints()) {
            System.out.println("node=" + e.nodeId() + " " + e.host() + ":" + e.port());
        }
        for (FetchResponseData.FetchableTopicResponse t : data.responses()) {
            for (FetchResponseData.PartitionData p : t.partitions()) {
                System.out.println("partition=" + p.partitionIndex() + " bytes="
                    + (p.records() == null ? -1 : p.records().sizeInBytes()));
            }
        }
    }
}
"""


def streamed(frame: bytes, version: int, advertise: Any) -> bytes:
    def not_decoded(frame: bytes | memoryview) -> bytes | memoryview:
        raise AssertionError("decoded")

    stream = NodeEndpointsTail(1, version, advertise, not_decoded).stream(len(frame))
    out = []
    for start in range(0, len(frame), 4096):
        out += stream.feed(frame[start : start + 4096], start + 4096 >= len(frame))
    return b"".join(bytes(p) for p in out)


@pytest.mark.parametrize("version", [16, 17, 18])
@pytest.mark.parametrize("proxy_host", ["proxy.test", "a-much-longer-proxy-hostname.example.com"])
def test_kafkas_reader_sees_the_proxys_endpoints_and_skips_the_padding(
    tmp_path: Path, version: int, proxy_host: str
) -> None:
    """A proxy address shorter than the broker's: padded; a longer one cannot fit the tail
    whose size was already sent: ``node_endpoints`` is dropped (the client asks Metadata)."""
    classpath = require_kafka()
    schema = codec.response_schema(1, version)
    topic_t = codec.nested_type(schema, "responses")
    part_t = codec.nested_type(topic_t, "partitions")
    node_t = codec.nested_type(schema, "node_endpoints")
    response = codec.make_entity(
        schema,
        throttle_time=timedelta(0),
        responses=(
            codec.make_entity(
                topic_t,
                topic_id=uuid.uuid4(),
                partitions=(
                    codec.make_entity(part_t, partition_index=0, records=b"r" * 100_000),
                    codec.make_entity(part_t, ErrorCode.not_leader_or_follower, partition_index=1),
                ),
            ),
        ),
        node_endpoints=(
            codec.make_entity(node_t, node_id=2, host="broker-2.internal.example", port=9092),
        ),
    )
    frame = codec.encode_response(response, 7)
    sent = streamed(frame, version, lambda node_id, host, port: (proxy_host, 30000 + node_id))
    assert len(sent) == len(frame) and b"broker-2" not in sent
    body = tmp_path / "body.bin"
    body.write_bytes(sent[4 + 4 + 1 :])  # size, correlation id, header tagged fields (none)
    (tmp_path / "ReadFetch.java").write_text(READER)
    result = subprocess.run(
        ["java", "-cp", classpath, str(tmp_path / "ReadFetch.java"), str(body), str(version)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert "remaining=0" in lines
    if proxy_host == "proxy.test":
        assert "node=2" in result.stdout and "proxy.test:30002" in result.stdout
    else:
        assert "node=" not in result.stdout
    assert "unknown=1" in lines  # the padding, kept aside as an unknown tagged field
    assert "bytes=100000" in lines
