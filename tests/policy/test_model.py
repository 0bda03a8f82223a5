"""Enum codes, parsing, AclBinding validation (AclBindingTest) and filter matching
(``AclBindingFilter.matches``, ``ResourcePatternFilter.matches``,
``AccessControlEntryFilter.matches``)."""

from __future__ import annotations

import pytest

from kafkaguard.policy.model import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclBindingError,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    acl_binding,
)
from tests.support.policy import ALLOW, DENY, LITERAL, PREFIXED, TOPIC, Op, acl


def test_wire_codes() -> None:
    assert [(o.name, o.value) for o in AclOperation] == [
        ("UNKNOWN", 0), ("ANY", 1), ("ALL", 2), ("READ", 3), ("WRITE", 4), ("CREATE", 5),
        ("DELETE", 6), ("ALTER", 7), ("DESCRIBE", 8), ("CLUSTER_ACTION", 9),
        ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11), ("IDEMPOTENT_WRITE", 12),
        ("CREATE_TOKENS", 13), ("DESCRIBE_TOKENS", 14), ("TWO_PHASE_COMMIT", 15),
    ]  # fmt: skip
    assert [r.value for r in ResourceType] == list(range(8))
    assert (PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED) == (2, 3, 4)
    assert (AclPermissionType.DENY, AclPermissionType.ALLOW) == (2, 3)
    assert AclOperation.from_code(99) is AclOperation.UNKNOWN


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read", AclOperation.READ),
        ("Read", AclOperation.READ),
        ("DescribeConfigs", AclOperation.DESCRIBE_CONFIGS),
        ("DESCRIBECONFIGS", AclOperation.DESCRIBE_CONFIGS),
        ("describe_configs", AclOperation.DESCRIBE_CONFIGS),
        ("IdempotentWrite", AclOperation.IDEMPOTENT_WRITE),
        ("bogus", AclOperation.UNKNOWN),
    ],
)
def test_operation_from_string(text: str, expected: AclOperation) -> None:
    assert AclOperation.from_string(text) is expected


def test_parse_refuses_unknown_and_names() -> None:
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert PatternType.parse("prefixed") is PatternType.PREFIXED
    with pytest.raises(ValueError, match="unknown AclOperation 'reed'"):
        AclOperation.parse("reed")
    assert ResourceType.DELEGATION_TOKEN.pascal_name == "DelegationToken"


def test_principal_parse_splits_at_first_colon() -> None:
    p = KafkaPrincipal.parse("User:CN=a:b,O=c")
    assert (p.principal_type, p.name) == ("User", "CN=a:b,O=c")
    assert str(p) == "User:CN=a:b,O=c"
    assert KafkaPrincipal.parse("User:") == KafkaPrincipal("User", "")
    assert KafkaPrincipal.ANONYMOUS.text == "User:ANONYMOUS"
    assert KafkaPrincipal("User", "*") == KafkaPrincipal.WILDCARD
    for bad in ("", "alice"):
        with pytest.raises(ValueError, match="principalType:principalName"):
            KafkaPrincipal.parse(bad)


