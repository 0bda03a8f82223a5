"""The audit record: one JSON object per line, schema version 2 (the audit contract).

This module owns the record the proxy writes and the Spark jobs read
(:mod:`kafkaguard.audit.spark.trail.schema` mirrors :data:`FIELD_NAMES`; a test keeps the two
equal), and the conversion of a :class:`~kafkaguard.policy.audit_log.DecisionEvent` into it. It is
pure: no I/O, no clock (times are passed in as epoch seconds).

Fields, in order (the JSON keys are exactly these)::

    schema_version int       2 (version 1 had no ``groups``; readers take its groups as none)
    kind           str       "decision" | "aggregate" (identical decisions counted per window)
    time           str       ISO-8601 UTC, milliseconds, "Z"; an aggregate's window start
    window_end     str|null  aggregates: the window end; decisions: null
    count          int       1 for a decision; n for an aggregate
    mode           str       "enforce" | "log_only" (the listener's, for this request)
    listener, security_protocol, principal (str),
    groups         list[str] the connection's group principals (``Group:eng``, sorted; empty
                             when none: kafkaguard/policy/groups.py), beyond Kafka's context
    client_host, client_id (str|null),
    api_key (int), api_name, api_version (int), correlation_id (int|null; null in aggregates),
    operation, resource_type, pattern_type, resource_name, result ("ALLOWED" | "DENIED"),
    would_deny     bool      mode == "log_only", result == "DENIED" and the check is one Kafka
                             logs when denied (it refuses something; forwarded anyway). A
                             KIP-430 probe or silent "list all" filtering denied on a log_only
                             listener (audited only with include_unlogged) refused nothing
                             and is not a would-deny.
    reason         str       SuperUser | DenyAcl | AllowAcl | DefaultAllow | DefaultDeny |
                             InternalTopic | OpaAllow | OpaDeny | OpaError
    implied        bool      an ALLOW ACL for another operation granted it
    acl            object|null  the deciding ACL (see :func:`kafkaguard.policy.explain.acl_json`)

Adding a field is a schema change: bump :data:`SCHEMA_VERSION` and the Spark schema with it
(which keeps reading every earlier version: :data:`.spark.trail.schema.SCHEMA_VERSIONS`).

``audit.format: cloudevents`` writes the same record as a CloudEvents 1.0 event in structured
JSON mode, laid out like Confluent's audit log authorization event
(:meth:`AuditEvent.to_cloudevent`; the mapping is in docs/audit.md): SIEM pipelines that parse
Confluent's audit log read it as it is, and the Spark jobs read it back to the same fields.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from typing import Final, NamedTuple
from urllib.parse import quote

from kafkaguard.audit.config import FORMAT_CLOUDEVENTS, LOG_ONLY
from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason, api_name
from kafkaguard.policy.authorizer import AuthorizationResult
from kafkaguard.policy.explain import acl_json
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    KafkaPrincipal,
    PatternType,
    ResourceType,
)

SCHEMA_VERSION: Final = 2
KIND_DECISION: Final = "decision"
KIND_AGGREGATE: Final = "aggregate"

CLOUDEVENTS_TYPE: Final = "io.confluent.kafka.server/authorization"
"""The ``type`` of Confluent's audit log authorization events."""
CLOUDEVENTS_SOURCE_PREFIX: Final = "crn:///kafkaguard/listener="
"""``source``: the kafkaguard listener that decided, as a CRN like Confluent's
``crn:///kafka=<cluster id>`` (the listener name percent-encoded)."""
CLOUDEVENTS_CONTENT_TYPE: Final = "application/cloudevents+json; charset=UTF-8"
"""The ``content-type`` header of a structured-mode event on Kafka (CloudEvents Kafka binding)."""
MODE_EXTENSION: Final = "kafkaguardmode"
"""The CloudEvents extension attribute carrying the dry-run mode (``enforce`` | ``log_only``)."""


