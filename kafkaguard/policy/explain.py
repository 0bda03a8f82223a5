"""Why a request is allowed or denied: one decision, replayed and explained.

Used by ``kafkaguard explain`` and by the Spark ``unused``/``whatif`` jobs. The verdict (result,
reason, deciding ACL, implication) is never recomputed here: :func:`explain` asks
:meth:`StandardAuthorizer.authorize` itself and takes them from the
:class:`~kafkaguard.policy.audit_log.DecisionEvent` it reports, so an explanation cannot
disagree with the proxy. What is added is :attr:`Explanation.matching_acls`, every stored ACL
that applies to the request (Kafka reports only the first DENY, else the first ALLOW).

Every check Kafka makes for the request is modelled, not only the one named: a READ, WRITE or
DESCRIBE of a topic reaches the topic through a Metadata request, and when the topic does not
exist that request auto-creates it only with CREATE on the cluster or on the topic
(``KafkaApis.handleTopicMetadataRequest``, ``AutoTopicCreationManager``; both checked with
``logIfDenied=false``, so the denial is neither logged nor audited): :func:`auto_creation`.
Whether the topic exists is the caller's to find out (``kafkaguard explain --ask-upstream``).

This module does no I/O; rendering returns text and dicts for the caller to print.
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass
from typing import Final

from kafkaguard.policy.acl_index import (
    _ALLOW_OPS,  # the implication table of StandardAuthorizerData (ALLOW ACLs only)
    _DENY_OPS,
    USER_WILDCARD_KEY,
    AclIndex,
    Entry,
    principal_key,
)
from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason
from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
    java_host_address,
)
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.acl_file_format import sort_key


@dataclass(frozen=True, slots=True)
class Explanation:
    result: AuthorizationResult
    reason: DecisionReason
    deciding_acl: AclBinding | None
    implied: bool
    matching_acls: tuple[AclBinding, ...]
    """Every stored ACL that applies to this principal, host and resource and whose operation
    covers the requested one — DENY first, then in Kafka's scan order (literal name,
    prefixes shortest first, literal ``*``). "Covers": ALL or the operation itself; for an
    ALLOW ACL also an operation implying it (READ/WRITE/DELETE/ALTER → DESCRIBE,
    ALTER_CONFIGS → DESCRIBE_CONFIGS). A DENY READ does not deny DESCRIBE in Kafka, so it
    is not listed for a DESCRIBE request."""
    super_user: bool
    acls_applied: bool
    """False only when no ACL at all touched the resource (the case allow.everyone governs)."""


def explain(authorizer: StandardAuthorizer, context: RequestContext, action: Action) -> Explanation:
    """Decide ``action`` exactly as the proxy would and say why.

    The authorizer's decision listener is swapped for the duration of the call (the decision
    is neither audited nor counted): use an authorizer of its own, not the one a running
    proxy serves requests with.

    Raises:
        AuthorizerNotReadyError: the authorizer has not loaded its ACLs (super users aside).
        ValueError: the action's pattern is not LITERAL (as ``authorize`` refuses it).
    """
    events: list[DecisionEvent] = []
    previous = authorizer.decision_listener
    authorizer.decision_listener = events.append
    try:
        result = authorizer.authorize(context, [action])[0]
    finally:
        authorizer.decision_listener = previous
    event = events[-1]
    return Explanation(
        result=result,
        reason=event.reason,
        deciding_acl=event.acl,
        implied=event.implied,
        matching_acls=matching_acls(authorizer.acl_index, context, action),
        super_user=event.reason is DecisionReason.SUPER_USER,
        acls_applied=event.acls_applied,
    )


def explain_event(event: DecisionEvent) -> Explanation:
    """The explanation of an authorizer without ACLs (OPA, kafkaguard/policy/opa.py): its
    decision event is all there is to say."""
    return Explanation(
        result=event.result,
        reason=event.reason,
        deciding_acl=None,
        implied=False,
        matching_acls=(),
        super_user=event.reason is DecisionReason.SUPER_USER,
        acls_applied=True,
    )


OPA_REASONS: Final = {
    DecisionReason.OPA_ALLOW: "OPA's policy answered true → allowed",
    DecisionReason.OPA_DENY: "OPA's policy answered false → denied",
    DecisionReason.OPA_ERROR: "OPA could not be asked (the kafkaguard.opa log line says why)",
}


AUTO_CREATING: frozenset[AclOperation] = frozenset(
    {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
)
"""Topic operations whose clients look the topic up with a Metadata request that may
auto-create it (producers always; consumers with ``allow.auto.create.topics``, the default)."""
_CLUSTER = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class AutoCreation:
    """Kafka's CREATE checks for a topic that does not exist: CREATE on the cluster first,
    then (only when that is denied, as Kafka) CREATE on the topic."""

    topic: str
    on_cluster: Explanation
    on_topic: Explanation | None

    @property
    def allowed(self) -> bool:
        return any(
            e is not None and e.result is AuthorizationResult.ALLOWED
            for e in (self.on_cluster, self.on_topic)
        )


def auto_creation(
    authorizer: StandardAuthorizer, context: RequestContext, action: Action
) -> AutoCreation | None:
    """The CREATE checks a missing topic adds to ``action`` (None when it adds none: not a
    topic, or an operation whose request never auto-creates)."""
    pattern = action.resource_pattern
    if pattern.resource_type is not ResourceType.TOPIC or action.operation not in AUTO_CREATING:
        return None
    create = AclOperation.CREATE
    on_cluster = explain(authorizer, context, Action(create, _CLUSTER, log_if_denied=False))
    on_topic = None
    if on_cluster.result is not AuthorizationResult.ALLOWED:
        on_topic = explain(authorizer, context, Action(create, pattern, log_if_denied=False))
    return AutoCreation(pattern.name, on_cluster, on_topic)


def overall_result(
    explanation: Explanation, creation: AutoCreation | None, exists: bool | None
) -> AuthorizationResult | None:
    """What the request gets: the named check's answer, and for a topic that does not exist
    also auto-creation's; None when that depends on an existence nobody checked."""
    result = explanation.result
    if result is not AuthorizationResult.ALLOWED or creation is None or creation.allowed:
        return result
    if exists is None:
        return None
    return result if exists else AuthorizationResult.DENIED


