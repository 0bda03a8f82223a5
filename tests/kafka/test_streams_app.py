"""A real Kafka Streams application through kafkaguard with ``group.protocol=streams`` (KIP-1071).

``StreamsWordCount.java`` (beside this file; run in source-file mode against the fixture's
Kafka 4.3.1 classpath, to which tests/kafka/pom.xml adds ``kafka-streams``) counts the words of
an input topic: a ``groupBy`` (repartition topic) and a ``count`` (state store with a changelog
topic). It logs in to kafkaguard -- in front of the unsecured ``kafka_upstream`` -- as
``User:alice``, who may READ/WRITE/DESCRIBE the input and output topics, READ the group (the
application id) and READ/WRITE/DESCRIBE topics under the application id's prefix (its internal
topics). Each test has its own topics and application id.

* With CREATE on that prefix, the broker creates the internal topics (kafkaguard forwards the
  StreamsGroupHeartbeat) and the output is the right word count.
* Without it, as on a secured broker, the application waits with the heartbeat status
  MISSING_INTERNAL_TOPICS, writes nothing, and its internal topics do not exist on the broker.

The application's log (``<tmp>/<application id>/streams.log``) has ``NetworkClient`` at DEBUG:
every StreamsGroupHeartbeat request and response, in full.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.conformance.datapath import acl, create_topics
from tests.support.conformance.harness import Side, guard_config, scenario_name
from tests.support.kafka_broker import (
    REFEREE_USERS,
    KafkaBroker,
    _die_with_parent,
    check_runtime,
    log_config_args,
)
from tests.support.proxy_fixture import start_proxy_thread, stop_proxy_thread

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

APP = Path(__file__).resolve().parent / "StreamsWordCount.java"
LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "The dog barks",
    "fox and dog",
]
EXPECTED = Counter(word for line in LINES for word in line.lower().split())
OUTPUT_WAIT_S = 45.0
MISSING_WAIT_S = 30.0
STOP_WAIT_S = 20.0


@pytest.fixture(scope="module")
def guard(kafka_upstream: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """kafkaguard (the referee's users, ``User:admin`` super user) in front of the upstream."""
    running = start_proxy_thread(guard_config(kafka_upstream, tmp_path_factory.mktemp("streams")))
    try:
        yield Side("kafkaguard", running.bootstrap)
    finally:
        stop_proxy_thread(running)


class StreamsApp:
    """One ``StreamsWordCount`` JVM; stdout (state changes) and its log go to files."""

    def __init__(self, tmp: Path, bootstrap: str, app_id: str, source: str, sink: str) -> None:
        self.app_id = app_id
        self.dir = tmp / app_id
        self.dir.mkdir(parents=True)
        properties = {
            "application.id": app_id,
            "bootstrap.servers": bootstrap,
            "group.protocol": "streams",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            f'required username="alice" password="{REFEREE_USERS["alice"]}";',
            "state.dir": str(self.dir / "state"),
            "num.stream.threads": "1",
            "commit.interval.ms": "100",
            "statestore.cache.max.bytes": "0",
            "replication.factor": "1",
            "auto.offset.reset": "earliest",
        }
        config = self.dir / "app.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), "utf-8")
        self.log = self.dir / "streams.log"
        log_args = log_config_args(self.dir, level="info", to_stderr=True)
        with open(self.dir / "log4j2-info.properties", "a", encoding="utf-8") as extra:
            extra.write(
                "logger.hb.name = org.apache.kafka.clients.NetworkClient\nlogger.hb.level = DEBUG\n"
            )
        self.out = self.dir / "stdout.txt"
        command = [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            *log_args,
            "-cp",
            check_runtime(),
            str(APP),
            str(config),
            source,
            sink,
        ]
        with open(self.out, "wb") as out, open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                preexec_fn=_die_with_parent,
            )

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what: str, in_log: bool, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if what in (self.log_text() if in_log else self.stdout()):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """Close stdin (the app closes itself), SIGKILL after a bound; idempotent."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def diagnostics(self) -> str:
        tail = "\n".join(self.log_text().splitlines()[-40:])
        return f"stdout:\n{self.stdout()}\nlog tail:\n{tail}"


def produce(side: Side, topic: str, lines: list[str]) -> None:
    producer = Producer(side.client_config("admin", log_level=0))
    for line in lines:
        producer.produce(topic, line.encode())
    assert producer.flush(20) == 0, "input not acknowledged within 20 s"


def read_counts(side: Side, topic: str, until: Counter[str], timeout_s: float) -> dict[str, int]:
    """The last count per word on ``topic``, read from the start until it equals ``until`` or
    ``timeout_s`` passes."""
    consumer = Consumer(
        side.client_config(
            "admin",
            **{"group.id": scenario_name("wc-reader"), "enable.auto.commit": False},
            log_level=0,
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and counts != dict(until):
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            key, value = msg.key(), msg.value()
            assert key is not None and value is not None, msg
            counts[key.decode()] = int(value.decode())
    finally:
        consumer.close()
    return counts


def record_count(upstream: KafkaBroker, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": upstream.bootstrap, "group.id": "wm", "log_level": 0})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        return high - low
    finally:
        consumer.close()


def upstream_topics(upstream: KafkaBroker, prefix: str) -> set[str]:
    metadata = AdminClient({"bootstrap.servers": upstream.bootstrap, "log_level": 0}).list_topics(
        timeout=15
    )
    return {name for name in metadata.topics if name.startswith(prefix)}


def setup_scenario(guard: Side, *, create: bool) -> tuple[str, str, str]:
    """Fresh input/output topics (the input holding :data:`LINES`) and application id, with
    alice's ACLs; CREATE on the application's prefix only if ``create``."""
    source, sink, app = scenario_name("wc-in"), scenario_name("wc-out"), scenario_name("wc-app")
    acls = [
        acl("User:alice", op, "TOPIC", topic)
        for topic in (source, sink)
        for op in ("READ", "WRITE", "DESCRIBE")
    ]
    acls.append(acl("User:alice", "READ", "GROUP", app))
    prefix_ops = ("READ", "WRITE", "DESCRIBE", *(("CREATE",) if create else ()))
    acls += [acl("User:alice", op, "TOPIC", f"{app}-", pattern="PREFIXED") for op in prefix_ops]
    guard.set_acls(acls)
    create_topics(guard, source, sink)
    produce(guard, source, LINES)
    return source, sink, app


def create_denials(caplog: pytest.LogCaptureFixture) -> list[str]:
    """kafkaguard's authorizer log lines denying CREATE for a StreamsGroupHeartbeat."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "kafka.authorizer.logger"
        and "is Denied operation = CREATE" in r.getMessage()
        and "for request = StreamsGroupHeartbeat" in r.getMessage()
    ]


