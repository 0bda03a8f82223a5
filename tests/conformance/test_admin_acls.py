"""Differential scenarios: the ACL administration APIs (DescribeAcls, CreateAcls, DeleteAcls)
by authorized and unauthorized principals, with invalid bindings and every kind of filter.

Kafka's behaviour followed: ``AclApis`` (DESCRIBE / ALTER on the cluster for the whole
request, per-binding validation, KRaft's "matched before the request" DeleteAcls semantics)
and the request classes' parse-time checks (wire code 0 closes the connection).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.conformance.admin_steps import (
    ALICE,
    BOB,
    CAROL,
    CLUSTER,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    REQUEST_DUMP,
    acl,
    call,
    set_acls,
)
from tests.support.conformance.harness import Side, ck_admin, differential

pytestmark = pytest.mark.kafka

# Wire codes of the ACL enums (``code()`` of PatternType, ResourceType, AclOperation,
# AclPermissionType).
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
TOPIC, GROUP, CLUSTER_TYPE, TRANSACTIONAL_ID = 2, 3, 4, 5
ALL, READ, CREATE, DESCRIBE = 2, 3, 5, 8
DENY, ALLOW = 2, 3


# -- DescribeAcls --------------------------------------------------------------------------------


SCENARIO_ACLS = [
    acl(ALICE, "DESCRIBE", "CLUSTER", CLUSTER),
    acl(BOB, "ALTER", "CLUSTER", CLUSTER),
    acl(ALICE, "READ", "TOPIC", "orders"),
    acl(ALICE, "WRITE", "TOPIC", "orders", host="127.0.0.1"),
    acl(CAROL, "READ", "TOPIC", "ord", pattern="PREFIXED"),
    acl("User:*", "DESCRIBE", "TOPIC", "*"),
    acl(CAROL, "ALL", "TOPIC", "orders-secret", permission="DENY"),
    acl(ALICE, "READ", "GROUP", "billing-", pattern="PREFIXED"),
    acl(BOB, "WRITE", "TRANSACTIONAL_ID", "tx-1"),
]


def acl_view(response: Any) -> Any:
    """DescribeAcls' answer with resources and their entries sorted: the order is the store's
    iteration order (Kafka's ``AclCache`` sort order, kafkaguard's own), not something a
    client can rely on or an authorization outcome."""
    resources = sorted(
        (
            (
                r.resource_type,
                r.resource_name,
                r.pattern_type,
                sorted((a.principal, a.host, a.operation, a.permission_type) for a in r.acls),
            )
            for r in response.resources
        ),
        key=repr,
    )
    return {
        "error_code": response.error_code,
        "error_message": response.error_message,
        "resources": resources,
    }


def describe_acls(
    user: str,
    version: int,
    *,
    resource_type: int = ANY,
    name: str | None = None,
    pattern: int = ANY,
    principal: str | None = None,
    host: str | None = None,
    operation: int = ANY,
    permission: int = ANY,
) -> Callable[[Side], Any]:
    def run(side: Side) -> Any:
        return acl_view(
            call(
                side,
                user,
                DESCRIBE_ACLS,
                version,
                resource_type_filter=resource_type,
                resource_name_filter=name,
                pattern_type_filter=pattern,
                principal_filter=principal,
                host_filter=host,
                operation=operation,
                permission_type=permission,
            )
        )

    return run


def test_describe_acls_needs_describe_cluster(sides: list[Side]) -> None:
    """DESCRIBE CLUSTER (or ALTER, which implies it) returns every principal's ACLs; anyone
    else gets 31 for the whole request."""
    set_acls(sides, SCENARIO_ACLS)
    for version in (1, 3):
        denied = differential(sides, describe_acls("carol", version))
        assert denied["error_code"] == "cluster_authorization_failed"
        assert denied["resources"] == []
        for user in ("alice", "bob", "admin"):
            everything = differential(sides, describe_acls(user, version))
            assert everything["error_code"] == "none"
            assert sum(len(r[3]) for r in everything["resources"]) == len(SCENARIO_ACLS)


def test_describe_acls_filters(sides: list[Side]) -> None:
    """``AclBindingFilter.matches`` on both sides: by type, exact name, MATCH (literal, ``*``
    and prefixes), pattern type, principal (exact: ``User:*`` only matches itself), host,
    operation (ANY only: READ does not match an ALL ACL) and permission."""
    set_acls(sides, SCENARIO_ACLS)
    filters: list[dict[str, Any]] = [
        {"resource_type": TOPIC},
        {"resource_type": GROUP},
        {"resource_type": CLUSTER_TYPE},
        {"resource_type": TRANSACTIONAL_ID},
        {"resource_type": TOPIC, "name": "orders"},
        {"resource_type": TOPIC, "name": "orders", "pattern": LITERAL},
        {"resource_type": TOPIC, "name": "orders", "pattern": MATCH},
        {"resource_type": TOPIC, "name": "orders-secret", "pattern": MATCH},
        {"resource_type": ANY, "name": "ord", "pattern": PREFIXED},
        {"resource_type": TOPIC, "name": "*", "pattern": LITERAL},
        {"pattern": PREFIXED},
        {"principal": ALICE},
        {"principal": "User:*"},
        {"principal": "User:nobody"},
        {"host": "127.0.0.1"},
        {"host": "*", "principal": ALICE},
        {"operation": READ},
        {"operation": ALL},
        {"operation": READ, "resource_type": TOPIC, "name": "orders-secret", "pattern": MATCH},
        {"permission": DENY},
        {"permission": ALLOW, "resource_type": GROUP},
    ]
    for version in (1, 3):
        for f in filters:
            differential(sides, describe_acls("alice", version, **f))

    # AdminClient.describe_acls: what a client shows for a MATCH filter.
    def client(side: Side) -> Any:
        match = ck_admin.AclBindingFilter(
            ck_admin.ResourceType.TOPIC,
            "orders",
            ck_admin.ResourcePatternType.MATCH,
            None,
            None,
            ck_admin.AclOperation.ANY,
            ck_admin.AclPermissionType.ANY,
        )
        admin = side.admin("alice")
        found = admin.describe_acls(match).result(15)
        return sorted(str(b) for b in found)

    assert len(differential(sides, client)) == 4  # orders ×2, "ord" prefixed, "*"


# -- CreateAcls / DeleteAcls ---------------------------------------------------------------------


def creation(
    resource_type: int,
    name: str,
    principal: str,
    operation: int,
    *,
    pattern: int = LITERAL,
    host: str = "*",
    permission: int = ALLOW,
) -> dict[str, Any]:
    return {
        "resource_type": resource_type,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": host,
        "operation": operation,
        "permission_type": permission,
    }


def create_acls(user: str, version: int, creations: list[dict[str, Any]]) -> Callable[[Side], Any]:
    def run(side: Side) -> Any:
        return call(side, user, CREATE_ACLS, version, creations=creations)

    return run


def all_acls(side: Side, expected: int) -> Any:
    """Every ACL on ``side`` as the super user once ``expected`` of them are visible (the
    referee applies an ACL change to its authorizer after answering the request)."""
    deadline = time.monotonic() + 15
    while True:
        view = describe_acls("admin", 3)(side)
        if sum(len(r[3]) for r in view["resources"]) == expected or time.monotonic() > deadline:
            return view
        time.sleep(0.05)


def test_create_acls(sides: list[Side]) -> None:
    """ALTER CLUSTER is needed (DESCRIBE is not enough: 31 on every creation); then each
    binding is validated on its own (42 with Kafka's message) and the valid ones stored;
    a binding no ``ResourcePattern``/``AccessControlEntry`` can hold (ANY/MATCH) fails the
    whole request with -1 and stores nothing."""
    set_acls(
        sides, [acl(ALICE, "ALTER", "CLUSTER", CLUSTER), acl(BOB, "DESCRIBE", "CLUSTER", CLUSTER)]
    )
    valid = [
        creation(TOPIC, "audit", CAROL, READ),
        creation(GROUP, "audit-", CAROL, READ, pattern=PREFIXED),
        creation(TOPIC, "*", "User:*", DESCRIBE, host="127.0.0.1", permission=DENY),
    ]
    invalid = [
        creation(CLUSTER_TYPE, "not-the-cluster", CAROL, CREATE),
        creation(TOPIC, "", CAROL, READ),
        creation(TOPIC, "audit", "carol", READ),
        creation(TOPIC, "audit", CAROL, 99),
        creation(99, "audit", CAROL, READ),
    ]
    for version in (1, 3):
        for user in ("carol", "bob"):
            denied = differential(sides, create_acls(user, version, valid + invalid))
            assert {r["error_code"] for r in denied["results"]} == {"cluster_authorization_failed"}

    answer = differential(sides, create_acls("alice", 3, valid + invalid))
    codes = [r["error_code"] for r in answer["results"]]
    assert codes == ["none"] * 3 + ["invalid_request"] * 5, codes
    differential(sides, lambda side: all_acls(side, 2 + len(valid)))

    # One creation with resource type ANY / pattern MATCH / operation ANY / permission ANY:
    # the whole request fails, nothing is stored (the valid creation of the same request too).
    for bad in (
        creation(ANY, "x", CAROL, READ),
        creation(TOPIC, "x", CAROL, READ, pattern=MATCH),
        creation(TOPIC, "x", CAROL, ANY),
        creation(TOPIC, "x", CAROL, READ, permission=ANY),
    ):
        request = [creation(TOPIC, "kept-out", CAROL, READ), bad]
        answer = differential(sides, create_acls("alice", 1, request))
        assert [r["error_code"] for r in answer["results"]] == ["unknown_server_error"] * 2
    differential(sides, lambda side: all_acls(side, 2 + len(valid)))


def delete_acls(user: str, version: int, filters: list[dict[str, Any]]) -> Callable[[Side], Any]:
    def run(side: Side) -> Any:
        response = call(side, user, DELETE_ACLS, version, filters=filters)
        # Matching ACLs of one filter come in store order: sort them (see acl_view).
        return [
            (r.error_code, r.error_message, sorted(map(repr, r.matching_acls)))
            for r in response.filter_results
        ]

    return run


def acl_filter(
    resource_type: int = ANY,
    name: str | None = None,
    pattern: int = ANY,
    principal: str | None = None,
    host: str | None = None,
    operation: int = ANY,
    permission: int = ANY,
) -> dict[str, Any]:
    return {
        "resource_type_filter": resource_type,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": host,
        "operation": operation,
        "permission_type": permission,
    }


def test_delete_acls(sides: list[Side]) -> None:
    """ALTER CLUSTER is needed (31 per filter otherwise); each filter reports the ACLs it
    matched before the request — one ACL matched by two filters is reported by both; a filter
    with an unknown element (wire code 99 decodes to UNKNOWN) gets 42."""
    set_acls(sides, [acl(ALICE, "ALTER", "CLUSTER", CLUSTER), *SCENARIO_ACLS[2:]])
    filters = [
        acl_filter(TOPIC, "orders", MATCH),
        acl_filter(principal=CAROL),
        acl_filter(GROUP, "nothing-here", LITERAL),
        acl_filter(99),
        acl_filter(TOPIC, operation=99),
    ]
    for version in (1, 3):
        denied = differential(sides, delete_acls("carol", version, filters))
        assert {r[0] for r in denied} == {"cluster_authorization_failed"}
    answer = differential(sides, delete_acls("alice", 3, filters))
    assert [r[0] for r in answer] == ["none"] * 3 + ["invalid_request"] * 2
    # orders (2 literal), "ord" prefixed, "*"; carol's two (one of them matched already).
    assert [len(r[2]) for r in answer[:3]] == [4, 2, 0]
    remaining = 1 + len(SCENARIO_ACLS) - 2 - 5
    differential(sides, lambda side: all_acls(side, remaining))

    # AdminClient.delete_acls: the rest, by a pattern-type filter, as a client shows it.
    def client(side: Side) -> Any:
        everything = ck_admin.AclBindingFilter(
            ck_admin.ResourceType.ANY,
            None,
            ck_admin.ResourcePatternType.PREFIXED,
            None,
            None,
            ck_admin.AclOperation.ANY,
            ck_admin.AclPermissionType.ANY,
        )
        admin = side.admin("alice")
        (future,) = admin.delete_acls([everything]).values()
        return sorted(str(b) for b in future.result(15))

    differential(sides, client)


def test_cluster_denial_messages(sides: list[Side]) -> None:
    """deviation: the message of a whole-request CLUSTER_AUTHORIZATION_FAILED. Kafka's
    ``AuthHelper.authorizeClusterOperation`` writes ``Request <the broker's
    RequestChannel.Request> needs <OP> permission.`` — processor, connection id with the
    broker's own address, session and buffer objects; kafkaguard answers a null message (the
    code is the same). Every other step compares messages with these made null
    (``admin_steps.hide_request_dumps``); this one pins the raw difference."""
    set_acls(sides, [])
    steps: list[tuple[int, str, dict[str, Any], str]] = [
        (DESCRIBE_ACLS, "DESCRIBE", DESCRIBE_EVERYTHING, ""),
        (CREATE_ACLS, "ALTER", {"creations": [creation(TOPIC, "t", BOB, READ)]}, "results"),
        (DELETE_ACLS, "ALTER", {"filters": [acl_filter()]}, "filter_results"),
    ]
    for api_key, operation, fields, items in steps:
        messages = {}
        for side in sides:
            response = call(side, "carol", api_key, 3, keep_dumps=True, **fields)
            (denied,) = getattr(response, items) if items else (response,)
            assert denied.error_code == 31, (side.name, denied)
            messages[side.name] = denied.error_message
        dump = REQUEST_DUMP.fullmatch(messages["referee"] or "")
        assert dump is not None and dump.group(1) == operation, messages["referee"]
        assert messages["kafkaguard"] is None


DESCRIBE_EVERYTHING: dict[str, Any] = {
    "resource_type_filter": ANY,
    "resource_name_filter": None,
    "pattern_type_filter": ANY,
    "principal_filter": None,
    "host_filter": None,
    "operation": ANY,
    "permission_type": ANY,
}


def test_acl_requests_with_unknown_codes_close_the_connection(sides: list[Side]) -> None:
    """Wire code 0 (UNKNOWN) in a filter or binding makes the request fail to parse: Kafka
    closes the connection without answering, for any principal."""
    set_acls(sides, [])
    requests: list[tuple[int, dict[str, Any]]] = [
        (DESCRIBE_ACLS, DESCRIBE_EVERYTHING | {"resource_type_filter": 0}),
        (CREATE_ACLS, {"creations": [creation(TOPIC, "t", BOB, 0)]}),
        (DELETE_ACLS, {"filters": [acl_filter(TOPIC, "t", 0)]}),
    ]
    for api_key, fields in requests:

        def run(side: Side, api_key: int = api_key, fields: dict[str, Any] = fields) -> str:
            try:
                call(side, "admin", api_key, 3, **fields)
            except EOFError:
                return "closed"
            return "answered"

        assert differential(sides, run) == "closed"
