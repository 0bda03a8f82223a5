"""Data-path benchmark: the same workloads directly against Tansu and through kafkaguard.

Usage (from the repository root, with the test extras installed)::

    .venv/bin/python bench/proxy_bench.py              # full run (~10 min; ./dev bench)
    .venv/bin/python bench/proxy_bench.py --quick      # smoke run (< 1 min)
    .venv/bin/python bench/proxy_bench.py --no-relay --workers 1   # direct and kafkaguard only

What runs where. Tansu and the proxy each run in their own process (``python -m kafkaguard
run --config <tmp yaml>``, uvloop), so the load generator (confluent-kafka, in this process)
never shares a GIL with the proxy. Everything is on loopback.

Sides. ``direct``: clients bootstrap to Tansu A. ``kafkaguard``: clients bootstrap to the proxy
in front of Tansu A (it rewrites every broker address). ``relay`` (default; ``--no-relay``): a
~30-line uvloop ``asyncio.Protocol`` byte pipe in its own process, in front of a second Tansu B that
advertises the relay's port (a byte relay cannot rewrite addresses) — the floor any Python
proxy can reach.

Workloads (one per side, interleaved: for every round and workload the sides run back to back,
their order rotated per round; medians over rounds are printed with proxy/direct ratios, and
each proxy's CPU-seconds per GB moved, against the relay's):

* ``produce-1k`` / ``produce-100``: one confluent-kafka Producer, ``acks=all`` (Tansu is a
  single node, so ``acks=1`` is the same), ``linger.ms=5`` (librdkafka's default), no
  compression, one partition; fixed message count; timed from the first ``produce()`` to the
  end of ``flush()``, after a warm-up message so metadata lookup is excluded. The topic is
  deleted after every run (Tansu keeps every record in memory).
* ``produce-50p``: 50 producers at once, the ``produce-1k`` count of 1 KiB records between
  them (each producer its own connections; the proxy's work spreads over its ``workers``).
* ``consume``: a confluent-kafka Consumer ``assign()``-ed to a pre-filled 1 KiB topic from the
  beginning (no group join, no commits), timed from ``assign()`` to the last message.
* ``consume-100``: the same with 100 B records (the ``produce-100`` count).
* ``latency``: produce one 100 B message with ``linger.ms=0`` and wait for its delivery report,
  repeated; p50/p99 per side. ``metadata-rtt``: a raw-socket Metadata v1 request (no topics)
  round trip, p50/p99 (through kafkaguard this response is decoded and re-encoded).

``--upstream kafka`` puts Apache Kafka 4.3.1 in Tansu's place (single-node KRaft, PLAINTEXT, no
authorizer, 512 MB heap, started by ``tests/support/kafka_broker.py``: needs Java >= 17 and
Maven, like the ``kafka`` tests); the relay then fronts a second Kafka that advertises the
relay's port, ``metadata-rtt`` sends Metadata v4 (Kafka 4 removed v0-v3, KIP-896), and one
unrecorded warm-up round runs first (the JVM's JIT; ``--warmup-rounds``).

``--workers N`` adds the side ``kafkaguard-xN``: the same proxy with ``workers: N``
(kafkaguard/proxy/app/workers.py); proxy CPU is then the whole process tree's.
``kafkaguard-pure`` (default; ``--no-pure``) is the proxy with ``KAFKAGUARD_PURE_PYTHON=1``:
the pure-Python modules even where the compiled ones are built. ``kroxylicious`` (default when
``../shared/peers/kroxylicious/run_kroxy.sh`` exists; ``--no-kroxylicious``) is Kroxylicious
0.12 without filters in front of Tansu A, run from a writable copy in
``~/.cache/kafkaguard/kroxylicious`` (one warm-up round then runs first, for its JIT). The
proxies authorize with the bench's own ACLs plus ``--acls N`` (default 1,000) of other
principals. Ratios against the relay are printed beside those against direct, and for the
one-request-at-a-time workloads (``latency``, ``metadata-rtt``) each proxy's CPU per request
with the requests/s one core would serve at that cost. ``--py-spy DIR`` samples every Python
proxy side and prints the shares of its busy samples by stage.

``--profile-proxy FILE`` runs the proxy under cProfile (``python -m cProfile -o FILE``); it is
stopped with SIGINT so the profile is written. ``--kafkaguard-path DIR`` runs the proxy from
another checkout (prepended to ``PYTHONPATH``), for comparing a prototype change.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkaguard.proxy.config import HostPort  # noqa: E402
from kafkaguard.tansu import NODE_ID, TansuBroker, free_base, free_port  # noqa: E402

# --------------------------------------------------------------------------------------------
# The byte-relay baseline (runs in its own process: ``proxy_bench.py --serve-relay``).


class _Pipe(asyncio.Protocol):
    """One direction of a relay: bytes in → the peer's transport, with back-pressure."""

    def __init__(self, peer: _Pipe | None = None) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.peer is None:  # client side: connect upstream, buffer until connected
            self.transport.pause_reading()  # type: ignore[union-attr]
            asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, up = await loop.create_connection(lambda: _Pipe(self), *UPSTREAM)
        except OSError:
            self.transport.close()  # type: ignore[union-attr]
            return
        self.peer = up
        up.transport.writelines(self.pending)  # type: ignore[union-attr]
        self.pending = []
        self.transport.resume_reading()  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        if self.peer is None:  # uvloop may deliver data before the upstream is up
            self.pending.append(data)
        else:
            self.peer.transport.write(data)  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self.peer.transport.pause_reading()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self.peer.transport.resume_reading()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


