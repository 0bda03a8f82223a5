"""The internal-topics rule in front of an authorizer (kafkaguard/policy/internal_topics.py)."""

from __future__ import annotations

import logging

import pytest

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.internal_topics import InternalTopicGuard, InternalTopics
from kafkaguard.policy.model import ResourcePattern
from tests.support.policy import CLUSTER, LITERAL, TOPIC, Op, acl, authorizer, ctx

ALLOWED, DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED


def topic(name: str) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, LITERAL)


def guard(principals: frozenset[str] = frozenset()) -> InternalTopicGuard:
    inner = authorizer([acl("User:bob", Op.ALL, name="_kafkaguard-acls")], super_users="User:su")
    return InternalTopicGuard(inner, InternalTopics(frozenset({"audit"}), principals))


def test_a_super_user_is_refused_only_the_internal_topics_in_request_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    actions = [
        Action(Op.READ, topic("orders")),
        Action(Op.READ, topic("_kafkaguard-acls")),
        Action(Op.ALTER, ResourcePattern(CLUSTER, "kafka-cluster", LITERAL)),
        Action(Op.WRITE, topic("audit")),
    ]
    with caplog.at_level(logging.INFO, logger="kafka.authorizer.logger"):
        results = guard().authorize(ctx("User:su"), actions)
    assert results == [ALLOWED, DENIED, ALLOWED, DENIED]
    denials = [r.getMessage() for r in caplog.records if "Denied" in r.getMessage()]
    assert len(denials) == 2
    assert all(m.endswith("based on rule InternalTopic") for m in denials)


def test_an_allow_acl_on_an_internal_topic_does_not_open_it() -> None:
    results = guard().authorize(ctx("User:bob"), [Action(Op.READ, topic("_kafkaguard-acls"))])
    assert results == [DENIED]


def test_a_named_principal_is_authorized_by_the_authorizer_alone() -> None:
    g = guard(frozenset({"User:bob", "User:su"}))
    assert g.authorize(ctx("User:bob"), [Action(Op.READ, topic("_kafkaguard-acls"))]) == [ALLOWED]
    assert g.authorize(ctx("User:bob"), [Action(Op.READ, topic("audit"))]) == [DENIED]  # no ACL
    assert g.authorize(ctx("User:su"), [Action(Op.WRITE, topic("audit"))]) == [ALLOWED]


def test_a_named_group_admits_its_members_as_super_users_does() -> None:
    g = guard(frozenset({"Group:backup"}))
    action = [Action(Op.READ, topic("_kafkaguard-acls"))]
    assert g.authorize(ctx("User:bob", groups=("backup",)), action) == [ALLOWED]
    assert g.authorize(ctx("User:bob", groups=("eng",)), action) == [DENIED]
    assert g.authorize(ctx("User:bob"), action) == [DENIED]
    assert not g.refused(ctx("User:bob", groups=("eng", "backup")), "_kafkaguard-acls")
    assert g.refused(ctx("User:backup"), "_kafkaguard-acls")  # a group is not a user
    ops = g.authorized_operations(ctx("User:bob", groups=("backup",)), topic("_kafkaguard-acls"))
    assert Op.READ in ops


def test_a_super_user_group_is_refused_until_internal_topics_names_a_group_of_its_member() -> None:
    inner = authorizer([], super_users="Group:admins")
    member = ctx("User:carol", groups=("admins",))
    actions = [Action(Op.WRITE, topic("orders")), Action(Op.WRITE, topic("audit"))]
    closed = InternalTopicGuard(inner, InternalTopics(frozenset({"audit"})))
    assert closed.authorize(member, actions) == [ALLOWED, DENIED]
    named = InternalTopics(frozenset({"audit"}), frozenset({"Group:admins"}))
    assert InternalTopicGuard(inner, named).authorize(member, actions) == [ALLOWED, ALLOWED]


def test_authorized_operations_of_an_internal_topic_are_none_for_a_super_user() -> None:
    g = guard()
    assert g.authorized_operations(ctx("User:su"), topic("_kafkaguard-users")) == set()
    assert Op.READ in g.authorized_operations(ctx("User:su"), topic("orders"))


def test_the_rules_may_be_swapped_at_run_time() -> None:
    g = guard()
    action = [Action(Op.READ, topic("_kafkaguard-acls"))]
    assert g.authorize(ctx("User:su"), action) == [DENIED]
    g.rules = InternalTopics(principals=frozenset({"User:su"}))
    assert g.authorize(ctx("User:su"), action) == [ALLOWED]


@pytest.mark.parametrize(
    ("name", "internal"),
    [
        ("_kafkaguard-acls", True),
        (".kafkaguard-acls", True),  # collides with _kafkaguard-acls (Topic.unifyCollisionChars)
        (".kafkaguard-users.x", True),
        (".kafkaguard.users", False),  # _kafkaguard_users: no "_kafkaguard-" prefix
        ("audit", True),
        ("audit_", False),
        ("a.u.dit", False),
        ("kafkaguard-acls", False),
        ("-kafkaguard-acls", False),
    ],
)
def test_names_are_compared_as_kafka_compares_them(name: str, internal: bool) -> None:
    rules = InternalTopics(frozenset({"audit"}))
    assert rules.internal(name) is internal


def test_a_configured_name_collides_both_ways() -> None:
    rules = InternalTopics(frozenset({"audit.trail"}))
    assert rules.internal("audit_trail") and rules.internal("audit.trail")
    assert rules.internal("audit_trail") and not rules.internal("audit-trail")