def test_word_count_through_kafkaguard(
    guard: Side,
    kafka_upstream: KafkaBroker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """May CREATE its internal topics: the broker creates them, the app runs, counts right."""
    caplog.set_level("INFO", logger="kafka.authorizer.logger")
    source, sink, app_id = setup_scenario(guard, create=True)
    app = StreamsApp(tmp_path, guard.bootstrap, app_id, source, sink)
    try:
        running = app.wait_for("-> RUNNING", in_log=False, timeout_s=OUTPUT_WAIT_S)
        assert running, f"{app_id} never RUNNING:\n{app.diagnostics()}"
        counts = read_counts(guard, sink, EXPECTED, OUTPUT_WAIT_S)
        assert counts == dict(EXPECTED), f"word counts {counts}:\n{app.diagnostics()}"
        internal = upstream_topics(kafka_upstream, f"{app_id}-")
        assert any(t.endswith("-changelog") for t in internal), internal
        assert any(t.endswith("-repartition") for t in internal), internal
    finally:
        app.stop()
    assert "UNCAUGHT" not in app.stdout(), app.diagnostics()
    assert "CLOSED" in app.stdout(), app.diagnostics()
    assert create_denials(caplog) == []
    assert kafka_upstream.bootstrap not in app.log_text()


WAITING = "Membership is in the following statuses: (3) Internal topics are missing"
"""``StreamsGroupHeartbeatRequestManager``'s WARN line for a MISSING_INTERNAL_TOPICS status."""


def test_without_create_waits_for_internal_topics(
    guard: Side,
    kafka_upstream: KafkaBroker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """May not CREATE them: as on a secured broker, the app waits with MISSING_INTERNAL_TOPICS
    (across heartbeats), its internal topics are not created, and it writes nothing."""
    caplog.set_level("INFO", logger="kafka.authorizer.logger")
    source, sink, app_id = setup_scenario(guard, create=False)
    app = StreamsApp(tmp_path, guard.bootstrap, app_id, source, sink)
    try:
        waiting = app.wait_for(WAITING, in_log=True, timeout_s=MISSING_WAIT_S)
        assert waiting, f"{app_id}: no MISSING_INTERNAL_TOPICS:\n{app.diagnostics()}"
        # Two more heartbeat intervals (5 s each): still waiting, not failed.
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline and app.log_text().count(WAITING) < 3:
            if app.proc.poll() is not None or "UNCAUGHT" in app.stdout():
                break
            time.sleep(0.5)
        assert "UNCAUGHT" not in app.stdout(), app.diagnostics()
        assert app.proc.poll() is None, app.diagnostics()
        assert app.log_text().count(WAITING) >= 3, app.diagnostics()
        assert record_count(kafka_upstream, sink) == 0
        assert upstream_topics(kafka_upstream, f"{app_id}-") == set()
    finally:
        app.stop()
    denials = create_denials(caplog)
    assert denials and all(f"Topic:LITERAL:{app_id}-" in m for m in denials), denials
    assert kafka_upstream.bootstrap not in app.log_text()
