"""In-memory cost of the allowed data path's protocol work, per request, compiled or pure Python
(issue 27, item 2; docs/design.md#the-compiled-protocol-modules).

One "request" is what the proxy's protocol layer does for an allowed Produce and an allowed
Fetch round trip, without I/O: the client's frames split by :class:`FrameBuffer` (read in
64 KiB pieces), both request headers peeked, the Produce request skimmed, the Fetch request
walked and decoded (``guard`` + kio), two in-flight slots taken and claimed, the broker's
responses framed, their correlation ids peeked and their tails walked, the Fetch response's
``node_endpoints`` (KIP-951) rewritten. Which implementation runs is the process's
(``KAFKAGUARD_PURE_PYTHON=1`` for pure Python; ``kafkaguard.protocol.COMPILED`` says).

    python bench/protocol_bench.py [--requests N] [--rounds R] [--stage STAGE]
        wall-clock median of R rounds of N requests, in µs per request (or of one stage)
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_operator_call \
        --dump-after=_operator_call python bench/protocol_bench.py --callgrind --requests N
        instructions: one dump per stage and one for the round trips, each over N
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from kafkaguard import protocol
from kafkaguard.protocol import codec
from kafkaguard.protocol.framing import FrameBuffer
from kafkaguard.protocol.header import peek_correlation_id, peek_request_header
from kafkaguard.protocol.inflight import InflightQueue
from kafkaguard.protocol.skim.produce import skim_produce_request
from kafkaguard.protocol.skim.tails import NodeEndpointsTail

PRODUCE_VERSION = 11
FETCH_VERSION = 17
READ = 64 * 1024


def produce_request(correlation_id: int) -> bytes:
    schema = codec.request_schema(0, PRODUCE_VERSION)
    topic_t = codec.nested_type(schema, "topic_data")
    part_t = codec.nested_type(topic_t, "partition_data")
    parts = tuple(codec.make_entity(part_t, index=i, records=bytes(1024)) for i in range(3))
    topic = codec.make_entity(topic_t, name="orders", partition_data=parts)
    body = codec.make_entity(schema, acks=-1, timeout=timedelta(seconds=30), topic_data=(topic,))
    return codec.encode_request(body, correlation_id, "bench-producer")


def fetch_request(correlation_id: int) -> bytes:
    schema = codec.request_schema(1, FETCH_VERSION)
    topic_t = codec.nested_type(schema, "topics")
    part_t = codec.nested_type(topic_t, "partitions")
    parts = tuple(
        codec.make_entity(part_t, partition=i, fetch_offset=1000, partition_max_bytes=1 << 20)
        for i in range(3)
    )
    topic = codec.make_entity(topic_t, topic_id=uuid.UUID(int=7), partitions=parts)
    body = codec.make_entity(schema, max_wait=timedelta(milliseconds=500), topics=(topic,))
    return codec.encode_request(body, correlation_id, "bench-consumer")


def produce_response(correlation_id: int) -> bytes:
    schema = codec.response_schema(0, PRODUCE_VERSION)
    topic_t = codec.nested_type(schema, "responses")
    part_t = codec.nested_type(topic_t, "partition_responses")
    parts = tuple(codec.make_entity(part_t, index=i, base_offset=1000) for i in range(3))
    topic = codec.make_entity(topic_t, name="orders", partition_responses=parts)
    return codec.encode_response(
        codec.make_entity(schema, throttle_time=timedelta(0), responses=(topic,)), correlation_id
    )


def fetch_response(correlation_id: int) -> bytes:
    schema = codec.response_schema(1, FETCH_VERSION)
    topic_t = codec.nested_type(schema, "responses")
    part_t = codec.nested_type(topic_t, "partitions")
    node_t = codec.nested_type(schema, "node_endpoints")
    parts = tuple(
        codec.make_entity(part_t, partition_index=i, high_watermark=2000, records=bytes(1024))
        for i in range(3)
    )
    topic = codec.make_entity(topic_t, topic_id=uuid.UUID(int=7), partitions=parts)
    node = codec.make_entity(node_t, node_id=2, host="broker-2.internal", port=9092)
    body = codec.make_entity(
        schema,
        throttle_time=timedelta(0),
        session_id=11,
        responses=(topic,),
        node_endpoints=(node,),
    )
    return codec.encode_response(body, correlation_id)


def advertise(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "proxy.example", 30000 + node_id


def not_walked(frame: bytes | memoryview) -> bytes | memoryview:
    raise AssertionError("the benchmark's responses are walked, never decoded")


def reads(frames: list[bytes]) -> list[bytes]:
    stream = b"".join(frames)
    return [stream[i : i + READ] for i in range(0, len(stream), READ)]


def prepare(requests: int) -> tuple[list[bytes], list[bytes]]:
    """The client's and the broker's byte streams, as the reads that carry them."""
    templates = (produce_request(0), fetch_request(0), produce_response(0), fetch_response(0))
    client, broker = [], []
    for i in range(requests):
        client += (
            templates[0][:8] + i.to_bytes(4, "big") + templates[0][12:],
            templates[1][:8] + i.to_bytes(4, "big") + templates[1][12:],
        )
        broker += (
            templates[2][:4] + i.to_bytes(4, "big") + templates[2][8:],
            templates[3][:4] + i.to_bytes(4, "big") + templates[3][8:],
        )
    return reads(client), reads(broker)


def run(client: list[bytes], broker: list[bytes]) -> int:
    """The allowed Produce + Fetch round trips of ``prepare`` through the protocol layer."""
    from_client, from_broker = FrameBuffer(), FrameBuffer()
    inflight = InflightQueue(1 << 30)
    tails = {
        0: NodeEndpointsTail(0, PRODUCE_VERSION, advertise, not_walked),
        1: NodeEndpointsTail(1, FETCH_VERSION, advertise, not_walked),
    }
    for data in client:
        for frame in from_client.feed(data):
            header = peek_request_header(frame)
            if header.api_key == 0:
                skim = skim_produce_request(frame, header.api_version, header.client_id_end)
                assert skim is not None
            else:
                codec.decode_request(frame, header.api_key, header.api_version)
            inflight.forward(header.correlation_id, header.api_key, header.api_version, None)
    out = 0
    for data in broker:
        for frame in from_broker.feed(data):
            slot = inflight.claim(peek_correlation_id(frame))
            slot.response = tails[slot.api_key](frame)
            out += len(inflight.take_ready())
    return out


def stages() -> dict[str, Callable[[], object]]:
    """Each stage of :func:`run` alone, on one request's frames (``--stage``)."""
    produce, fetch = produce_request(1), fetch_request(1)
    produce_out, fetch_out = produce_response(1), fetch_response(1)
    header = peek_request_header(produce)
    produce_tail = NodeEndpointsTail(0, PRODUCE_VERSION, advertise, not_walked)
    fetch_tail = NodeEndpointsTail(1, FETCH_VERSION, advertise, not_walked)
    frames, queue = FrameBuffer(), InflightQueue(1 << 30)
    stream = produce + fetch + produce_out + fetch_out

    def slot() -> object:
        queue.forward(1, 0, PRODUCE_VERSION, None)
        queue.claim(1).response = produce_out
        return queue.take_ready()

    return {
        "framing": lambda: frames.feed(stream),
        "header": lambda: (peek_request_header(produce), peek_request_header(fetch)),
        "produce-skim": lambda: skim_produce_request(
            produce, PRODUCE_VERSION, header.client_id_end
        ),
        "fetch-request": lambda: codec.decode_request(fetch, 1, FETCH_VERSION),
        "inflight": slot,
        "produce-tail": lambda: produce_tail(produce_out),
        "fetch-tail-rewrite": lambda: fetch_tail(fetch_out),
    }