UPSTREAM: tuple[str, int] = ("127.0.0.1", 0)


def serve_relay(listen_port: int, upstream: str) -> None:
    global UPSTREAM
    host, port = upstream.rsplit(":", 1)
    UPSTREAM = (host, int(port))
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Pipe, "127.0.0.1", listen_port)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        print("relay ready", flush=True)
        await stop.wait()
        server.close()

    asyncio.run(main())


# --------------------------------------------------------------------------------------------
# Processes


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@dataclass
class Side:
    name: str
    bootstrap: str
    admin_bootstrap: str
    """Where topics are created and deleted (always the broker itself)."""
    consume_topics: dict[int, str] = field(default_factory=dict)
    """Pre-filled topics to consume, by record size."""
    pid: int | None = None
    """The proxy process whose CPU time is measured (relay, kafkaguard)."""


def cpu_seconds(pid: int | None) -> float:
    """user + system CPU time of a process and its live children (``workers``: the
    supervisor and its worker processes; Linux ``/proc``), 0 when there is none."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            kids = [int(child) for child in children.read().split()]
    except FileNotFoundError:  # ended meanwhile
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(kid) for kid in kids)


class Timer:
    """Wall time and the side's proxy CPU time of the timed section of one run."""

    last_cpu_share = 0.0
    """Proxy CPU seconds per wall second of the last run (1.0 = one core busy)."""
    last_cpu_seconds = 0.0
    """Proxy CPU seconds of the last run."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.start = time.perf_counter()
        self.cpu = cpu_seconds(side.pid)

    def stop(self) -> float:
        elapsed = time.perf_counter() - self.start
        Timer.last_cpu_seconds = cpu_seconds(self.side.pid) - self.cpu
        Timer.last_cpu_share = Timer.last_cpu_seconds / elapsed
        return elapsed


class Scraper:
    """Scrapes a side's /metrics every second while the benchmark runs (as Prometheus would),
    so the side's figures include what recording and exposing its metrics cost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.scrapes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class Env:
    brokers: list[TansuBroker] = field(default_factory=list)
    kafka_brokers: list[Any] = field(default_factory=list)
    """tests.support.kafka_broker.KafkaBroker (``--upstream kafka``); imported lazily."""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    scrapers: list[Scraper] = field(default_factory=list)
    tmp: tempfile.TemporaryDirectory[str] = field(default_factory=tempfile.TemporaryDirectory)

    def start_broker(self, advertised: HostPort | None = None) -> TansuBroker:
        broker = TansuBroker(advertised=advertised)
        broker.start()
        self.brokers.append(broker)
        asyncio.run(broker.wait_ready())
        return broker

    def start_kafka(self, advertised_port: int | None = None) -> HostPort:
        """Apache Kafka via the tests' fixture; ``advertised_port``: clients are sent there
        (the relay's port) instead of to the broker's own."""
        sys.path.insert(0, str(REPO))
        from tests.support.kafka_broker import start_kafka

        extra = None
        if advertised_port is not None:
            extra = {"advertised.listeners": f"CLIENT://127.0.0.1:{advertised_port}"}
        directory = Path(self.tmp.name) / f"kafka-{len(self.kafka_brokers)}"
        broker = start_kafka("upstream", directory, extra_props=extra)
        self.kafka_brokers.append(broker)
        return HostPort("127.0.0.1", broker.port)

    def spawn(self, argv: list[str], env: dict[str, str] | None = None, log: Any = None) -> int:
        # cwd: ``python -m`` puts the working directory first on sys.path, which would shadow
        # a ``--kafkaguard-path``/``--candidate`` checkout given through PYTHONPATH.
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=self.tmp.name,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        self.processes.append(proc)
        return proc.pid

    def start_proxy(
        self,
        upstream: HostPort,
        args: argparse.Namespace,
        name: str = "kafkaguard",
        path: str | None = None,
        profile: str | None = None,
        workers: int = 1,
        extra_env: dict[str, str] | None = None,
    ) -> Side:
        port = free_port()
        config = Path(self.tmp.name) / f"{name}.yaml"
        (Path(self.tmp.name) / "acls.yaml").write_text(ACLS + other_acls(args.acls))
        admin = ""
        if name in (args.metrics or ()):  # the admin listener, scraped every second
            admin_port = free_port()
            admin = f"admin:\n  port: {admin_port}\n"
            self.scrapers.append(Scraper(f"http://127.0.0.1:{admin_port}/metrics"))
        config.write_text(
            admin + "listeners:\n"
            "  - name: PLAINTEXT\n"
            "    bind_host: 127.0.0.1\n"
            f"    port: {port}\n"
            f"    broker_ports: {{base: {free_base()}}}\n"
            f"upstream:\n  bootstrap_servers: ['{upstream}']\n"
            f"workers: {workers}\n"
            "logging:\n  level: WARNING\n" + (AUTHZ_SUPER if args.authz == "super" else AUTHZ_ACLS)
        )
        env = dict(os.environ, **(extra_env or {}))
        if path:
            env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
        argv = [sys.executable]
        if profile:
            argv += ["-m", "cProfile", "-o", profile]
        argv += ["-m", "kafkaguard", "run", "--config", str(config)]
        pid = self.spawn(argv, env)
        wait_port(port)
        return Side(name, f"127.0.0.1:{port}", str(upstream), pid=pid)

    def start_relay(self, port: int, upstream: HostPort) -> Side:
        pid = self.spawn([sys.executable, __file__, "--serve-relay", str(port), str(upstream)])
        wait_port(port)
        return Side("relay", f"127.0.0.1:{port}", str(upstream), pid=pid)

    def start_kroxylicious(self, upstream: HostPort, node_id: int) -> Side:
        """Kroxylicious 0.12 (no filters) via the peer's ``run_kroxy.sh``, run from a writable
        copy (the script resolves its jars and compiles its launcher beside itself); it
        serves the broker ``node_id`` (its log: ``kroxylicious.log`` in the run's directory)."""
        KROXY_HOME.mkdir(parents=True, exist_ok=True)
        for source in KROXY_PEER.iterdir():
            if source.is_file() and not (KROXY_HOME / source.name).exists():
                (KROXY_HOME / source.name).write_bytes(source.read_bytes())
        (KROXY_HOME / "run_kroxy.sh").chmod(0o755)
        port = free_port()
        script = str(KROXY_HOME / "run_kroxy.sh")
        kroxy_log = (Path(self.tmp.name) / "kroxylicious.log").open("wb")
        pid = self.spawn(["bash", script, str(port), str(upstream), str(node_id)], log=kroxy_log)
        wait_port(port, timeout=300)  # the first start resolves the jars with Maven
        return Side("kroxylicious", f"127.0.0.1:{port}", str(upstream), pid=pid)

    def start_py_spy(self, side: Side, directory: str) -> None:
        """Sample ``side``'s process (and its workers) until the end: collapsed stacks in
        ``directory/<side>.txt``, idle samples left out (``py-spy record --format raw``)."""
        out = Path(directory) / f"{side.name}.txt"
        argv = ["py-spy", "record", "--format", "raw", "--rate", "250", "--subprocesses"]
        argv += ["--nonblocking", "-o", str(out), "-p", str(side.pid)]
        self.spawn(argv)

    def close(self) -> None:
        """Stop everything started (once: a second call finds nothing left)."""
        for scraper in self.scrapers:
            scraper.stop()
        for proc in self.processes:  # SIGINT: lets cProfile write its output
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        for proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for broker in self.brokers:
            broker.stop()
        for kafka in self.kafka_brokers:
            kafka.stop()
        self.scrapers, self.processes, self.brokers, self.kafka_brokers = [], [], [], []
        self.tmp.cleanup()


