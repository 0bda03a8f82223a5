"""AclIndex against ``StandardAuthorizerData.findAclRule``/``findResult`` transcribed as a scan:
verdict classes, deciding entry, updates.

The per-principal index finds ACLs through the requester's and ``User:*``'s views and answers
"does any ACL apply?" separately; these properties pin down that all four verdicts
(DENY_ACL / ALLOW_ACL / NO_MATCHING_ACL / NO_ACL) and the reported entry match a plain scan.
"""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaguard.policy.acl_index import USER_WILDCARD_KEY, AclIndex, AclMatch, principal_key
from kafkaguard.policy.authorizer import (
    Action,
    RequestContext,
    SecurityProtocol,
    java_host_address,
)
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from tests.support.policy import authorizer, ctx

OPS = [op for op in AclOperation if op.value >= 2]
NAMES = ["", "a", "ab", "abc", "abd", "abcd", "b", "*", "x*", "a*"]
ACL_PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:alice", "Group:*", "User:a:b"]
# (type, name): includes the wildcard principal itself and a type containing ':', which can
# equal no ACL principal (ACL principals split at their first ':').
REQUEST_PRINCIPALS = [
    ("User", "alice"),
    ("User", "bob"),
    ("Group", "alice"),
    ("User", "*"),
    ("User", "a:b"),
    ("User:a", "b"),
]
TYPES = [ResourceType.TOPIC, ResourceType.GROUP]

bindings = st.builds(
    lambda rt, name, ptype, principal, host, op, perm: acl_binding(
        rt, name or "n", principal, op, perm, host=host, pattern_type=ptype
    ),
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(ACL_PRINCIPALS),
    st.sampled_from(["*", "10.0.0.1", "10.0.0.2", "0:0:0:0:0:0:0:1", "::1"]),
    st.sampled_from(OPS),
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
)
requests = st.tuples(
    st.sampled_from(REQUEST_PRINCIPALS),
    st.sampled_from(["10.0.0.1", "::1", "10.0.0.2"]),
    st.sampled_from(OPS),
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
)

_IMPLIERS = {
    AclOperation.DESCRIBE: {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    },
    AclOperation.DESCRIBE_CONFIGS: {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS},
}


def _applies(a: AclBinding, rtype: ResourceType, name: str) -> bool:
    p = a.pattern
    if p.resource_type != rtype:
        return False
    if p.pattern_type == PatternType.LITERAL:
        return p.name in (name, "*")
    return p.pattern_type == PatternType.PREFIXED and name.startswith(p.name)


def _result(a: AclBinding, principal: tuple[str, str], host: str, op: AclOperation) -> str | None:
    at, _, an = a.entry.principal.partition(":")
    if (at, an) not in {principal, ("User", "*")} or a.entry.host not in ("*", host):
        return None
    aop, allow = a.entry.operation, a.entry.permission_type == AclPermissionType.ALLOW
    if aop != AclOperation.ALL:
        ok = aop in _IMPLIERS.get(op, {op}) if allow else aop == op
        if not ok:
            return None
    return "ALLOWED" if allow else "DENIED"


def reference_verdict(acls, principal, host, op, rtype, name) -> tuple[AclMatch, set[AclBinding]]:
    """``findAclRule``/``findResult`` by scan: the verdict class and the bindings that may be
    reported for it."""
    applicable = [a for a in acls if _applies(a, rtype, name)]
    results = {a: _result(a, principal, host, op) for a in applicable}
    denies = {a for a, r in results.items() if r == "DENIED"}
    if denies:
        return AclMatch.DENY_ACL, denies
    allows = {a for a, r in results.items() if r == "ALLOWED"}
    if allows:
        return AclMatch.ALLOW_ACL, allows
    return (AclMatch.NO_MATCHING_ACL if applicable else AclMatch.NO_ACL), set()


def _match(index: AclIndex, request, need_applicable: bool = True):
    (ptype, pname), host, op, rtype, name = request
    key = principal_key(KafkaPrincipal(ptype, pname))
    address = ipaddress.ip_address(host)
    return index.match(key, java_host_address(address), address, op, rtype, name, need_applicable)


@settings(max_examples=1500, deadline=None)
@given(st.lists(bindings, max_size=14), requests)
def test_match_equals_reference_verdict_and_entry(acls, request) -> None:
    (ptype, pname), host, op, rtype, name = request
    host = java_host_address(ipaddress.ip_address(host))
    expected, candidates = reference_verdict(acls, (ptype, pname), host, op, rtype, name)
    index = AclIndex.build(acls)
    verdict, entry = _match(index, request)
    assert verdict == expected
    if candidates:
        assert entry is not None and entry.binding in candidates
    else:
        assert entry is None
    # Without the applicability question, NO_ACL may fold into NO_MATCHING_ACL; nothing else.
    quick, quick_entry = _match(index, request, need_applicable=False)
    assert quick == expected or (expected, quick) == (AclMatch.NO_ACL, AclMatch.NO_MATCHING_ACL)
    assert quick_entry == entry