@dataclass(slots=True)
class AuditEvent:
    """One line of the audit trail; the attributes are the JSON keys, in order.

    Read-only by convention rather than ``frozen`` (a frozen 25-field dataclass costs ~4 µs
    to build, once per written line).
    """

    schema_version: int
    kind: str
    time: str
    window_end: str | None
    count: int
    mode: str
    listener: str
    security_protocol: str
    principal: str
    groups: tuple[str, ...]
    client_host: str
    client_id: str | None
    api_key: int
    api_name: str
    api_version: int
    correlation_id: int | None
    operation: str
    resource_type: str
    pattern_type: str
    resource_name: str
    result: str
    would_deny: bool
    reason: str
    implied: bool
    acl: Mapping[str, str] | None

    def to_dict(self) -> dict[str, object]:
        record = {name: getattr(self, name) for name in FIELD_NAMES}
        record["groups"] = list(self.groups)  # a JSON array
        return record

    def to_cloudevent(self, event_id: str | None = None) -> dict[str, object]:
        """The record as a CloudEvents 1.0 event laid out like Confluent's audit log
        authorization event (docs/audit.md, "CloudEvents format"): Confluent's fields filled
        from the decision, and what they have no place for under ``data.kafkaguard``, so the
        Spark jobs read back every field of this record (:mod:`.spark.source`).

        ``event_id``: the CloudEvents ``id`` (default: a random UUID, unique per source).
        """
        source = CLOUDEVENTS_SOURCE_PREFIX + quote(self.listener, safe="")
        resource = f"{source}/{self.resource_type.lower()}={self.resource_name}"
        authorization: dict[str, object] = {
            "granted": self.result == "ALLOWED",
            "operation": _pascal(self.operation),
            "resourceType": _pascal(self.resource_type),
            "resourceName": self.resource_name,
            "patternType": self.pattern_type,
        }
        acl = self.acl
        if self.reason == "SuperUser":
            authorization["superUserAuthorization"] = True
        elif acl is not None:
            authorization["aclAuthorization"] = {
                "permissionType": acl["permission_type"],
                "host": acl["host"],
            }
        if self.groups:
            # Where Confluent Cloud's events with group mapping name the principals a decision
            # considered (the user's groups) and the one whose binding decided.
            authorization["assignedPrincipals"] = list(self.groups)
            if acl is not None:
                authorization["actingPrincipal"] = acl["principal"]
        request: dict[str, object] = {}
        if self.correlation_id is not None:
            request["correlation_id"] = str(self.correlation_id)  # a string, as Confluent's
        if self.client_id is not None:
            request["client_id"] = self.client_id
        return {
            "specversion": "1.0",
            "id": event_id if event_id is not None else str(uuid.uuid4()),
            "source": source,
            "type": CLOUDEVENTS_TYPE,
            "datacontenttype": "application/json",
            "subject": resource,
            "time": self.time,
            MODE_EXTENSION: self.mode,
            "data": {
                "serviceName": source,
                "methodName": f"kafka.{self.api_name}",
                "resourceName": resource,
                "authenticationInfo": {"principal": self.principal},
                "authorizationInfo": authorization,
                "request": request,
                "requestMetadata": {"client_address": self.client_host},
                "kafkaguard": {
                    "schema_version": self.schema_version,
                    "kind": self.kind,
                    "window_end": self.window_end,
                    "count": self.count,
                    "security_protocol": self.security_protocol,
                    "api_key": self.api_key,
                    "api_version": self.api_version,
                    "would_deny": self.would_deny,
                    "reason": self.reason,
                    "implied": self.implied,
                    "acl": None if acl is None else dict(acl),
                },
            },
        }

    def encode(self, record_format: str) -> bytes:
        """The record in ``record_format`` (``audit.format``) as one line without its newline:
        compact JSON, ASCII only."""
        if record_format == FORMAT_CLOUDEVENTS:
            return json.dumps(self.to_cloudevent(), separators=(",", ":")).encode()
        return self.to_json().encode()

    def to_json(self) -> str:
        """The line without its newline: compact, keys in contract order, ASCII only (so
        any principal or client id text is valid UTF-8 and valid JSON).

        Exactly ``json.dumps(self.to_dict(), separators=(",", ":"))`` (a test holds them
        equal), written out because it runs once per audited denial and is 4× faster.
        """
        q = _quote
        acl = self.acl
        return (
            f'{{"schema_version":{self.schema_version:d},"kind":{q(self.kind)},'
            f'"time":{q(self.time)},"window_end":{_nullable(self.window_end)},'
            f'"count":{self.count:d},"mode":{q(self.mode)},"listener":{q(self.listener)},'
            f'"security_protocol":{q(self.security_protocol)},"principal":{q(self.principal)},'
            f'"groups":[{",".join(map(q, self.groups))}],"client_host":{q(self.client_host)},'
            f'"client_id":{_nullable(self.client_id)},'
            f'"api_key":{self.api_key:d},"api_name":{q(self.api_name)},'
            f'"api_version":{self.api_version:d},"correlation_id":'
            f"{'null' if self.correlation_id is None else f'{self.correlation_id:d}'},"
            f'"operation":{q(self.operation)},"resource_type":{q(self.resource_type)},'
            f'"pattern_type":{q(self.pattern_type)},"resource_name":{q(self.resource_name)},'
            f'"result":{q(self.result)},"would_deny":{_BOOL[self.would_deny]},'
            f'"reason":{q(self.reason)},"implied":{_BOOL[self.implied]},"acl":'
            + (
                "null"
                if acl is None
                else "{" + ",".join(f"{q(k)}:{q(v)}" for k, v in acl.items()) + "}"
            )
            + "}"
        )


_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii
"""JSON string literal, quotes included, non-ASCII escaped (json's own C helper)."""
_BOOL: Final = {True: "true", False: "false"}


def _nullable(value: str | None) -> str:
    return "null" if value is None else _quote(value)


def _pascal(kafka_name: str) -> str:
    """``IDEMPOTENT_WRITE`` -> ``IdempotentWrite``, as ``SecurityUtils.operationName`` and
    ``resourceTypeName`` print operations and resource types (and Confluent's audit log)."""
    return "".join(part.capitalize() for part in kafka_name.split("_"))


