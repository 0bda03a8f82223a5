"""Per-request cost of the allowed Produce and Fetch paths, by stage, without sockets.

Why: the proxy's added latency and CPU per GB are per-request Python work (bench/RESULTS.md),
and wall-clock timings on the shared 2-core machine move by tens of percent between runs.
Instruction counts under ``valgrind --tool=callgrind`` do not: the same code path costs the
same instructions however loaded the machine is. So every figure here is either CPU time
(``--timer``, quick, noisy) or callgrind instructions (``--callgrind``, default, repeatable).

What runs. One allowed Produce v11 (one topic, one partition, one ~1 KiB record batch) and one
allowed sessionless Fetch v16 (one topic by id, one partition; a ~1 KiB answer, buffered) go
through the real parts, and so do three Metadata requests: ``metadata``, v1 with no topics
(``proxy_bench.py``'s ``metadata-rtt``) answered by a single-node cluster; ``metadata-tansu``,
the same answered as Tansu answers it, with every topic (ten); and ``metadata-topic``, v12 for
one topic (a client's per-topic lookup) answered with its one partition. They pass a
:class:`~kafkaguard.policy.standard.StandardAuthorizer` holding 1,000 ACLs
(``authorizer_bench.make_acls``) plus the client's PREFIXED ALLOW, the sans-I/O
:class:`~kafkaguard.proxy.core.exchange.Exchange`, and the asyncio shell's two protocols
(:class:`~kafkaguard.proxy.net.connection.ClientConnection` / ``UpstreamConnection``) with
transports whose ``write``/``writelines`` are C no-ops (``deque(maxlen=0)``), so the figures
are the Python path from ``data_received`` to the transport write, both directions. The byte
relay (``proxy_bench._Pipe``) is measured the same way.

Stages are measured one at a time, each its own loop over the same inputs (``STAGES``), then
``round trip`` is the whole path; "rest" in the table is the round trip minus the stages
(glue between them: the exchange's loops, command lists, attribute lookups). Per-iteration
figures have the loop's own cost (the ``empty`` stage) taken off.

How callgrind isolates a stage. The harness runs under ``valgrind --tool=callgrind
--collect-atstart=no --toggle-collect=_operator_call --dump-after=_operator_call``: each stage's
measured loop is called through ``operator.call`` (a C function nothing else on these paths
uses), so only the loop is counted and each stage is dumped to its own file. Start-up, imports
and warm-up are not counted.

Usage::

    python bench/exchange_cost_bench.py                 # callgrind, every stage (~2-4 min)
    python bench/exchange_cost_bench.py --timer         # process_time, best of 5 (seconds)
    python bench/exchange_cost_bench.py --stages 'produce round trip,relay round trip'
"""

from __future__ import annotations

import argparse
import glob
import operator
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from authorizer_bench import make_acls  # noqa: E402

from kafkaguard.policy.authorizer import Action  # noqa: E402
from kafkaguard.policy.model import AclOperation  # noqa: E402
from kafkaguard.protocol import codec  # noqa: E402
from kafkaguard.protocol.framing import FrameBuffer  # noqa: E402
from kafkaguard.protocol.header import peek_correlation_id, peek_request_header  # noqa: E402
from kafkaguard.protocol.inflight import Slot  # noqa: E402
from kafkaguard.proxy.config import HostPort  # noqa: E402
from kafkaguard.proxy.core.commands import SendBroker, SendClient  # noqa: E402
from kafkaguard.proxy.core.dispatch import (  # noqa: E402
    _verdict,
    handle_request,
    response_transform,
)
from kafkaguard.proxy.handlers import REGISTRY  # noqa: E402
from kafkaguard.proxy.handlers.support.authz import topic  # noqa: E402
from kafkaguard.proxy.handlers.support.base import (  # noqa: E402
    Forward,
    Request,
    ResponseRewrite,
)
from kafkaguard.proxy.net.connection import ClientConnection, UpstreamConnection  # noqa: E402
from tests.support import data_path  # noqa: E402
from tests.support.data_path import nested  # noqa: E402
from tests.support.entities import req, resp  # noqa: E402
from tests.support.exchange_driver import Driver  # noqa: E402
from tests.support.handler_harness import acl  # noqa: E402

TOPIC = "bench-orders"
TOPIC_ID = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)
PRODUCE_VERSION = 11
FETCH_VERSION = 16
METADATA_VERSIONS = {"metadata": 1, "metadata-topic": 12, "metadata-tansu": 1}
TANSU_TOPICS = tuple(f"other-{i}" for i in range(10))
"""What Tansu answers ``metadata-tansu``'s empty list with: every topic it holds (ten here),
which the proxy drops (none was asked for)."""
CLIENT_ID = "rdkafka"
ITERATIONS = 2000
"""Iterations per stage under callgrind (instructions per iteration are exact; more only
costs time)."""


