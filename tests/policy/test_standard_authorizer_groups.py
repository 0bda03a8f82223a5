"""Decisions over a connection's whole identity (issue 37): as StandardAuthorizer would decide
for a subject holding its principal and every one of its ``Group:`` principals."""

from __future__ import annotations

import logging
import random

import pytest

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclBinding, AclOperation, ResourcePattern, ResourceType
from tests.support.policy import (
    ALLOW,
    CLUSTER,
    DENY,
    LITERAL,
    PREFIXED,
    TOPIC,
    Op,
    acl,
    allowed,
    authorizer,
    ctx,
)

ALLOWED, DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED
TXN = ResourceType.TRANSACTIONAL_ID


def test_an_allow_on_a_group_allows_its_members_only() -> None:
    auth = authorizer([acl("Group:eng", Op.WRITE)])
    assert allowed(auth, ctx("User:alice", groups=("eng",)), Op.WRITE)
    assert allowed(auth, ctx("User:alice", groups=("eng",)), Op.DESCRIBE)  # implied, as Kafka
    assert not allowed(auth, ctx("User:alice", groups=("ops",)), Op.WRITE)
    assert not allowed(auth, ctx("User:alice"), Op.WRITE)
    # a principal that merely looks like the group is not it
    assert not allowed(auth, ctx("User:eng"), Op.WRITE)


def test_a_deny_on_any_group_wins_over_an_allow_on_the_user() -> None:
    auth = authorizer(
        [
            acl("User:bob", Op.WRITE),
            acl("Group:contractors", Op.WRITE, DENY, name="fo", ptype=PREFIXED),
        ]
    )
    assert allowed(auth, ctx("User:bob"), Op.WRITE)
    assert not allowed(auth, ctx("User:bob", groups=("staff", "contractors")), Op.WRITE)


def test_a_deny_on_the_user_wins_over_an_allow_on_a_group() -> None:
    auth = authorizer([acl("Group:eng", Op.ALL), acl("User:alice", Op.READ, DENY)])
    assert not allowed(auth, ctx("User:alice", groups=("eng",)), Op.READ)
    assert allowed(auth, ctx("User:alice", groups=("eng",)), Op.WRITE)
    assert allowed(auth, ctx("User:carol", groups=("eng",)), Op.READ)


def test_the_wildcard_principal_and_host_rules_hold_for_groups() -> None:
    auth = authorizer([acl("User:*", Op.READ), acl("Group:eng", Op.WRITE, host="10.0.0.1")])
    assert allowed(auth, ctx("User:alice", groups=("eng",)), Op.READ)
    assert not allowed(auth, ctx("User:alice", "10.0.0.2", groups=("eng",)), Op.WRITE)
    assert allowed(auth, ctx("User:alice", "10.0.0.1", groups=("eng",)), Op.WRITE)


def test_super_users_may_name_a_group() -> None:
    auth = authorizer([acl("Group:admins", Op.READ, DENY)], super_users="Group:admins")
    assert allowed(auth, ctx("User:root", groups=("admins",)), Op.READ)
    assert allowed(auth, ctx("User:root", groups=("admins",)), Op.ALTER, "x", CLUSTER)
    assert not allowed(auth, ctx("User:root"), Op.READ)


def test_allow_everyone_if_no_acl_found_is_unchanged_by_groups() -> None:
    auth = authorizer([acl("Group:eng", Op.READ, name="other")], allow_everyone=True)
    assert allowed(auth, ctx("User:alice", groups=("ops",)), Op.WRITE)  # no ACL on foo
    assert not allowed(auth, ctx("User:alice", groups=("ops",)), Op.READ, "other")
    assert allowed(auth, ctx("User:alice", groups=("eng",)), Op.READ, "other")


@pytest.fixture
def audit_records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(1, logger="kafka.authorizer.logger")
    return caplog


def test_the_audit_line_names_the_groups_and_the_deciding_acls_principal(
    audit_records: pytest.LogCaptureFixture,
) -> None:
    auth = authorizer([acl("Group:contractors", Op.READ, DENY)])
    context = ctx("User:bob", "127.0.0.1", groups=("staff", "contractors"))
    auth.authorize(context, [Action(Op.READ, ResourcePattern(TOPIC, "foo"))])
    (record,) = audit_records.records
    assert record.getMessage() == (
        "Principal = User:bob (groups = Group:staff, Group:contractors) is Denied operation = "
        "READ from host = 127.0.0.1 on resource = Topic:LITERAL:foo for request = Fetch with "
        "resourceRefCount = 1 based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, "
        "resourceName=foo, patternType=LITERAL, principal=Group:contractors, host=*, "
        "operation=READ, permissionType=DENY))"
    )
    assert record.levelno == logging.INFO


