"""Fuzz the proxy over the wire and check that it holds: ``python -m tests.support.fuzz.harness``.

Why over the wire, against a real process: the failures that matter are the process dying
(a native abort in a decoder), memory growing without bound, a hostile frame making the proxy
forward what it must refuse, or leaking what it must hide. Only a separate ``kafkaguard run``
process in front of a real broker shows all of them: its exit status, its RSS and its log are
observed from outside, the broker's topics are inspected behind the proxy's back.

Set-up: an embedded Tansu broker on 127.0.0.2 (a port whose bytes rarely occur by chance, so
its appearance in a response means a leak), with a protected topic ``guarded`` holding marker
records written directly at Tansu, and ``fuzz-*`` topics. The proxy has two listeners:
PLAINTEXT (``User:ANONYMOUS``) and SASL_PLAINTEXT with PLAIN (``User:fuzzer``); both
principals may use ``fuzz-*`` topics and groups, neither has any right on ``guarded``.

Fuzzing: a bounded pool of raw connections, each in one of three phases — PLAINTEXT, SASL
before authentication, SASL after a real PLAIN authentication — writes batches of frames from
:class:`frames.FrameGenerator` pipelined, each batch followed by an ApiVersions probe: its
answer means every frame before it was handled and the connection is reused; a close means
the proxy refused something (reconnect); silence means a frame claims more bytes than were
sent (close after a short wait).

Invariants, checked continuously and at the end: the proxy is alive and under the RSS limit;
no response carries a marker, the broker's host or its port; the protected topic's end
offsets do not move; a control client (PLAINTEXT Produce + Metadata, SASL login + Metadata,
each on a fresh connection) succeeds every few seconds; the proxy logs no traceback and no
ERROR line. Any violation ends the run, prints the frames that preceded it (hex, seed, index)
and makes the exit status 1.

``--differential`` runs no proxy and no broker: the same frames are read by the proxy's request
path and by Kafka's own readers, and compared (:mod:`tests.support.fuzz.differential`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import TansuBroker, free_port
from tests.support.fuzz.frames import (
    ALLOWED_TOPICS,
    PROTECTED_TOPIC,
    FrameGenerator,
    FuzzFrame,
    record_batch,
)

BROKER_HOST: Final = "127.0.0.2"
"""Where Tansu listens and what it advertises; the proxy's listeners are on 127.0.0.1."""
PROXY_HOST: Final = "127.0.0.1"
USER: Final = "fuzzer"
PHASES: Final = (("plaintext", 0.4), ("sasl-preauth", 0.25), ("sasl-authed", 0.35))
PROBE_BASE: Final = 0x4B470000
"""Correlation ids of the harness's own ApiVersions probes (fuzz frames rarely use them)."""
PROBE_WAIT_S: Final = 1.0
"""How long a batch may take to be answered (long-polls and group joins end up here)."""
OPEN_ENDED_WAIT_S: Final = 0.1
"""How long to watch a connection whose last frame claims more bytes than were sent."""
BATCHES_PER_CONNECTION: Final = 16
LOG_PROBLEM: Final = re.compile(r"Traceback|^\S+ \S+ (ERROR|CRITICAL) ")
"""A traceback, or a line logged at ERROR or above (the format of ``kafkaguard run``)."""
PEER: Final = re.compile(r"127\.0\.0\.1:(\d+)")


@dataclass
class Options:
    seed: int
    frames: int
    seconds: float
    connections: int = 8
    rss_limit_mb: float = 200.0
    control_interval_s: float = 2.0
    control_timeout_s: float = 5.0
    keep: bool = False
    """Keep the work directory (config, log) even when the run passes."""


@dataclass
class Violation:
    kind: str
    detail: str
    frames: list[tuple[str, FuzzFrame]] = field(default_factory=list)
    """(phase and local port, frame) of the frames that preceded it, oldest first."""

    def render(self, seed: int) -> str:
        lines = [f"VIOLATION {self.kind}: {self.detail}"]
        for where, f in self.frames:
            hex_ = f.data.hex() if len(f.data) <= 8192 else f.data[:8192].hex() + "..."
            lines.append(f"  frame seed={seed} index={f.index} {where} {f.description}")
            lines.append(f"    hex={hex_}")
        return "\n".join(lines)


