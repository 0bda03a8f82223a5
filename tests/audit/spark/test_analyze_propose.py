"""``propose``: observed grants (Spark), the proposal rules (pure), and both renderings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.spark.proposal import (
    ObservedGrant,
    ProposedAcl,
    Refusal,
    build_proposal,
    consolidate,
    kafka_acls_command,
    principal_roles,
    render_acl_file,
    render_commands,
    verify,
)
from kafkaguard.audit.spark.propose import observed_grants, proposal_tables, propose
from kafkaguard.audit.spark.source import read_audit
from kafkaguard.policy.model import AclOperation, PatternType, ResourceType, acl_binding
from kafkaguard.policy.stores.file import read_acl_file
from tests.support.analyze_data import rec, write_audit

pytestmark = pytest.mark.spark

T = "2026-11-22T10:{:02d}:00.000Z"
LOG_ONLY = {"mode": "log_only"}
TRAIL = [
    rec(T.format(1), "User:alice", "WRITE", "TOPIC", "orders", count=5),
    rec(T.format(2), "User:alice", "DESCRIBE", "TOPIC", "orders"),
    rec(T.format(3), "User:alice", "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster"),
    rec(T.format(4), "User:bob", "READ", "TOPIC", "orders", "DENIED", count=2, **LOG_ONLY),
    rec(T.format(5), "User:bob", "READ", "GROUP", "g1", "DENIED", **LOG_ONLY),
    rec(T.format(6), "User:bob", "DESCRIBE", "GROUP", "g1", "DENIED", **LOG_ONLY),
    rec(T.format(7), "User:admin", "ALTER", "CLUSTER", "kafka-cluster", reason="SuperUser"),
    rec(T.format(8), "User:mallory", "READ", "TOPIC", "secret", "DENIED"),  # enforced
    rec(T.format(9), "User:carol", "DESCRIBE_CONFIGS", "TOPIC", "orders", "DENIED", **LOG_ONLY),
    rec(T.format(10), "User:carol", "ALTER_CONFIGS", "TOPIC", "orders", "DENIED", **LOG_ONLY),
    rec(T.format(11), "User:dan", "READ", "TOPIC", "t1", host="10.0.0.7"),
    rec(T.format(12), "User:dan", "READ", "TOPIC", "t1", host="10.0.0.8", count=3),
    rec(T.format(13), "alice-without-type", "READ", "TOPIC", "t1"),
    rec(T.format(14), "User:erin", "READ", "TOPIC", "denied-on-purpose", "DENIED",
        reason="DenyAcl", **LOG_ONLY),
]  # fmt: skip


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_audit(tmp_path_factory.mktemp("trail"), TRAIL))


def test_observed_grants(spark: SparkSession, trail: str) -> None:
    grants = observed_grants(read_audit(spark, trail), exact_hosts=True).select(
        "principal", "host", "operation", "resource_name", "decisions", "would_deny", "deny_acl"
    )
    assertDataFrameEqual(
        grants,
        [
            Row("User:alice", "10.0.0.1", "DESCRIBE", "orders", 1, 0, False),
            Row("User:alice", "10.0.0.1", "IDEMPOTENT_WRITE", "kafka-cluster", 1, 0, False),
            Row("User:alice", "10.0.0.1", "WRITE", "orders", 5, 0, False),
            Row("User:bob", "10.0.0.1", "DESCRIBE", "g1", 1, 1, False),
            Row("User:bob", "10.0.0.1", "READ", "g1", 1, 1, False),
            Row("User:bob", "10.0.0.1", "READ", "orders", 2, 2, False),
            Row("User:carol", "10.0.0.1", "ALTER_CONFIGS", "orders", 1, 1, False),
            Row("User:carol", "10.0.0.1", "DESCRIBE_CONFIGS", "orders", 1, 1, False),
            Row("User:dan", "10.0.0.7", "READ", "t1", 1, 0, False),
            Row("User:dan", "10.0.0.8", "READ", "t1", 3, 0, False),
            Row("User:erin", "10.0.0.1", "READ", "denied-on-purpose", 1, 1, True),
            Row("alice-without-type", "10.0.0.1", "READ", "t1", 1, 0, False),
        ],
    )  # super user admin and the enforced denial of mallory are not proposable


EXPECTED_FILE = """\
# header line
version: 1
acls:
  # User:alice: idempotent producer
  - {"principal": "User:alice", "host": "*", "operation": "WRITE", "permission": "ALLOW", \
"resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders"}  # 5 decisions
  - {"principal": "User:alice", "host": "*", "operation": "IDEMPOTENT_WRITE", "permission": \
"ALLOW", "resource_type": "CLUSTER", "pattern_type": "LITERAL", "name": "kafka-cluster"}  \
# 1 decisions
  # User:bob: consumer
  - {"principal": "User:bob", "host": "*", "operation": "READ", "permission": "ALLOW", \
"resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders"}  # 2 decisions
  - {"principal": "User:bob", "host": "*", "operation": "READ", "permission": "ALLOW", \
"resource_type": "GROUP", "pattern_type": "LITERAL", "name": "g1"}  # 1 decisions
  # User:carol: no recognised client role
  - {"principal": "User:carol", "host": "*", "operation": "ALTER_CONFIGS", "permission": \
"ALLOW", "resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders"}  # 1 decisions
  # User:dan: no recognised client role
  - {"principal": "User:dan", "host": "*", "operation": "READ", "permission": "ALLOW", \
"resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "t1"}  # 4 decisions
  # User:erin: no recognised client role
  - {"principal": "User:erin", "host": "*", "operation": "READ", "permission": "ALLOW", \
"resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "denied-on-purpose"}  \
# 1 decisions; observed as a would-deny by a DENY ACL: review
"""


def test_proposal_file_loads_in_the_file_store(
    spark: SparkSession, trail: str, tmp_path: Path
) -> None:
    made = propose(read_audit(spark, trail))
    assert made.skipped == 1  # the principal without a type
    text = render_acl_file(made.acls, ["header line"])
    assert text == EXPECTED_FILE
    path = tmp_path / "proposed.yaml"
    path.write_text(text, encoding="utf-8")
    assert read_acl_file(path)[0] == frozenset(a.binding for a in made.acls)
    tables = proposal_tables(spark, made)
    assertDataFrameEqual(
        tables["principal_roles"],
        [
            Row("User:alice", ["idempotent producer"]),
            Row("User:bob", ["consumer"]),
            Row("User:carol", []),
            Row("User:dan", []),
            Row("User:erin", []),
        ],
    )
    assert tables["proposed_acls"].count() == 7


def test_exact_hosts_keep_one_acl_per_client_address(spark: SparkSession, trail: str) -> None:
    made = propose(read_audit(spark, trail), exact_hosts=True)
    dan = [(a.binding.entry.host, a.decisions) for a in made.acls if "dan" in str(a.binding)]
    assert dan == [("10.0.0.7", 1), ("10.0.0.8", 3)]


def test_kafka_acls_commands() -> None:
    alice, cluster = "User:alice", "kafka-cluster"
    acls = [
        ProposedAcl(
            acl_binding(ResourceType.TOPIC, "orders", alice, AclOperation.WRITE), 5, ("orders",)
        ),
        ProposedAcl(
            acl_binding(ResourceType.CLUSTER, cluster, alice, AclOperation.IDEMPOTENT_WRITE),
            1, (cluster,),
        ),
        ProposedAcl(
            acl_binding(ResourceType.TOPIC, "logs.", "User:CN=x,O=y", AclOperation.DESCRIBE_CONFIGS,
                        pattern_type=PatternType.PREFIXED, host="10.0.0.7"),
            9, ("logs.a", "logs.b"), ("prefix of 2 observed topics",),
        ),
    ]  # fmt: skip
    assert render_commands(acls, "kafka:9092").splitlines() == [
        "#!/bin/sh",
        "# Generated by kafkaguard analyze propose; review before running.",
        "set -e",
        "# User:alice: idempotent producer",
        "kafka-acls --bootstrap-server kafka:9092 --add --allow-principal User:alice "
        "--operation Write --topic orders  # 5 decisions",
        "kafka-acls --bootstrap-server kafka:9092 --add --allow-principal User:alice "
        "--operation IdempotentWrite --cluster  # 1 decisions",
        "# User:CN=x,O=y: no recognised client role",
        "kafka-acls --bootstrap-server kafka:9092 --add --allow-principal User:CN=x,O=y "
        "--allow-host 10.0.0.7 --operation DescribeConfigs --topic logs. "
        "--resource-pattern-type prefixed  # 9 decisions; covers logs.a, logs.b; "
        "prefix of 2 observed topics",
    ]
    group = acl_binding(ResourceType.GROUP, "my group", "User:a", AclOperation.READ)
    assert kafka_acls_command(group, "b:1").endswith("--operation Read --group 'my group'")


def _grant(
    principal: str, op: AclOperation, name: str, rtype: ResourceType = ResourceType.TOPIC
) -> ObservedGrant:
    return ObservedGrant(principal, "*", op, rtype, name, 1)


def test_prefix_consolidation_is_opt_in_and_lists_what_it_covers() -> None:
    names = ["logs.app1", "logs.app2", "logs.app3", "metrics.x"]
    grants = [_grant("User:eve", AclOperation.WRITE, n) for n in names]
    assert all(
        a.binding.pattern.pattern_type == PatternType.LITERAL for a in build_proposal(grants)
    )
    made = build_proposal(grants, prefix_min_topics=3)
    assert [(a.binding.pattern.name, a.binding.pattern.pattern_type, a.covers) for a in made] == [
        ("logs.", PatternType.PREFIXED, ("logs.app1", "logs.app2", "logs.app3")),
        ("metrics.x", PatternType.LITERAL, ("metrics.x",)),
    ]
    assert build_proposal(grants, prefix_min_topics=4)[0].binding.pattern.pattern_type == (
        PatternType.LITERAL
    )


@pytest.mark.parametrize(
    "refusal",
    [
        Refusal("User:eve", AclOperation.WRITE, ResourceType.TOPIC, "logs.secret"),
        # WRITE implies DESCRIBE: a refused DESCRIBE under the prefix blocks it too.
        Refusal("User:eve", AclOperation.DESCRIBE, ResourceType.TOPIC, "logs.audit"),
    ],
)
def test_prefix_never_covers_a_refused_topic(refusal: Refusal) -> None:
    grants = [_grant("User:eve", AclOperation.WRITE, f"logs.app{i}") for i in range(3)]
    made = build_proposal(grants, [refusal], prefix_min_topics=3)
    assert [a.binding.pattern.pattern_type for a in made] == [PatternType.LITERAL] * 3
    other = Refusal("User:other", AclOperation.WRITE, ResourceType.TOPIC, "logs.secret")
    assert len(build_proposal(grants, [other], prefix_min_topics=3)) == 1


def test_consolidate_prefers_the_most_specific_prefix() -> None:
    names = ["a.b.1", "a.b.2", "a.b.3", "a.c", "a.d"]
    assert consolidate(names, 3) == ([("a.b.", ["a.b.1", "a.b.2", "a.b.3"])], {"a.c", "a.d"})
    # A shorter prefix chosen later absorbs the longer one it covers.
    assert consolidate([*names, "a.e"], 3) == (
        [("a.", ["a.b.1", "a.b.2", "a.b.3", "a.c", "a.d", "a.e"])],
        set(),
    )


def test_implication_drops_describe_but_keeps_it_alone() -> None:
    grants = [
        _grant("User:a", AclOperation.READ, "t"),
        _grant("User:a", AclOperation.DESCRIBE, "t"),
        _grant("User:a", AclOperation.DESCRIBE, "u"),
        _grant("User:a", AclOperation.DESCRIBE_CONFIGS, "t"),
    ]
    made = build_proposal(grants)
    assert [(a.binding.entry.operation, a.binding.pattern.name) for a in made] == [
        (AclOperation.READ, "t"),
        (AclOperation.DESCRIBE_CONFIGS, "t"),  # READ does not imply DESCRIBE_CONFIGS
        (AclOperation.DESCRIBE, "u"),
    ]


def test_roles_and_verification() -> None:
    txn = [
        _grant("User:t", AclOperation.WRITE, "tx-1", ResourceType.TRANSACTIONAL_ID),
        _grant("User:t", AclOperation.WRITE, "out"),
        _grant("User:p", AclOperation.WRITE, "out"),
    ]
    assert principal_roles(build_proposal(txn)) == {
        "User:p": ["producer"],
        "User:t": ["transactional producer"],
    }
    with pytest.raises(AssertionError, match="does not allow"):
        verify([], txn)