KROXY_PEER = REPO.parent / "shared" / "peers" / "kroxylicious"
"""Kroxylicious as a benchmark peer (``run_kroxy.sh LISTEN_PORT UPSTREAM``), when present."""
KROXY_HOME = Path.home() / ".cache" / "kafkaguard" / "kroxylicious"
KAFKA_NODE_ID = 1
"""The node id of ``tests/support/kafka_broker.py``'s broker (Tansu's: ``tansu.NODE_ID``)."""

# --------------------------------------------------------------------------------------------
# Workloads (confluent-kafka in this process)

QUIET = {"log_level": 3}

# The proxy authorizes every request. Default: least-privilege ACLs for the bench's own
# topics and groups (the realistic path); ``--authz super``: the client is a super user.
ACLS = """\
version: 1
acls:
  - {principal: "User:ANONYMOUS", operation: ALL, permission: ALLOW,
     resource_type: TOPIC, pattern_type: PREFIXED, name: bench-}
  - {principal: "User:ANONYMOUS", operation: READ, permission: ALLOW,
     resource_type: GROUP, pattern_type: PREFIXED, name: bench-}
  - {principal: "User:ANONYMOUS", operation: IDEMPOTENT_WRITE, permission: ALLOW,
     resource_type: CLUSTER, name: kafka-cluster}
  - {principal: "User:ANONYMOUS", operation: DESCRIBE, permission: ALLOW,
     resource_type: CLUSTER, name: kafka-cluster}
"""