# --------------------------------------------------------------------------------------------
# Inputs


def produce_frames(correlation_id: int) -> tuple[bytes, bytes]:
    return data_path.produce_frames(correlation_id, PRODUCE_VERSION, (TOPIC,), (TOPIC,))


def fetch_frames(correlation_id: int) -> tuple[bytes, bytes]:
    return data_path.fetch_frames(correlation_id, FETCH_VERSION, TOPIC_ID)


def frames(api: str, correlation_id: int) -> tuple[bytes, bytes]:
    """The request and the broker's answer of ``api`` (a key of :data:`APIS`)."""
    if api == "produce":
        return produce_frames(correlation_id)
    if api == "fetch":
        return fetch_frames(correlation_id)
    topics = (TOPIC,) if api == "metadata-topic" else ()
    version = METADATA_VERSIONS[api]
    if api == "metadata-tansu":
        return data_path.metadata_frames(correlation_id, version, (), answered=TANSU_TOPICS)
    return data_path.metadata_frames(correlation_id, version, topics, (TOPIC_ID,)[: len(topics)])


API_VERSIONS_VERSION = 3


def api_versions_frames(correlation_id: int) -> tuple[bytes, bytes]:
    """A client's ApiVersions v3 and a KRaft broker's answer: every API the codec knows at its
    versions, three supported and two finalized features (Kafka 4.x's shape)."""
    request = codec.encode_request(
        req(18, API_VERSIONS_VERSION, client_software_name="rdkafka", client_software_version="2"),
        correlation_id,
        CLIENT_ID,
    )
    rschema = codec.response_schema(18, API_VERSIONS_VERSION)
    keys = tuple(
        codec.make_entity(
            nested(rschema, "api_keys"),
            api_key=key,
            min_version=codec.codec_versions(key).start,
            max_version=codec.codec_versions(key).stop - 1,
        )
        for key in sorted(codec.API_NAMES)
    )
    features = tuple(
        codec.make_entity(
            nested(rschema, "supported_features"), name=n, min_version=1, max_version=m
        )
        for n, m in (("group.version", 1), ("metadata.version", 25), ("kraft.version", 1))
    )
    finalized = tuple(
        codec.make_entity(
            nested(rschema, "finalized_features"), name=n, min_version_level=m, max_version_level=m
        )
        for n, m in (("metadata.version", 25), ("group.version", 1))
    )
    response = codec.encode_response(
        resp(
            18,
            API_VERSIONS_VERSION,
            api_keys=keys,
            supported_features=features,
            finalized_features=finalized,
            finalized_features_epoch=42,
        ),
        correlation_id,
    )
    return request, response


def acls() -> list[Any]:
    """1,000 ACLs of other principals (the authorizer benchmark's mix) and the client's own."""
    return [
        *make_acls(1000, random.Random(27)),
        acl("User:alice", "ALL", "TOPIC", "bench-", pattern="PREFIXED"),
    ]


def _sink() -> SimpleNamespace:
    """A transport whose writes are C calls that keep nothing (uvloop's are C too)."""
    drop: deque[Any] = deque(maxlen=0)
    return SimpleNamespace(
        write=drop.append, writelines=drop.extend, pause_reading=int, resume_reading=int
    )


