"""Fuzz the compiled protocol modules against their pure-Python source, in one process.

Why: the compiled modules replace the Python the rest of the suite reviews, on every byte a
client or broker sends (docs/design.md#the-compiled-protocol-modules). mypyc keeps the source,
not always its semantics (a type check at a call, an integer kept native, a set where a
frozenset was typed), so the two are run side by side on the same hostile inputs: framing
in pieces, the request header peek, the Produce request skim, the Fetch and Produce response
walks and tail rewrites (buffered and streamed), the share response skim, the Metadata
request skim and response walk and splice, Java's string decoding and the in-flight queue.
Each must return equal values, or raise the same exception with the same message; anything
else is a finding. The process runs under ``RLIMIT_AS``, so an allocation sized by a claimed
length fails as a crash.

The input is a selector byte (which entry point), a parameter byte (version, frame size limit)
and a cut byte (where a stream is split), then the frame. Seeds are valid frames encoded by
the codec. Needs the compiled modules (``pip install -e .``; not ``KAFKAGUARD_PURE_PYTHON``).

    ./dev fuzz --implementations --seconds 60     # atheris (libFuzzer), coverage-guided
    .venv/bin/python tests/fuzz/atheris_implementations.py --plain --iterations 100000
"""

from __future__ import annotations

import argparse
import importlib
import random
import resource
import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from types import ModuleType
from typing import Any

from kafkaguard import protocol
from kafkaguard.protocol import codec
from kafkaguard.protocol.build import COMPILED_MODULES
from tests.fuzz.atheris_codec import ADDRESS_SPACE_LIMIT, mutants
from tests.support import data_path

Modules = dict[str, ModuleType]


