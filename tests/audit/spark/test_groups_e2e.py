"""Groups in the audit trail and the analytics, for real (issue 37): SASL/PLAIN clients through
kafkaguard to Tansu with a groups file; the records the proxy writes carry each connection's
groups and the deciding group ACL, and ``analyze propose --groups`` / ``analyze unused`` over
that trail answer with group ACLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.config import AuditConfig
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, GroupsConfig, PolicyConfig
from kafkaguard.policy.model import AclOperation, ResourceType, acl_binding
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.tansu import TansuBroker
from tests.proxy.test_groups_e2e import _produce as produce_one
from tests.support.proxy_fixture import RunningProxy, created_topic, stop_proxy_thread
from tests.support.sasl_proxy import start_sasl_proxy

pytestmark = [pytest.mark.spark, pytest.mark.integration]

USERS = {user: f"{user}-secret" for user in ("alice", "bob", "carol")}
GROUPS = 'version: 1\ngroups:\n  "User:alice": [eng]\n  "User:carol": [eng, oncall]\n'
WRITE = AclOperation.WRITE


def _produce(running: RunningProxy, topic: str, user: str) -> int | None:
    """One record produced as ``user`` over SASL/PLAIN; its delivery error code (None:
    delivered)."""
    auth = {"sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}
    error = produce_one(running, topic, **auth)
    return None if error is None else int(error.code())


def _analyze(spark: SparkSession, *argv: str) -> list[str]:
    lines: list[str] = []
    args = cli.build_parser().parse_args(["analyze", *argv])
    assert analyze_main.run(args, spark, lines.append) == 0
    return lines


def test_the_trail_names_the_groups_and_propose_groups_unused_read_them(
    spark: SparkSession, tansu: TansuBroker, proxy: RunningProxy, tmp_path: Path
) -> None:
    groups_file = tmp_path / "groups.yaml"
    groups_file.write_text(GROUPS, encoding="utf-8")
    trail = tmp_path / "audit"
    with created_topic(proxy, "audit-groups") as topic:
        acls = [
            acl_binding(ResourceType.TOPIC, topic, "Group:eng", WRITE),
            # Never used: no request of carol's (oncall) is on this topic.
            acl_binding(ResourceType.TOPIC, "other-" + topic, "Group:oncall", AclOperation.READ),
            acl_binding(ResourceType.TOPIC, topic, "User:bob", WRITE),
        ]
        policy = PolicyConfig(
            authorizer=AuthorizerConfig(groups=GroupsConfig(file=groups_file)),
            acl_store=AclStoreConfig(type="file", path=tmp_path / "acls.yaml"),
        )
        audit = AuditConfig(enabled=True, dir=trail, allowed="individual")
        running = start_sasl_proxy(
            tansu, tmp_path, acls, policy=policy, passwords=USERS, audit=audit
        )
        try:
            assert [_produce(running, topic, u) for u in ("alice", "carol", "bob")] == [None] * 3
            unknown = _produce(running, "no-acl-" + topic, "carol")
            assert unknown == KafkaError.TOPIC_AUTHORIZATION_FAILED
        finally:
            stop_proxy_thread(running)  # closes the trail's files

        records = [
            json.loads(line)
            for path in sorted(trail.rglob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()
        ]
        writes = {
            (r["principal"], r["result"], tuple(r["groups"]), (r["acl"] or {}).get("principal"))
            for r in records
            if r["operation"] == "WRITE" and r["resource_name"] == topic
        }
        assert writes == {
            ("User:alice", "ALLOWED", ("Group:eng",), "Group:eng"),
            ("User:carol", "ALLOWED", ("Group:eng", "Group:oncall"), "Group:eng"),
            ("User:bob", "ALLOWED", (), "User:bob"),
        }
        refused = {
            (r["principal"], tuple(r["groups"]))
            for r in records
            if r["result"] == "DENIED" and r["resource_name"] == "no-acl-" + topic
        }
        assert refused == {("User:carol", ("Group:eng", "Group:oncall"))}
        assert {r["schema_version"] for r in records} == {2}

        proposed = tmp_path / "proposed.yaml"
        _analyze(spark, "propose", "--input", str(trail), "--groups", "--acl-file", str(proposed))
        bindings = read_acl_file(proposed)[0]
        writers = {b.entry.principal for b in bindings if b.pattern.name == topic}
        assert writers >= {"Group:eng", "User:bob"}
        assert not writers & {"User:alice", "User:carol"}  # eng's ACL covers both
        assert "group ACL for its 2 observed members: User:alice, User:carol" in (
            proposed.read_text(encoding="utf-8")
        )

        unused = _analyze(
            spark, "unused", "--input", str(trail), "--acls", str(tmp_path / "acls.yaml")
        )
        assert unused[0].startswith("1 of 3 ACLs")
        assert unused[1:] == [
            f"  ALLOW READ on Topic:LITERAL:other-{topic} for Group:oncall from host *"
        ]