def _rank(binding: AclBinding, name: str) -> int:
    p = binding.pattern
    if p.pattern_type == PatternType.PREFIXED:
        return len(p.name)
    return 0 if p.name == name else 1 << 30


@settings(max_examples=500, deadline=None)
@given(st.lists(bindings, max_size=14), requests)
def test_reported_entry_comes_first_in_scan_order(acls, request) -> None:
    """The deciding entry is from the earliest bucket (literal, prefixes shortest first, '*'),
    the requester's own ACLs before ``User:*``'s in the same bucket."""
    (ptype, pname), host, op, rtype, name = request
    host = java_host_address(ipaddress.ip_address(host))
    _, candidates = reference_verdict(acls, (ptype, pname), host, op, rtype, name)
    _, entry = _match(AclIndex.build(acls), request)
    if entry is None:
        return

    def order(b: AclBinding) -> tuple[int, bool]:
        return _rank(b, name), principal_key(KafkaPrincipal(ptype, pname)) != b.entry.principal

    assert order(entry.binding) == min(order(b) for b in candidates)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(bindings, max_size=12),
    st.lists(
        st.tuples(st.lists(bindings, max_size=4), st.lists(st.integers(0, 30), max_size=4)),
        max_size=5,
    ),
)
def test_chained_updates_equal_rebuild(base, steps) -> None:
    """A sequence of incremental updates (adding/removing prefixes, lengths, wildcards) decides
    like a fresh build of the final set, for every verdict class."""
    index = AclIndex.build(base)
    current = set(base)
    for added, picks in steps:
        pool = sorted(current, key=str)
        removed = [pool[i % len(pool)] for i in picks] if pool else []
        index = index.updated(added, removed)
        current = (current - set(removed)) | set(added)
    assert index.bindings == frozenset(current)
    fresh = AclIndex.build(current)
    for principal in REQUEST_PRINCIPALS:
        for rtype in TYPES:
            for name in NAMES:
                for op in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALTER):
                    request = (principal, "10.0.0.1", op, rtype, name)
                    assert _match(index, request)[0] == _match(fresh, request)[0]
            key = principal_key(KafkaPrincipal(*principal))
            assert sorted(str(e.binding) for e in index.principal_entries(rtype, key)) == sorted(
                str(e.binding) for e in fresh.principal_entries(rtype, key)
            )


def test_principal_key_is_the_acl_text_unless_the_type_has_a_colon() -> None:
    assert principal_key(KafkaPrincipal("User", "alice")) == "User:alice"
    assert principal_key(KafkaPrincipal("User", "a:b")) == "User:a:b"
    assert principal_key(KafkaPrincipal("User:a", "b")) is None
    assert principal_key(KafkaPrincipal.WILDCARD) == USER_WILDCARD_KEY


def test_colon_in_principal_type_only_matches_user_wildcard() -> None:
    """ACL 'User:a:b' is (User, a:b) (``SecurityUtils.parseKafkaPrincipal`` splits at the first
    colon): it must not match principal (User:a, b)."""
    acls = [
        acl_binding(ResourceType.TOPIC, "t", "User:a:b", AclOperation.READ),
        acl_binding(ResourceType.TOPIC, "u", "User:*", AclOperation.READ),
    ]
    auth = authorizer(acls)
    odd = RequestContext(
        listener_name="PLAINTEXT",
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal=KafkaPrincipal("User:a", "b"),
        client_address=ipaddress.ip_address("10.0.0.1"),
        api_key=1,
        api_version=0,
    )

    def ok(context: RequestContext, name: str) -> bool:
        action = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, name))
        return auth.authorize(context, [action])[0].name == "ALLOWED"

    assert not ok(odd, "t")
    assert ok(odd, "u")
    assert ok(ctx("User:a:b"), "t")


def test_allow_everyone_and_listener_still_see_no_acl_vs_no_match() -> None:
    """The applicability question is skipped only when nothing depends on it."""
    acls = [acl_binding(ResourceType.TOPIC, "abc", "User:bob", AclOperation.READ)]
    auth = authorizer(acls, allow_everyone=True)
    action = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "abc"))
    other = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "abd"))
    assert [r.name for r in auth.authorize(ctx("User:alice"), [action, other])] == [
        "DENIED",
        "ALLOWED",
    ]
    events = []
    strict = authorizer(acls)
    strict.decision_listener = events.append
    strict.authorize(ctx("User:alice"), [action, other])
    assert [e.acls_applied for e in events] == [True, False]
