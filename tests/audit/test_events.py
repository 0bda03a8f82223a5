"""The audit record is the contract with the Spark jobs: exact keys, order and values."""

from __future__ import annotations

import ipaddress
import json

import pytest

from kafkaguard.audit.config import ENFORCE, LOG_ONLY, effective_mode
from kafkaguard.audit.events import (
    ACL_FIELDS,
    FIELD_NAMES,
    SCHEMA_VERSION,
    aggregate_record,
    decision_key,
    decision_record,
    format_time,
    partition,
)
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import Action, RequestContext, SecurityProtocol
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import (
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer

CONTRACT_FIELDS = (
    "schema_version", "kind", "time", "window_end", "count", "mode", "listener",
    "security_protocol", "principal", "groups", "client_host", "client_id", "api_key", "api_name",
    "api_version", "correlation_id", "operation", "resource_type", "pattern_type",
    "resource_name", "result", "would_deny", "reason", "implied", "acl",
)  # fmt: skip

AT = 1795342503.123  # 2026-11-22T10:15:03.123Z
DENY_ORD = acl_binding(
    ResourceType.TOPIC,
    "ord",
    "User:alice",
    AclOperation.WRITE,
    AclPermissionType.DENY,
    pattern_type=PatternType.PREFIXED,
)
ALLOW_READ = acl_binding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ)


def context(
    api_key: int = 0, correlation_id: int = 42, groups: tuple[str, ...] = ()
) -> RequestContext:
    return RequestContext(
        listener_name="EXTERNAL",
        security_protocol=SecurityProtocol.SASL_SSL,
        principal=KafkaPrincipal.parse("User:alice"),
        client_address=ipaddress.ip_address("::1"),
        api_key=api_key,
        api_version=9,
        client_id="billing",
        correlation_id=correlation_id,
        groups=tuple(KafkaPrincipal("Group", g) for g in groups),
    )


def decide(action: Action, ctx: RequestContext | None = None) -> DecisionEvent:
    """One decision of a real StandardAuthorizer, as its decision listener receives it."""
    events: list[DecisionEvent] = []
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=events.append)
    auth.load_snapshot([DENY_ORD, ALLOW_READ])
    auth.authorize(ctx or context(), [action])
    (event,) = events
    return event


def test_field_list_is_the_contract() -> None:
    assert FIELD_NAMES == CONTRACT_FIELDS
    assert SCHEMA_VERSION == 2
    assert ACL_FIELDS == (
        "resource_type", "pattern_type", "resource_name", "principal", "host", "operation",
        "permission_type",
    )  # fmt: skip


def test_decision_line_golden() -> None:
    event = decide(Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "orders")))
    line = decision_record(event, LOG_ONLY, AT).to_json()
    assert line == (
        '{"schema_version":2,"kind":"decision","time":"2026-11-22T10:15:03.123Z",'
        '"window_end":null,"count":1,"mode":"log_only","listener":"EXTERNAL",'
        '"security_protocol":"SASL_SSL","principal":"User:alice","groups":[],'
        '"client_host":"0:0:0:0:0:0:0:1","client_id":"billing","api_key":0,'
        '"api_name":"Produce","api_version":9,"correlation_id":42,"operation":"WRITE",'
        '"resource_type":"TOPIC","pattern_type":"LITERAL","resource_name":"orders",'
        '"result":"DENIED","would_deny":true,"reason":"DenyAcl","implied":false,'
        '"acl":{"resource_type":"TOPIC","pattern_type":"PREFIXED","resource_name":"ord",'
        '"principal":"User:alice","host":"*","operation":"WRITE","permission_type":"DENY"}}'
    )
    assert list(json.loads(line)) == list(CONTRACT_FIELDS)
    assert list(json.loads(line)["acl"]) == list(ACL_FIELDS)


def test_aggregate_line_golden_with_implied_allow() -> None:
    event = decide(Action(AclOperation.DESCRIBE, ResourcePattern(ResourceType.TOPIC, "orders")))
    record = aggregate_record(decision_key(event, ENFORCE), AT - 3.123, AT - 3.123 + 60, 17)
    assert json.loads(record.to_json()) == {
        "schema_version": 2,
        "kind": "aggregate",
        "time": "2026-11-22T10:15:00.000Z",
        "window_end": "2026-11-22T10:16:00.000Z",
        "count": 17,
        "mode": "enforce",
        "listener": "EXTERNAL",
        "security_protocol": "SASL_SSL",
        "principal": "User:alice",
        "groups": [],
        "client_host": "0:0:0:0:0:0:0:1",
        "client_id": "billing",
        "api_key": 0,
        "api_name": "Produce",
        "api_version": 9,
        "correlation_id": None,
        "operation": "DESCRIBE",
        "resource_type": "TOPIC",
        "pattern_type": "LITERAL",
        "resource_name": "orders",
        "result": "ALLOWED",
        "would_deny": False,
        "reason": "AllowAcl",
        "implied": True,
        "acl": {
            "resource_type": "TOPIC",
            "pattern_type": "LITERAL",
            "resource_name": "orders",
            "principal": "User:alice",
            "host": "*",
            "operation": "READ",
            "permission_type": "ALLOW",
        },
    }


