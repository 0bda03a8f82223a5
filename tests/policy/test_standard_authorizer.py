"""Ports of Kafka's StandardAuthorizerTest / AuthorizerTest decision cases
(``StandardAuthorizer.authorize``: ``StandardAuthorizerData.findAclRule``/``findResult``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    AuthorizerNotReadyError,
    operations_bitfield,
)
from kafkaguard.policy.config import AuthorizerConfig, ListenerPolicy
from kafkaguard.policy.model import (
    AclBindingFilter,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.base import MemoryAclStore
from tests.support.policy import (
    CLUSTER,
    DENY,
    GROUP,
    LITERAL,
    PREFIXED,
    TOPIC,
    Op,
    acl,
    allowed,
    authorizer,
    ctx,
)

TXN = ResourceType.TRANSACTIONAL_ID

# (name, acls, principal, host, op, resource name, expected)
CASES = [
    ("no acls -> deny", [], "User:alice", "10.0.0.1", Op.READ, "foo", False),
    ("literal allow", [acl("User:alice", Op.READ)], "User:alice", "10.0.0.1", Op.READ, "foo", True),
    ("other op", [acl("User:alice", Op.READ)], "User:alice", "10.0.0.1", Op.WRITE, "foo", False),
    ("other user", [acl("User:alice", Op.READ)], "User:bob", "10.0.0.1", Op.READ, "foo", False),
    (
        "principal case sensitive",
        [acl("User:Alice", Op.READ)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "principal type case sensitive",
        [acl("user:alice", Op.READ)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "resource name case sensitive",
        [acl("User:alice", Op.READ, name="Foo")],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "wildcard resource",
        [acl("User:alice", Op.READ, name="*")],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "anything",
        True,
    ),
    ("wildcard principal", [acl("User:*", Op.READ)], "User:bob", "1.1.1.1", Op.READ, "foo", True),
    (
        "User:* matches other principal types",
        [acl("User:*", Op.READ)],
        "Group:ops",
        "1.1.1.1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "Group:* is not a wildcard",
        [acl("Group:*", Op.READ)],
        "Group:ops",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "Group:x is not User:x",
        [acl("Group:alice", Op.READ)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "prefixed allow",
        [acl("User:alice", Op.READ, name="fo", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "prefixed equal to name",
        [acl("User:alice", Op.READ, name="foo", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "prefixed longer than name",
        [acl("User:alice", Op.READ, name="foo-bar", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "literal prefix does not match",
        [acl("User:alice", Op.READ, name="fo")],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "prefixed '*' is an ordinary prefix",
        [acl("User:alice", Op.READ, name="*", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "prefixed '*' matches '*x'",
        [acl("User:alice", Op.READ, name="*", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "*x",
        True,
    ),
    (
        "deny literal beats allow",
        [acl("User:alice", Op.READ), acl("User:alice", Op.READ, DENY)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "prefixed deny beats literal allow",
        [acl("User:alice", Op.READ), acl("User:alice", Op.READ, DENY, name="f", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "wildcard deny beats literal allow",
        [acl("User:alice", Op.READ), acl("User:*", Op.READ, DENY, name="*")],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "deny ALL beats allow",
        [acl("User:alice", Op.READ), acl("User:alice", Op.ALL, DENY)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "allow ALL",
        [acl("User:alice", Op.ALL)],
        "User:alice",
        "1.1.1.1",
        Op.ALTER_CONFIGS,
        "foo",
        True,
    ),
    (
        "allow ALL even unsupported op",
        [acl("User:alice", Op.ALL)],
        "User:alice",
        "1.1.1.1",
        Op.CLUSTER_ACTION,
        "foo",
        True,
    ),
    (
        "READ implies DESCRIBE",
        [acl("User:alice", Op.READ)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        True,
    ),
    (
        "WRITE implies DESCRIBE",
        [acl("User:alice", Op.WRITE)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        True,
    ),
    (
        "DELETE implies DESCRIBE",
        [acl("User:alice", Op.DELETE)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        True,
    ),
    (
        "ALTER implies DESCRIBE",
        [acl("User:alice", Op.ALTER)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        True,
    ),
    (
        "CREATE does not imply DESCRIBE",
        [acl("User:alice", Op.CREATE)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        False,
    ),
    (
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        [acl("User:alice", Op.ALTER_CONFIGS)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE_CONFIGS,
        "foo",
        True,
    ),
    (
        "ALTER does not imply DESCRIBE_CONFIGS",
        [acl("User:alice", Op.ALTER)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE_CONFIGS,
        "foo",
        False,
    ),
    (
        "DESCRIBE_CONFIGS does not imply DESCRIBE",
        [acl("User:alice", Op.DESCRIBE_CONFIGS)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        False,
    ),
    (
        "READ does not imply WRITE",
        [acl("User:alice", Op.READ)],
        "User:alice",
        "1.1.1.1",
        Op.WRITE,
        "foo",
        False,
    ),
    (
        "WRITE does not imply IDEMPOTENT_WRITE",
        [acl("User:alice", Op.WRITE)],
        "User:alice",
        "1.1.1.1",
        Op.IDEMPOTENT_WRITE,
        "foo",
        False,
    ),
    (
        "WRITE does not imply TWO_PHASE_COMMIT",
        [acl("User:alice", Op.WRITE, rtype=ResourceType.TRANSACTIONAL_ID)],
        "User:alice",
        "1.1.1.1",
        Op.TWO_PHASE_COMMIT,
        "foo",
        False,
    ),
    (
        "deny READ does not deny DESCRIBE",
        [acl("User:alice", Op.READ, DENY), acl("User:alice", Op.DESCRIBE)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        True,
    ),
    (
        "deny READ + allow READ: DESCRIBE still implied by allow",
        [acl("User:alice", Op.READ, DENY), acl("User:alice", Op.READ)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE,
        "foo",
        True,
    ),
    (
        "deny ALTER_CONFIGS does not deny DESCRIBE_CONFIGS",
        [acl("User:alice", Op.ALTER_CONFIGS, DENY), acl("User:alice", Op.DESCRIBE_CONFIGS)],
        "User:alice",
        "1.1.1.1",
        Op.DESCRIBE_CONFIGS,
        "foo",
        True,
    ),
    (
        "host match",
        [acl("User:alice", Op.READ, host="10.0.0.1")],
        "User:alice",
        "10.0.0.1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "host mismatch",
        [acl("User:alice", Op.READ, host="10.0.0.1")],
        "User:alice",
        "10.0.0.2",
        Op.READ,
        "foo",
        False,
    ),
    (
        "deny other host ignored",
        [acl("User:alice", Op.READ), acl("User:alice", Op.READ, DENY, host="10.0.0.9")],
        "User:alice",
        "10.0.0.1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "IPv6 uncompressed form matches",
        [acl("User:alice", Op.READ, host="0:0:0:0:0:0:0:1")],
        "User:alice",
        "::1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "IPv6 compressed ACL never matches",
        [acl("User:alice", Op.READ, host="::1")],
        "User:alice",
        "::1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "IPv6 compressed DENY does nothing",
        [acl("User:alice", Op.READ), acl("User:alice", Op.READ, DENY, host="::1")],
        "User:alice",
        "::1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "IPv6 full form",
        [acl("User:alice", Op.READ, host="2001:db8:0:0:0:0:0:1")],
        "User:alice",
        "2001:db8::1",
        Op.READ,
        "foo",
        True,
    ),
    (
        "IPv6 upper-case ACL never matches",
        [acl("User:alice", Op.READ, host="2001:DB8:0:0:0:0:0:1")],
        "User:alice",
        "2001:db8::1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "IPv4-mapped seen as IPv4",
        [acl("User:alice", Op.READ, host="10.1.2.3")],
        "User:alice",
        "::ffff:10.1.2.3",
        Op.READ,
        "foo",
        True,
    ),
    (
        "zero-padded IPv4 ACL never matches",
        [acl("User:alice", Op.READ, host="192.168.001.001")],
        "User:alice",
        "192.168.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "wildcard acl is per type",
        [acl("User:alice", Op.READ, name="*", rtype=GROUP)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "foo",
        False,
    ),
    (
        "empty name only matches '*'",
        [acl("User:alice", Op.READ, name="*")],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "",
        True,
    ),
    (
        "empty name and prefix",
        [acl("User:alice", Op.READ, name="a", ptype=PREFIXED)],
        "User:alice",
        "1.1.1.1",
        Op.READ,
        "",
        False,
    ),
]


@pytest.mark.parametrize(
    ("acls", "principal", "host", "op", "name", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decisions(acls, principal, host, op, name, expected) -> None:
    assert allowed(authorizer(acls), ctx(principal, host), op, name) is expected


def test_group_resources_use_their_type() -> None:
    auth = authorizer([acl("User:alice", Op.READ, name="g1", rtype=GROUP)])
    assert allowed(auth, ctx(), Op.READ, "g1", GROUP)
    assert not allowed(auth, ctx(), Op.READ, "g1", TOPIC)


@pytest.mark.parametrize(
    ("acls", "expected"),
    [
        ([], True),
        ([acl("User:bob", Op.READ)], False),  # another principal's ACL disables it
        ([acl("User:alice", Op.WRITE)], False),  # another operation
        ([acl("User:alice", Op.READ, host="10.9.9.9")], False),  # host-mismatched ACL
        ([acl("User:bob", Op.READ, name="*")], False),  # a '*' ACL
        ([acl("User:bob", Op.READ, name="f", ptype=PREFIXED)], False),  # a matching prefix
        ([acl("User:bob", Op.READ, name="foo-longer", ptype=PREFIXED)], True),  # longer prefix
        ([acl("User:bob", Op.READ, name="fo")], True),  # literal prefix is not on the resource
        ([acl("User:bob", Op.READ, name="foo", rtype=GROUP)], True),  # other type
    ],
)
def test_allow_everyone_if_no_acl_found(acls, expected) -> None:
    auth = authorizer(acls, allow_everyone=True)
    assert allowed(auth, ctx("User:alice", "10.0.0.1"), Op.READ) is expected


def test_super_users_bypass_deny_exactly() -> None:
    acls = [acl("User:*", Op.ALL, DENY, name="*")]
    auth = authorizer(acls, super_users=" User:admin ; ;User:ops")
    assert allowed(auth, ctx("User:admin"), Op.READ)
    assert allowed(auth, ctx("User:ops"), Op.ALTER)
    assert not allowed(auth, ctx("User:Admin"), Op.READ)
    assert not allowed(auth, ctx("Group:admin"), Op.READ)


def test_invalid_super_user_rejected() -> None:
    with pytest.raises(ValueError, match="principalType:principalName"):
        authorizer(super_users="User:a;admin")


def test_not_ready_raises_except_super_user() -> None:
    auth = StandardAuthorizer(AuthorizerConfig(super_users=frozenset({"User:admin"})))
    action = Action(Op.READ, ResourcePattern(TOPIC, "foo"))
    assert auth.authorize(ctx("User:admin"), [action]) == [AuthorizationResult.ALLOWED]
    with pytest.raises(AuthorizerNotReadyError):
        auth.authorize(ctx("User:alice"), [action])


def test_non_literal_action_rejected() -> None:
    auth = authorizer()
    with pytest.raises(ValueError, match="Only literal"):
        auth.authorize(ctx(), [Action(Op.READ, ResourcePattern(TOPIC, "f", PREFIXED))])


def test_results_in_order() -> None:
    auth = authorizer([acl("User:alice", Op.READ, name="a"), acl("User:alice", Op.READ, name="c")])
    actions = [Action(Op.READ, ResourcePattern(TOPIC, n)) for n in "abc"]
    assert [r.name for r in auth.authorize(ctx(), actions)] == ["ALLOWED", "DENIED", "ALLOWED"]


# Authorizer.authorizeByResourceType's default method (KIP-679) -------------------------------
BY_TYPE = [
    ("nothing", [], False),
    ("literal allow", [acl("User:alice", Op.WRITE, name="t1")], True),
    ("prefixed allow", [acl("User:alice", Op.WRITE, name="t", ptype=PREFIXED)], True),
    ("ALL allow", [acl("User:alice", Op.ALL, name="t1")], True),
    ("no implication", [acl("User:alice", Op.WRITE, name="t1")], True),
    (
        "READ does not give DESCRIBE by type",
        [acl("User:alice", Op.READ, name="t1")],
        False,
        Op.DESCRIBE,
    ),
    (
        "wildcard deny wins",
        [acl("User:alice", Op.WRITE, name="t1"), acl("User:alice", Op.WRITE, DENY, name="*")],
        False,
    ),
    (
        "wildcard allow then wildcard deny",
        [acl("User:alice", Op.WRITE, name="*"), acl("User:*", Op.WRITE, DENY, name="*")],
        False,
    ),
    (
        "literal deny same literal",
        [acl("User:alice", Op.WRITE, name="t1"), acl("User:alice", Op.WRITE, DENY, name="t1")],
        False,
    ),
    (
        "literal deny other literal",
        [acl("User:alice", Op.WRITE, name="t1"), acl("User:alice", Op.WRITE, DENY, name="t2")],
        True,
    ),
    (
        "prefix deny dominates literal",
        [
            acl("User:alice", Op.WRITE, name="t1"),
            acl("User:alice", Op.WRITE, DENY, name="t", ptype=PREFIXED),
        ],
        False,
    ),
    (
        "prefix deny dominates prefix",
        [
            acl("User:alice", Op.WRITE, name="t1", ptype=PREFIXED),
            acl("User:alice", Op.WRITE, DENY, name="t", ptype=PREFIXED),
        ],
        False,
    ),
    (
        "longer prefix deny does not dominate",
        [
            acl("User:alice", Op.WRITE, name="t", ptype=PREFIXED),
            acl("User:alice", Op.WRITE, DENY, name="t1", ptype=PREFIXED),
        ],
        True,
    ),
    (
        "literal deny does not dominate prefix",
        [
            acl("User:alice", Op.WRITE, name="t", ptype=PREFIXED),
            acl("User:alice", Op.WRITE, DENY, name="t"),
        ],
        True,
    ),
    ("other host ignored", [acl("User:alice", Op.WRITE, name="t1", host="9.9.9.9")], False),
    ("User:* allow", [acl("User:*", Op.WRITE, name="t1")], True),
    (
        "prefix 'h' covers hardcode",
        [
            acl("User:alice", Op.WRITE, name="h", ptype=PREFIXED),
            acl("User:alice", Op.WRITE, DENY, name="h", ptype=PREFIXED),
        ],
        False,
    ),
]


@pytest.mark.parametrize("case", BY_TYPE, ids=[c[0] for c in BY_TYPE])
def test_authorize_by_resource_type(case) -> None:
    acls, expected = case[1], case[2]
    op = case[3] if len(case) > 3 else Op.WRITE
    auth = authorizer(acls)
    result = auth.authorize_by_resource_type(ctx("User:alice", "10.0.0.1"), op, TOPIC)
    assert (result is AuthorizationResult.ALLOWED) is expected


def test_authorize_by_resource_type_super_user_and_default() -> None:
    deny_all = [acl("User:*", Op.ALL, DENY, name="*")]
    auth = authorizer(deny_all, super_users="User:admin")
    assert auth.authorize_by_resource_type(ctx("User:admin"), Op.WRITE, TOPIC).name == "ALLOWED"
    assert auth.authorize_by_resource_type(ctx("User:bob"), Op.WRITE, TOPIC).name == "DENIED"
    everyone = authorizer([acl("User:bob", Op.READ, name="x")], allow_everyone=True)
    assert everyone.authorize_by_resource_type(ctx("User:al"), Op.WRITE, TOPIC).name == "ALLOWED"
    with pytest.raises(ValueError, match="non-filter"):
        auth.authorize_by_resource_type(ctx(), Op.ANY, TOPIC)
    with pytest.raises(ValueError, match="non-filter"):
        auth.authorize_by_resource_type(ctx(), Op.WRITE, ResourceType.ANY)


# authorized operations (KIP-430) --------------------------------------------------------------
def test_authorized_operations_and_bitfield() -> None:
    auth = authorizer(
        [
            acl("User:alice", Op.DESCRIBE, name="kafka-cluster", rtype=CLUSTER),
            acl("User:alice", Op.ALTER, name="kafka-cluster", rtype=CLUSTER),
        ]
    )
    ops = auth.authorized_operations(ctx(), ResourcePattern(CLUSTER, "kafka-cluster"))
    assert ops == {Op.DESCRIBE, Op.ALTER}
    assert operations_bitfield(ops) == 384
    topic_ops = authorizer([acl("User:alice", Op.READ)]).authorized_operations(
        ctx(), ResourcePattern(TOPIC, "foo")
    )
    assert topic_ops == {Op.READ, Op.DESCRIBE}
    assert operations_bitfield(set()) == 0


# extensions -----------------------------------------------------------------------------------
def test_cidr_hosts_only_when_enabled() -> None:
    acls = [acl("User:alice", Op.READ, host="10.0.0.0/8")]
    assert not allowed(authorizer(acls), ctx(host="10.1.2.3"), Op.READ)
    cidr = authorizer(acls, host_cidr=True)
    assert allowed(cidr, ctx(host="10.1.2.3"), Op.READ)
    assert not allowed(cidr, ctx(host="11.1.2.3"), Op.READ)
    deny = authorizer(
        [acl("User:*", Op.READ), acl("User:alice", Op.READ, DENY, host="fd00::/8")], host_cidr=True
    )
    assert not allowed(deny, ctx(host="fd00::5"), Op.READ)
    assert allowed(deny, ctx(host="fe80::5"), Op.READ)


def test_listener_overrides() -> None:
    listeners = {
        "EXTERNAL": ListenerPolicy(
            super_users=frozenset({"User:x"}), allow_everyone_if_no_acl_found=False
        ),
        "INTERNAL": ListenerPolicy(allow_everyone_if_no_acl_found=True),
    }
    auth = authorizer([], super_users="User:admin", allow_everyone=False, listeners=listeners)
    assert not allowed(auth, ctx("User:admin", listener="EXTERNAL"), Op.READ)
    assert allowed(auth, ctx("User:x", listener="EXTERNAL"), Op.READ)
    assert allowed(auth, ctx("User:admin", listener="INTERNAL"), Op.READ)
    assert allowed(auth, ctx("User:bob", listener="INTERNAL"), Op.READ)
    assert not allowed(auth, ctx("User:bob", listener="PLAINTEXT"), Op.READ)
    assert allowed(auth, ctx("User:admin", listener="PLAINTEXT"), Op.READ)


# ACL management -------------------------------------------------------------------------------
async def test_create_and_delete_acls_with_store() -> None:
    store = MemoryAclStore()
    auth = StandardAuthorizer(AuthorizerConfig(), store)
    ready = auth.start(["PLAINTEXT"])
    await ready["PLAINTEXT"]
    good = acl("User:alice", Op.READ)
    bad = acl_binding(CLUSTER, "my-cluster", "User:alice", Op.ALTER)
    results = await auth.create_acls(ctx(), [good, bad])
    assert results[0].error is None
    assert results[1].error is not None and results[1].error.code == 42
    assert "kafka-cluster" in results[1].error.message
    assert store.snapshot() == {good}
    assert allowed(auth, ctx(), Op.READ)
    other = acl("User:bob", Op.WRITE)
    await auth.create_acls(ctx(), [other])
    flt_all = AclBindingFilter.ANY
    flt_alice = acl("User:alice", Op.READ).to_filter()
    deleted = await auth.delete_acls(ctx(), [flt_alice, flt_all])
    # Each filter sees the ACLs as they were before the request (AuthorizerTest.testAclsFilter).
    assert [r.binding for r in deleted[0].binding_results] == [good]
    assert {r.binding for r in deleted[1].binding_results} == {good, other}
    assert store.snapshot() == frozenset()
    assert not allowed(auth, ctx(), Op.READ)
    await auth.close()


async def test_delete_unknown_filter_is_invalid_request() -> None:
    from kafkaguard.policy.model import (
        AccessControlEntryFilter,
        AclPermissionType,
        ResourcePatternFilter,
    )

    auth = authorizer()
    flt = AclBindingFilter(
        ResourcePatternFilter(ResourceType.UNKNOWN, None, LITERAL), AccessControlEntryFilter.ANY
    )
    flt2 = AclBindingFilter(
        ResourcePatternFilter.ANY,
        AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.UNKNOWN),
    )
    res = await auth.delete_acls(ctx(), [flt, flt2])
    assert res[0].error is not None and res[0].error.code == 42
    assert res[0].error.message == "Unknown patternFilter."
    assert res[1].error is not None and res[1].error.message == "Unknown entryFilter."


async def test_start_waits_for_store_and_propagates_failure() -> None:
    class SlowStore(MemoryAclStore):
        def __init__(self) -> None:
            super().__init__([acl("User:alice", Op.READ)])
            self.gate = asyncio.Event()

        async def start(self) -> None:
            await self.gate.wait()
            await super().start()

    store = SlowStore()
    auth = StandardAuthorizer(AuthorizerConfig(), store)
    futures = auth.start(["A", "B"])
    await asyncio.sleep(0)
    assert not auth.ready
    with pytest.raises(AuthorizerNotReadyError):
        allowed(auth, ctx(), Op.READ)
    store.gate.set()
    await asyncio.gather(*futures.values())
    assert allowed(auth, ctx(), Op.READ)

    class BrokenStore(MemoryAclStore):
        async def start(self) -> None:
            raise RuntimeError("boom")

    broken = StandardAuthorizer(AuthorizerConfig(), BrokenStore())
    fut = broken.start(["A"])["A"]
    with pytest.raises(RuntimeError, match="boom"):
        await fut
    assert not broken.ready


def test_acls_filter_listing() -> None:
    a1 = acl("User:alice", Op.READ, name="foo")
    a2 = acl("User:bob", Op.READ, name="fo", ptype=PREFIXED)
    a3 = acl("User:bob", Op.READ, name="*")
    auth = authorizer([a1, a2, a3])
    from kafkaguard.policy.model import AccessControlEntryFilter, PatternType, ResourcePatternFilter

    match = AclBindingFilter(
        ResourcePatternFilter(TOPIC, "foo", PatternType.MATCH), AccessControlEntryFilter.ANY
    )
    assert set(auth.acls(match)) == {a1, a2, a3}
    exact = AclBindingFilter(
        ResourcePatternFilter(TOPIC, "foo", PatternType.ANY), AccessControlEntryFilter.ANY
    )
    assert auth.acls(exact) == [a1]


def test_incremental_snapshot_matches_rebuild() -> None:
    auth = authorizer([acl("User:alice", Op.READ, name=f"t{i}") for i in range(10)])
    auth.load_snapshot(
        [acl("User:alice", Op.READ, name=f"t{i}") for i in range(1, 11)]
        + [acl("User:alice", Op.READ, DENY, name="t5")]
    )
    assert not allowed(auth, ctx(), Op.READ, "t0")
    assert allowed(auth, ctx(), Op.READ, "t10")
    assert not allowed(auth, ctx(), Op.READ, "t5")
    assert allowed(auth, ctx(), Op.READ, "t4")


def test_empty_config_class_is_protocol() -> None:
    from kafkaguard.policy.authorizer import Authorizer

    assert isinstance(StandardAuthorizer(), Authorizer)


@pytest.fixture
def audit_records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(1, logger="kafka.authorizer.logger")
    return caplog


def test_audit_log_line_format(audit_records: pytest.LogCaptureFixture) -> None:
    deny = acl("User:bob", Op.READ, DENY, name="alp", ptype=PREFIXED)
    auth = authorizer([deny])
    auth.authorize(
        ctx("User:bob", "127.0.0.1", api_key=1), [Action(Op.READ, ResourcePattern(TOPIC, "alpha"))]
    )
    (record,) = audit_records.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "Principal = User:bob is Denied operation = READ from host = 127.0.0.1 on resource = "
        "Topic:LITERAL:alpha for request = Fetch with resourceRefCount = 1 based on rule "
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=alp, patternType=PREFIXED, "
        "principal=User:bob, host=*, operation=READ, permissionType=DENY))"
    )


@pytest.mark.parametrize(
    ("acls", "super_users", "log_allowed", "log_denied", "level", "suffix"),
    [
        ([acl("User:bob", Op.READ, rtype=TXN)], "", True, True, logging.DEBUG, "MatchingAcl("),
        ([acl("User:bob", Op.READ, rtype=TXN)], "", False, True, 5, "MatchingAcl("),
        ([], "", True, True, logging.INFO, "based on rule DefaultDeny"),
        ([], "", True, False, 5, "based on rule DefaultDeny"),
        (
            [acl("User:x", Op.READ, rtype=TXN)],
            "",
            True,
            True,
            logging.INFO,
            "based on rule DefaultDeny",
        ),
        ([], "User:bob", True, True, logging.DEBUG, "based on rule SuperUser"),
    ],
)
def test_audit_levels(
    audit_records, acls, super_users, log_allowed, log_denied, level, suffix
) -> None:
    auth = authorizer(acls, super_users=super_users)
    action = Action(
        Op.READ, ResourcePattern(ResourceType.TRANSACTIONAL_ID, "foo"), 3, log_allowed, log_denied
    )
    auth.authorize(ctx("User:bob", "::1", api_key=22), [action])
    (record,) = audit_records.records
    assert record.levelno == level
    assert record.levelname in {"TRACE", "DEBUG", "INFO"}
    msg = record.getMessage()
    assert "from host = 0:0:0:0:0:0:0:1 on resource = TransactionalId:LITERAL:foo" in msg
    assert "for request = InitProducerId with resourceRefCount = 3" in msg
    assert suffix in msg


def test_default_allow_rule_logged(audit_records) -> None:
    authorizer([], allow_everyone=True).authorize(
        ctx(), [Action(Op.READ, ResourcePattern(TOPIC, "x"))]
    )
    assert audit_records.records[0].getMessage().endswith("based on rule DefaultAllow")


def test_decision_events() -> None:
    from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason

    events: list[DecisionEvent] = []
    read = acl("User:alice", Op.READ)
    auth = StandardAuthorizer(
        AuthorizerConfig(allow_everyone_if_no_acl_found=True), decision_listener=events.append
    )
    auth.load_snapshot([read, acl("User:alice", Op.WRITE, DENY)])
    c = ctx()
    auth.authorize(
        c,
        [
            Action(Op.DESCRIBE, ResourcePattern(TOPIC, "foo")),
            Action(Op.WRITE, ResourcePattern(TOPIC, "foo")),
            Action(Op.READ, ResourcePattern(TOPIC, "other")),
            Action(Op.ALTER, ResourcePattern(TOPIC, "foo")),
        ],
    )
    assert [(e.result.name, e.reason, e.implied, e.acls_applied) for e in events] == [
        ("ALLOWED", DecisionReason.ALLOW_ACL, True, True),
        ("DENIED", DecisionReason.DENY_ACL, False, True),
        ("ALLOWED", DecisionReason.DEFAULT_ALLOW, False, False),
        ("DENIED", DecisionReason.DEFAULT_DENY, False, True),
    ]
    assert events[0].acl == read and events[0].context is c
    assert events[2].acl is None