@dataclass
class Stats:
    frames_sent: int = 0
    connections: int = 0
    closes: int = 0
    """Connections the proxy closed (EOF or reset)."""
    timeouts: int = 0
    """Connections the harness gave up waiting on (a frame claiming more bytes than sent)."""
    responses: int = 0
    """Response frames received, the probes' included."""
    probes: int = 0
    """Probes answered: batches after which the connection was still usable."""
    auth_ok: int = 0
    auth_failed: int = 0
    control_ok: int = 0
    max_rss_kb: int = 0
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0


@dataclass
class Report:
    options: Options
    stats: Stats
    violations: list[Violation]
    workdir: Path

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        s = self.stats
        duration = (s.ended or time.monotonic()) - s.started
        return (
            f"fuzz seed={self.options.seed} frames={s.frames_sent} duration={duration:.1f}s "
            f"rate={s.frames_sent / max(duration, 1e-9):.0f}/s connections={s.connections} "
            f"closes={s.closes} timeouts={s.timeouts} responses={s.responses} probes={s.probes} "
            f"auth={s.auth_ok}ok/{s.auth_failed}failed max_rss={s.max_rss_kb / 1024:.1f}MB "
            f"control_round_trips={s.control_ok} failures={len(self.violations)}"
        )


# -- a raw Kafka connection ------------------------------------------------------------------


class RawConnection:
    """One client connection: write any bytes, read whole response frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self.local_port: int = writer.get_extra_info("sockname")[1]

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float = 5.0) -> RawConnection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        return cls(reader, writer)

    def close(self) -> None:
        self.writer.close()

    async def read_some(self, timeout_s: float) -> bytes:
        """The next bytes received (b"" on EOF or reset); TimeoutError if none come."""
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout_s)
        except ConnectionError:
            return b""
        self.buffer += data
        return data

    def take_frames(self) -> Iterator[bytes]:
        while len(self.buffer) >= 4:
            size = int.from_bytes(self.buffer[:4], "big", signed=True)
            if size < 0 or len(self.buffer) < 4 + size:
                return
            frame = bytes(self.buffer[: 4 + size])
            del self.buffer[: 4 + size]
            yield frame

    async def request(self, body: Any, correlation_id: int, timeout_s: float) -> Any:
        """Send ``body``, return its decoded response (EOFError if the connection closes)."""
        self.writer.write(codec.encode_request(body, correlation_id, "fuzz-control"))
        deadline = time.monotonic() + timeout_s
        while True:
            for frame in self.take_frames():
                if int.from_bytes(frame[4:8], "big", signed=True) == correlation_id:
                    return codec.decode_response(frame, body.__api_key__, body.__version__)
            if not await self.read_some(max(0.01, deadline - time.monotonic())):
                raise EOFError("connection closed")


def build(api_key: int, version: int, **values: Any) -> Any:
    return codec.make_entity(codec.request_schema(api_key, version), **values)


def nested(api_key: int, version: int, *path: str, **values: Any) -> Any:
    entity_type: Any = codec.request_schema(api_key, version)
    for name in path:
        entity_type = codec.nested_type(entity_type, name)
    return codec.make_entity(entity_type, **values)


def metadata_request(topics: tuple[str, ...] | None) -> Any:
    entries = None if topics is None else tuple(nested(3, 12, "topics", name=t) for t in topics)
    return build(3, 12, topics=entries, allow_auto_topic_creation=False)


def produce_request(topic: str) -> Any:
    partition = nested(0, 9, "topic_data", "partition_data", index=0, records=record_batch())
    data = nested(0, 9, "topic_data", name=topic, partition_data=(partition,))
    return build(0, 9, acks=1, timeout=timedelta(seconds=5), topic_data=(data,))


async def sasl_login(conn: RawConnection, password: str, timeout_s: float) -> bool:
    """SaslHandshake v1 (PLAIN) + SaslAuthenticate v2 with raw frames; True on success."""
    handshake = await conn.request(build(17, 1, mechanism="PLAIN"), 1, timeout_s)
    if handshake.error_code != ErrorCode.none:
        return False
    token = b"\0" + USER.encode() + b"\0" + password.encode()
    answer = await conn.request(build(36, 2, auth_bytes=token), 2, timeout_s)
    return bool(answer.error_code == ErrorCode.none)


# -- set-up ----------------------------------------------------------------------------------


def distinctive_port(host: str) -> int:
    """A free port both of whose bytes are >= 0x80: as an int32 (00 00 hi lo) or in ASCII it
    is unlikely to occur in a response by chance, so finding it there means a leak."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(0x80, 0xEE) << 8 | rng.randrange(0x80, 0x100)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free distinctive port")