def test_default_deny_has_no_acl_and_enforce_never_would_deny() -> None:
    event = decide(Action(AclOperation.READ, ResourcePattern(ResourceType.GROUP, "g")))
    record = decision_record(event, ENFORCE, AT)
    assert (record.result, record.reason, record.acl, record.would_deny) == (
        "DENIED",
        "DefaultDeny",
        None,
        False,
    )


def test_only_a_check_kafka_logs_when_denied_is_a_would_deny() -> None:
    """A KIP-430 probe or silent filtering (``log_if_denied`` false, audited only with
    ``include_unlogged``) refuses nothing: no would-deny, so ``propose`` grants nothing for it."""
    topic = ResourcePattern(ResourceType.TOPIC, "payments")
    logged = decide(Action(AclOperation.WRITE, topic))
    probe = decide(Action(AclOperation.WRITE, topic, 1, False, False))
    assert decision_record(logged, LOG_ONLY, AT).would_deny
    assert not decision_record(probe, LOG_ONLY, AT).would_deny
    assert decision_record(probe, LOG_ONLY, AT).result == "DENIED"
    assert decision_key(logged, LOG_ONLY) != decision_key(probe, LOG_ONLY)


def test_aggregation_key_ignores_time_and_correlation_id_only() -> None:
    action = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "orders"))
    first = decide(action, context(correlation_id=1))
    second = decide(action, context(correlation_id=2))
    assert decision_key(first, ENFORCE) == decision_key(second, ENFORCE)
    assert decision_key(first, ENFORCE) != decision_key(first, LOG_ONLY)
    other_api = decide(action, context(api_key=1))
    assert decision_key(first, ENFORCE) != decision_key(other_api, ENFORCE)


def test_the_groups_are_recorded_sorted_and_part_of_the_aggregation_key() -> None:
    """A connection's groups come in its sources' order; the record names them as a set, and
    identical decisions of connections with other groups are other records."""
    action = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "orders"))
    grouped = decide(action, context(groups=("oncall", "eng", "oncall")))
    record = decision_record(grouped, ENFORCE, AT)
    assert record.groups == ("Group:eng", "Group:oncall")
    line = record.to_json()
    assert '"principal":"User:alice","groups":["Group:eng","Group:oncall"],' in line
    assert line == json.dumps(record.to_dict(), separators=(",", ":"))
    assert list(json.loads(line)) == list(CONTRACT_FIELDS)
    same = decide(action, context(correlation_id=9, groups=("eng", "oncall")))
    other = decide(action, context(groups=("eng",)))
    none = decide(action, context())
    assert decision_key(grouped, ENFORCE) == decision_key(same, ENFORCE)
    assert decision_key(grouped, ENFORCE) != decision_key(other, ENFORCE)
    assert decision_key(grouped, ENFORCE) != decision_key(none, ENFORCE)
    assert decision_record(none, ENFORCE, AT).groups == ()


def test_non_ascii_names_stay_valid_json() -> None:
    event = decide(Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "zähler-\udcff")))
    line = decision_record(event, ENFORCE, AT).to_json()
    line.encode("ascii")  # escaped: every line is valid UTF-8 whatever a client sent
    assert json.loads(line)["resource_name"] == "zähler-\udcff"


@pytest.mark.parametrize(
    ("at", "text", "where"),
    [
        (0.0, "1970-01-01T00:00:00.000Z", ("1970-01-01", 0)),
        (AT, "2026-11-22T10:15:03.123Z", ("2026-11-22", 10)),
        (1795345199.9994, "2026-11-22T10:59:59.999Z", ("2026-11-22", 10)),
        (1795345200.0, "2026-11-22T11:00:00.000Z", ("2026-11-22", 11)),
        (1798761599.5, "2026-12-31T23:59:59.500Z", ("2026-12-31", 23)),
    ],
)
def test_time_format_and_partition(at: float, text: str, where: tuple[str, int]) -> None:
    assert format_time(at) == text
    assert partition(at) == where


def test_acl_and_credential_administration_stays_enforced_in_log_only() -> None:
    keys = (0, 1, 29, 30, 31, 32, 50, 51)
    assert [effective_mode(LOG_ONLY, key) for key in keys] == [
        LOG_ONLY, LOG_ONLY, ENFORCE, ENFORCE, ENFORCE, LOG_ONLY, ENFORCE, ENFORCE,
    ]  # fmt: skip
    assert effective_mode(ENFORCE, 0) == ENFORCE
