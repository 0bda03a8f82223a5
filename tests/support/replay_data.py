"""The ACL set and trail that ``unused``, ``whatif`` and the replay they share are tested on
(tests/audit/spark/runtime/test_replay.py, jobs/unused/, jobs/whatif/): one trail, so the
three agree on what each decision is."""

from __future__ import annotations

from kafkaguard.policy.model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    acl_binding,
)
from tests.support.analyze_data import rec

Op, R = AclOperation, ResourceType
DENY = AclPermissionType.DENY
CURRENT = [
    acl_binding(R.TOPIC, "ord", "User:bob", Op.READ, pattern_type=PatternType.PREFIXED),
    acl_binding(R.TOPIC, "orders", "User:alice", Op.READ, DENY),  # never asked: alice only writes
    acl_binding(R.TOPIC, "orders", "User:alice", Op.WRITE),  # also covers DESCRIBE (implied)
    acl_binding(R.TOPIC, "orders", "User:bob", Op.READ, DENY, host="10.0.0.9"),  # other host
    acl_binding(R.TOPIC, "z", "User:zed", Op.READ),
    acl_binding(R.GROUP, "*", "User:*", Op.DESCRIBE),
]
T = "2026-11-22T10:{:02d}:00.000Z"
TRAIL = [
    rec(T.format(1), "User:alice", "WRITE", "TOPIC", "orders", count=3),
    rec(T.format(2), "User:alice", "DESCRIBE", "TOPIC", "orders"),
    rec(T.format(3), "User:bob", "READ", "TOPIC", "orders", count=2),
    rec(T.format(4), "User:carol", "DESCRIBE", "GROUP", "g"),
    rec(T.format(5), "User:dave", "READ", "TOPIC", "orders", "DENIED"),
    rec(T.format(6), "User:dave", "READ", "TOPIC", "orders", "DENIED", count=3),
    rec(T.format(7), "User:admin", "ALTER", "CLUSTER", "kafka-cluster", "DENIED"),
    rec(T.format(8), "User:eve", "READ", "TOPIC", "orders", host="not-an-ip"),
]