def other_acls(count: int) -> str:
    """``count`` ACLs of other principals (LITERAL and PREFIXED topic ACLs, a DENY in 20, as
    ``authorizer_bench.make_acls``), so the authorizer's index has a realistic size."""
    lines = []
    for i in range(count):
        permission = "DENY" if i % 20 == 0 else "ALLOW"
        operation = ("READ", "WRITE", "DESCRIBE", "CREATE")[i % 4]
        pattern, name = ("LITERAL", f"topic-{i}") if i % 10 < 6 else ("PREFIXED", f"team-{i:06d}")
        lines.append(
            f'  - {{principal: "User:u{i % 997}", operation: {operation}, '
            f"permission: {permission}, resource_type: TOPIC, pattern_type: {pattern}, "
            f"name: {name}}}\n"
        )
    return "".join(lines)


AUTHZ_ACLS = """\
authorizer:
  allow_everyone_if_no_acl_found: false
acl_store:
  type: file
  path: acls.yaml
  poll_interval_s: 0
"""
AUTHZ_SUPER = """\
authorizer:
  super_users: "User:ANONYMOUS"
"""


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(15)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for fut in admin.delete_topics([topic]).values():
        with contextlib.suppress(KafkaException):
            fut.result(15)


def producer(bootstrap: str, **extra: object) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "none",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        **QUIET,
    }
    config.update(extra)
    return Producer(config)


def send(
    prod: Producer, topic: str, payload: bytes, on_delivery: Callable[..., None] | None = None
) -> None:
    """``produce()``, waiting while librdkafka's queue is full."""
    while True:
        try:
            if on_delivery is None:
                prod.produce(topic, payload)
            else:
                prod.produce(topic, payload, on_delivery=on_delivery)
            return
        except BufferError:
            prod.poll(0.001)


def produce_run(side: Side, size: int, count: int) -> float:
    """Messages per second for ``count`` records of ``size`` bytes."""
    topic = f"bench-p-{uuid.uuid4().hex[:8]}"
    create_topic(side.admin_bootstrap, topic)
    try:
        prod = producer(side.bootstrap)
        prod.produce(topic, b"w")
        if prod.flush(15) != 0:
            raise RuntimeError(f"{side.name}: warm-up message not delivered")
        payload = os.urandom(size)
        failed = 0

        def on_delivery(err: object, _msg: object) -> None:
            nonlocal failed
            if err is not None:
                failed += 1

        timer = Timer(side)
        for _ in range(count):
            send(prod, topic, payload, on_delivery)
        if prod.flush(120) != 0:
            raise RuntimeError(f"{side.name}: messages left undelivered")
        elapsed = timer.stop()
        if failed:
            raise RuntimeError(f"{side.name}: {failed} deliveries failed")
        return count / elapsed
    finally:
        delete_topic(side.admin_bootstrap, topic)


