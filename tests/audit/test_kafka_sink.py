"""The audit topic (``audit.sink: kafka | both``): a real proxy, real clients, real brokers.

The proxy produces its audit records to a topic on the cluster it protects (Tansu, or Apache
Kafka 4.3.1 for the restart: Tansu keeps records in memory). What is checked is what a
reader of the topic gets: the file trail's lines byte for byte, keyed by principal, and
every audited decision either in the topic or counted as dropped or lost.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import shlex
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafkaguard.audit.config import AuditConfig, AuditKafkaConfig
from kafkaguard.cli import main as cli_main
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import (
    AclOperation,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.acl_file_format import parse_acl_text
from kafkaguard.proxy.app.metrics import ProxyCollector
from kafkaguard.proxy.app.server import ProxyServer, audit_connection
from kafkaguard.proxy.config import BrokerPorts, HostPort, ProxyConfig, parse_config
from kafkaguard.tansu import TansuBroker, free_base
from tests.support.audit_topic import decisions_in, read_topic, restart_kafka
from tests.support.kafka_broker import KafkaBroker, require_kafka, start_kafka
from tests.support.proxy_fixture import (
    ALLOW_ALL,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)

NO_ACLS = PolicyConfig(authorizer=AuthorizerConfig(), acl_store=AclStoreConfig(type="memory"))
QUIET = {"log_level": 3}


def audited_config(
    upstream: HostPort, audit_dir: Path, sink: str, topic: str, **kafka: object
) -> ProxyConfig:
    """log_only with no ACLs: every request is forwarded and every check is an audited
    denial (one record each)."""
    return replace(
        proxy_config(upstream, policy=NO_ACLS),
        enforcement="log_only",
        audit=AuditConfig(
            enabled=True,
            dir=audit_dir,
            sink=sink,
            kafka=AuditKafkaConfig(topic=topic, partitions=3, **kafka),  # type: ignore[arg-type]
        ),
    )


def produce(bootstrap: str, topic: str, count: int = 1) -> None:
    """``count`` records through the proxy, one request each; all must be delivered."""
    errors: list[object] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 15000, **QUIET}
    )
    for index in range(count):
        producer.produce(topic, b"m%d" % index, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(30) == 0  # one Produce request each
    assert errors == [None] * count


def trail_lines(directory: Path) -> list[bytes]:
    return [
        line
        for path in sorted(directory.rglob("*.jsonl"))
        for line in path.read_bytes().splitlines()
    ]


def assert_nothing_silently_lost(server: ProxyServer, in_topic: int) -> tuple[int, int, int]:
    """The target: decisions in the topic == decisions audited - reported drops. Returns
    (decisions audited, dropped, lost)."""
    audit = server.audit
    assert audit.writer is not None and audit.writer.topic is not None
    topic = audit.writer.topic
    decisions = sum(c.decisions for c in audit.counters.values())
    dropped = sum(c.dropped for c in audit.counters.values()) + topic.dropped
    assert in_topic == decisions - dropped - topic.lost
    return decisions, dropped, topic.lost


def audit_metrics(server: ProxyServer) -> dict[tuple[str, str], float]:
    (family,) = [
        f for f in ProxyCollector(server, None).collect() if f.name == "kafkaguard_audit_events"
    ]
    return {(s.labels["sink"], s.labels["outcome"]): s.value for s in family.samples}


def test_both_sinks_hold_the_same_records(tansu: TansuBroker, tmp_path: Path) -> None:
    audit_topic, topic = unique_name("audit"), unique_name("data")
    running = start_proxy_thread(
        audited_config(tansu.address, tmp_path / "audit", "both", audit_topic)
    )
    try:
        produce(running.bootstrap, topic, 5)
    finally:
        stop_proxy_thread(running)  # the trail is flushed and the files closed
    server = running.server

    records = read_topic(str(tansu.address), audit_topic)
    lines = trail_lines(tmp_path / "audit")
    assert len(lines) > 5  # the Metadata (topic auto-creation) and Produce denials
    # The same records: each value is a file line, without its newline, byte for byte.
    assert Counter(r.value for r in records) == Counter(lines)
    for record in records:
        event = json.loads(record.value)
        assert record.key == event["principal"].encode() == b"User:ANONYMOUS"
    produced = [json.loads(r.value) for r in records if b'"api_name":"Produce"' in r.value]
    assert len(produced) == 5 and all(e["resource_name"] == topic for e in produced)
    # One principal, one partition: its records are in the order they were written.
    assert len({r.partition for r in records}) == 1
    assert [r.value for r in sorted(records, key=lambda r: r.offset)] == lines

    decisions, dropped, lost = assert_nothing_silently_lost(server, decisions_in(records))
    assert (dropped, lost) == (0, 0)
    assert audit_metrics(server) == {
        ("file", "written"): len(lines),
        ("file", "dropped"): 0,
        ("file", "failed"): 0,
        ("kafka", "written"): len(records),
        ("kafka", "dropped"): 0,
        ("kafka", "failed"): 0,
    }


def test_cloudevents_on_the_topic_kafkaguard_lines_in_the_files(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    """``audit.kafka.format: cloudevents`` with ``sink: both``: the topic holds the same
    records as the files, as structured-mode CloudEvents with the binding's header."""
    audit_topic, topic = unique_name("audit"), unique_name("data")
    config = audited_config(
        tansu.address, tmp_path / "audit", "both", audit_topic, format="cloudevents"
    )
    running = start_proxy_thread(config)
    try:
        produce(running.bootstrap, topic, 2)
    finally:
        stop_proxy_thread(running)
    records = read_topic(str(tansu.address), audit_topic)
    lines = [json.loads(line) for line in trail_lines(tmp_path / "audit")]
    assert len(records) == len(lines) > 2
    events = [json.loads(r.value) for r in records]
    assert {r.headers for r in records} == {
        (("content-type", b"application/cloudevents+json; charset=UTF-8"),)
    }
    assert len({e["id"] for e in events}) == len(events)
    as_read = Counter(
        (
            e["data"]["authenticationInfo"]["principal"],
            e["data"]["methodName"],
            e["data"]["authorizationInfo"]["resourceName"],
            e["data"]["authorizationInfo"]["granted"],
            e["kafkaguardmode"],
            e["time"],
        )
        for e in events
    )
    assert as_read == Counter(
        (
            line["principal"],
            f"kafka.{line['api_name']}",
            line["resource_name"],
            line["result"] == "ALLOWED",
            line["mode"],
            line["time"],
        )
        for line in lines
    )
    counts = sum(e["data"]["kafkaguard"]["count"] for e in events)
    assert counts == sum(line["count"] for line in lines)