class Path_:
    """One connection through kafkaguard, ready for requests of one API."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.driver = Driver(acls())
        self.driver.cluster.learn_topic_names([(TOPIC_ID, TOPIC)])
        self.driver.connect()
        self.exchange = self.driver.exchange
        self.request, self.response = frames(api, 7)
        client = ClientConnection(None, None, 0.0)  # type: ignore[arg-type]
        client.exchange = self.exchange
        client._transport = _sink()  # type: ignore[assignment]
        upstream = UpstreamConnection(client, HostPort("127.0.0.1", 9))
        upstream._transport = _sink()  # type: ignore[assignment]
        client._upstream = upstream
        self.client, self.upstream = client, upstream
        self.header = peek_request_header(self.request)
        self.handler = REGISTRY[self.header.api_key]
        self.context = self.exchange.context
        # One round trip to check the path is the allowed one and the response goes back.
        commands = self.exchange.receive_client(self.request)
        assert [type(c) for c in commands] == [SendBroker], commands
        commands = self.exchange.receive_broker(self.response)
        assert [type(c) for c in commands] == [SendClient], commands

    def new_header(self) -> None:
        """Each request has its own header: the KIP-504 context is built per request."""
        self.context._context_header = None


# --------------------------------------------------------------------------------------------
# Stages: each returns one iteration's work as a closure.


def _round_trip(p: Path_) -> Callable[[], None]:
    client_data, broker_data = p.client.data_received, p.upstream.data_received
    request, response = p.request, p.response

    def step() -> None:
        client_data(request)
        broker_data(response)

    return step


def _exchange_only(p: Path_) -> Callable[[], None]:
    receive_client, receive_broker = p.exchange.receive_client, p.exchange.receive_broker
    request, response = p.request, p.response

    def step() -> None:
        receive_client(request)
        receive_broker(response)

    return step


def _framing(p: Path_) -> Callable[[], None]:
    client, broker = FrameBuffer(100 << 20), FrameBuffer((1 << 31) - 1)
    request, response = p.request, p.response

    def step() -> None:
        client.feed(request)
        broker.feed(response)

    return step


def _header(p: Path_) -> Callable[[], None]:
    request, response = p.request, p.response  # a read of one frame is the frame (framing.py)

    def step() -> None:
        peek_request_header(request)
        peek_correlation_id(response)

    return step


def _decide(p: Path_) -> Callable[[], None]:
    """Registry, version gate, read_request, handler, authorization: ``handle_request``."""
    header, frame, ctx = p.header, p.request, p.context

    def step() -> None:
        ctx._context_header = None
        handle_request(header, frame, ctx)

    return step


def _read_request(p: Path_) -> Callable[[], None]:
    header, frame, read = p.header, p.request, p.handler.read_request

    def step() -> None:
        read(header, frame)

    return step


def _handler(p: Path_) -> Callable[[], None]:
    """The handler's decision, authorization included (``on_request``, and for a two-phase
    handler the one ``authorize`` call and ``on_authorized``), without the topic-id walk."""
    frame = p.request
    request = Request(p.header, frame, p.handler.read_request(p.header, frame))
    handler, ctx = p.handler, p.context

    def step() -> None:
        ctx._context_header = None
        _verdict(handler, request, ctx)

    return step


def _authorize(p: Path_) -> Callable[[], None]:
    """One ``ctx.authorize`` of the request's one action: the KIP-504 context built, the
    authorizer's index walked (no decision listener: audit off, the default)."""
    frame = p.request
    request = Request(p.header, frame, None)
    operation = AclOperation.WRITE if p.header.api_key == 0 else AclOperation.READ
    actions = [Action(operation, topic(TOPIC), 1, True, True)]
    authorize, ctx = p.context.authorize, p.context

    def step() -> None:
        ctx._context_header = None
        authorize(request, actions)

    return step


def _authorize_audited(p: Path_) -> Callable[[], None]:
    """:func:`_authorize` with ``audit.enabled: true`` (defaults: allowed decisions aggregated
    by the writer thread): the decision listener's hand-off (``AuditTrail.on_decision``, a
    ``DecisionEvent`` queued for the writer) is the difference. On a connection of its own
    (the other stages' authorizer has no listener); the writer thread is not started, its
    queue is emptied after each call, as the thread would."""
    from kafkaguard.audit import AuditTrail
    from kafkaguard.audit.config import AuditConfig

    trail = AuditTrail(
        AuditConfig(enabled=True, dir=Path(tempfile.gettempdir()) / "kg-cost-audit"),
        {"LISTENER": "enforce"},
    )
    writer = trail.writer
    assert writer is not None
    queue = writer._queue
    own = Path_(p.api)
    own.driver.authorizer.decision_listener = trail.on_decision
    step = _authorize(own)

    def audited() -> None:
        step()
        queue.clear()

    return audited


def _request_context(p: Path_) -> Callable[[], None]:
    session, header = p.context.session, p.header

    def step() -> None:
        session.request_context(header)

    return step


def _apply(p: Path_) -> Callable[[], None]:
    """``Exchange._apply`` of the allowed verdict (its in-flight slot included) and the
    slot's release."""
    frame = p.request
    request = Request(p.header, frame, p.handler.read_request(p.header, frame))
    verdict = _verdict(p.handler, request, p.context)
    apply, header, inflight = p.exchange._apply, p.header, p.exchange._inflight
    slots, upstream = inflight._slots, inflight._upstream

    def step() -> None:
        apply(verdict, header, frame, [])
        slots.clear()
        upstream.clear()

    return step


def _slot(p: Path_) -> Callable[[], None]:
    """The in-flight slot: reserved, claimed by the response, released."""
    inflight, header, response = p.exchange._inflight, p.header, p.response
    cid, key, version = header.correlation_id, header.api_key, header.api_version

    def step() -> None:
        inflight.forward(cid, key, version, None, 0.0)
        inflight.claim(cid).response = response
        inflight.take_ready()

    return step