def implementations(
    importing: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> tuple[Modules, Modules]:
    """The compiled modules and, imported beside them, their pure-Python source: the modules
    are taken out of ``sys.modules`` while the pure ones import (and import each other), then
    put back, so the rest of the process keeps the compiled ones. The pure ones import inside
    ``importing()`` (atheris's instrumentation)."""
    # The protocol's modules: those this harness calls (the allowed path above them is
    # compared through the suites' pure-Python pass).
    names = [name for name in COMPILED_MODULES if name.startswith(protocol.__name__ + ".")]
    compiled = {name: importlib.import_module(name) for name in names}
    if not protocol.COMPILED:
        raise SystemExit(
            "the compiled protocol modules are not loaded: build them (pip install -e .) "
            f"and leave {protocol.PURE_PYTHON_ENV} unset"
        )
    for name in names:
        del sys.modules[name]
    sys.meta_path.insert(0, protocol.PurePythonFinder)
    try:
        with importing():
            pure = {name: importlib.import_module(name) for name in names}
    finally:
        sys.meta_path.remove(protocol.PurePythonFinder)
        sys.modules.update(compiled)
        for name, module in compiled.items():
            parent, _, attr = name.rpartition(".")
            setattr(sys.modules[parent], attr, module)
    assert all(pure[n] is not compiled[n] for n in names)
    return {n.removeprefix("kafkaguard.protocol."): m for n, m in compiled.items()}, {
        n.removeprefix("kafkaguard.protocol."): m for n, m in pure.items()
    }


def normal(value: Any) -> Any:
    """A value both implementations' results compare by: buffers as bytes, the skims' objects
    as (class name, attributes): ``__slots__`` in Python, ``__mypyc_attrs__`` compiled."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, list | tuple):
        return tuple(normal(v) for v in value)
    kind = type(value)
    names = getattr(kind, "__slots__", None) or getattr(kind, "__mypyc_attrs__", None)
    if names and not isinstance(value, str):
        return (kind.__name__, tuple((n, normal(getattr(value, n))) for n in sorted(names)))
    return value


def outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("returned", normal(call()))
    except Exception as exc:  # noqa: BLE001 - the outcome compared, whatever it is
        return ("raised", type(exc).__name__, str(exc))


def advertise(node_id: int, host: str, port: int) -> tuple[str, int]:
    return ("proxy.example" if len(host) % 2 else "a-longer-proxy-name.example"), port + node_id


def fallback(frame: bytes | memoryview) -> bytes:
    return b"decoded:" + bytes(frame)


def cuts(frame: bytes, cut: int) -> list[bytes]:
    """``frame`` in pieces, at points drawn from ``cut``."""
    rng = random.Random(cut)
    points = sorted({rng.randrange(len(frame) + 1) for _ in range(cut % 5)})
    bounds = [0, *points, len(frame)]
    return [frame[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def run_one(m: Modules, selector: int, param: int, cut: int, frame: bytes) -> Any:  # noqa: C901 - one case per entry point
    """One entry point of implementation ``m`` on ``frame``: its outcomes, in order."""
    tails = m["skim.tails"]
    match selector % 10:
        case 0:  # framing, the frame cut into reads, a limit from ``param``
            buffer = m["framing"].FrameBuffer(param * 16)
            out = [outcome(lambda piece=piece: buffer.feed(piece)) for piece in cuts(frame, cut)]
            held = (buffer.pending_bytes, buffer.partial_frame_size)
            head = outcome(lambda: buffer.partial_head(8)) if buffer.pending_bytes else None
            return out, held, head, outcome(buffer.take_partial)
        case 1:
            header = m["header"]
            return (
                outcome(lambda: header.peek_request_header(frame)),
                outcome(lambda: header.peek_correlation_id(frame)),
            )
        case 2:  # the Produce request skim, after the client id where the peek finds it
            try:
                end = m["header"].peek_request_header(frame).client_id_end
            except Exception:  # noqa: BLE001 - compared in case 1; here any offset will do
                end = param
            produce = m["skim.produce"]
            return outcome(lambda: produce.skim_produce_request(frame, param % 16, end))
        case 3:
            version = param % 20
            return (
                outcome(lambda: tails.fetch_response_tail(frame, version)),
                outcome(lambda: tails.produce_response_tail(frame, version)),
                outcome(lambda: tails.fetch_response_has_node_endpoints(frame, version)),
                outcome(lambda: tails.fetch_response_head(frame, version)),
            )
        case 4 | 5:  # the tail rewrite, buffered then streamed
            heads: list[tuple[int, int]] = []
            api_key = selector % 2

            def head(error_code: int, session_id: int) -> None:
                heads.append((error_code, session_id))

            tail = tails.NodeEndpointsTail(
                api_key, param % 20, advertise, fallback, head if param & 32 else None
            )
            out = [outcome(lambda: tail(frame)), outcome(lambda: tail.streamable)]
            if tail.streamable:
                stream = outcome(lambda: tail.stream(len(frame)))
                out.append(stream[0])
                if stream[0] == "returned":
                    stream_ = tail.stream(len(frame))
                    pieces = cuts(frame, cut)
                    for i, piece in enumerate(pieces):
                        step = outcome(lambda p=piece, i=i: stream_.feed(p, i == len(pieces) - 1))
                        out.append(step)
                        if step[0] == "raised":
                            break
            return out, heads
        case 6:
            share = m["skim.share"]
            return outcome(lambda: share.skim_share_response(frame, 78 + param % 2, param % 4))
        case 7:
            return (
                outcome(lambda: m["strings"].read_string(frame)),
                outcome(lambda: tails.rewrite_node_endpoints(frame, advertise)),
                outcome(lambda: tails.fit_tail([(0, frame[:40]), (3, frame[40:])], param * 4)),
            )
        case 8:  # the Metadata request skim, the response walk and its splice (param: version)
            metadata = m["skim.metadata"]
            version = param % 16
            try:
                end = m["header"].peek_request_header(frame).client_id_end
            except Exception:  # noqa: BLE001 - compared in case 1; here any offset will do
                end = param
            walk = metadata.walk_metadata_response(frame, version)
            out = [
                outcome(lambda: metadata.skim_metadata_request(frame, version, end)),
                outcome(lambda: walk),
            ]
            if walk is not None:
                topics = walk.topics[::-1]
                ops = [param - 128] * len(topics)
                out.append(outcome(lambda: walk.splice(frame, advertise, topics, ops, param)))
            return out
        case _:  # the in-flight queue driven by the bytes: forward, respond, ask, claim, take
            inflight = m["inflight"]
            queue = inflight.InflightQueue(param % 8 + 1)
            out = []
            for i, op in enumerate(frame[:64]):
                corr = op >> 3

                def step(op: int = op, corr: int = corr, i: int = i) -> Any:
                    match op % 6:
                        case 0:
                            return queue.forward(corr, 1, 17, None, float(i))
                        case 1:
                            return queue.respond(corr, 3, 12, frame[:i], float(i))
                        case 2:
                            return queue.ask(corr, 18, 3, lambda answer: bool(answer))
                        case 3:
                            slot = queue.claim(corr)
                            slot.response = frame[i:]
                            return (slot.correlation_id, slot.api_key, repr(slot))
                        case 4:
                            return [(s.correlation_id, s.response) for s in queue.take_ready()]
                        case _:
                            return (len(queue), queue.full, queue.awaiting_upstream)

                out.append(outcome(step))
            return out


class Finding(AssertionError):
    pass


def target(compiled: Modules, pure: Modules) -> Callable[[bytes], None]:
    def test_one_input(data: bytes) -> None:
        if len(data) < 3:
            return
        selector, param, cut, frame = data[0], data[1], data[2], data[3:]
        got = run_one(compiled, selector, param, cut, frame)
        want = run_one(pure, selector, param, cut, frame)
        if got != want:
            raise Finding(f"input {data.hex()}:\ncompiled {got!r}\npure     {want!r}")

    return test_one_input


def seeds() -> list[bytes]:
    """Valid frames, each behind the selector, parameter and cut bytes of the entry points
    that read it."""
    produce_t = codec.request_schema(0, 11)
    topic_t = codec.nested_type(produce_t, "topic_data")
    part_t = codec.nested_type(topic_t, "partition_data")
    produce = codec.encode_request(
        codec.make_entity(
            produce_t,
            acks=-1,
            timeout=timedelta(seconds=30),
            topic_data=(
                codec.make_entity(
                    topic_t,
                    name="orders",
                    partition_data=(codec.make_entity(part_t, index=0, records=bytes(64)),),
                ),
            ),
        ),
        7,
        "fuzz",
    )
    fetch_t = codec.response_schema(1, 17)
    f_topic_t = codec.nested_type(fetch_t, "responses")
    f_part_t = codec.nested_type(f_topic_t, "partitions")
    node_t = codec.nested_type(fetch_t, "node_endpoints")
    fetch = codec.encode_response(
        codec.make_entity(
            fetch_t,
            throttle_time=timedelta(0),
            session_id=5,
            responses=(
                codec.make_entity(
                    f_topic_t,
                    topic_id=uuid.UUID(int=9),
                    partitions=(codec.make_entity(f_part_t, partition_index=1, records=b"r" * 9),),
                ),
            ),
            node_endpoints=(codec.make_entity(node_t, node_id=2, host="broker-2", port=9092),),
        ),
        7,
    )
    produce_response = codec.encode_response(
        codec.make_entity(codec.response_schema(0, 11), throttle_time=timedelta(0)), 7
    )
    share = codec.encode_response(
        codec.make_entity(codec.response_schema(78, 1), throttle_time=timedelta(0)), 7
    )
    metadata_request, metadata_response = data_path.metadata_frames(7, 12, ("orders",))
    metadata_v4 = data_path.metadata_frames(7, 4, ("orders", "b"))
    return [
        bytes([0, 255, 3]) + produce + fetch,
        bytes([1, 0, 0]) + produce,
        bytes([2, 11, 0]) + produce,
        bytes([3, 17, 0]) + fetch,
        bytes([3, 11, 0]) + produce_response,
        bytes([5, 17 + 32, 4]) + fetch,
        bytes([4, 11, 0]) + produce_response,
        bytes([6, 1 + 4, 0]) + share,
        bytes([7, 0, 0]) + fetch[-30:],
        bytes([8, 12, 0]) + metadata_response,
        bytes([8, 12, 0]) + metadata_request,
        bytes([8, 4, 0]) + metadata_v4[1],
        bytes([8, 4, 0]) + metadata_v4[0],
        bytes([9, 3, 0]) + bytes(range(64)),
    ]


def run_plain(one: Callable[[bytes], None], seed_frames: list[bytes], iterations: int) -> None:
    """Seeded random mutations of the seeds (no coverage guidance)."""
    rng = random.Random(0)
    for data in zip(range(iterations), mutants(seed_frames, rng), strict=False):
        one(data[1])
    print(f"{iterations} inputs, both implementations agree")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", action="store_true", help="random mutation, no atheris")
    parser.add_argument("--iterations", type=int, default=200_000, help="for --plain")
    parser.add_argument("--seconds", type=int, default=60, help="for atheris")
    args, rest = parser.parse_known_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    seed_frames = seeds()
    try:
        import atheris  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        atheris = None
    if args.plain or atheris is None:
        run_plain(target(*implementations()), seed_frames, args.iterations)
        return
    # Coverage of the pure-Python modules, instrumented as they import (the compiled ones are
    # native); instrumenting everything loaded (kio's schemas) would take minutes.
    one = target(*implementations(lambda: atheris.instrument_imports(include=[protocol.__name__])))

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        if not data:  # libFuzzer starts from an empty input: begin from a valid frame
            return random.Random(seed).choice(seed_frames)[:max_size]
        mutated: bytes = atheris.Mutate(data, max_size)
        return mutated

    options = [f"-max_total_time={args.seconds}", *[a for a in rest if a != "--"]]
    atheris.Setup([sys.argv[0], *options], one, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1:])