def matching_acls(
    index: AclIndex, context: RequestContext, action: Action
) -> tuple[AclBinding, ...]:
    """The ACLs of :attr:`Explanation.matching_acls`, from the index the authorizer uses."""
    pattern = action.resource_pattern
    name = pattern.name
    own = principal_key(context.principal)
    keys = [USER_WILDCARD_KEY] if own in (None, USER_WILDCARD_KEY) else [own, USER_WILDCARD_KEY]
    keys[-1:-1] = [g.text for g in context.groups if g.text not in keys]  # before User:*
    found: list[tuple[int, int, int, Entry]] = []
    for position, key in enumerate(keys):
        for entry in index.principal_entries(pattern.resource_type, key):
            acl_pattern = entry.binding.pattern
            if acl_pattern.pattern_type == PatternType.PREFIXED:
                if not name.startswith(acl_pattern.name):
                    continue
                rank = len(acl_pattern.name)
            elif acl_pattern.name == name:
                rank = 0
            elif acl_pattern.name == WILDCARD_RESOURCE:
                rank = sys.maxsize
            else:
                continue
            if entry.host not in (WILDCARD_HOST, context.host) and (
                entry.network is None or context.client_address not in entry.network
            ):
                continue
            covering = _ALLOW_OPS if entry.allow else _DENY_OPS
            if entry.operation not in covering[action.operation]:
                continue
            found.append((int(entry.allow), rank, position, entry))
    found.sort(key=lambda f: (f[0], f[1], f[2], sort_key(f[3].binding)))
    return tuple(f[3].binding for f in found)


def decision_context(
    principal: str,
    host: str,
    listener: str = "",
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
    groups: tuple[KafkaPrincipal, ...] = (),
) -> RequestContext:
    """A request context for offline replay; ``groups``: the principal's ``Group:`` principals.

    ``host`` is any IP text; ACL hosts are compared with it as Java prints it (``::1`` is
    ``0:0:0:0:0:0:0:1``), exactly as the proxy computes it for a connection. Audit records'
    ``client_host`` is already in that form (and a scoped ``fe80::1%2`` is kept as given).

    Raises:
        ValueError: ``principal`` is not ``Type:name`` or ``host`` is not an IP address.
    """
    address = ipaddress.ip_address(host.split("%", 1)[0])
    return RequestContext(
        listener_name=listener,
        security_protocol=security_protocol,
        principal=KafkaPrincipal.parse(principal),
        client_address=address,
        api_key=-1,
        api_version=0,
        host=host if "%" in host else java_host_address(address),
        groups=groups,
    )


# -- rendering ---------------------------------------------------------------------------------