def produce_many_run(side: Side, size: int, count: int, producers: int = 50) -> float:
    """Messages per second for ``count`` records of ``size`` bytes from ``producers``
    producers at once (each its own connections; one Python thread hands them records in
    turn, librdkafka's threads send them)."""
    topic = f"bench-m-{uuid.uuid4().hex[:8]}"
    create_topic(side.admin_bootstrap, topic)
    try:
        prods = [producer(side.bootstrap) for _ in range(producers)]
        for prod in prods:
            prod.produce(topic, b"w")
        if any(prod.flush(30) != 0 for prod in prods):
            raise RuntimeError(f"{side.name}: warm-up messages not delivered")
        payload = os.urandom(size)
        timer = Timer(side)
        for i in range(count):
            send(prods[i % producers], topic, payload)
        if any(prod.flush(120) != 0 for prod in prods):
            raise RuntimeError(f"{side.name}: messages left undelivered")
        return count / timer.stop()
    finally:
        delete_topic(side.admin_bootstrap, topic)


def fill_topic(side: Side, count: int, size: int) -> str:
    """A new topic holding ``count`` records of ``size`` bytes; its name."""
    topic = f"bench-c-{uuid.uuid4().hex[:8]}"
    create_topic(side.admin_bootstrap, topic)
    prod = producer(side.admin_bootstrap, **{"linger.ms": 20})
    payload = os.urandom(size)
    for _ in range(count):
        send(prod, topic, payload)
    if prod.flush(120) != 0:
        raise RuntimeError("pre-fill failed")
    return topic


def consume_run(side: Side, size: int, count: int) -> float:
    cons = Consumer(
        {
            "bootstrap.servers": side.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **QUIET,
        }
    )
    try:
        topic = side.consume_topics[size]
        cons.list_topics(topic, timeout=15)  # metadata lookup not timed
        timer = Timer(side)
        cons.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 120
        while got < count:
            for msg in cons.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is None:
                    got += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side.name}: consumed only {got} of {count}")
        return count / timer.stop()
    finally:
        cons.close()


def latency_run(side: Side, count: int) -> list[float]:
    """Milliseconds from produce() to delivery report, one message at a time."""
    topic = f"bench-l-{uuid.uuid4().hex[:8]}"
    create_topic(side.admin_bootstrap, topic)
    try:
        prod = producer(side.bootstrap, **{"linger.ms": 0})
        prod.produce(topic, b"w")
        prod.flush(15)
        payload = os.urandom(100)
        samples = []
        timer = Timer(side)
        for _ in range(count):
            start = time.perf_counter()
            prod.produce(topic, payload)
            if prod.flush(10) != 0:
                raise RuntimeError(f"{side.name}: latency message not delivered")
            samples.append((time.perf_counter() - start) * 1000)
        timer.stop()
        return samples
    finally:
        delete_topic(side.admin_bootstrap, topic)


def metadata_rtt(side: Side, count: int, version: int = 1) -> list[float]:
    """Raw-socket Metadata (no topics) round trips, milliseconds; v1, or v4 (the oldest
    Kafka 4 accepts: it adds ``allow_auto_topic_creation``)."""
    host, port = side.bootstrap.rsplit(":", 1)
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        timer = Timer(side)
        for corr in range(count + 10):
            client = b"bench"
            body = struct.pack(">hhih", 3, version, corr, len(client)) + client
            body += struct.pack(">i", 0) + (b"\x00" if version >= 4 else b"")
            request = struct.pack(">i", len(body)) + body
            start = time.perf_counter()
            sock.sendall(request)
            size = struct.unpack(">i", _recv(sock, 4))[0]
            _recv(sock, size)
            if corr >= 10:  # the first round trips warm up
                samples.append((time.perf_counter() - start) * 1000)
        timer.stop()
    return samples


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


# --------------------------------------------------------------------------------------------
# Driver


@dataclass
class Plan:
    rounds: int
    produce_1k: int
    produce_100: int
    consume: int
    latency: int


PLANS = {
    "full": Plan(
        rounds=7, produce_1k=300_000, produce_100=1_000_000, consume=300_000, latency=2000
    ),
    "quick": Plan(rounds=3, produce_1k=100_000, produce_100=300_000, consume=100_000, latency=500),
}

