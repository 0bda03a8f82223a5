"""A producer's and a consumer's request on the data path, and the broker's answer, as frames:
what bench/exchange_cost_bench.py measures and tests/support/request_trace.py traces.

A record batch is a v2 batch header (attributes 0: not transactional) and its records: the
proxy reads the header only (``has_transactional_batches``), never the records.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.responses import entity
from tests.support.entities import req, resp


def record_batch(size: int) -> bytes:
    """A v2 record batch header and ``size`` bytes after it."""
    body = bytes(size)
    length = 49 + len(body)  # from leaderEpoch to the end
    return (
        (0).to_bytes(8, "big")
        + length.to_bytes(4, "big")
        + (-1).to_bytes(4, "big", signed=True)
        + b"\x02"
        + bytes(4)  # crc (not checked by the proxy)
        + bytes(2)  # attributes
        + bytes(40)
        + body
    )


def nested(schema: Any, *path: str) -> Any:
    for name in path:
        schema = codec.nested_type(schema, name)
    return schema


_FETCHED: Final = {"partition": 0, "fetch_offset": 1000, "partition_max_bytes": 1 << 20}
_ANSWERED: Final = {
    "partition_index": 0,
    "high_watermark": 2000,
    "last_stable_offset": 2000,
    "log_start_offset": 0,
}


def _topic(entry: Any, key: dict[str, Any], field: str, **partition: Any) -> Any:
    """A topic entry of type ``entry`` named by ``key`` whose ``field`` lists one partition
    entry with the values ``partition``."""
    one = codec.make_entity(nested(entry, field), **partition)
    return codec.make_entity(entry, **key, **{field: (one,)})


def produce_frames(
    correlation_id: int,
    version: int,
    topics: Sequence[str],
    answered: Sequence[str],
    *,
    record_size: int = 1024,
    client_id: str = "rdkafka",
) -> tuple[bytes, bytes]:
    """Produce (acks=-1) of one batch to partition 0 of each of ``topics``, and the broker's
    answer for the topics in ``answered`` (those the proxy sends it)."""
    entry = nested(codec.request_schema(0, version), "topic_data")
    records = record_batch(record_size)
    topic_data = tuple(
        _topic(entry, {"name": n}, "partition_data", index=0, records=records) for n in topics
    )
    request = codec.encode_request(
        req(
            0,
            version,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=topic_data,
        ),
        correlation_id,
        client_id,
    )
    answer = nested(codec.response_schema(0, version), "responses")
    responses = tuple(
        _topic(answer, {"name": n}, "partition_responses", index=0, base_offset=42)
        for n in answered
    )
    response = codec.encode_response(resp(0, version, responses=responses), correlation_id)
    return request, response


def fetch_frames(
    correlation_id: int,
    version: int,
    topic: str | UUID,
    *,
    record_size: int = 1024,
    client_id: str = "rdkafka",
) -> tuple[bytes, bytes]:
    """A sessionless Fetch of partition 0 of ``topic`` (by id from v13, by name before), and
    the broker's answer with one batch."""
    key = {"topic_id": topic} if version >= 13 else {"topic": topic}
    entry = nested(codec.request_schema(1, version), "topics")
    fetched = _topic(entry, key, "partitions", **_FETCHED)
    request = codec.encode_request(
        req(
            1,
            version,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=50 << 20,
            session_id=0,
            session_epoch=-1,
            topics=(fetched,),
        ),
        correlation_id,
        client_id,
    )
    answer = nested(codec.response_schema(1, version), "responses")
    rtopic = _topic(answer, key, "partitions", **_ANSWERED, records=record_batch(record_size))
    response = codec.encode_response(resp(1, version, responses=(rtopic,)), correlation_id)
    return request, response


def metadata_frames(
    correlation_id: int,
    version: int,
    topics: Sequence[str],
    topic_ids: Sequence[UUID] = (),
    *,
    answered: Sequence[str] | None = None,
    client_id: str = "rdkafka",
) -> tuple[bytes, bytes]:
    """A Metadata request for ``topics`` by name (none: an empty list, as
    ``bench/proxy_bench.py``'s ``metadata-rtt`` sends), and a single-node cluster's answer:
    its one broker and each topic with one partition led by it (``topic_ids`` from v10; the
    fields a version lacks are left out). ``answered``: the topics the broker answers with
    instead (Tansu answers an empty list with every topic)."""
    entry = nested(codec.request_schema(3, version), "topics")
    request = codec.encode_request(
        req(3, version, topics=tuple(entity(entry, name=n) for n in topics)),
        correlation_id,
        client_id,
    )
    rschema = codec.response_schema(3, version)
    broker = entity(nested(rschema, "brokers"), node_id=1, host="broker-1.internal", port=9092)
    partition = entity(
        nested(rschema, "topics", "partitions"),
        leader_id=1,
        leader_epoch=0,
        replica_nodes=(1,),
        isr_nodes=(1,),
    )
    names = topics if answered is None else answered
    ids = list(topic_ids) or [UUID(int=0)] * len(names)
    entries = tuple(
        entity(nested(rschema, "topics"), name=n, topic_id=i, partitions=(partition,))
        for n, i in zip(names, ids, strict=True)
    )
    body = entity(rschema, brokers=(broker,), cluster_id="bench", controller_id=1, topics=entries)
    return request, codec.encode_response(body, correlation_id)