def callgrind(requests: int) -> None:
    """Every stage ``requests`` times, then ``requests`` round trips, each inside one
    ``operator.call``: under ``valgrind --tool=callgrind --collect-atstart=no
    --toggle-collect=_operator_call --dump-after=_operator_call`` each is one dump, holding the
    instructions of that work alone (no start-up, no set-up)."""
    run(*prepare(50))
    client, broker = prepare(requests)
    for name, stage in stages().items():
        stage()

        def repeat(stage: Callable[[], object] = stage) -> None:
            for _ in range(requests):
                stage()

        print(name, flush=True)
        operator.call(repeat)
    print("all", flush=True)
    operator.call(run, client, broker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--stage", choices=[*stages(), "all"], default="all")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="each stage, then the round trip, once inside operator.call (see the module doc)",
    )
    args = parser.parse_args()
    if args.callgrind:
        callgrind(args.requests)
        return
    if args.stage != "all":
        stage = stages()[args.stage]
        stage()
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            for _ in range(args.requests):
                stage()
            times.append(time.perf_counter() - start)
        median = statistics.median(times) / max(args.requests, 1) * 1e6
        print(f"compiled={protocol.COMPILED} stage={args.stage} median={median:.2f} us")
        return
    run(*prepare(50))  # warm: kio's and guard's per-schema caches, as in a running proxy
    client, broker = prepare(args.requests)
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        answered = run(client, broker)
        times.append(time.perf_counter() - start)
        assert answered == 2 * args.requests, answered
    if args.requests:
        median = statistics.median(times) / args.requests * 1e6
        print(
            f"compiled={protocol.COMPILED} requests={args.requests} rounds={args.rounds} "
            f"median={median:.2f} us/request (produce + fetch round trip)"
        )


if __name__ == "__main__":
    main()