def free_base(node_id: int) -> int:
    """A broker-port base such that ``base + node_id`` is free (below the ephemeral range)."""
    for _ in range(100):
        base = random.randrange(20000, 32000 - node_id)
        with socket.socket() as sock:
            try:
                sock.bind((PROXY_HOST, base + node_id))
            except OSError:
                continue
            return base
    raise RuntimeError("no free port range")


def acl_file_text() -> str:
    """Both fuzzing principals: ``fuzz-*`` topics, groups and transactional ids, cluster
    DESCRIBE/IDEMPOTENT_WRITE; nothing on ``guarded``. No CREATE/DELETE/ALTER anywhere, so the
    fuzzer cannot make Tansu create thousands of partitions or drop the protected topic."""
    grants = [
        ("TOPIC", "PREFIXED", "fuzz-", ("READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")),
        ("GROUP", "PREFIXED", "fuzz-", ("READ", "DESCRIBE")),
        ("TRANSACTIONAL_ID", "PREFIXED", "fuzz-", ("WRITE", "DESCRIBE")),
        ("CLUSTER", "LITERAL", "kafka-cluster", ("DESCRIBE", "IDEMPOTENT_WRITE")),
    ]
    lines = ["version: 1", "acls:"]
    for principal in ("User:ANONYMOUS", f"User:{USER}"):
        for resource_type, pattern_type, name, operations in grants:
            for operation in operations:
                lines.append(
                    f'  - {{principal: "{principal}", operation: {operation}, '
                    f"permission: ALLOW, resource_type: {resource_type}, "
                    f'pattern_type: {pattern_type}, name: "{name}"}}'
                )
    return "\n".join(lines) + "\n"


def config_text(upstream: str, plaintext: tuple[int, int], sasl: tuple[int, int]) -> str:
    return f"""\
upstream:
  bootstrap_servers: ["{upstream}"]
  connect_timeout_s: 5.0
listeners:
  - name: PLAINTEXT
    security_protocol: PLAINTEXT
    bind_host: {PROXY_HOST}
    port: {plaintext[0]}
    advertised_host: {PROXY_HOST}
    broker_ports: {{base: {plaintext[1]}}}
  - name: SASL_PLAINTEXT
    security_protocol: SASL_PLAINTEXT
    bind_host: {PROXY_HOST}
    port: {sasl[0]}
    advertised_host: {PROXY_HOST}
    broker_ports: {{base: {sasl[1]}}}
    sasl:
      enabled_mechanisms: [PLAIN]
      credentials_file: users.yaml
      # Failed authentications are the fuzzer's daily bread: keep their delay short.
      failed_authentication_delay_ms: 1
      max_failed_authentication_delay_ms: 10
logging:
  level: WARNING
shutdown_timeout_ms: 1000
authorizer:
  allow_everyone_if_no_acl_found: false
acl_store:
  type: file
  path: acls.yaml
"""