WORKLOADS = (
    "produce-1k",
    "produce-100",
    "produce-50p",
    "consume",
    "consume-100",
    "latency",
    "metadata-rtt",
)
SIZES = {"produce-100": 100, "consume-100": 100}
"""Record size of the throughput workloads other than 1 KiB."""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> int:  # noqa: C901 - the benchmark as one script: start sides, run rounds, report
    plan = PLANS["quick" if args.quick else "full"]
    rounds = args.rounds or plan.rounds
    if args.messages:
        scale = args.messages / plan.produce_1k
        plan = Plan(
            rounds,
            args.messages,
            int(plan.produce_100 * scale),
            args.messages,
            plan.latency,
        )
    if args.samples:
        plan = Plan(plan.rounds, plan.produce_1k, plan.produce_100, plan.consume, args.samples)
    workloads = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        print(f"unknown workloads: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    env = Env()
    began = time.monotonic()
    try:
        kafka = args.upstream == "kafka"
        broker = env.start_kafka() if kafka else env.start_broker().address
        sides = [
            Side("direct", str(broker), str(broker)),
            env.start_proxy(broker, args, path=args.kafkaguard_path, profile=args.profile_proxy),
        ]
        if args.candidate:
            sides.append(env.start_proxy(broker, args, "candidate", args.candidate))
        if args.pure:  # the pure-Python modules even where compiled ones are installed
            pure = {"KAFKAGUARD_PURE_PYTHON": "1"}
            sides.append(env.start_proxy(broker, args, "kafkaguard-pure", extra_env=pure))
        if args.workers > 1:
            name = f"kafkaguard-x{args.workers}"
            sides.append(env.start_proxy(broker, args, name, workers=args.workers))
        if args.relay:
            relay_port = free_port()
            relayed = (
                env.start_kafka(advertised_port=relay_port)
                if kafka
                else env.start_broker(advertised=HostPort("127.0.0.1", relay_port)).address
            )
            sides.insert(1, env.start_relay(relay_port, relayed))
        kroxy = args.kroxylicious
        if kroxy is None:
            kroxy = (KROXY_PEER / "run_kroxy.sh").exists()
        if kroxy:
            sides.append(env.start_kroxylicious(broker, KAFKA_NODE_ID if kafka else NODE_ID))
        if args.py_spy:
            for side in sides:
                if side.pid is not None and side.name != "kroxylicious":
                    env.start_py_spy(side, args.py_spy)
        fills = {1024: plan.consume, 100: plan.produce_100}  # one topic per broker and size
        for size, count in fills.items():
            if ("consume" if size == 1024 else "consume-100") not in workloads:
                continue
            filled: dict[str, str] = {}
            for side in sides:
                if side.admin_bootstrap not in filled:
                    filled[side.admin_bootstrap] = fill_topic(side, count, size)
                side.consume_topics[size] = filled[side.admin_bootstrap]
        jobs: dict[str, Callable[[Side], float | list[float]]] = {
            "produce-1k": lambda s: produce_run(s, 1024, plan.produce_1k),
            "produce-100": lambda s: produce_run(s, 100, plan.produce_100),
            "produce-50p": lambda s: produce_many_run(s, 1024, plan.produce_1k),
            "consume": lambda s: consume_run(s, 1024, plan.consume),
            "consume-100": lambda s: consume_run(s, 100, plan.produce_100),
            "latency": lambda s: latency_run(s, plan.latency),
            "metadata-rtt": lambda s: metadata_rtt(s, plan.latency, 4 if kafka else 1),
        }
        results: dict[tuple[str, str], list[float | list[float]]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        per_request: dict[tuple[str, str], list[float]] = {}
        """Proxy CPU-seconds per request of the one-at-a-time workloads."""
        warmup = args.warmup_rounds
        if warmup is None:  # the JVMs' JIT: Kafka's, Kroxylicious'
            warmup = int(kafka or kroxy)
        for r in range(-warmup, rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for workload in workloads:
                for side in order:
                    value = jobs[workload](side)
                    if r < 0:  # warm-up: the JVM's JIT, page cache, connections
                        print(f"warm-up {workload:<13} {side.name}")
                        continue
                    results.setdefault((workload, side.name), []).append(value)
                    cpu.setdefault((workload, side.name), []).append(Timer.last_cpu_share)
                    if isinstance(value, list):
                        per_request.setdefault((workload, side.name), []).append(
                            Timer.last_cpu_seconds / len(value)
                        )
                    shown = (
                        f"{value:,.0f} msg/s"
                        if isinstance(value, float)
                        else f"p50 {percentile(value, 0.5):.3f} ms"
                    )
                    if side.pid is not None:
                        shown += f"  (proxy CPU {Timer.last_cpu_share:.0%} of a core)"
                    print(f"round {r + 1}/{rounds} {workload:<13} {side.name:<11} {shown}")
        print(f"\nupstream: {args.upstream}")
        report(results, sides, workloads, plan, rounds)
        proxies = [s.name for s in sides if s.pid is not None]
        print("\nmedian proxy-process CPU during the timed section (1.00 = one core busy)")
        for workload in workloads:
            shares = "".join(
                f" {name:>16} {statistics.median(cpu[(workload, name)]):.2f}" for name in proxies
            )
            print(f"{workload:<22}{shares}")
        cpu_per_gb(results, cpu, proxies, workloads)
        cpu_per_request(per_request, proxies, workloads)
        if args.py_spy:
            env.close()  # py-spy writes its files when its target ends
            for side in sides:
                profile = Path(args.py_spy) / f"{side.name}.txt"
                if profile.exists():
                    print_stages(side.name, profile)
        print(f"\nwall time {time.monotonic() - began:.0f} s")
    finally:
        env.close()
    return 0


def cpu_per_gb(
    results: dict[tuple[str, str], list[float | list[float]]],
    cpu: dict[tuple[str, str], list[float]],
    proxies: list[str],
    workloads: list[str],
) -> None:
    """Proxy CPU-seconds per GB moved (median over rounds of CPU share ÷ GB/s), and each
    proxy's against the relay's when there is one."""
    print("\nproxy CPU-seconds per GB (median of rounds)")
    for workload in workloads:
        if workload in ("latency", "metadata-rtt"):
            continue
        size = SIZES.get(workload, 1024)
        per_gb = {
            name: statistics.median(
                share / (rate * size / 1e9)  # type: ignore[operator]
                for share, rate in zip(
                    cpu[(workload, name)], results[(workload, name)], strict=True
                )
            )
            for name in proxies
        }
        line = f"{workload:<22}" + "".join(f" {name:>16} {per_gb[name]:.2f}" for name in proxies)
        if per_gb.get("relay"):  # (0 in a run too short for the clock's ticks)
            line += "".join(
                f"   {name}/relay {per_gb[name] / per_gb['relay']:.2f}x"
                for name in proxies
                if name != "relay"
            )
        print(line)


def cpu_per_request(
    per_request: dict[tuple[str, str], list[float]], proxies: list[str], workloads: list[str]
) -> None:
    """Proxy CPU per request of the one-request-at-a-time workloads (median of rounds), and the
    requests per second one core would serve at that cost (a projection: a loaded proxy
    batches reads and writes, so it does better; the ratio between sides is the figure)."""
    rows = [w for w in workloads if w in ("latency", "metadata-rtt")]
    if not rows:
        return
    print("\nproxy CPU per request, µs (median of rounds), and projected requests/s per core")
    for workload in rows:
        line = f"{workload:<22}"
        for name in proxies:
            us = statistics.median(per_request[(workload, name)]) * 1e6
            line += f" {name:>16} {us:6.1f} µs ({1e6 / us if us else 0:,.0f}/s)"
        print(line)


STAGE_RULES: tuple[tuple[str, str], ...] = (
    ("policy/standard.py", "authorize"),
    ("session.py", "authorize"),
    ("proxy/core/context.py", "authorize"),
    ("kafkaguard/audit/", "audit hand-off"),
    ("protocol/framing.py", "framing"),
    ("peek_request_header", "header peek"),
    ("peek_correlation_id", "header peek"),
    ("protocol/skim/produce.py", "handler"),
    ("protocol/codec.py", "handler"),
    ("proxy/handlers/", "handler"),
    ("handle_request", "dispatch"),
    ("protocol/inflight.py", "in-flight slot"),
    ("proxy/core/stats.py", "stats"),
    ("protocol/skim/tails.py", "response path"),
    ("_on_responses", "response path"),
    ("_write_ready", "response path"),
    ("receive_broker", "response path"),
    ("_apply", "verdict"),
    ("proxy/core/exchange.py", "exchange (other)"),
    ("_send_client", "socket writes"),
    ("send (kafkaguard/proxy/net/connection.py", "socket writes"),
    ("data_received (proxy_bench.py", "relay data_received + write"),
    ("proxy/net/connection.py", "shell"),
)
"""py-spy frame text → stage; a sample counts for the first rule matched from its leaf."""


def print_stages(name: str, profile: Path) -> None:
    """Shares of the proxy's busy samples by stage (``py-spy record --format raw``)."""
    counts: dict[str, int] = {}
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")[::-1]
        stage = next(
            (stage for frame in frames for needle, stage in STAGE_RULES if needle in frame),
            "event loop (uvloop: epoll, reads), other",
        )
        counts[stage] = counts.get(stage, 0) + int(count)
    total = sum(counts.values()) or 1
    print(f"\npy-spy {name}: {total} busy samples")
    for stage, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {stage:<32}{count / total:6.1%}")


def report(
    results: dict[tuple[str, str], list[float | list[float]]],
    sides: list[Side],
    workloads: list[str],
    plan: Plan,
    rounds: int,
) -> None:
    names = [s.name for s in sides]
    print(f"medians over {rounds} rounds (messages: 1k={plan.produce_1k}, 100B={plan.produce_100},")
    print(f"consume={plan.consume}, latency samples={plan.latency} per round)")
    header = f"{'workload':<22}" + "".join(f"{n:>17}" for n in names)
    header += "".join(f"{n + '/direct':>24}" for n in names[1:])
    print(header)
    for workload in workloads:
        rows: list[tuple[str, dict[str, float], bool]] = []
        if workload in ("latency", "metadata-rtt"):
            for q, label in ((0.5, "p50 ms"), (0.99, "p99 ms")):
                # Per-round percentile, then the median over rounds.
                values = {
                    n: statistics.median(percentile(v, q) for v in results[(workload, n)])  # type: ignore[arg-type]
                    for n in names
                }
                rows.append((f"{workload} {label}", values, False))
        else:
            values = {n: statistics.median(results[(workload, n)]) for n in names}  # type: ignore[arg-type]
            size = SIZES.get(workload, 1024)
            rows.append((f"{workload} msg/s", values, True))
            rows.append((f"{workload} MB/s", {n: v * size / 1e6 for n, v in values.items()}, True))
        for label, values, throughput in rows:
            line = f"{label:<22}" + "".join(f"{values[n]:>17,.3f}" for n in names)
            for n in names[1:]:
                if throughput:
                    line += f"{values[n] / values['direct']:>23.2f}x"
                else:
                    line += f"{values[n] - values['direct']:>+22.3f}ms"
            if "relay" in values and values["relay"]:  # the ratios: against the relay
                line += "   vs relay:" + "".join(
                    f" {n} {values[n] / values['relay']:.2f}x"
                    for n in names
                    if n not in ("direct", "relay")
                )
            print(line)


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7, quick 3)")
    parser.add_argument("--messages", type=int, help="1 KiB produce/consume message count")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (< 1 min)")
    parser.add_argument(
        "--samples",
        type=int,
        help="round trips per round of latency and metadata-rtt (default 2000, quick 500; "
        "CPU per request is read from /proc in 10 ms ticks: more samples, finer figures)",
    )
    parser.add_argument(
        "--relay",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the plain byte-relay floor as a side (default; --no-relay leaves it out)",
    )
    parser.add_argument("--workloads", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    parser.add_argument("--profile-proxy", metavar="FILE", help="run the proxy under cProfile")
    parser.add_argument("--kafkaguard-path", metavar="DIR", help="run the proxy from DIR")
    parser.add_argument(
        "--candidate",
        metavar="DIR",
        help="also run a second kafkaguard from DIR (a prototype) as side 'candidate'",
    )
    parser.add_argument(
        "--metrics",
        action="append",
        metavar="SIDE",
        help="serve the admin listener on SIDE (kafkaguard or candidate) and scrape its "
        "/metrics every second (repeatable)",
    )
    parser.add_argument(
        "--authz",
        choices=("acls", "super"),
        default="acls",
        help="acls: prefixed ALLOW ACLs for the bench topics (default); super: super user",
    )
    parser.add_argument(
        "--upstream",
        choices=("tansu", "kafka"),
        default="tansu",
        help="the broker: Tansu in memory (default) or Apache Kafka 4.3.1 (needs Java 17, Maven)",
    )
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        help="unrecorded rounds first (default 1 with --upstream kafka: JIT warm-up, else 0)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=max(2, len(os.sched_getaffinity(0))),
        metavar="N",
        help="also run kafkaguard with workers: N as side kafkaguard-xN (default: the cores, "
        "at least 2; 1: no such side)",
    )
    parser.add_argument(
        "--pure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run kafkaguard with KAFKAGUARD_PURE_PYTHON=1 as side kafkaguard-pure "
        "(default; the same code where no compiled modules are built)",
    )
    parser.add_argument(
        "--kroxylicious",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Kroxylicious as a side (default: when ../shared/peers/kroxylicious/run_kroxy.sh "
        "exists; needs Java 17 and Maven)",
    )
    parser.add_argument(
        "--acls",
        type=int,
        default=1000,
        metavar="N",
        help="ACLs of other principals beside the bench's own (default 1000)",
    )
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="sample every Python proxy side with py-spy; collapsed stacks in DIR, and the "
        "shares of busy samples by stage printed at the end",
    )
    parser.add_argument(
        "--serve-relay", nargs=2, metavar=("PORT", "UPSTREAM"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve_relay:
        serve_relay(int(args.serve_relay[0]), args.serve_relay[1])
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