def acl_json(binding: AclBinding) -> dict[str, str]:
    """An ACL as the audit contract's ``acl`` object: Kafka enum names, e.g. ``PREFIXED``."""
    pattern, entry = binding.pattern, binding.entry
    return {
        "resource_type": pattern.resource_type.name,
        "pattern_type": pattern.pattern_type.name,
        "resource_name": pattern.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.name,
        "permission_type": entry.permission_type.name,
    }


def acl_text(binding: AclBinding) -> str:
    """``ALLOW READ on Topic:PREFIXED:ord for User:alice from host *``."""
    pattern, entry = binding.pattern, binding.entry
    return (
        f"{entry.permission_type.name} {entry.operation.name} on "
        f"{pattern.resource_type.pascal_name}:{pattern.pattern_type.name}:{pattern.name} "
        f"for {entry.principal} from host {entry.host}"
    )


def _reason_text(
    explanation: Explanation, context: RequestContext, action: Action, allow_everyone: bool
) -> str:
    reason = explanation.reason
    if reason in OPA_REASONS:
        verdict = explanation.result is AuthorizationResult.ALLOWED
        suffix = {True: " → allowed (allow_on_error)", False: " → denied"}[verdict]
        return OPA_REASONS[reason] + (suffix if reason is DecisionReason.OPA_ERROR else "")
    if reason is DecisionReason.SUPER_USER:
        return (
            f"{_subject_text(context)} is a super user: every operation is allowed, "
            "ACLs are not consulted"
        )
    if reason is DecisionReason.DENY_ACL:
        allows = sum(
            b.entry.permission_type == AclPermissionType.ALLOW for b in explanation.matching_acls
        )
        extra = (
            f" ({allows} matching ALLOW ACL{'s' if allows != 1 else ''} overridden)"
            if allows
            else ""
        )
        return f"a DENY ACL matched, and DENY takes precedence over any ALLOW{extra}"
    if reason is DecisionReason.ALLOW_ACL:
        text = "an ALLOW ACL matched and no DENY ACL did"
        acl = explanation.deciding_acl
        if explanation.implied and acl is not None:
            text += f"; {action.operation.name} is implied by {acl.entry.operation.name}"
        return text
    if reason is DecisionReason.DEFAULT_ALLOW:
        return "no ACL exists for this resource and allow.everyone.if.no.acl.found=true → allowed"
    if explanation.acls_applied:
        flag = " (so allow.everyone.if.no.acl.found does not apply)" if allow_everyone else ""
        return (
            f"ACLs exist for this resource{flag}, but none matches {_subject_text(context)} "
            f"from host {context.host} for {action.operation.name} → denied"
        )
    return "no ACL matched; allow.everyone.if.no.acl.found=false → denied"


def _subject_text(context: RequestContext) -> str:
    """``User:alice`` or, with groups, ``User:alice (groups Group:eng, Group:oncall)``."""
    groups = context.groups
    if not groups:
        return context.principal.text
    return f"{context.principal.text} (groups {', '.join(g.text for g in groups)})"


def deciding_principal(explanation: Explanation, context: RequestContext) -> str | None:
    """Whose ACL decided: the principal itself, ``User:*`` or one of its groups (None: no
    ACL decided)."""
    acl = explanation.deciding_acl
    return None if acl is None else acl.entry.principal


def listener_overrides(config: AuthorizerConfig, listener: str) -> dict[str, str]:
    """The per-listener replacements of super_users / allow.everyone that apply (extension)."""
    policy = config.listeners.get(listener)
    if policy is None:
        return {}
    out: dict[str, str] = {}
    if policy.super_users is not None:
        out["super_users"] = ";".join(sorted(policy.super_users)) or "(none)"
    if policy.allow_everyone_if_no_acl_found is not None:
        out["allow_everyone_if_no_acl_found"] = str(policy.allow_everyone_if_no_acl_found).lower()
    return out


def render_text(
    explanation: Explanation, context: RequestContext, action: Action, config: AuthorizerConfig
) -> list[str]:
    """The human-readable explanation, one line per item."""
    pattern = action.resource_pattern
    in_force = config.in_force(context.listener_name)
    where = f"listener {context.listener_name}, " if context.listener_name else ""
    lines = [
        f"{explanation.result.value}: {_subject_text(context)} {action.operation.name} "
        f"{pattern.resource_type.pascal_name}:{pattern.pattern_type.name}:{pattern.name} "
        f"from host {context.host} ({where}{context.security_protocol.value})",
        f"Reason: {explanation.reason.value}: "
        + _reason_text(explanation, context, action, in_force.allow_everyone_if_no_acl_found),
    ]
    overrides = listener_overrides(config, context.listener_name)
    if overrides:
        settings = ", ".join(f"{k}={v}" for k, v in overrides.items())
        lines.append(f"Listener {context.listener_name} overrides: {settings}")
    if explanation.deciding_acl is not None:
        lines.append(f"Deciding ACL: {acl_text(explanation.deciding_acl)}")
        decider = explanation.deciding_acl.entry.principal
        if any(g.text == decider for g in context.groups):
            lines.append(f"Decided by the ACL of {decider}, a group of {context.principal.text}")
    if explanation.matching_acls:
        lines.append(f"Matching ACLs ({len(explanation.matching_acls)}, DENY first):")
        for binding in explanation.matching_acls:
            mark = "  <- deciding" if binding == explanation.deciding_acl else ""
            lines.append(f"  {acl_text(binding)}{mark}")
    elif not explanation.super_user and explanation.reason not in OPA_REASONS:
        lines.append("Matching ACLs: none")
    return lines