def _stats(p: Path_) -> Callable[[], None]:
    """What one round trip counts: bytes both ways, the request and response counters and
    the three latency histograms."""
    stats, key = p.exchange.stats, p.header.api_key
    count = p.exchange._count_response
    slot = Slot(p.header.correlation_id, key, p.header.api_version, None)  # compiled: a Slot

    def step() -> None:
        stats.bytes_from_client += 100
        requests = stats.requests
        requests[key] = requests.get(key, 0) + 1
        stats.bytes_to_broker += 100
        stats.bytes_from_broker += 100
        count(stats.responses_from_broker, slot)
        stats.observe(stats.upstream_latency, key, 0.0002)
        stats.observe_answer(key, 0.0003, 0.0002)
        stats.bytes_to_client += 100

    return step


def _response_transform(p: Path_) -> Callable[[], None]:
    """The response's rewrite on its raw bytes (the ``node_endpoints`` tail walk)."""
    frame = p.response
    request = Request(p.header, frame, p.handler.read_request(p.header, p.request))
    transform = _verdict(p.handler, request, p.context).transform  # type: ignore[union-attr]
    assert transform is not None

    def step() -> None:
        transform(frame)

    return step


def _rewrite(p: Path_) -> ResponseRewrite:
    """The rewrite of the allowed request's verdict."""
    frame = memoryview(p.request)
    request = Request(p.header, frame, p.handler.read_request(p.header, frame))
    verdict = _verdict(p.handler, request, p.context)
    assert isinstance(verdict, Forward) and verdict.rewrite is not None, verdict
    return verdict.rewrite


def _response_decoded(p: Path_) -> Callable[[], None]:
    """The response through its decoded rewrite: decode, rewrite, encode
    (``dispatch.response_transform``), what runs where no transform on the raw bytes does."""
    transform = response_transform(_rewrite(p), p.header)
    frame = memoryview(p.response)

    def step() -> None:
        transform(frame)

    return step


def _response_decode(p: Path_) -> Callable[[], None]:
    header, frame = p.header, memoryview(p.response)

    def step() -> None:
        codec.decode_response(frame, header.api_key, header.api_version)

    return step


def _response_rewrite(p: Path_) -> Callable[[], None]:
    """The handler's rewrite of the decoded response (a new entity each time)."""
    rewrite = _rewrite(p)
    body = codec.decode_response(memoryview(p.response), p.header.api_key, p.header.api_version)

    def step() -> None:
        rewrite(body)

    return step


def _response_encode(p: Path_) -> Callable[[], None]:
    rewrite = _rewrite(p)
    body = codec.decode_response(memoryview(p.response), p.header.api_key, p.header.api_version)
    new, correlation_id = rewrite(body), p.header.correlation_id

    def step() -> None:
        codec.encode_response(new, correlation_id)

    return step


def _shell(p: Path_) -> Callable[[], None]:
    """The shell carrying out one SendBroker and one SendClient (dispatch by command type)."""
    run = p.client._run
    to_broker = [SendBroker([p.request])]
    to_client = [SendClient([p.response])]

    def step() -> None:
        run(to_broker)  # type: ignore[arg-type]
        run(to_client)  # type: ignore[arg-type]

    return step


def _relay(_: Path_) -> Callable[[], None]:
    """The byte relay of ``proxy_bench.py``: request and response through ``_Pipe``."""
    from proxy_bench import _Pipe

    client_side, broker_side = _Pipe(), _Pipe()
    client_side.peer, broker_side.peer = broker_side, client_side
    client_side.transport, broker_side.transport = _sink(), _sink()  # type: ignore[assignment]
    request, response = produce_frames(7)

    def step() -> None:
        client_side.data_received(request)
        broker_side.data_received(response)

    return step


def _api_versions(p: Path_) -> Callable[[], None]:
    """A new connection's ApiVersions on ``p``'s connection: the request forwarded, the
    broker's answer rewritten (the same answer each time, as a cluster gives every client)."""
    request, response = api_versions_frames(7)
    client_data, broker_data = p.client.data_received, p.upstream.data_received

    def step() -> None:
        client_data(request)
        broker_data(response)

    return step


def _empty(_: Path_) -> Callable[[], None]:
    def step() -> None:
        pass

    return step


