"""``audit.format: cloudevents``: CloudEvents 1.0 in structured JSON mode, laid out like
Confluent's audit log authorization event (docs/audit.md, "CloudEvents format")."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest

from kafkaguard.audit.config import FORMAT_CLOUDEVENTS, AuditConfig
from kafkaguard.audit.events import AuditEvent, decision_record
from kafkaguard.audit.writer import AuditWriter
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import Action
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import AclOperation, ResourcePattern, ResourceType, acl_binding
from kafkaguard.policy.standard import StandardAuthorizer
from tests.audit.test_events import AT, context, decide

CLOUDEVENTS_SCHEMA = {
    # The CloudEvents 1.0 JSON format's schema (cloudevents/spec, cloudevents/formats/
    # cloudevents.json), with the spec's naming rule for extension attributes
    # (lower-case ASCII letters and digits).
    "$ref": "#/definitions/event",
    "definitions": {
        "event": {
            "type": "object",
            "required": ["specversion", "id", "type", "source"],
            "properties": {
                "specversion": {"type": "string", "minLength": 1},
                "datacontenttype": {"type": "string"},
                "data": {"type": ["object", "string"]},
                "data_base64": {"type": "string"},
                "id": {"type": "string", "minLength": 1},
                "time": {"type": "string", "format": "date-time"},
                "dataschema": {"type": "string", "format": "uri"},
                "subject": {"type": "string", "minLength": 1},
                "type": {"type": "string", "minLength": 1},
                "source": {"type": "string", "format": "uri-reference"},
            },
            "propertyNames": {"pattern": "^([a-z0-9]{1,20}|data_base64)$"},
        }
    },
}

CONFLUENT_ACL_EXAMPLE = json.loads(
    # The field layout of the published Confluent Platform audit log authorization examples
    # ("Audit log content" in Confluent's docs): a topic creation granted by an ACL.
    """{
    "id": "889bdcd9-a378-4bfe-8860-180ef8efd208",
    "source": "crn:///kafka=8caBa-0_Tu-2k3rKSxY64Q",
    "specversion": "1.0",
    "type": "io.confluent.kafka.server/authorization",
    "time": "2019-10-24T16:15:48.355Z",
    "datacontenttype": "application/json",
    "subject": "crn:///kafka=8caBa-0_Tu-2k3rKSxY64Q/topic=app3-topic",
    "data": {
      "serviceName": "crn:///kafka=8caBa-0_Tu-2k3rKSxY64Q",
      "methodName": "kafka.CreateTopics",
      "resourceName": "crn:///kafka=8caBa-0_Tu-2k3rKSxY64Q/topic=app3-topic",
      "authenticationInfo": {"principal": "User:admin"},
      "authorizationInfo": {
        "granted": true,
        "operation": "Create",
        "resourceType": "Topic",
        "resourceName": "app3-topic",
        "patternType": "LITERAL",
        "aclAuthorization": {"permissionType": "ALLOW", "host": "*"}
      },
      "request": {"correlation_id": "3", "client_id": "adminclient-6"},
      "requestMetadata": {"client_address": "/127.0.0.1"}
    }
  }"""
)


def _layout(value: object, path: str = "") -> set[tuple[str, str]]:
    """Every key path of a JSON value with its JSON type."""
    if isinstance(value, dict):
        out = {(path, "object")}
        for key, item in value.items():
            out |= _layout(item, f"{path}.{key}")
        return out
    return {(path, type(value).__name__)}


def _validate(event: dict[str, object]) -> None:
    jsonschema.validate(event, CLOUDEVENTS_SCHEMA)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(event["time"]))
    datetime.fromisoformat(str(event["time"]))


def test_a_granted_write_has_confluents_layout_and_validates() -> None:
    allow_write = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "orders"))
    record = decision_record(decide(allow_write), "enforce", AT)
    event = json.loads(record.encode(FORMAT_CLOUDEVENTS))
    _validate(event)
    assert _layout(CONFLUENT_ACL_EXAMPLE) <= _layout(event)
    data = event["data"]
    assert event["type"] == "io.confluent.kafka.server/authorization"
    assert event["source"] == "crn:///kafkaguard/listener=EXTERNAL"
    assert event["kafkaguardmode"] == "enforce"
    assert event["subject"] == data["resourceName"] == f"{event['source']}/topic=orders"
    assert data["methodName"] == "kafka.Produce"
    assert data["authenticationInfo"] == {"principal": "User:alice"}
    assert data["authorizationInfo"] == {
        "granted": True,
        "operation": "Read",
        "resourceType": "Topic",
        "resourceName": "orders",
        "patternType": "LITERAL",
        "aclAuthorization": {"permissionType": "ALLOW", "host": "*"},
    }
    assert data["request"] == {"correlation_id": "42", "client_id": "billing"}
    assert data["requestMetadata"] == {"client_address": "0:0:0:0:0:0:0:1"}  # as Java prints it
    assert data["kafkaguard"]["acl"] == {
        "resource_type": "TOPIC", "pattern_type": "LITERAL", "resource_name": "orders",
        "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW",
    }  # fmt: skip


def test_a_denial_an_aggregate_and_a_super_user() -> None:
    deny = Action(
        AclOperation.IDEMPOTENT_WRITE, ResourcePattern(ResourceType.CLUSTER, "kafka-cluster")
    )
    denied = json.loads(decision_record(decide(deny), "log_only", AT).encode(FORMAT_CLOUDEVENTS))
    _validate(denied)
    authz = denied["data"]["authorizationInfo"]
    assert (authz["granted"], authz["operation"], authz["resourceType"]) == (
        False, "IdempotentWrite", "Cluster"
    )  # fmt: skip
    assert "aclAuthorization" not in authz and denied["kafkaguardmode"] == "log_only"
    assert denied["data"]["kafkaguard"]["would_deny"] is True
    prefixed = Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "orders"))
    # DENY_ORD: a PREFIXED DENY WRITE on ord
    by_deny_acl = decision_record(decide(prefixed), "enforce", AT).to_cloudevent()
    assert by_deny_acl["data"]["authorizationInfo"]["aclAuthorization"] == {  # type: ignore[index]
        "permissionType": "DENY",
        "host": "*",
    }
    fields = decision_record(decide(prefixed), "enforce", AT).to_dict()
    aggregate = AuditEvent(**{**fields, "kind": "aggregate", "count": 9, "correlation_id": None,  # type: ignore[arg-type]
                              "reason": "SuperUser", "acl": None, "client_id": None})  # fmt: skip
    event = json.loads(aggregate.encode(FORMAT_CLOUDEVENTS))
    _validate(event)
    assert event["data"]["request"] == {}
    assert event["data"]["authorizationInfo"]["superUserAuthorization"] is True
    assert event["data"]["kafkaguard"]["count"] == 9


def test_ids_are_unique_and_both_sinks_of_one_format_get_the_same_bytes(tmp_path: Path) -> None:
    record = decision_record(
        decide(Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "x"))), "enforce", AT
    )
    ids = {json.loads(record.encode(FORMAT_CLOUDEVENTS))["id"] for _ in range(100)}
    assert len(ids) == 100
    config = AuditConfig(enabled=True, dir=tmp_path, format=FORMAT_CLOUDEVENTS)
    writer = AuditWriter(config, clock=lambda: AT)
    event = decide(Action(AclOperation.READ, ResourcePattern(ResourceType.GROUP, "g")), context())
    assert writer.offer(AT, event, "enforce")
    assert writer.close(5.0)
    (path,) = tmp_path.rglob("*.jsonl")
    (line,) = path.read_text().splitlines()
    written = json.loads(line)
    _validate(written)
    assert written["data"]["authorizationInfo"]["resourceType"] == "Group"


@pytest.mark.parametrize("name", ["EXTERNAL", "odd listener/%+"])
def test_the_listener_is_the_source(name: str) -> None:
    fields = decision_record(
        decide(Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "x"))), "enforce", AT
    ).to_dict()
    event = AuditEvent(**{**fields, "listener": name}).to_cloudevent()  # type: ignore[arg-type]
    _validate(event)
    assert "/" not in str(event["source"]).removeprefix("crn:///kafkaguard/")


def test_a_group_members_decision_names_its_groups_where_confluent_does() -> None:
    """With groups, ``authorizationInfo`` carries them as Confluent Cloud's events with group
    mapping do: ``assignedPrincipals`` (the groups considered) and ``actingPrincipal`` (whose
    ACL decided); without, neither key is there (the layout of before)."""
    events: list[DecisionEvent] = []
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=events.append)
    auth.load_snapshot([acl_binding(ResourceType.TOPIC, "orders", "Group:eng", AclOperation.READ)])
    read = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, "orders"))
    auth.authorize(context(groups=("oncall", "eng")), [read])
    auth.authorize(context(), [read])
    member, outsider = (json.loads(decision_record(e, "enforce", AT).encode(FORMAT_CLOUDEVENTS))
                        for e in events)  # fmt: skip
    _validate(member)
    authz = member["data"]["authorizationInfo"]
    assert authz["granted"] is True
    assert authz["assignedPrincipals"] == ["Group:eng", "Group:oncall"]
    assert authz["actingPrincipal"] == "Group:eng"
    assert member["data"]["authenticationInfo"] == {"principal": "User:alice"}
    outside = outsider["data"]["authorizationInfo"]
    assert outside["granted"] is False
    assert not {"assignedPrincipals", "actingPrincipal"} & set(outside)
