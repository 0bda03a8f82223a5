"""DescribeAcls / CreateAcls / DeleteAcls answered by the proxy from its own authorizer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkaguard.policy.model import AclBindingFilter
from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.base import Close, Respond, RespondLater, Verdict
from tests.support.handler_harness import HandlerHarness, acl

ADMIN = "User:admin"
# Wire codes (``code()`` of PatternType, ResourceType, AclOperation, AclPermissionType).
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
TOPIC, GROUP, CLUSTER = 2, 3, 4
READ, WRITE, DESCRIBE, ALTER = 3, 4, 8, 7
DENY, ALLOW = 2, 3

STORED = [
    acl("User:bob", "READ", "TOPIC", "orders"),
    acl("User:bob", "WRITE", "TOPIC", "orders"),
    acl("User:carol", "READ", "TOPIC", "ord", pattern="PREFIXED"),
    acl("User:*", "READ", "TOPIC", "*"),
    acl("User:bob", "READ", "GROUP", "g1", permission="DENY", host="10.0.0.9"),
]
ADMIN_ALTER = acl(ADMIN, "ALTER", "CLUSTER", "kafka-cluster")


def harness(*extra: Any, principal: str = ADMIN) -> HandlerHarness:
    return HandlerHarness([*STORED, *extra], principal=principal)


def finish(verdict: Verdict) -> Any:
    """The response the client receives, awaiting a RespondLater as the connection does."""
    if isinstance(verdict, RespondLater):
        response = asyncio.run(verdict.response()).response
    else:
        assert isinstance(verdict, Respond), verdict
        response = verdict.response
    codec.encode_response(response, 7)
    return response


def describe(
    version: int = 3,
    *,
    resource_type: int = ANY,
    name: str | None = None,
    pattern_type: int = ANY,
    principal: str | None = None,
    host: str | None = None,
    operation: int = ANY,
    permission: int = ANY,
) -> Any:
    return codec.request_schema(29, version)(
        resource_type_filter=resource_type,
        resource_name_filter=name,
        pattern_type_filter=pattern_type,
        principal_filter=principal,
        host_filter=host,
        operation=operation,
        permission_type=permission,
    )


def resources(response: Any) -> dict[tuple[int, str, int], set[tuple[str, str, int, int]]]:
    return {
        (r.resource_type, r.resource_name, r.pattern_type): {
            (a.principal, a.host, a.operation, a.permission_type) for a in r.acls
        }
        for r in response.resources
    }


# -- DescribeAcls ------------------------------------------------------------------------------


def test_describe_denied_without_describe_cluster() -> None:
    h = harness(acl(ADMIN, "DESCRIBE", "TOPIC", "*"))
    response = finish(h.send(describe()))
    assert (response.error_code, response.resources) == (ErrorCode.cluster_authorization_failed, ())
    assert response.error_message is None
    assert h.checked() == [("DESCRIBE", "CLUSTER", "kafka-cluster", "DENIED")]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_describe_all_groups_by_resource_and_shows_every_principal(version: int) -> None:
    h = harness(ADMIN_ALTER)  # ALTER implies DESCRIBE
    response = finish(h.send(describe(version)))
    assert (response.error_code, response.error_message) == (ErrorCode.none, "")
    assert h.checked() == [("DESCRIBE", "CLUSTER", "kafka-cluster", "ALLOWED")]
    assert resources(response) == {
        (TOPIC, "orders", LITERAL): {
            ("User:bob", "*", READ, ALLOW),
            ("User:bob", "*", WRITE, ALLOW),
        },
        (TOPIC, "ord", PREFIXED): {("User:carol", "*", READ, ALLOW)},
        (TOPIC, "*", LITERAL): {("User:*", "*", READ, ALLOW)},
        (GROUP, "g1", LITERAL): {("User:bob", "10.0.0.9", READ, DENY)},
        (CLUSTER, "kafka-cluster", LITERAL): {(ADMIN, "*", ALTER, ALLOW)},
    }
    assert len(response.resources) == 5  # one entry per pattern


def test_describe_match_finds_wildcard_and_prefixed() -> None:
    h = harness(ADMIN_ALTER)
    response = finish(
        h.send(describe(resource_type=TOPIC, name="orders", pattern_type=MATCH, operation=READ))
    )
    assert set(resources(response)) == {
        (TOPIC, "orders", LITERAL),
        (TOPIC, "ord", PREFIXED),
        (TOPIC, "*", LITERAL),
    }
    assert resources(response)[(TOPIC, "orders", LITERAL)] == {("User:bob", "*", READ, ALLOW)}


def test_describe_any_pattern_is_exact_on_the_name() -> None:
    h = harness(ADMIN_ALTER)
    response = finish(h.send(describe(resource_type=TOPIC, name="orders", principal="User:bob")))
    assert set(resources(response)) == {(TOPIC, "orders", LITERAL)}


def test_describe_unrecognised_code_matches_nothing() -> None:
    response = finish(harness(ADMIN_ALTER).send(describe(operation=99)))
    assert (response.error_code, response.resources) == (ErrorCode.none, ())


@pytest.mark.parametrize("field", ["resource_type", "pattern_type", "operation", "permission"])
def test_describe_unknown_code_closes_like_a_parse_failure(field: str) -> None:
    h = harness(ADMIN_ALTER)
    assert isinstance(h.send(describe(**{field: 0})), Close)
    assert h.checked() == []


# -- CreateAcls --------------------------------------------------------------------------------


def creation(
    version: int = 3,
    *,
    resource_type: int = TOPIC,
    name: str = "payments",
    pattern_type: int = LITERAL,
    principal: str = "User:dave",
    host: str = "*",
    operation: int = WRITE,
    permission: int = ALLOW,
) -> Any:
    cls = codec.nested_type(codec.request_schema(30, version), "creations")
    return cls(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern_type,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def create(*creations: Any, version: int = 3) -> Any:
    return codec.request_schema(30, version)(creations=creations)


def results(response: Any) -> list[tuple[int, str | None]]:
    return [(r.error_code, r.error_message) for r in response.results]


def stored(h: HandlerHarness) -> set[str]:
    return {str(b) for b in h.authorizer.acls(AclBindingFilter.ANY)}


def test_create_denied_without_alter_cluster() -> None:
    h = harness(acl(ADMIN, "DESCRIBE", "CLUSTER", "kafka-cluster"))
    before = stored(h)
    verdict = h.send(create(creation(), creation(name="x")))
    assert isinstance(verdict, Respond)  # nothing to await: the store is untouched
    assert results(finish(verdict)) == [(31, None), (31, None)]
    assert h.checked() == [("ALTER", "CLUSTER", "kafka-cluster", "DENIED")]
    assert stored(h) == before


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_per_binding_results(version: int) -> None:
    h = harness(ADMIN_ALTER)
    verdict = h.send(
        create(
            creation(version),
            creation(version, resource_type=CLUSTER, name="other-cluster", operation=ALTER),
            creation(version, name=""),
            creation(version, principal="dave"),
            creation(version, name="pay", pattern_type=PREFIXED, operation=READ),
            version=version,
        )
    )
    assert isinstance(verdict, RespondLater)
    # A created binding's errorMessage is the generated class's default "" (as the referee
    # answers it, tests/conformance/test_admin_cluster.py).
    assert results(finish(verdict)) == [
        (0, ""),
        (42, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (42, "Invalid empty resource name"),
        (
            42,
            "Could not parse principal from `dave` (no colon is present separating the "
            "principal type from the principal name)",
        ),
        (0, ""),
    ]
    # The next request already sees them.
    response = finish(h.send(describe(principal="User:dave")))
    assert resources(response) == {
        (TOPIC, "payments", LITERAL): {("User:dave", "*", WRITE, ALLOW)},
        (TOPIC, "pay", PREFIXED): {("User:dave", "*", READ, ALLOW)},
    }


def test_create_unrecognised_codes_are_invalid_request() -> None:
    h = harness(ADMIN_ALTER)
    response = finish(h.send(create(creation(operation=99), creation(pattern_type=42))))
    assert results(response) == [
        (42, "Invalid operation UNKNOWN"),
        (42, "Invalid patternType UNKNOWN"),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"resource_type": ANY},
        {"pattern_type": ANY},
        {"pattern_type": MATCH},
        {"operation": ANY},
        {"permission": ANY},
    ],
)
def test_create_with_any_fails_every_creation(bad: dict[str, int]) -> None:
    # Java's ResourcePattern/AccessControlEntry constructors throw IllegalArgumentException
    # in CreateAclsRequest.aclBinding: UNKNOWN_SERVER_ERROR on every creation, none stored.
    h = harness(ADMIN_ALTER)
    before = stored(h)
    response = finish(h.send(create(creation(name="fine"), creation(**bad))))
    assert results(response) == [(-1, None), (-1, None)]
    assert stored(h) == before


@pytest.mark.parametrize("field", ["resource_type", "pattern_type", "operation", "permission"])
def test_create_unknown_code_closes(field: str) -> None:
    h = harness(ADMIN_ALTER)
    assert isinstance(h.send(create(creation(), creation(**{field: 0}))), Close)
    assert h.checked() == []


# -- DeleteAcls --------------------------------------------------------------------------------


def delete_filter(
    version: int = 3,
    *,
    resource_type: int = ANY,
    name: str | None = None,
    pattern_type: int = ANY,
    principal: str | None = None,
    host: str | None = None,
    operation: int = ANY,
    permission: int = ANY,
) -> Any:
    cls = codec.nested_type(codec.request_schema(31, version), "filters")
    return cls(
        resource_type_filter=resource_type,
        resource_name_filter=name,
        pattern_type_filter=pattern_type,
        principal_filter=principal,
        host_filter=host,
        operation=operation,
        permission_type=permission,
    )


def delete(*filters: Any, version: int = 3) -> Any:
    return codec.request_schema(31, version)(filters=filters)


def matched(result: Any) -> list[tuple[int, str, int, str, int]]:
    return [
        (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.operation)
        for m in result.matching_acls
    ]


def test_delete_denied_without_alter_cluster() -> None:
    h = harness(acl(ADMIN, "DESCRIBE", "CLUSTER", "kafka-cluster"))
    before = stored(h)
    response = finish(h.send(delete(delete_filter(), delete_filter(principal="User:bob"))))
    assert [(r.error_code, r.matching_acls) for r in response.filter_results] == [
        (31, ()),
        (31, ()),
    ]
    assert h.checked() == [("ALTER", "CLUSTER", "kafka-cluster", "DENIED")]
    assert stored(h) == before


@pytest.mark.parametrize("version", [1, 2, 3])
def test_delete_per_filter_results(version: int) -> None:
    h = harness(ADMIN_ALTER)
    verdict = h.send(
        delete(
            delete_filter(version, principal="User:bob", resource_type=TOPIC),
            delete_filter(version, resource_type=TOPIC, name="orders", pattern_type=MATCH),
            delete_filter(version, resource_type=GROUP, name="nothing"),
            delete_filter(version, resource_type=99),
            version=version,
        )
    )
    assert isinstance(verdict, RespondLater)
    response = finish(verdict)
    first, second, third, fourth = response.filter_results
    assert (first.error_code, first.error_message) == (0, None)
    assert sorted(matched(first)) == [
        (TOPIC, "orders", LITERAL, "User:bob", READ),
        (TOPIC, "orders", LITERAL, "User:bob", WRITE),
    ]
    # Evaluated against the ACLs as they were before the request (KRaft): bob's ACLs
    # are reported again under the second filter.
    assert sorted(matched(second)) == sorted(
        [
            (TOPIC, "orders", LITERAL, "User:bob", READ),
            (TOPIC, "orders", LITERAL, "User:bob", WRITE),
            (TOPIC, "ord", PREFIXED, "User:carol", READ),
            (TOPIC, "*", LITERAL, "User:*", READ),
        ]
    )
    assert all(m.error_code == 0 and m.host == "*" for m in second.matching_acls)
    assert (third.error_code, third.matching_acls) == (0, ())
    assert (fourth.error_code, fourth.error_message) == (42, "Unknown patternFilter.")
    remaining = finish(h.send(describe()))
    assert set(resources(remaining)) == {
        (GROUP, "g1", LITERAL),
        (CLUSTER, "kafka-cluster", LITERAL),
    }


@pytest.mark.parametrize("field", ["resource_type", "pattern_type", "operation", "permission"])
def test_delete_unknown_code_closes(field: str) -> None:
    h = harness(ADMIN_ALTER)
    assert isinstance(h.send(delete(delete_filter(**{field: 0}))), Close)
    assert h.checked() == []
