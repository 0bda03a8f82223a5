"""Two proxies, one audit topic, one proposal: ``analyze propose --input kafka://...`` over the
topic both proxies wrote equals ``propose`` over the union of their file trails (issue 16).

Two kafkaguard proxies (SASL/PLAIN, ``enforcement: log_only``, no ACLs: every check is an
audited would-deny) stand in front of one Apache Kafka 4.3.1 broker, each with
``audit.sink: both``: its own audit directory and the same fresh audit topic on that broker.
Real confluent-kafka clients work through each proxy as different principals, on different
topics and groups, with some overlap (one principal on both proxies, one topic written
through both). The topic is read by Spark's Kafka source in a real ``kafkaguard analyze``
subprocess (Tansu's high watermark after a batch produce is wrong, hence Kafka, as in
test_kafka_input.py); the directories by the shared in-process session.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.config import AuditConfig, AuditKafkaConfig
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.proxy.config import BrokerPorts, HostPort, ProxyConfig
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import free_base
from tests.support.audit_stream import create_topic, run_analyze
from tests.support.kafka_broker import KafkaBroker
from tests.support.proxy_fixture import (
    SESSION_TIMEOUT_MS,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.spark_kafka import require_spark_kafka

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

USERS = ("alice", "bob", "carol", "dave")
QUIET = {"log_level": 3}
Grant = tuple[str, str, str, str]
"""(principal, operation, resource type, resource name) of one proposed ACL."""


def client(bootstrap: str, user: str, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        **QUIET,
        **extra,
    }


def produce(bootstrap: str, user: str, topic: str, count: int = 3) -> None:
    """``count`` records of ``topic`` as ``user``, every one delivered."""
    errors: list[object] = []
    producer = Producer(client(bootstrap, user, **{"linger.ms": 0}))
    for index in range(count):
        value = f"{user}-{index}".encode()
        producer.produce(topic, value, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0
    assert errors == [None] * count


def consume(bootstrap: str, user: str, topic: str, group: str, count: int) -> None:
    """Join ``group``, read ``count`` records of ``topic``, commit, leave."""
    consumer = Consumer(
        client(
            bootstrap, user, **{"group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS},
        )
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        got = 0
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got += 1
            if got == count:
                consumer.commit(asynchronous=False)
                break
        assert got == count, f"{user} read {got} of {count} records of {topic}"
    finally:
        consumer.close()


def sasl_listener(tmp_path: Path) -> SaslListenerConfig:
    credentials = tmp_path / "users.yaml"
    write_users_file(
        credentials,
        {
            u: {"PLAIN": plain.make_credential(f"{u}-secret", iterations=4096).to_string()}
            for u in USERS
        },
    )
    return SaslListenerConfig(
        enabled_mechanisms=("PLAIN",), credentials_file=credentials,
        failed_authentication_delay_ms=10, max_failed_authentication_delay_ms=50,
    )  # fmt: skip


def audited_proxy(
    broker: KafkaBroker, sasl: SaslListenerConfig, acl_file: Path, audit_dir: Path, topic: str
) -> ProxyConfig:
    """log_only with no ACLs (every check an audited would-deny), files and the topic."""
    config = proxy_config(
        HostPort("127.0.0.1", broker.port),
        name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT", sasl=sasl,
        broker_ports=BrokerPorts(free_base([broker.node_id]), {}),
        policy=PolicyConfig(AuthorizerConfig(), AclStoreConfig(type="file", path=acl_file)),
    )  # fmt: skip
    return dataclasses.replace(
        config,
        enforcement="log_only",
        audit=AuditConfig(
            enabled=True,
            dir=audit_dir,
            sink="both",
            kafka=AuditKafkaConfig(topic=topic, partitions=3, replication_factor=1),
        ),
    )


def merge_trails(directories: list[Path], into: Path) -> int:
    """Copy every closed ``.jsonl`` file of ``directories`` into ``into``, keeping the
    ``date=/hour=`` layout; a name taken already (both proxies ran in this process, so their
    file names share the pid) gets the proxy's index. Returns the number of files."""
    copied = 0
    for index, directory in enumerate(directories):
        for path in sorted(directory.rglob("*.jsonl")):
            target = into / path.relative_to(directory)
            if target.exists():
                target = target.with_name(f"{path.name.removesuffix('.jsonl')}-p{index}.jsonl")
            assert not target.exists()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            copied += 1
    return copied


def propose_in_process(spark: SparkSession, audit_dir: Path, acl_file: Path) -> None:
    lines: list[str] = []
    args = cli.build_parser().parse_args(
        ["analyze", "propose", "--input", str(audit_dir), "--acl-file", str(acl_file)]
    )
    assert analyze_main.run(args, spark, lines.append) == 0, lines