def prepare_broker(bootstrap: str, marker: bytes) -> dict[int, int]:
    """Create the topics and write the marker records to ``guarded`` directly at the broker
    (the proxy never sees them); returns ``guarded``'s end offsets."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    topics = [NewTopic(PROTECTED_TOPIC, 2, 1), *(NewTopic(t, 1, 1) for t in ALLOWED_TOPICS)]
    for future in admin.create_topics(topics, operation_timeout=10).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    errors: list[Any] = []
    for partition in (0, 1):
        for i in range(3):
            producer.produce(
                PROTECTED_TOPIC,
                marker + f"-{partition}-{i}".encode(),
                key=marker,
                partition=partition,
                on_delivery=lambda err, _msg: errors.append(err),
            )
    if producer.flush(15) or any(errors):
        raise RuntimeError(f"cannot write the marker records: {errors}")
    return end_offsets(bootstrap)


def end_offsets(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fuzz-offsets", "log_level": 3}
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(PROTECTED_TOPIC, p), timeout=10)[1]
            for p in (0, 1)
        }
    finally:
        consumer.close()


# -- the run ---------------------------------------------------------------------------------


class Fuzzer:
    def __init__(self, options: Options, workdir: Path) -> None:
        self.options = options
        self.workdir = workdir
        self.stats = Stats()
        self.violations: list[Violation] = []
        self.stop = asyncio.Event()
        self.marker = b"KGMARK-" + secrets.token_hex(8).encode()
        self.password = secrets.token_hex(12)
        self.rng = random.Random(options.seed)
        self.next_index = 0
        self.deadline = 0.0
        self.broker: TansuBroker | None = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "proxy.log"
        self.log_offset = 0
        self.ports: dict[str, int] = {}
        self.generator = FrameGenerator(options.seed)
        """Replaced, once the broker's topic ids are known, by one that uses them."""
        self.history: OrderedDict[int, tuple[str, deque[FuzzFrame]]] = OrderedDict()
        """Local port → (phase, last frames sent on it), for the last 512 connections: a log
        line names the peer, which is how a traceback is traced back to its frames."""
        self.recent: deque[tuple[str, FuzzFrame]] = deque(maxlen=16)
        self.patterns: dict[bytes, str] = {}
        self.offsets_before: dict[int, int] = {}
        self.finishing = False
        """Set for the final checks: until then only the first violation counts (the others
        are mostly its consequences)."""

    # -- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> Report:
        try:
            await self._set_up()
            self.stats.started = time.monotonic()
            self.deadline = self.stats.started + self.options.seconds
            tasks = [asyncio.create_task(self._worker()) for _ in range(self.options.connections)]
            tasks += [asyncio.create_task(self._monitor()), asyncio.create_task(self._control())]
            try:
                await asyncio.wait_for(self.stop.wait(), self.options.seconds + 30)
            except TimeoutError:
                self.violate("harness", "the run did not end within its time bound")
            self.stats.ended = time.monotonic()
            await asyncio.sleep(0.5)  # let the proxy log what the last frames caused
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.finishing = True
            await self._final_checks()
        finally:
            self._tear_down()
        return Report(self.options, self.stats, self.violations, self.workdir)

    async def _set_up(self) -> None:
        port = distinctive_port(BROKER_HOST)
        self.broker = TansuBroker(port=port, host=BROKER_HOST)
        self.broker.start()
        await self.broker.wait_ready()
        upstream = f"{BROKER_HOST}:{port}"
        self.patterns = {
            self.marker: "marker record of the protected topic",
            BROKER_HOST.encode(): "the broker's host",
            f":{port}".encode(): "the broker's port (text)",
            struct.pack(">i", port): "the broker's port (int32)",
        }
        self.offsets_before = await asyncio.to_thread(prepare_broker, upstream, self.marker)
        topic_ids, node_id = await self._broker_metadata(port)
        self.generator = FrameGenerator(self.options.seed, topic_ids)

        # The fewest iterations allowed: the authenticated phase logs in on every connection.
        credential = plain.make_credential(self.password, iterations=plain.MIN_ITERATIONS)
        users = {USER: {"PLAIN": credential.to_string()}}
        write_users_file(self.workdir / "users.yaml", users)
        (self.workdir / "acls.yaml").write_text(acl_file_text(), encoding="utf-8")
        self.ports = {"plaintext": free_port(PROXY_HOST), "sasl": free_port(PROXY_HOST)}
        config = config_text(
            upstream,
            (self.ports["plaintext"], free_base(node_id)),
            (self.ports["sasl"], free_base(node_id)),
        )
        (self.workdir / "config.yaml").write_text(config, encoding="utf-8")
        self.proxy = start_proxy(self.workdir, self.log_path)
        await self._wait_for_proxy()
        await self._check_protected()

    async def _broker_metadata(self, port: int) -> tuple[list[uuid.UUID], int]:
        """Topic ids of the created topics (so frames can name them by id, as Fetch v13+ and
        DescribeTopicPartitions do) and the broker's node id."""
        conn = await RawConnection.open(BROKER_HOST, port)
        try:
            answer = await conn.request(metadata_request(None), 1, 10)
        finally:
            conn.close()
        ids = [t.topic_id for t in answer.topics if t.name in (PROTECTED_TOPIC, *ALLOWED_TOPICS)]
        return ids, int(answer.brokers[0].node_id)

    async def _wait_for_proxy(self) -> None:
        deadline = time.monotonic() + 30
        for port in self.ports.values():
            while True:
                assert self.proxy is not None
                if self.proxy.poll() is not None:
                    raise RuntimeError(
                        f"the proxy exited at start ({self.proxy.returncode}): "
                        f"{self.log_path.read_text(errors='replace')[-2000:]}"
                    )
                try:
                    (await RawConnection.open(PROXY_HOST, port)).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)

    async def _check_protected(self) -> None:
        """Not vacuous: through the proxy, ``guarded`` is refused and ``fuzz-ok`` is not."""
        conn = await RawConnection.open(PROXY_HOST, self.ports["plaintext"])
        try:
            answer = await conn.request(metadata_request((PROTECTED_TOPIC, "fuzz-ok")), 1, 10)
        finally:
            conn.close()
        codes = {t.name: t.error_code for t in answer.topics}
        expected = {
            PROTECTED_TOPIC: ErrorCode.topic_authorization_failed,
            "fuzz-ok": ErrorCode.none,
        }
        if codes != expected:
            raise RuntimeError(f"ACL set-up is not as intended: {codes}")

    def _tear_down(self) -> None:
        if self.proxy is not None and self.proxy.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proxy.pid, signal.SIGTERM)
            try:
                self.proxy.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proxy.pid, signal.SIGKILL)
                self.proxy.wait(timeout=5)
        if self.broker is not None:
            self.broker.stop()

    # -- violations --------------------------------------------------------------------------
    def violate(
        self, kind: str, detail: str, frames: list[tuple[str, FuzzFrame]] | None = None
    ) -> None:
        if self.stop.is_set() and not self.finishing:
            return
        self.violations.append(
            Violation(kind, detail, list(self.recent if frames is None else frames))
        )
        self.stop.set()

    def frames_of(self, local_port: int) -> list[tuple[str, FuzzFrame]]:
        phase, frames = self.history.get(local_port, ("?", deque()))
        return [(f"{phase}:{local_port}", f) for f in frames]

    def scan(self, data: bytes, conn: RawConnection, phase: str) -> None:
        for pattern, what in self.patterns.items():
            at = data.find(pattern)
            if at >= 0:
                context = data[max(0, at - 64) : at + len(pattern) + 64].hex()
                self.violate(
                    "leak",
                    f"{what} in a response on {phase}:{conn.local_port}: ...{context}...",
                    self.frames_of(conn.local_port),
                )

    # -- fuzzing -----------------------------------------------------------------------------
    def _take(self, n: int) -> list[FuzzFrame]:
        budget = min(n, self.options.frames - self.next_index)
        if budget <= 0 or time.monotonic() > self.deadline:
            self.stop.set()
            return []
        frames = [self.generator.frame(self.next_index + i) for i in range(budget)]
        self.next_index += budget
        return frames

    async def _open(self, phase: str) -> RawConnection | None:
        port = self.ports["plaintext" if phase == "plaintext" else "sasl"]
        try:
            conn = await RawConnection.open(PROXY_HOST, port)
        except (OSError, TimeoutError) as exc:
            if not self._crashed():
                self.violate("connect", f"cannot connect to the {phase} listener: {exc!r}")
            return None
        self.stats.connections += 1
        if phase != "sasl-authed":
            return conn
        try:
            ok = await sasl_login(conn, self.password, 5.0)
        except (EOFError, TimeoutError):
            ok = False
        if ok:
            self.stats.auth_ok += 1
            return conn
        self.stats.auth_failed += 1
        conn.close()
        return None

    async def _worker(self) -> None:
        rng = random.Random(self.rng.getrandbits(64))
        phases, weights = zip(*PHASES, strict=True)
        while not self.stop.is_set():
            phase = rng.choices(phases, weights)[0]
            conn = await self._open(phase)
            if conn is None:
                await asyncio.sleep(0.05)
                continue
            sent: deque[FuzzFrame] = deque(maxlen=8)
            self.history[conn.local_port] = (phase, sent)
            while len(self.history) > 512:
                self.history.popitem(last=False)
            try:
                for _ in range(BATCHES_PER_CONNECTION):
                    frames = self._take(rng.choice((1, 1, 2, 4)))
                    if not frames or not await self._batch(conn, phase, frames, sent):
                        break
            finally:
                conn.close()

    async def _batch(
        self, conn: RawConnection, phase: str, frames: list[FuzzFrame], sent: deque[FuzzFrame]
    ) -> bool:
        """Write ``frames`` and a probe; True if the connection is still usable after them."""
        probe_id = PROBE_BASE + (frames[0].index & 0xFFFF)
        data = b"".join(f.data for f in frames)
        open_ended = _claims_more(data)
        payload = data if open_ended else data + codec.encode_request(build(18, 0), probe_id, "p")
        for f in frames:
            sent.append(f)
            self.recent.append((f"{phase}:{conn.local_port}", f))
        self.stats.frames_sent += len(frames)
        try:
            conn.writer.write(payload)
            await asyncio.wait_for(conn.writer.drain(), PROBE_WAIT_S)
        except (ConnectionError, TimeoutError):
            self.stats.closes += 1
            return False
        deadline = time.monotonic() + (OPEN_ENDED_WAIT_S if open_ended else PROBE_WAIT_S)
        tail = b""
        while True:
            try:
                chunk = await conn.read_some(max(0.005, deadline - time.monotonic()))
            except TimeoutError:
                self.stats.timeouts += 1
                return False
            if not chunk:
                self.stats.closes += 1
                return False
            self.scan(tail + chunk, conn, phase)
            tail = chunk[-64:]  # longer than any pattern: one split across reads is found
            for frame in conn.take_frames():
                self.stats.responses += 1
                if int.from_bytes(frame[4:8], "big", signed=True) == probe_id and not open_ended:
                    self.stats.probes += 1
                    return True

    # -- invariants --------------------------------------------------------------------------
    async def _monitor(self) -> None:
        assert self.proxy is not None and self.broker is not None
        while True:
            if self._crashed():
                return
            if self.broker.process is None or self.broker.process.poll() is not None:
                self.violate("harness", "Tansu exited: the run cannot continue")
                return
            rss = _rss_kb(self.proxy.pid)
            self.stats.max_rss_kb = max(self.stats.max_rss_kb, rss)
            if rss > self.options.rss_limit_mb * 1024:
                self.violate("memory", f"proxy RSS {rss / 1024:.1f} MB")
            self._scan_log()
            await asyncio.sleep(0.25)

    def _crashed(self) -> bool:
        """Has the proxy exited? If so, report it with the last frame of each of the last 16
        connections (one of them was being read when it died)."""
        assert self.proxy is not None
        status = self.proxy.poll()
        if status is None:
            return False
        how = f"signal {-status}" if status < 0 else f"status {status}"
        candidates = [
            (f"{phase}:{port}", frames[-1])
            for port, (phase, frames) in list(self.history.items())[-16:]
            if frames
        ]
        self.violate("crash", f"the proxy exited with {how}; log: {self._log_tail()}", candidates)
        return True

    def _scan_log(self) -> None:
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            data = log.read()
        end = data.rfind(b"\n") + 1
        self.log_offset += end
        lines = data[:end].decode("utf-8", errors="replace").splitlines()
        for i, line in enumerate(lines):
            if LOG_PROBLEM.search(line):
                peer = PEER.search(line)
                frames = self.frames_of(int(peer.group(1))) if peer else None
                context = "\n      ".join(lines[i : i + 25])
                self.violate("log", f"the proxy logged:\n      {context}", frames)
                return

    def _log_tail(self) -> str:
        return self.log_path.read_bytes()[-3000:].decode("utf-8", errors="replace")

    async def _control(self) -> None:
        while True:
            await asyncio.sleep(self.options.control_interval_s)
            error = await self._control_round()
            if error is not None:
                if not self._crashed():
                    self.violate("control", error)
                return
            self.stats.control_ok += 1

    async def _control_round(self) -> str | None:
        """A Produce + Metadata on PLAINTEXT and a login + Metadata on SASL, each on a fresh
        connection: None if both worked within the timeout, else what failed."""
        timeout = self.options.control_timeout_s
        try:
            async with asyncio.timeout(timeout):
                conn = await RawConnection.open(PROXY_HOST, self.ports["plaintext"])
                try:
                    produced = await conn.request(produce_request("fuzz-ok"), 1, timeout)
                    described = await conn.request(metadata_request(("fuzz-ok",)), 2, timeout)
                finally:
                    conn.close()
                code = produced.responses[0].partition_responses[0].error_code
                if code != ErrorCode.none or described.topics[0].error_code != ErrorCode.none:
                    return f"PLAINTEXT control answered {produced} / {described}"
                conn = await RawConnection.open(PROXY_HOST, self.ports["sasl"])
                try:
                    if not await sasl_login(conn, self.password, timeout):
                        return "SASL control login failed"
                    described = await conn.request(metadata_request(("fuzz-ok",)), 3, timeout)
                finally:
                    conn.close()
                if described.topics[0].error_code != ErrorCode.none:
                    return f"SASL control answered {described}"
        except (OSError, EOFError, TimeoutError) as exc:
            return f"control round trip failed: {exc!r}"
        return None

    async def _final_checks(self) -> None:
        assert self.proxy is not None and self.broker is not None
        if self.proxy.poll() is None:
            self._scan_log()
            if not self.violations:
                error = await self._control_round()
                if error is not None:
                    self.violate("control", f"after the run: {error}", [])
        elif not any(v.kind == "crash" for v in self.violations):
            self._crashed()
        if self.broker.process is not None and self.broker.process.poll() is None:
            upstream = f"{BROKER_HOST}:{self.broker.port}"
            after = await asyncio.to_thread(end_offsets, upstream)
            if after != self.offsets_before:
                self.violate(
                    "write",
                    f"the protected topic's end offsets moved: {self.offsets_before} -> {after}",
                    [],
                )


