"""Kafka's authorizer audit log line, and the structured decision event for the audit trail.

This module owns the *format* of decisions: the ``kafka.authorizer.logger`` text line that
operators already grep for (``StandardAuthorizerData.buildAuditMessage``), and the
``DecisionEvent`` handed to an optional listener (the JSON-lines audit sink, ``kafkaguard.audit``).
It does not decide anything and writes nowhere itself except through ``logging``.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from kafkaguard.policy.authorizer import Action, AuthorizationResult, RequestContext
from kafkaguard.policy.model import AclBinding

TRACE = 5
"""log4j's TRACE, below DEBUG; Kafka logs unlogged (log_if_* = false) decisions there."""
logging.addLevelName(TRACE, "TRACE")

AUDIT_LOGGER_NAME = "kafka.authorizer.logger"
audit_logger = logging.getLogger(AUDIT_LOGGER_NAME)

# ApiKeys.name (the "name" of each *Request.json), used in "for request = <name>".
API_KEY_NAMES: tuple[str, ...] = (
    "Produce", "Fetch", "ListOffsets", "Metadata", "LeaderAndIsr", "StopReplica",
    "UpdateMetadata", "ControlledShutdown", "OffsetCommit", "OffsetFetch", "FindCoordinator",
    "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups",
    "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "WriteTxnMarkers", "TxnOffsetCommit", "DescribeAcls", "CreateAcls", "DeleteAcls",
    "DescribeConfigs", "AlterConfigs", "AlterReplicaLogDirs", "DescribeLogDirs",
    "SaslAuthenticate", "CreatePartitions", "CreateDelegationToken", "RenewDelegationToken",
    "ExpireDelegationToken", "DescribeDelegationToken", "DeleteGroups", "ElectLeaders",
    "IncrementalAlterConfigs", "AlterPartitionReassignments", "ListPartitionReassignments",
    "OffsetDelete", "DescribeClientQuotas", "AlterClientQuotas", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum",
    "AlterPartition", "UpdateFeatures", "Envelope", "FetchSnapshot", "DescribeCluster",
    "DescribeProducers", "BrokerRegistration", "BrokerHeartbeat", "UnregisterBroker",
    "DescribeTransactions", "ListTransactions", "AllocateProducerIds", "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe", "ControllerRegistration", "GetTelemetrySubscriptions",
    "PushTelemetry", "AssignReplicasToDirs", "ListConfigResources", "DescribeTopicPartitions",
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge",
    "AddRaftVoter", "RemoveRaftVoter", "UpdateRaftVoter", "InitializeShareGroupState",
    "ReadShareGroupState", "WriteShareGroupState", "DeleteShareGroupState",
    "ReadShareGroupStateSummary", "StreamsGroupHeartbeat", "StreamsGroupDescribe",
    "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
)  # fmt: skip


def api_name(api_key: int) -> str:
    """``ApiKeys.forId(key).name``; an unknown key is printed as its number."""
    if 0 <= api_key < len(API_KEY_NAMES):
        return API_KEY_NAMES[api_key]
    return f"ApiKey{api_key}"


class DecisionReason(enum.Enum):
    """The rule that decided; the first four are Kafka's audit rule names."""

    SUPER_USER = "SuperUser"
    DEFAULT_ALLOW = "DefaultAllow"  # no ACL on the resource and allow.everyone.if.no.acl.found
    DEFAULT_DENY = "DefaultDeny"  # no ACL applies, or ACLs apply but none matched
    DENY_ACL = "DenyAcl"
    ALLOW_ACL = "AllowAcl"
    INTERNAL_TOPIC = "InternalTopic"  # the proxy's topics (kafkaguard/policy/internal_topics.py)
    OPA_ALLOW = "OpaAllow"  # OPA's policy answered true (kafkaguard/policy/opa.py)
    OPA_DENY = "OpaDeny"  # OPA's policy answered false
    OPA_ERROR = "OpaError"  # OPA could not be asked: denied, or allowed under allow_on_error


@dataclass(slots=True)
class DecisionEvent:
    """One authorization decision with everything needed to explain it later.

    ``implied`` is true when an ALLOW ACL for another operation granted the request (READ,
    WRITE, DELETE, ALTER → DESCRIBE; ALTER_CONFIGS → DESCRIBE_CONFIGS). ``acls_applied`` is
    false only when no ACL at all touched the resource (the case allow.everyone governs).

    Read-only by convention, not ``frozen``: one is built per decision while a listener is
    installed, and a frozen dataclass costs ~1 µs more to build (measured with the audit
    trail on, issue 7).
    """

    context: RequestContext
    action: Action
    result: AuthorizationResult
    reason: DecisionReason
    acl: AclBinding | None = None
    implied: bool = False
    acls_applied: bool = True


def standard_acl_text(binding: AclBinding) -> str:
    """``StandardAcl.toString``, as embedded in the "based on rule" suffix."""
    p, e = binding.pattern, binding.entry
    return (
        f"StandardAcl(resourceType={p.resource_type.name}, resourceName={p.name}, "
        f"patternType={p.pattern_type.name}, principal={e.principal}, host={e.host}, "
        f"operation={e.operation.name}, permissionType={e.permission_type.name})"
    )


def rule_text(reason: DecisionReason, acl: AclBinding | None) -> str:
    if acl is not None:
        return f"MatchingAcl(acl={standard_acl_text(acl)})"
    if reason in (DecisionReason.DENY_ACL, DecisionReason.ALLOW_ACL):  # pragma: no cover
        return "DefaultDeny"
    return str(reason.value)


def audit_message(
    context: RequestContext,
    action: Action,
    result: AuthorizationResult,
    reason: DecisionReason,
    acl: AclBinding | None,
) -> str:
    """``StandardAuthorizerData.buildAuditMessage``, byte for byte; a connection with groups
    (kafkaguard/policy/groups.py, beyond Kafka) has them named after its principal."""
    pattern = action.resource_pattern
    verdict = "Allowed" if result is AuthorizationResult.ALLOWED else "Denied"
    groups = context.groups
    who = context.principal.text
    if groups:
        who += f" (groups = {', '.join(g.text for g in groups)})"
    return (
        f"Principal = {who} is {verdict} operation = "
        f"{action.operation.name} from host = {context.host} on resource = "
        f"{pattern.resource_type.pascal_name}:{pattern.pattern_type.name}:{pattern.name} "
        f"for request = {api_name(context.api_key)} with resourceRefCount = "
        f"{action.resource_reference_count} based on rule {rule_text(reason, acl)}"
    )


def log_level(action: Action, result: AuthorizationResult) -> int:
    """``logAuditMessage``: denied → INFO if log_if_denied, allowed → DEBUG if log_if_allowed."""
    if result is AuthorizationResult.ALLOWED:
        return logging.DEBUG if action.log_if_allowed else TRACE
    return logging.INFO if action.log_if_denied else TRACE


def log_decision(
    context: RequestContext,
    action: Action,
    result: AuthorizationResult,
    reason: DecisionReason,
    acl: AclBinding | None,
) -> None:
    """Write the audit line if the level is enabled; the message is built only then."""
    level = log_level(action, result)
    if audit_logger.isEnabledFor(level):
        audit_logger.log(level, "%s", audit_message(context, action, result, reason, acl))