def test_two_proxies_one_topic_holds_the_union_of_their_trails(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    """Two proxies behind one cluster share one audit topic: it holds exactly both trails."""
    audit_topic = unique_name("audit")
    proxies = [
        start_proxy_thread(audited_config(tansu.address, tmp_path / f"p{i}", "both", audit_topic))
        for i in range(2)
    ]
    try:
        for index, running in enumerate(proxies):
            produce(running.bootstrap, unique_name(f"data{index}"), index + 2)
    finally:
        for running in proxies:
            stop_proxy_thread(running)
    records = read_topic(str(tansu.address), audit_topic)
    trails = [trail_lines(tmp_path / f"p{i}") for i in range(2)]
    assert all(trails)
    assert Counter(r.value for r in records) == Counter(trails[0] + trails[1])
    in_topic = decisions_in(records)
    audited = [sum(c.decisions for c in r.server.audit.counters.values()) for r in proxies]
    assert in_topic == sum(audited)


def test_kafka_sink_alone_full_queue_drops_and_counts(tansu: TansuBroker, tmp_path: Path) -> None:
    """``sink: kafka`` writes no file. A producer queue of 3 records that linger for 2 s
    takes 3 of a burst of denials; the rest are dropped and counted, and traffic goes on."""
    audit_topic, topic = unique_name("audit"), unique_name("data")
    config = audited_config(
        tansu.address,
        tmp_path / "audit",
        "kafka",
        audit_topic,
        queue_max_events=3,
        linger_ms=2000,
    )
    running = start_proxy_thread(config)
    try:
        began = time.monotonic()
        produce(running.bootstrap, topic, 20)
        assert time.monotonic() - began < 15  # the full audit queue never held the client
        topic_sink = running.server.audit.writer.topic  # type: ignore[union-attr]
        assert topic_sink is not None
        deadline = time.monotonic() + 5  # the writer thread takes the queue every 0.2 s
        while topic_sink.dropped == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert topic_sink.dropped > 0
    finally:
        stop_proxy_thread(running)
    server = running.server
    assert not (tmp_path / "audit").exists()

    records = read_topic(str(tansu.address), audit_topic)
    decisions, dropped, lost = assert_nothing_silently_lost(server, decisions_in(records))
    assert dropped > 0 and lost == 0 and len(records) == decisions - dropped
    metrics = audit_metrics(server)
    assert set(metrics) == {("kafka", "written"), ("kafka", "dropped"), ("kafka", "failed")}
    assert metrics[("kafka", "written")] == len(records)
    assert metrics[("kafka", "dropped")] == dropped


@pytest.mark.kafka
def test_broker_restart_mid_run_loses_nothing(tmp_path: Path) -> None:
    """Apache Kafka 4.3.1 restarted (clean stop, start on the same data) while clients
    produce through the proxy: every audited decision is in the topic afterwards (0 dropped,
    0 lost), none twice (idempotence), allowed ones aggregated per 1 s window."""
    require_kafka()
    broker = start_kafka("upstream", tmp_path / "kafka")
    try:
        _run_through_a_restart(broker, tmp_path)
    finally:
        broker.stop()


def _run_through_a_restart(broker: KafkaBroker, tmp_path: Path) -> None:
    upstream = HostPort("127.0.0.1", broker.port)
    audit_topic, topic = unique_name("audit"), unique_name("data")
    config = replace(
        proxy_config(
            upstream,
            policy=ALLOW_ALL,
            broker_ports=BrokerPorts(free_base([broker.node_id]), {}),
        ),
        audit=AuditConfig(
            enabled=True,
            dir=tmp_path / "audit",
            sink="kafka",
            allowed="individual",  # every Produce a record: many records in flight
            kafka=AuditKafkaConfig(topic=audit_topic, partitions=1, replication_factor=1),
        ),
    )
    running: RunningProxy = start_proxy_thread(config)
    stop = threading.Event()
    delivered: list[int] = [0]

    def traffic() -> None:  # retries through the outage: librdkafka's default timeouts
        producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 2, **QUIET})

        def count(error: object, _message: object) -> None:
            delivered[0] += error is None

        while not stop.is_set():
            with contextlib.suppress(BufferError):  # full while the broker is down
                producer.produce(topic, b"x", on_delivery=count)
            producer.poll(0.005)
        producer.flush(10)

    sender = threading.Thread(target=traffic, name="traffic", daemon=True)
    try:
        sender.start()
        time.sleep(2)
        topic_sink = running.server.audit.writer.topic  # type: ignore[union-attr]
        assert topic_sink is not None and topic_sink.written > 0
        before = delivered[0]
        while_down: dict[str, int] = {}

        def outage() -> None:  # the broker is stopped: records pile up in the producer
            time.sleep(1)
            while_down["pending"] = topic_sink.pending

        down_s = restart_kafka(broker, while_down=outage)
        assert while_down["pending"] > 0  # records waited for the broker to come back
        time.sleep(3)  # the audit producer catches up, clients produce again
        assert delivered[0] > before  # traffic went on after the restart
    finally:
        stop.set()
        sender.join(20)
        stop_proxy_thread(running)  # flushes the audit topic (bounded)
    server = running.server

    records = read_topic(broker.bootstrap, audit_topic)
    decisions, dropped, lost = assert_nothing_silently_lost(server, decisions_in(records))
    assert (dropped, lost) == (0, 0), f"restart took {down_s:.1f} s"
    assert decisions > 100
    # Idempotence: a retried batch is not written twice (correlation ids are per connection,
    # so compare whole records, whose times are to the millisecond).
    values = Counter(r.value for r in records)
    assert max(values.values()) <= 2  # two identical decisions in one millisecond at most