def test_str_forms_match_kafka() -> None:
    b = acl("User:alice", Op.READ, name="orders")
    assert str(b.pattern) == "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"
    assert str(b.entry) == "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    assert str(b) == f"(pattern={b.pattern}, entry={b.entry})"
    assert str(ResourcePatternFilter(TOPIC, None, PatternType.ANY)).startswith(
        "ResourcePattern(resourceType=TOPIC, name=<any>"
    )


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (
            acl_binding(ResourceType.CLUSTER, "x", "User:a", Op.ALTER),
            "only valid name for the CLUSTER",
        ),
        (acl("User:a", Op.READ, name=""), "Invalid empty resource name"),
        (acl("User:a", Op.READ, ptype=PatternType.ANY), "Invalid patternType ANY"),
        (acl("User:a", Op.READ, ptype=PatternType.MATCH), "Invalid patternType MATCH"),
        (acl("User:a", Op.READ, ptype=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
        (acl("User:a", Op.READ, rtype=ResourceType.ANY), "Invalid resourceType ANY"),
        (acl("User:a", Op.READ, rtype=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (acl("User:a", Op.ANY), "Invalid operation ANY"),
        (acl("User:a", Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (acl("User:a", Op.READ, AclPermissionType.ANY), "Invalid permissionType ANY"),
        (acl("alice", Op.READ), "no colon"),
        (acl("User:a", Op.READ, name="*", ptype=PREFIXED), "LITERAL '\\*'"),
    ],
)
def test_invalid_bindings(binding: AclBinding, message: str) -> None:
    with pytest.raises(InvalidAclBindingError, match=message):
        binding.validate()


def test_valid_bindings_pass() -> None:
    acl("User:a", Op.READ).validate()
    acl("User:*", Op.ALL, DENY, name="*").validate()
    acl_binding(ResourceType.CLUSTER, "kafka-cluster", "User:a", Op.IDEMPOTENT_WRITE).validate()
    acl("User:a", Op.READ, name="pre", ptype=PREFIXED, host="10.0.0.1").validate()


def _pf(rtype, name, ptype) -> ResourcePatternFilter:
    return ResourcePatternFilter(rtype, name, ptype)


LIT_FOO = ResourcePattern(TOPIC, "foo", LITERAL)
LIT_STAR = ResourcePattern(TOPIC, "*", LITERAL)
PRE_FO = ResourcePattern(TOPIC, "fo", PREFIXED)
PRE_FOOBAR = ResourcePattern(TOPIC, "foobar", PREFIXED)


@pytest.mark.parametrize(
    ("flt", "pattern", "expected"),
    [
        (_pf(ResourceType.ANY, None, PatternType.ANY), LIT_FOO, True),
        (_pf(ResourceType.GROUP, None, PatternType.ANY), LIT_FOO, False),
        (_pf(TOPIC, "foo", LITERAL), LIT_FOO, True),
        (_pf(TOPIC, "foo", LITERAL), LIT_STAR, False),
        (_pf(TOPIC, "foo", PREFIXED), LIT_FOO, False),
        (_pf(TOPIC, "fo", PREFIXED), PRE_FO, True),
        (_pf(TOPIC, "foo", PatternType.ANY), LIT_FOO, True),
        (_pf(TOPIC, "foo", PatternType.ANY), LIT_STAR, False),  # ANY is exact on the name
        (_pf(TOPIC, "foo", PatternType.ANY), PRE_FO, False),
        (_pf(TOPIC, "*", PatternType.ANY), LIT_STAR, True),
        (_pf(TOPIC, "foo", PatternType.MATCH), LIT_FOO, True),
        (_pf(TOPIC, "foo", PatternType.MATCH), LIT_STAR, True),
        (_pf(TOPIC, "foo", PatternType.MATCH), PRE_FO, True),
        (_pf(TOPIC, "foo", PatternType.MATCH), PRE_FOOBAR, False),
        (_pf(TOPIC, "fo", PatternType.MATCH), LIT_FOO, False),
        (_pf(TOPIC, None, PatternType.MATCH), PRE_FOOBAR, True),
        (_pf(TOPIC, "fo", PatternType.MATCH), PRE_FO, True),  # same type: exact
    ],
)
def test_resource_pattern_filter(flt, pattern, expected) -> None:
    assert flt.matches(pattern) is expected


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (AccessControlEntryFilter.ANY, True),
        (AccessControlEntryFilter("User:alice", None, Op.ANY, AclPermissionType.ANY), True),
        (AccessControlEntryFilter("User:*", None, Op.ANY, AclPermissionType.ANY), False),
        (AccessControlEntryFilter(None, "*", Op.ANY, AclPermissionType.ANY), False),
        (AccessControlEntryFilter(None, "10.0.0.1", Op.READ, ALLOW), True),
        (AccessControlEntryFilter(None, None, Op.ALL, AclPermissionType.ANY), False),
        (AccessControlEntryFilter(None, None, Op.ANY, DENY), False),
    ],
)
def test_entry_filter(flt, expected) -> None:
    entry = AccessControlEntry("User:alice", "10.0.0.1", Op.READ, ALLOW)
    assert flt.matches(entry) is expected


def test_binding_filter_and_unknown() -> None:
    b = acl("User:alice", Op.READ)
    assert b.to_filter().matches(b)
    assert AclBindingFilter.ANY.matches(b)
    assert not AclBindingFilter.ANY.is_unknown()
    unknown = AclBindingFilter(
        ResourcePatternFilter.ANY, AccessControlEntryFilter(None, None, Op.UNKNOWN, ALLOW)
    )
    assert unknown.is_unknown()
    assert _pf(TOPIC, "a", LITERAL).matches_at_most_one()
    assert not _pf(TOPIC, "a", PatternType.MATCH).matches_at_most_one()
