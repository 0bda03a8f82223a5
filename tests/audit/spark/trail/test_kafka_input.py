"""``kafkaguard analyze ... --input kafka://host:port/topic``: the audit topic read in batch by
Spark's Kafka source gives the same results as the files holding the same audit lines.

The topic lives on Apache Kafka 4.3.1 (tests/support/kafka_broker.py): Tansu answers
ListOffsets with a high watermark one past a batch's *first* offset, so a batch reader that
stops at the latest offset, as Spark's does, would see one record of each produced batch.
The topic job runs as a real ``kafkaguard analyze`` subprocess (``spark.jars`` is fixed when a
JVM starts, and the tests' shared session has no Kafka source); the file job runs on the
shared session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.runtime.session import KAFKA_JARS_ENV
from kafkaguard.audit.spark.trail.source import KafkaInput
from tests.support.analyze_data import rec, write_audit
from tests.support.audit_stream import create_topic, produce_lines, run_analyze
from tests.support.kafka_broker import KafkaBroker, plain_jaas
from tests.support.spark_kafka import require_spark_kafka

T = "2026-11-{:02d}T{:02d}:{:02d}:00.000Z"
LOG_ONLY = {"mode": "log_only"}
TRAIL = [
    rec(T.format(21, 23, 59), "User:early", "READ", "TOPIC", "orders"),  # before --since
    rec(T.format(22, 10, 1), "User:alice", "WRITE", "TOPIC", "orders", count=5),
    rec(T.format(22, 10, 2), "User:alice", "DESCRIBE", "TOPIC", "orders"),
    rec(T.format(22, 10, 3), "User:alice", "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster"),
    rec(T.format(22, 11, 4), "User:bob", "READ", "TOPIC", "orders", "DENIED", count=2, **LOG_ONLY),
    rec(T.format(22, 11, 5), "User:bob", "READ", "GROUP", "g1", "DENIED", **LOG_ONLY),
    rec(T.format(22, 12, 7), "User:admin", "ALTER", "CLUSTER", "kafka-cluster", reason="SuperUser"),
    rec(T.format(22, 12, 8), "User:mallory", "READ", "TOPIC", "secret", "DENIED"),  # enforced
    rec(T.format(23, 1, 11), "User:dan", "READ", "TOPIC", "t1", host="10.0.0.7"),
    rec(T.format(23, 2, 12), "User:dan", "READ", "TOPIC", "t1", host="10.0.0.8", count=3),
    rec(T.format(23, 3, 13), "User:dan", "READ", "GROUP", "dan-app", count=4),
]  # fmt: skip
SINCE = "2026-11-22T00:00Z"
ANALYTICS = "User:carol"
"""The analytics principal on the referee (one of its SASL/PLAIN users)."""
BAD_LINES = [
    '{"schema_version": 1, "kind": "decis',  # cut short
    "not json at all",
    '{"schema_version": 3}',  # another version
    json.dumps({**json.loads(TRAIL[1].to_json()), "time": "garbage"}),  # no usable time
    "",
]
"""Records a reader must drop, as it drops such lines of a file."""


def analyze(spark: SparkSession, *argv: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    args = cli.build_parser().parse_args(["analyze", *argv])
    return analyze_main.run(args, spark, lines.append), lines


def acl_lines(text: str) -> list[str]:
    """An ACL file without its comments (whose header names the input)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_kafka_uri() -> None:
    source = KafkaInput.parse("kafka://127.0.0.1:9092,[::1]:9093/_kafkaguard-audit")
    assert source == KafkaInput("127.0.0.1:9092,[::1]:9093", "_kafkaguard-audit")
    assert str(source) == "kafka://127.0.0.1:9092,[::1]:9093/_kafkaguard-audit"
    assert source.options({"security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092,[::1]:9093",
        "subscribe": "_kafkaguard-audit",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
    }
    for bad in (
        "kafka://host/t",
        "kafka://h:1",
        "kafka://h:1/",
        "kafka://h:99999/t",
        "kafka://h:1/a b",
    ):
        with pytest.raises(ValueError, match="expected kafka://host:port"):
            KafkaInput.parse(bad)


def test_bad_kafka_input_is_an_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["analyze", "propose", "--input", "kafka://nohost/t"])
    assert analyze_main.run(args) == 2
    assert "expected kafka://host:port[,host:port]/topic" in capsys.readouterr().err
    args = cli.build_parser().parse_args(
        ["analyze", "report", "--input", "kafka://h:1/t", "--kafka-option", "novalue"]
    )
    assert analyze_main.run(args) == 2
    assert "--kafka-option needs KEY=VALUE" in capsys.readouterr().err


