"""The rollout loop, for real: log_only → propose → enforce with zero denials → whatif.

Real clients (confluent-kafka: an idempotent producer, a consumer in a group, an admin client
describing configs) talk SASL/PLAIN to kafkaguard in front of Tansu, as three principals:

1. ``log_only``, no ACLs, audit on: every decision is a would-deny, every operation succeeds.
2. ``propose`` from that audit window; the proposal is the ACL file of an enforcing proxy; the
   same workload succeeds with zero DENIED decisions.
3. One proposed ACL is removed. ``whatif`` over window 1 predicts which requests the reduced
   set denies, and over window 2 which allowed ones flip; a third run with the reduced set
   shows exactly those denials, with the same count.

The ACL removed is carol's DESCRIBE_CONFIGS: its request is the last of its client, so the
replay of what clients *did* predicts what they *will* do. Removing, say, bob's group READ is
different: the consumer is then refused at FindCoordinator and never sends the JoinGroup,
OffsetCommit... that window 1 recorded, so the observed denials are a subset of the predicted
ones (see kafkaguard/audit/spark/whatif.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.config import FORMAT_CLOUDEVENTS, AuditConfig, AuditRule
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.trail.source import read_audit
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import TansuBroker
from tests.support.proxy_fixture import (
    SESSION_TIMEOUT_MS,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

USERS = ("alice", "bob", "carol")
Outcome = dict[str, str]
Tuple = tuple[str, str, str, str]


def _client(bootstrap: str, user: str, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        **extra,
    }


def workload(bootstrap: str, topic: str, group: str) -> Outcome:
    """The same three clients every run; returns each one's outcome ("ok" or the error)."""
    outcome: Outcome = {}
    producer = Producer(_client(bootstrap, "alice", **{"enable.idempotence": True}))
    errors: list[str] = []
    for i in range(5):
        producer.produce(
            topic, f"m{i}".encode(), on_delivery=lambda e, _m: e and errors.append(str(e))
        )
    left = producer.flush(30)
    outcome["alice"] = "ok" if not errors and left == 0 else f"{errors} {left} undelivered"

    consumer = Consumer(
        _client(
            bootstrap, "bob", **{"group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS},
        )
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        got, failure = 0, ""
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                failure = str(msg.error())
                break
            got += 1
            if got == 5:
                consumer.commit(asynchronous=False)
                break
        outcome["bob"] = "ok" if got == 5 else f"got {got}: {failure}"
    finally:
        consumer.close()

    admin = AdminClient(_client(bootstrap, "carol"))
    future = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    try:
        for f in future.values():
            f.result(15)
        outcome["carol"] = "ok"
    except KafkaException as exc:
        outcome["carol"] = exc.args[0].name()
    return outcome


@pytest.fixture
def rollout(tansu: TansuBroker, tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``run(enforcement, acl_text, **audit)``: one proxy run of the workload, with
    ``AuditConfig`` settings ``audit``; returns its audit dir."""
    credentials = tmp_path / "users.yaml"
    write_users_file(
        credentials,
        {
            u: {"PLAIN": plain.make_credential(f"{u}-secret", iterations=4096).to_string()}
            for u in USERS
        },
    )
    sasl = SaslListenerConfig(
        enabled_mechanisms=("PLAIN",), credentials_file=credentials,
        failed_authentication_delay_ms=10, max_failed_authentication_delay_ms=50,
    )  # fmt: skip
    topic, group = unique_name("rollout"), unique_name("rollout-group")
    admin = AdminClient({"bootstrap.servers": str(tansu.address)})  # set-up only, direct
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(15)
    runs: list[int] = []

    def run(enforcement: str, acl_text: str, **audit: Any) -> Path:
        runs.append(len(runs) + 1)
        acl_file = tmp_path / f"acls-{runs[-1]}.yaml"
        acl_file.write_text(acl_text, encoding="utf-8")
        audit_dir = tmp_path / f"audit-{runs[-1]}"
        config = proxy_config(
            tansu.address, name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT", sasl=sasl,
            policy=PolicyConfig(AuthorizerConfig(), AclStoreConfig(type="file", path=acl_file)),
        )  # fmt: skip
        config = dataclasses.replace(
            config,
            enforcement=enforcement,
            audit=AuditConfig(enabled=True, dir=audit_dir, **audit),
        )
        proxy = start_proxy_thread(config)
        try:
            outcomes[runs[-1]] = workload(proxy.bootstrap, topic, group)
        finally:
            stop_proxy_thread(proxy)  # closes the audit trail: aggregates flushed, files renamed
        return audit_dir

    outcomes: dict[int, Outcome] = {}
    run.outcomes = outcomes  # type: ignore[attr-defined]
    run.names = (topic, group)  # type: ignore[attr-defined]
    try:
        yield run
    finally:
        for f in admin.delete_topics([topic]).values():
            f.result(15)


def analyze(spark: SparkSession, *argv: str) -> list[str]:
    lines: list[str] = []
    args = cli.build_parser().parse_args(["analyze", *argv])
    assert analyze_main.run(args, spark, lines.append) == 0, lines
    return lines


def denied(spark: SparkSession, audit_dir: Path) -> dict[Tuple, int]:
    rows = (
        read_audit(spark, str(audit_dir))
        .where("result = 'DENIED'")
        .groupBy("principal", "operation", "resource_type", "resource_name")
        .sum("count")
        .collect()
    )
    return {(r[0], r[1], r[2], r[3]): int(r[4]) for r in rows}


def predicted(spark: SparkSession, out: Path, *, column: str, value: str) -> dict[Tuple, int]:
    rows = spark.read.parquet(str(out / "whatif_replay.parquet")).where(f"{column} = '{value}'")
    found: dict[Tuple, int] = {}
    for r in rows.collect():
        key = (r.principal, r.operation, r.resource_type, r.resource_name)
        found[key] = found.get(key, 0) + r["count"]
    return found


@pytest.mark.timeout(600)
def test_log_only_propose_enforce_whatif(
    spark: SparkSession, rollout: Callable[..., Path], tmp_path: Path
) -> None:
    topic, group = rollout.names  # type: ignore[attr-defined]
    outcomes = rollout.outcomes  # type: ignore[attr-defined]

    window1 = rollout("log_only", "acls: []\n")
    assert outcomes[1] == {"alice": "ok", "bob": "ok", "carol": "ok"}
    first = read_audit(spark, str(window1))
    assert first.where("result = 'ALLOWED'").count() == 0
    assert first.where("would_deny").count() == first.count() > 0

    proposal = tmp_path / "proposed.yaml"
    analyze(spark, "propose", "--input", str(window1), "--acl-file", str(proposal))
    acls = {
        (b.entry.principal, b.entry.operation.name, b.pattern.resource_type.name, b.pattern.name)
        for b in read_acl_file(proposal)[0]
    }
    assert acls == {
        ("User:alice", "WRITE", "TOPIC", topic),
        ("User:bob", "READ", "TOPIC", topic),
        ("User:bob", "READ", "GROUP", group),
        ("User:carol", "DESCRIBE_CONFIGS", "TOPIC", topic),
    }  # DESCRIBE on the topic and the group: implied by WRITE/READ, so not proposed
    text = proposal.read_text(encoding="utf-8")
    assert "# User:alice: producer" in text and "# User:bob: consumer" in text

    window2 = rollout("enforce", text)
    assert outcomes[2] == {"alice": "ok", "bob": "ok", "carol": "ok"}
    assert denied(spark, window2) == {}
    assert read_audit(spark, str(window2)).where("result = 'ALLOWED'").count() > 0

    carol = ("User:carol", "DESCRIBE_CONFIGS", "TOPIC", topic)
    reduced = tmp_path / "reduced.yaml"
    reduced.write_text(
        "".join(line for line in text.splitlines(True) if '"DESCRIBE_CONFIGS"' not in line),
        encoding="utf-8",
    )
    assert len(read_acl_file(reduced)[0]) == 3
    out1, out2 = tmp_path / "whatif-1", tmp_path / "whatif-2"
    analyze(spark, "whatif", "--input", str(window1), "--acls", str(reduced), "--output", str(out1))
    lines = analyze(
        spark, "whatif", "--input", str(window2), "--acls", str(reduced), "--output", str(out2)
    )
    still_denied = predicted(spark, out1, column="predicted", value="DENIED")
    assert set(still_denied) == {carol}
    breaks = predicted(spark, out2, column="predicted", value="DENIED")
    assert set(breaks) == {carol}
    assert lines[0] == f"ALLOWED->DENIED: {breaks[carol]} decisions (1 distinct requests)"

    window3 = rollout("enforce", reduced.read_text(encoding="utf-8"))
    assert outcomes[3] == {"alice": "ok", "bob": "ok", "carol": "TOPIC_AUTHORIZATION_FAILED"}
    assert denied(spark, window3) == breaks  # the same requests, the same count


def _proposal(spark: SparkSession, window: Path, out: Path) -> set[Tuple]:
    analyze(spark, "propose", "--input", str(window), "--acl-file", str(out))
    return {
        (b.entry.principal, b.entry.operation.name, b.pattern.resource_type.name, b.pattern.name)
        for b in read_acl_file(out)[0]
    }


@pytest.mark.timeout(600)
def test_exclusions_and_cloudevents_give_the_same_proposal(
    spark: SparkSession, rollout: Callable[..., Path], tmp_path: Path
) -> None:
    """The rollout loop's first step with the noise of metadata lookups excluded and the trail
    in CloudEvents: fewer records, the same proposal (their DESCRIBEs are implied by the
    READ/WRITE proposed), and Kafka's unlogged checks are not in either trail."""
    plain = rollout("log_only", "acls: []\n")
    quiet = rollout(
        "log_only",
        "acls: []\n",
        format=FORMAT_CLOUDEVENTS,
        exclude=(AuditRule(apis=frozenset({3, 10})),),  # Metadata, FindCoordinator
    )
    outcomes = rollout.outcomes  # type: ignore[attr-defined]
    assert outcomes[1] == outcomes[2] == {"alice": "ok", "bob": "ok", "carol": "ok"}
    apis = {r.api_name for r in read_audit(spark, str(plain)).select("api_name").collect()}
    kept = {r.api_name for r in read_audit(spark, str(quiet)).select("api_name").collect()}
    assert {"Metadata", "FindCoordinator"} <= apis
    assert not kept & {"Metadata", "FindCoordinator"}
    assert {"Produce", "JoinGroup", "DescribeConfigs"} <= kept
    assert '"specversion":"1.0"' in next(quiet.rglob("*.jsonl")).read_text(encoding="utf-8")
    expected = _proposal(spark, plain, tmp_path / "plain.yaml")
    assert len(expected) == 4
    assert _proposal(spark, quiet, tmp_path / "quiet.yaml") == expected