def test_host_specific_acls_of_a_group_are_read_from_the_requests_host() -> None:
    auth = authorizer(
        [
            acl("Group:eng", Op.WRITE, host="10.0.0.1"),
            acl("Group:ops", Op.WRITE, DENY, host="10.0.0.1"),
        ]
    )
    assert allowed(auth, ctx("User:a", "10.0.0.1", groups=("eng",)), Op.WRITE)
    assert not allowed(auth, ctx("User:a", "10.0.0.2", groups=("eng",)), Op.WRITE)
    assert not allowed(auth, ctx("User:a", "10.0.0.1", groups=("eng", "ops")), Op.WRITE)


def test_authorize_by_resource_type_counts_the_groups_acls() -> None:
    auth = authorizer([acl("Group:eng", Op.WRITE, name="orders", rtype=TXN)])
    alice = ctx("User:alice", groups=("eng",))
    assert auth.authorize_by_resource_type(alice, Op.WRITE, TXN) is ALLOWED
    assert auth.authorize_by_resource_type(ctx("User:alice"), Op.WRITE, TXN) is DENIED
    denied = authorizer(
        [
            acl("Group:eng", Op.WRITE, name="orders", rtype=TXN),
            acl("Group:x", Op.WRITE, DENY, name="ord", rtype=TXN, ptype=PREFIXED),
        ]
    )
    assert (
        denied.authorize_by_resource_type(ctx("User:a", groups=("eng", "x")), Op.WRITE, TXN)
        is DENIED
    )
    assert (
        denied.authorize_by_resource_type(ctx("User:a", groups=("eng",)), Op.WRITE, TXN) is ALLOWED
    )


_PRINCIPALS = ("User:alice", "User:*", "Group:eng", "Group:ops", "Group:x")
_NAMES = ("orders", "orders-eu", "ord", "o", "*", "payments")


def _naive(
    bindings: list[AclBinding], subject: set[str], host: str, op: AclOperation, name: str
) -> str:
    """The set-based rule (ZooKeeper's ``AclAuthorizer``, which StandardAuthorizer's equals)
    for a subject holding every principal of ``subject`` (and ``User:*``)."""
    matching = [
        b
        for b in bindings
        if b.entry.principal in subject | {"User:*"}
        and b.entry.host in ("*", host)
        and (
            (b.pattern.pattern_type is LITERAL and b.pattern.name in (name, "*"))
            or (b.pattern.pattern_type is PREFIXED and name.startswith(b.pattern.name))
        )
    ]
    if any(b.entry.permission_type is DENY and b.entry.operation in (op, Op.ALL) for b in matching):
        return "DENIED"
    implied = {
        Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    }.get(op, {op})
    if any(
        b.entry.permission_type is ALLOW and b.entry.operation in implied | {Op.ALL}
        for b in matching
    ):
        return "ALLOWED"
    return "DENIED"


@pytest.mark.parametrize("seed", range(40))
def test_decisions_over_a_subject_equal_the_set_rule_over_all_its_principals(seed: int) -> None:
    rng = random.Random(seed)
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER]
    bindings = list(
        {
            acl(
                rng.choice(_PRINCIPALS),
                rng.choice(ops),
                rng.choice([ALLOW, DENY]),
                name=rng.choice(_NAMES[:-1]),
                ptype=rng.choice([LITERAL, PREFIXED]),
                host=rng.choice(["*", "10.0.0.1", "10.0.0.2"]),
            )
            for _ in range(rng.randint(1, 12))
        }
    )
    bindings = [
        b for b in bindings if not (b.pattern.pattern_type is PREFIXED and b.pattern.name == "*")
    ]
    auth = authorizer(bindings)
    for groups in [(), ("eng",), ("ops", "eng"), ("x", "eng", "ops")]:
        subject = {"User:alice", *(f"Group:{g}" for g in groups)}
        for host in ("10.0.0.1", "10.0.0.3"):
            for op in (Op.READ, Op.WRITE, Op.DESCRIBE):
                for name in _NAMES[:-1] + ("orders-us",):
                    got = allowed(auth, ctx("User:alice", host, groups=groups), op, name)
                    want = _naive(bindings, subject, host, op, name)
                    assert ("ALLOWED" if got else "DENIED") == want, (
                        bindings,
                        groups,
                        host,
                        op,
                        name,
                    )


def test_a_super_user_group_is_still_found_with_the_principal_not_one() -> None:
    """The groups are walked for ``super_users`` only when it names anyone: it must still find a
    group when it names one, and no group makes a super user when it names none."""
    named = authorizer([], super_users="User:root;Group:admins")
    assert allowed(named, ctx("User:alice", groups=("staff", "admins")), Op.ALTER)
    assert not allowed(named, ctx("User:alice", groups=("staff",)), Op.ALTER)
    nobody = authorizer([])
    assert not allowed(nobody, ctx("User:alice", groups=("admins",)), Op.ALTER)