def acl_lines(path: Path) -> list[str]:
    """An ACL file without its comments (whose header names the input)."""
    text = path.read_text(encoding="utf-8")
    return [
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def grants(path: Path) -> set[Grant]:
    return {
        (b.entry.principal, b.entry.operation.name, b.pattern.resource_type.name, b.pattern.name)
        for b in read_acl_file(path)[0]
    }


@pytest.fixture
def topics(kafka_upstream: KafkaBroker) -> Iterator[dict[str, str]]:
    """Data topics made directly on the broker (no CREATE decisions to audit), deleted after."""
    names = {key: unique_name(f"e2e-{key}") for key in ("orders", "payments", "shared")}
    for name in names.values():
        create_topic(kafka_upstream.admin_config(), name, partitions=1)
    admin = AdminClient({**kafka_upstream.admin_config(), **QUIET})
    try:
        yield names
    finally:
        for future in admin.delete_topics(list(names.values())).values():
            future.result(30)


@pytest.mark.timeout(300)
def test_propose_over_the_topic_equals_propose_over_both_trails(
    spark: SparkSession, kafka_upstream: KafkaBroker, topics: dict[str, str], tmp_path: Path
) -> None:
    require_spark_kafka()
    audit_topic = unique_name("_kafkaguard-audit-e2e")
    orders, payments, shared = topics["orders"], topics["payments"], topics["shared"]
    groups = [unique_name("orders-app"), unique_name("payments-app")]
    sasl = sasl_listener(tmp_path)
    acl_file = tmp_path / "acls.yaml"
    acl_file.write_text("acls: []\n", encoding="utf-8")
    audit_dirs = [tmp_path / "audit-p0", tmp_path / "audit-p1"]

    proxies: list[RunningProxy] = []
    try:
        for audit_dir in audit_dirs:
            config = audited_proxy(kafka_upstream, sasl, acl_file, audit_dir, audit_topic)
            proxies.append(start_proxy_thread(config))
        first, second = (p.bootstrap for p in proxies)
        # Proxy 0: alice writes orders, bob reads them; carol writes the shared topic.
        produce(first, "alice", orders)
        consume(first, "bob", orders, groups[0], 3)
        produce(first, "carol", shared)
        # Proxy 1: dave writes payments, bob reads them in another group; carol again.
        produce(second, "dave", payments)
        consume(second, "bob", payments, groups[1], 3)
        produce(second, "carol", shared)
    finally:
        for running in proxies:
            stop_proxy_thread(running)  # trail files closed, the topic flushed
    for running in proxies:
        topic_sink = running.server.audit.writer.topic  # type: ignore[union-attr]
        assert topic_sink is not None and topic_sink.written > 0
        assert (topic_sink.dropped, topic_sink.lost) == (0, 0)

    union = tmp_path / "audit-union"
    assert merge_trails(audit_dirs, union) >= 2
    from_files = tmp_path / "files.acl"
    propose_in_process(spark, union, from_files)
    from_topic = tmp_path / "topic.acl"
    result = run_analyze(
        "propose", "--input", f"kafka://{kafka_upstream.bootstrap}/{audit_topic}",
        "--acl-file", str(from_topic),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]

    expected = acl_lines(from_files)
    assert acl_lines(from_topic) == expected
    assert grants(from_topic) == {
        ("User:alice", "WRITE", "TOPIC", orders),
        ("User:bob", "READ", "TOPIC", orders),
        ("User:bob", "READ", "GROUP", groups[0]),
        ("User:carol", "WRITE", "TOPIC", shared),
        ("User:dave", "WRITE", "TOPIC", payments),
        ("User:bob", "READ", "TOPIC", payments),
        ("User:bob", "READ", "GROUP", groups[1]),
    }  # DESCRIBE on topics and groups: implied by WRITE/READ, so not proposed

    # Each proxy's trail alone proposes strictly less: the union is what the topic holds.
    alone = [tmp_path / "p0.acl", tmp_path / "p1.acl"]
    for audit_dir, proposal in zip(audit_dirs, alone, strict=True):
        propose_in_process(spark, audit_dir, proposal)
        assert grants(proposal) < grants(from_topic), proposal.name
    assert {p for p, *_ in grants(alone[0])} == {"User:alice", "User:bob", "User:carol"}
    assert {p for p, *_ in grants(alone[1])} == {"User:dave", "User:bob", "User:carol"}
    # carol's grant, proposed by both, carries the decisions of both proxies (each ACL line
    # ends with its decision count): the topic's line is neither proxy's alone.
    (carol,) = [line for line in expected if "User:carol" in line]
    assert all(carol not in acl_lines(proposal) for proposal in alone)
