"""Hypothesis ports of Kafka's property tests, plus equivalence with a plain scan transcribing
``StandardAuthorizerData.findAclRule``/``findResult``."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaguard.policy.acl_index import AclIndex
from kafkaguard.policy.authorizer import java_host_address
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    acl_binding,
)
from tests.support.policy import authorizer, ctx

OPS = [op for op in AclOperation if op.value >= 2]
NAMES = st.sampled_from(["", "a", "ab", "abc", "abd", "b", "*", "x*"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:alice", "Group:*"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2", "0:0:0:0:0:0:0:1", "::1"])
TYPES = st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP])

bindings = st.builds(
    lambda rt, name, ptype, principal, host, op, perm: acl_binding(
        rt, name or "n", principal, op, perm, host=host, pattern_type=ptype
    ),
    TYPES,
    NAMES,
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    PRINCIPALS,
    HOSTS,
    st.sampled_from(OPS),
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
)
requests = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "Group:alice"]),
    st.sampled_from(["10.0.0.1", "::1", "10.0.0.2"]),
    st.sampled_from(OPS),
    TYPES,
    NAMES,
)

DESCRIBE_IMPLIERS = {
    AclOperation.DESCRIBE,
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.DELETE,
    AclOperation.ALTER,
}
DESCRIBE_CONFIGS_IMPLIERS = {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}


def reference(acls, allow_everyone, principal, host, op, rtype, name) -> bool:
    """``StandardAuthorizerData.findAclRule``/``findResult`` transcribed (scan, no index)."""
    ptype, _, pname = principal.partition(":")
    principals = {(ptype, pname), ("User", "*")}
    host = java_host_address(ipaddress.ip_address(host))
    applicable = [
        a
        for a in acls
        if a.pattern.resource_type == rtype
        and (
            (a.pattern.pattern_type == PatternType.LITERAL and a.pattern.name in (name, "*"))
            or (a.pattern.pattern_type == PatternType.PREFIXED and name.startswith(a.pattern.name))
        )
    ]

    def entry_result(a: AclBinding) -> str | None:
        at, _, an = a.entry.principal.partition(":")
        if (at, an) not in principals or a.entry.host not in ("*", host):
            return None
        aop, allow = a.entry.operation, a.entry.permission_type == AclPermissionType.ALLOW
        if aop != AclOperation.ALL:
            if allow and op == AclOperation.DESCRIBE:
                ok = aop in DESCRIBE_IMPLIERS
            elif allow and op == AclOperation.DESCRIBE_CONFIGS:
                ok = aop in DESCRIBE_CONFIGS_IMPLIERS
            else:
                ok = aop == op
            if not ok:
                return None
        return "ALLOWED" if allow else "DENIED"

    results = [entry_result(a) for a in applicable]
    if "DENIED" in results:
        return False
    if "ALLOWED" in results:
        return True
    return not applicable and allow_everyone


@settings(max_examples=600, deadline=None)
@given(st.lists(bindings, max_size=12), requests, st.booleans())
def test_index_equals_reference_pseudocode(acls, request, allow_everyone) -> None:
    principal, host, op, rtype, name = request
    auth = authorizer(acls, allow_everyone=allow_everyone)
    got = auth.authorize(ctx(principal, host), [_action(op, rtype, name)])[0].name == "ALLOWED"
    assert got is reference(acls, allow_everyone, principal, host, op, rtype, name)


def _action(op, rtype, name):
    from kafkaguard.policy.authorizer import Action
    from kafkaguard.policy.model import ResourcePattern

    return Action(op, ResourcePattern(rtype, name))


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=10), requests, st.sampled_from(["", "a", "ab"]), st.booleans())
def test_matching_deny_always_wins(acls, request, prefix, literal) -> None:
    principal, host, op, rtype, name = request
    if not literal and not name.startswith(prefix):
        prefix = name[:1]
    deny = acl_binding(
        rtype,
        name if literal or not prefix else prefix,
        "User:*",
        op,
        AclPermissionType.DENY,
        pattern_type=PatternType.LITERAL if literal or not prefix else PatternType.PREFIXED,
    )
    if not deny.pattern.name:
        deny = acl_binding(rtype, "*", principal, AclOperation.ALL, AclPermissionType.DENY)
    auth = authorizer([*acls, deny], allow_everyone=True)
    assert auth.authorize(ctx(principal, host), [_action(op, rtype, name)])[0].name == "DENIED"


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=10), bindings, requests)
def test_adding_an_acl_never_turns_deny_into_allow_unless_it_matches(acls, extra, request) -> None:
    principal, host, op, rtype, name = request
    before = authorizer(acls).authorize(ctx(principal, host), [_action(op, rtype, name)])[0]
    after = authorizer([*acls, extra]).authorize(ctx(principal, host), [_action(op, rtype, name)])[
        0
    ]
    if before.name == "DENIED" and after.name == "ALLOWED":
        # only an ALLOW that itself matches the request may flip the decision
        assert extra.entry.permission_type == AclPermissionType.ALLOW
        assert (
            authorizer([extra]).authorize(ctx(principal, host), [_action(op, rtype, name)])[0].name
            == "ALLOWED"
        )


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=10), requests)
def test_deny_acls_never_imply(acls, request) -> None:
    """Only ALLOW entries imply DESCRIBE/DESCRIBE_CONFIGS: a DENY READ leaves DESCRIBE alone."""
    principal, host, _, rtype, name = request
    allow_describe = acl_binding(rtype, name or "*", "User:*", AclOperation.DESCRIBE)
    denies = [
        acl_binding(rtype, name or "*", principal, op, AclPermissionType.DENY)
        for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER, AclOperation.DELETE)
    ]
    kept = [a for a in acls if a.entry.permission_type == AclPermissionType.ALLOW]
    auth = authorizer([*kept, allow_describe, *denies])
    assert (
        auth.authorize(ctx(principal, host), [_action(AclOperation.DESCRIBE, rtype, name)])[0].name
        == "ALLOWED"
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(bindings, max_size=15), st.lists(bindings, max_size=5), st.lists(bindings, max_size=15)
)
def test_incremental_update_equals_rebuild(base, added, removed_pool) -> None:
    removed = [b for b in base if b in set(removed_pool)] + removed_pool[:2]
    index = AclIndex.build(base).updated(added, removed)
    expected = (frozenset(base) - frozenset(removed)) | frozenset(added)
    assert index.bindings == expected
    fresh = AclIndex.build(expected)
    for principal in ("User:alice", "User:bob", "Group:alice"):
        key = principal
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP):
            for name in ("", "a", "ab", "abc", "b", "*", "x*"):
                for op in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALL):
                    args = (key, "10.0.0.1", ipaddress.ip_address("10.0.0.1"), op, rtype, name)
                    assert index.match(*args)[0] == fresh.match(*args)[0]
            assert sorted(
                map(str, (e.binding for e in index.principal_entries(rtype, key)))
            ) == sorted(map(str, (e.binding for e in fresh.principal_entries(rtype, key))))