def test_missing_kafka_source_says_how_to_get_it(tmp_path: Path) -> None:
    """No traceback, no JVM: the message names the directory and the ways to fill it."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkaguard",
            "analyze",
            "propose",
            "--input",
            "kafka://127.0.0.1:1/t",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=os.environ | {KAFKA_JARS_ENV: str(tmp_path)},
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert f"spark-sql-kafka-0-10_2.13) is not in {tmp_path}" in result.stderr
    assert "python -m tests.support.spark_kafka" in result.stderr
    assert "spark.jars.packages" in result.stderr


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_audit(tmp_path_factory.mktemp("trail"), TRAIL)


def fill_topic(client: dict[str, str], topic: str) -> None:
    """The trail's lines in a 3-partition topic, with bad records among them."""
    create_topic(client, topic, partitions=3)
    lines = [r.to_json() for r in TRAIL]
    produce_lines(client, topic, [*lines[:4], *BAD_LINES, *lines[4:]])


@pytest.mark.spark
@pytest.mark.kafka
def test_propose_reads_the_topic_as_it_reads_files(
    spark: SparkSession, kafka_upstream: KafkaBroker, trail: Path, tmp_path: Path
) -> None:
    require_spark_kafka()
    topic = "_kafkaguard-audit-propose"
    fill_topic(kafka_upstream.admin_config(), topic)
    from_files = tmp_path / "files.acl"
    code, _ = analyze(
        spark, "propose", "--input", str(trail), "--since", SINCE, "--acl-file", str(from_files)
    )
    assert code == 0
    from_topic = tmp_path / "topic.acl"
    result = run_analyze(
        "propose", "--input", f"kafka://{kafka_upstream.bootstrap}/{topic}", "--since", SINCE,
        "--acl-file", str(from_topic),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    expected = acl_lines(from_files.read_text(encoding="utf-8"))
    assert acl_lines(from_topic.read_text(encoding="utf-8")) == expected
    assert any("User:dan" in line for line in expected)
    assert not any("User:early" in line for line in expected)  # cut by --since
    assert result.stderr.splitlines()[-1] == "proposed 6 ACLs for 3 principals"


def acl(resource: ResourceType, name: str, pattern: ResourcePatternType) -> AclBinding:
    return AclBinding(
        resource, name, pattern, ANALYTICS, "*", AclOperation.READ, AclPermissionType.ALLOW
    )


@pytest.mark.spark
@pytest.mark.kafka
def test_report_reads_the_topic_over_sasl_as_the_analytics_principal(
    spark: SparkSession, kafka_referee: KafkaBroker, trail: Path
) -> None:
    """Kafka with its own authorizer and SASL/PLAIN: the analytics principal holds only the
    ACLs docs/audit.md gives it (READ on the topic, READ on Spark's consumer groups), and
    ``--kafka-option`` carries its SASL settings to Spark's consumer."""
    require_spark_kafka()
    topic = "_kafkaguard-audit-report"
    fill_topic(kafka_referee.admin_config(), topic)
    admin = AdminClient(kafka_referee.admin_config())
    acls = [
        acl(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL),
        acl(ResourceType.GROUP, "spark-kafka-", ResourcePatternType.PREFIXED),
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)
    try:
        sasl = kafka_referee.client_config(ANALYTICS.removeprefix("User:"))
        options = [
            arg
            for key in ("security.protocol", "sasl.mechanism")
            for arg in ("--kafka-option", f"{key}={sasl[key]}")
        ]
        jaas = plain_jaas(sasl["sasl.username"], sasl["sasl.password"])
        options += ["--kafka-option", f"sasl.jaas.config={jaas}"]
        result = run_analyze(
            "report", "--input", f"kafka://{kafka_referee.bootstrap}/{topic}", *options
        )
    finally:
        filters = [
            AclBindingFilter(
                b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                b.permission_type,
            )
            for b in acls
        ]  # fmt: skip
        deleted = [binding for f in admin.delete_acls(filters).values() for binding in f.result(30)]
        assert sorted(map(str, deleted)) == sorted(map(str, acls))
    assert result.returncode == 0, result.stderr[-3000:]
    code, report_lines = analyze(spark, "report", "--input", str(trail))
    assert code == 0
    summary = "21 decisions: 17 allowed, 4 denied (3 would-deny in log_only), 6 principals"
    assert report_lines[-1] == summary
    assert result.stdout.splitlines()[-1] == summary