STAGE_FACTORIES: dict[str, Callable[[Path_], Callable[[], None]]] = {
    "round trip": _round_trip,
    "exchange": _exchange_only,
    "framing": _framing,
    "header peek": _header,
    "decide": _decide,
    "read_request": _read_request,
    "handler": _handler,
    "authorize": _authorize,
    "authorize audited": _authorize_audited,
    "request context": _request_context,
    "verdict": _apply,
    "in-flight slot": _slot,
    "stats": _stats,
    "response transform": _response_transform,
    "shell": _shell,
}
"""Per API (``produce …`` / ``fetch …`` / ``metadata …`` / ``metadata-topic …``)."""

RESPONSE_STAGES: dict[str, Callable[[Path_], Callable[[], None]]] = {
    "response decoded": _response_decoded,
    "response decode": _response_decode,
    "response rewrite": _response_rewrite,
    "response encode": _response_encode,
}
"""For the APIs whose responses a decoded rewrite changes (``metadata …``): the decoded path
and its three parts."""

APIS = ("produce", "fetch", "metadata", "metadata-topic", "metadata-tansu")

STAGES = [f"{api} {name}" for api in APIS for name in STAGE_FACTORIES]
STAGES += [f"{api} {name}" for api in APIS[2:] for name in RESPONSE_STAGES]
STAGES += ["relay round trip", "api_versions round trip", "empty"]


def build(stage: str, paths: dict[str, Path_]) -> Callable[[], None]:
    if stage == "relay round trip":
        return _relay(paths["produce"])
    if stage == "empty":
        return _empty(paths["produce"])
    if stage == "api_versions round trip":
        return _api_versions(paths["produce"])
    api, name = stage.split(" ", 1)
    return {**STAGE_FACTORIES, **RESPONSE_STAGES}[name](paths[api])


def measured_loop(step: Callable[[], None], n: int) -> Callable[[], None]:
    def loop() -> None:
        for _ in range(n):
            step()

    return loop


# --------------------------------------------------------------------------------------------
# Running


def run_stages(stages: list[str], iterations: int, timer: bool) -> dict[str, float]:
    """Run each stage's loop through ``operator.call`` (callgrind's toggle); with ``timer``,
    the best of 5 ``process_time`` readings, in µs per iteration."""
    # Each API's connection only when one of its stages runs; produce's always (the relay's,
    # api_versions' and the empty loop's stages run on it).
    wanted = {"produce", *(api for api in APIS for s in stages if s.startswith(f"{api} "))}
    paths = {api: Path_(api) for api in APIS if api in wanted}
    out: dict[str, float] = {}
    for stage in stages:
        step = build(stage, paths)
        for _ in range(200):  # warm-up: caches, lazily built verdicts
            step()
        loop = measured_loop(step, iterations)
        if timer:
            best = float("inf")
            for _ in range(5):
                start = time.process_time()
                loop()
                best = min(best, time.process_time() - start)
            out[stage] = best / iterations * 1e6
        else:
            operator.call(loop)
        print(f"ran {stage}", file=sys.stderr, flush=True)
    return out


def callgrind(stages: list[str], iterations: int) -> dict[str, float]:
    """Instructions per iteration of each stage, from one callgrind run (a dump per stage)."""
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "cg.out")
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=_operator_call",
            "--dump-after=_operator_call",
            f"--callgrind-out-file={out_file}",
            sys.executable,
            __file__,
            "--child",
            "--iterations",
            str(iterations),
            "--stages",
            ",".join(stages),
        ]
        subprocess.run(argv, check=True, stderr=subprocess.DEVNULL)
        dumps = sorted(glob.glob(out_file + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        if len(dumps) != len(stages):
            raise RuntimeError(f"{len(dumps)} callgrind dumps for {len(stages)} stages")
        return {stage: _total(dump) / iterations for stage, dump in zip(stages, dumps, strict=True)}


def _total(dump: str) -> int:
    for line in Path(dump).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", help=f"comma-separated subset of: {', '.join(STAGES)}")
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--timer", action="store_true", help="process_time instead of callgrind")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stages = args.stages.split(",") if args.stages else STAGES
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stages: {', '.join(sorted(unknown))}")
    if args.child:
        run_stages(stages, args.iterations, timer=False)
        return 0
    if "empty" not in stages:
        stages = [*stages, "empty"]
    if args.timer:
        figures = run_stages(stages, args.iterations * 10, timer=True)
        unit = "µs (process_time, best of 5)"
    else:
        figures = callgrind(stages, args.iterations)
        unit = "instructions (callgrind)"
    loop_cost = figures.pop("empty")
    print(f"per iteration, loop cost ({loop_cost:,.0f}) taken off: {unit}")
    for stage, value in figures.items():
        print(f"{stage:<34}{value - loop_cost:>14,.{3 if args.timer else 0}f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