def render_auto_creation(
    creation: AutoCreation,
    exists: bool | None,
    context: RequestContext,
    config: AuthorizerConfig,
) -> list[str]:
    """The lines of :class:`AutoCreation`: what a missing topic also needs, and the answer."""
    topic = f"Topic:LITERAL:{creation.topic}"
    if exists:
        return [f"{topic} exists (asked the upstream): no auto-creation, no CREATE needed"]
    head = (
        f"{topic} does not exist (asked the upstream):"
        if exists is False
        else f"Topic existence not checked (--ask-upstream asks the cluster); if {topic} does "
        "not exist:"
    )
    allow_everyone = config.in_force(context.listener_name).allow_everyone_if_no_acl_found
    lines = [
        head,
        "  the client's Metadata request auto-creates it only with CREATE on "
        f"Cluster:LITERAL:{CLUSTER_NAME} or on {topic} (Kafka: KafkaApis.handleTopicMetadata"
        "Request, checked with logIfDenied=false: a denial is not audited)",
    ]
    checks = (
        (creation.on_cluster, _CLUSTER),
        (creation.on_topic, ResourcePattern(ResourceType.TOPIC, creation.topic)),
    )
    for explanation, pattern in checks:
        if explanation is not None:
            action = Action(AclOperation.CREATE, pattern, log_if_denied=False)
            reason = _reason_text(explanation, context, action, allow_everyone)
            lines.append(
                f"  CREATE on {pattern.resource_type.pascal_name}:LITERAL:{pattern.name}: "
                f"{explanation.result.value} ({reason})"
            )
    if creation.allowed:
        lines.append(
            "  → ALLOWED: the topic is auto-created (if the brokers' auto.create.topics.enable "
            "is true; else UNKNOWN_TOPIC_OR_PARTITION (3))"
        )
    else:
        lines.append(
            f"  → DENIED: Metadata answers TOPIC_AUTHORIZATION_FAILED (29) for {creation.topic}, "
            "so the request fails"
        )
    if exists is None and not creation.allowed:
        lines.append(
            f"Result: ALLOWED if {creation.topic} exists, DENIED if it does not "
            "(grant CREATE on the topic or the cluster, or create the topic first)"
        )
    return lines


def auto_creation_json(creation: AutoCreation | None, exists: bool | None) -> dict[str, object]:
    """``--json``'s ``auto_creation`` object (null results: a check not made)."""
    if creation is None:
        return {"applies": False}
    on_topic = creation.on_topic
    return {
        "applies": True,
        "topic_exists": exists,
        "create_on_cluster": creation.on_cluster.result.value,
        "create_on_topic": None if on_topic is None else on_topic.result.value,
        "allowed": creation.allowed,
    }


def explanation_json(
    explanation: Explanation, context: RequestContext, action: Action
) -> dict[str, object]:
    """The machine-readable explanation (``kafkaguard explain --json``)."""
    pattern = action.resource_pattern
    return {
        "result": explanation.result.value,
        "reason": explanation.reason.value,
        "implied": explanation.implied,
        "super_user": explanation.super_user,
        "acls_applied": explanation.acls_applied,
        "deciding_acl": None
        if explanation.deciding_acl is None
        else acl_json(explanation.deciding_acl),
        "matching_acls": [acl_json(b) for b in explanation.matching_acls],
        "deciding_principal": deciding_principal(explanation, context),
        "request": {
            "principal": context.principal.text,
            "groups": [g.text for g in context.groups],
            "host": context.host,
            "listener": context.listener_name,
            "security_protocol": context.security_protocol.value,
            "operation": action.operation.name,
            "resource_type": pattern.resource_type.name,
            "pattern_type": pattern.pattern_type.name,
            "resource_name": pattern.name,
        },
    }