# -- configuration -------------------------------------------------------------------------------

BASE = "upstream: {embedded: true}\nlisteners:\n  - name: A\n    port: 9999\n"


def parse(text: str) -> ProxyConfig:
    return parse_config(ConfigSection.from_text(text, "c.yaml"), Path("/etc/kafkaguard"))


def test_sink_and_kafka_keys() -> None:
    default = parse(BASE).audit
    assert (default.sink, default.kafka) == ("file", AuditKafkaConfig())
    assert default.kafka.topic == "_kafkaguard-audit" and default.kafka.acks == "all"
    config = parse(
        BASE + "audit:\n  enabled: true\n  sink: both\n  kafka:\n    topic: kg.audit\n"
        "    partitions: 12\n    replication_factor: 3\n    queue_max_events: 1000\n"
        "    linger_ms: 50\n    compression: zstd\n    acks: all\n"
        "    enable_idempotence: true\n    delivery_timeout_ms: 300000\n"
    ).audit
    assert (config.sink, config.writes_files, config.writes_topic) == ("both", True, True)
    assert config.kafka == AuditKafkaConfig(
        topic="kg.audit",
        partitions=12,
        replication_factor=3,
        queue_max_events=1000,
        linger_ms=50,
        compression="zstd",
        acks="all",
        enable_idempotence=True,
        delivery_timeout_ms=300000,
    )
    acks_one = parse(BASE + "audit:\n  kafka:\n    acks: 1\n    enable_idempotence: false\n")
    assert acks_one.audit.kafka.acks == "1"
    example = Path(__file__).parents[2] / "config.example.yaml"
    documented = parse_config(ConfigSection.from_file(example), example.parent).audit
    assert (documented.sink, documented.kafka) == ("file", AuditKafkaConfig())  # the defaults


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("  sink: topic\n", "c.yaml:6 audit.sink", "must be one of file, kafka, both"),
        ("  kafka:\n    topik: x\n", "c.yaml:7 audit.kafka.topik", "unknown key 'topik'"),
        ("  kafka:\n    topic: a/b\n", "audit.kafka.topic", "not a legal Kafka topic name"),
        ("  kafka:\n    replication_factor: 0\n", "audit.kafka.replication_factor", "-1"),
        ("  kafka:\n    compression: brotli\n", "audit.kafka.compression", "one of none"),
        ("  kafka:\n    acks: 0\n", "audit.kafka.acks", "must be all or 1"),
        ("  kafka:\n    acks: 1\n", "audit.kafka.acks", "must be all with enable_idempotence"),
        ("  kafka:\n    queue_max_events: 0\n", "audit.kafka.queue_max_events", "at least 1"),
    ],
)
def test_bad_kafka_keys_name_file_line_and_key(text: str, where: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse(BASE + "audit:\n" + text)
    assert where in str(error.value) and message in str(error.value)


def test_the_producer_reaches_the_upstream_as_the_proxy_does(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    config = parse(
        "listeners:\n  - name: A\n    port: 9999\n"
        "upstream:\n  bootstrap_servers: [b1:9093, b2:9093]\n"
        f"  ssl:\n    ca_file: {tmp_path}/ca.pem\n    check_hostname: false\n"
        f"  sasl:\n    mechanism: SCRAM-SHA-512\n    username: kafkaguard\n"
        f"    password_file: {password}\n"
    )
    settings = audit_connection(config.upstream)
    assert settings["bootstrap.servers"] == "b1:9093,b2:9093"
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == f"{tmp_path}/ca.pem"
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert (settings["sasl.mechanism"], settings["sasl.username"], settings["sasl.password"]) == (
        "SCRAM-SHA-512",
        "kafkaguard",
        "s3cret",
    )
    plain = audit_connection(
        parse(BASE.replace("{embedded: true}", "{bootstrap_servers: [b:9092]}")).upstream
    )
    assert plain["security.protocol"] == "PLAINTEXT" and "sasl.password" not in plain


def test_the_documented_acls_let_only_the_analytics_principal_read(tmp_path: Path) -> None:
    """docs/audit.md's `kafkaguard acls` lines, run as written against an ACL file, decided by
    the StandardAuthorizer: User:analytics reads (with Spark's groups), nobody else reads,
    no client writes or deletes, whatever a wider ALLOW says."""
    doc = (Path(__file__).parents[2] / "docs" / "audit.md").read_text(encoding="utf-8")
    commands = re.findall(r"^kafkaguard acls (.+?)(?<!\\)$", doc.replace("\\\n", " "), re.M)
    assert len(commands) == 4
    acl_file = tmp_path / "acls.yaml"
    acl_file.write_text("version: 1\nacls: []\n", encoding="utf-8")
    for command in commands:
        args = shlex.split(command.replace("--config config.yaml", f"--acl-file {acl_file}"))
        assert cli_main(["acls", *args]) == 0
    # A wide grant a cluster may already have: every principal may use every topic.
    documented = list(parse_acl_text(acl_file.read_text(), str(acl_file)))
    wide = acl_binding(ResourceType.TOPIC, "*", "User:*", AclOperation.ALL)
    authorizer = StandardAuthorizer(AuthorizerConfig())

    def allowed(principal: str, operation: AclOperation, resource: ResourcePattern) -> bool:
        context = RequestContext(
            listener_name="PLAINTEXT",
            security_protocol=SecurityProtocol.PLAINTEXT,
            principal=KafkaPrincipal.parse(principal),
            client_address=ipaddress.ip_address("10.0.0.7"),
            api_key=1,
            api_version=12,
            client_id="c",
            correlation_id=1,
        )
        (result,) = authorizer.authorize(context, [Action(operation, resource)])
        return result is AuthorizationResult.ALLOWED

    audit = ResourcePattern(ResourceType.TOPIC, "_kafkaguard-audit")
    group = ResourcePattern(ResourceType.GROUP, "spark-kafka-relation-1f2e")
    authorizer.load_snapshot([*documented, wide])
    assert allowed("User:analytics", AclOperation.READ, audit)
    assert allowed("User:analytics", AclOperation.READ, group)
    for operation in (AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER):
        assert not allowed("User:analytics", operation, audit)
        assert not allowed("User:bob", operation, audit)
    # The wide grant still lets bob read: the documented caveat (no wildcard ALLOW).
    assert allowed("User:bob", AclOperation.READ, audit)
    authorizer.load_snapshot(documented)  # without it, only the analytics principal reads
    assert allowed("User:analytics", AclOperation.READ, audit)
    assert not allowed("User:bob", AclOperation.READ, audit)
    assert not allowed("User:bob", AclOperation.DESCRIBE, audit)


@pytest.mark.parametrize("record_format", ["kafkaguard", "cloudevents"])
def test_a_lost_records_decisions_are_its_count_whatever_its_groups_are_named(
    record_format: str,
) -> None:
    """``record_count`` takes the first ``"count":`` of the line: the groups (schema version 2)
    come after it in a record, and a group's name is a JSON string, so a name that spells the
    key is escaped and does not match before the field."""
    from kafkaguard.audit.events import AuditEvent
    from kafkaguard.audit.kafka_sink import record_count
    from tests.support.analyze_data import rec

    base = rec("2026-11-22T10:15:03.123Z", "User:a", "READ", "TOPIC", "t", count=7)
    record = AuditEvent(**{**base.to_dict(), "groups": ('Group:x"count":99,', "Group:eng")})  # type: ignore[arg-type]
    assert record_count(record.encode(record_format)) == 7