def start_proxy(workdir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """``kafkaguard run`` on ``workdir/config.yaml`` in its own process group, its stdout
    and stderr (the log) going to ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "kafkaguard", "run", "--config", "config.yaml"],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def _claims_more(data: bytes) -> bool:
    """Does the last frame of ``data`` (walked by size prefixes) claim more bytes than are
    there? Then the proxy waits for them, and a probe would only feed that frame."""
    pos = 0
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if size < 0:
            return False  # the proxy closes at once
        pos += 4 + size
    return pos != len(data)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def fuzz(options: Options) -> Report:
    workdir = Path(tempfile.mkdtemp(prefix="kafkaguard-fuzz-"))
    try:
        report = await Fuzzer(options, workdir).run()
    except BaseException:  # a failed set-up says why itself (the proxy's log tail included)
        if not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    if report.ok and not options.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fuzz.harness", description=__doc__
    )
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--frames", type=int, default=1_000_000, help="stop after this many")
    parser.add_argument("--seconds", type=float, default=480.0, help="stop after this long")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections")
    parser.add_argument("--rss-limit-mb", type=float, default=200.0)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--differential",
        action="store_true",
        help="read the frames with Kafka's own readers instead of sending them (no sockets)",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    if args.differential:
        from tests.support.fuzz.differential import main as differential

        return differential(seed, args.frames)
    options = Options(
        seed=seed,
        frames=args.frames,
        seconds=args.seconds,
        connections=args.connections,
        rss_limit_mb=args.rss_limit_mb,
        keep=args.keep,
    )

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the tear-down

    signal.signal(signal.SIGTERM, terminate)
    report = asyncio.run(fuzz(options))
    for violation in report.violations:
        print(violation.render(seed))
    print(report.summary(), flush=True)
    if not report.ok:
        print(f"work directory (config, proxy log): {report.workdir}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