FIELD_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in fields(AuditEvent))
"""The JSON keys of schema version 2, in order."""
ACL_FIELDS: Final[tuple[str, ...]] = (
    "resource_type",
    "pattern_type",
    "resource_name",
    "principal",
    "host",
    "operation",
    "permission_type",
)
"""The keys of the ``acl`` object, in order (:func:`~kafkaguard.policy.explain.acl_json`)."""


class DecisionKey(NamedTuple):
    """Everything of a decision but its time, correlation id and count: what identical
    decisions share, so allowed (or denied) decisions can be counted per window."""

    mode: str
    listener: str
    security_protocol: str
    principal: str
    groups: tuple[str, ...]
    client_host: str
    client_id: str | None
    api_key: int
    api_version: int
    operation: AclOperation
    resource_type: ResourceType
    pattern_type: PatternType
    resource_name: str
    result: AuthorizationResult
    reason: DecisionReason
    implied: bool
    acl: AclBinding | None
    would_deny: bool


def record_groups(groups: Collection[KafkaPrincipal]) -> tuple[str, ...]:
    """The record's ``groups``: the principals' texts, sorted and distinct (a connection's
    groups come in its sources' order; the record names a set).

    >>> record_groups([KafkaPrincipal("Group", "ops"), KafkaPrincipal("Group", "eng")])
    ('Group:eng', 'Group:ops')
    """
    return tuple(sorted({g.text for g in groups})) if groups else ()


def decision_key(event: DecisionEvent, mode: str) -> DecisionKey:
    context, action = event.context, event.action
    pattern = action.resource_pattern
    return DecisionKey(
        mode,
        context.listener_name,
        context.security_protocol.value,
        context.principal.text,
        record_groups(context.groups),
        context.host,
        context.client_id,
        context.api_key,
        context.api_version,
        action.operation,
        pattern.resource_type,
        pattern.pattern_type,
        pattern.name,
        event.result,
        event.reason,
        event.implied,
        event.acl,
        mode == LOG_ONLY
        and event.result is AuthorizationResult.DENIED
        and event.action.log_if_denied,
    )


def _event(
    key: DecisionKey,
    kind: str,
    start: str,
    end: str | None,
    count: int,
    correlation_id: int | None,
) -> AuditEvent:
    result = key.result.value
    return AuditEvent(
        schema_version=SCHEMA_VERSION,
        kind=kind,
        time=start,
        window_end=end,
        count=count,
        mode=key.mode,
        listener=key.listener,
        security_protocol=key.security_protocol,
        principal=key.principal,
        groups=key.groups,
        client_host=key.client_host,
        client_id=key.client_id,
        api_key=key.api_key,
        api_name=api_name(key.api_key),
        api_version=key.api_version,
        correlation_id=correlation_id,
        operation=key.operation.name,
        resource_type=key.resource_type.name,
        pattern_type=key.pattern_type.name,
        resource_name=key.resource_name,
        result=result,
        would_deny=key.would_deny,
        reason=key.reason.value,
        implied=key.implied,
        acl=None if key.acl is None else acl_json(key.acl),
    )


def decision_record(event: DecisionEvent, mode: str, at: float) -> AuditEvent:
    """The ``decision`` record of one authorization decision made at ``at`` (epoch s)."""
    key = decision_key(event, mode)
    return _event(key, KIND_DECISION, format_time(at), None, 1, event.context.correlation_id)


def aggregate_record(key: DecisionKey, start: float, end: float, count: int) -> AuditEvent:
    """The ``aggregate`` record of ``count`` decisions like ``key`` in [start, end)."""
    return _event(key, KIND_AGGREGATE, format_time(start), format_time(end), count, None)


_second_cache: tuple[int, str] = (-1, "")


def _millis(at: float) -> int:
    """Whole milliseconds since the epoch; the 1 µs nudge absorbs float representation
    error (``1795342503.123`` is stored as ``...503.12299990654``)."""
    return int(at * 1000 + 0.001)


def format_time(at: float) -> str:
    """``2026-11-22T10:15:03.123Z``: UTC, milliseconds truncated (as Java's Instant prints
    them at millisecond precision).

    >>> format_time(0.0)
    '1970-01-01T00:00:00.000Z'
    >>> format_time(1795342503.1239)
    '2026-11-22T10:15:03.123Z'
    """
    global _second_cache
    second, milli = divmod(_millis(at), 1000)
    cached_second, prefix = _second_cache
    if cached_second != second:  # most records of a busy second share the prefix
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_cache = (second, prefix)
    return f"{prefix}.{milli:03d}Z"


def partition(at: float) -> tuple[str, int]:
    """The ``date=YYYY-MM-DD`` / ``hour=HH`` partition a record of time ``at`` belongs to.

    >>> partition(1795342503.5)
    ('2026-11-22', 10)
    """
    tm = time.gmtime(_millis(at) // 1000)
    return f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}", tm.tm_hour
