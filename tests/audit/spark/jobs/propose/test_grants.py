"""``propose``'s Spark side: the observed grants, the proposal they give and its tables (the
rules themselves: tests/audit/spark/solver/test_proposal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.jobs.propose.grants import observed_grants, proposal_tables, propose
from kafkaguard.audit.spark.solver.proposal import render_acl_file
from kafkaguard.audit.spark.trail.source import read_audit
from kafkaguard.policy.stores.file import read_acl_file
from tests.support.analyze_data import GROUPS_TRAIL, rec, without_groups, write_audit

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


def _propose_file(spark: SparkSession, trail: Path, out: Path, *flags: str) -> str:
    """``kafkaguard analyze propose`` through the real parser: the ACL file it writes."""
    args = cli.build_parser().parse_args(
        ["analyze", "propose", "--input", str(trail), "--acl-file", str(out), *flags]
    )
    assert analyze_main.run(args, spark, lambda line: None) == 0
    return out.read_text(encoding="utf-8")


def test_propose_groups(spark: SparkSession, tmp_path: Path) -> None:
    """``--groups``: a Group:eng ACL for what every observed member of eng did (root, a super
    user, is no member that counts), user ACLs for the rest, the members named; without it,
    byte for byte the file of the same trail without groups."""
    trail = write_audit(tmp_path / "grouped", GROUPS_TRAIL)
    plain = write_audit(tmp_path / "plain", without_groups(GROUPS_TRAIL))
    ungrouped = _propose_file(spark, trail, tmp_path / "a.yaml")
    assert ungrouped == _propose_file(spark, plain, tmp_path / "b.yaml").replace(
        str(plain), str(trail)
    )
    assert "Group:" not in ungrouped
    grouped = _propose_file(spark, trail, tmp_path / "g.yaml", "--groups")
    rows = [line.strip() for line in grouped.splitlines() if line.startswith("  ")]
    assert rows == [
        "# Group:eng: producer",
        '- {"principal": "Group:eng", "host": "*", "operation": "WRITE", "permission": "ALLOW",'
        ' "resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders"}'
        "  # 5 decisions; group ACL for its 2 observed members: User:alice, User:bob",
        "# User:alice: no recognised client role",
        '- {"principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW",'
        ' "resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "audit"}  # 1 decisions',
        "# User:carol: producer",
        '- {"principal": "User:carol", "host": "*", "operation": "WRITE", "permission": "ALLOW",'
        ' "resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders"}  # 1 decisions',
    ]
    assert "# --groups: 1 Group: ACLs, each where every observed member" in grouped
    # "nothing else" does not hold for a group ACL: the file says whom else it grants.
    assert "also grants the group's members the window did not see" in grouped
    path = tmp_path / "loaded.yaml"
    path.write_text(grouped, encoding="utf-8")
    assert len(read_acl_file(path)[0]) == 3
    # Without groups in the trail, --groups has no member to group: the user ACLs.
    assert "Group:" not in _propose_file(spark, plain, tmp_path / "p.yaml", "--groups").replace(
        "Group: ACLs", ""
    )
