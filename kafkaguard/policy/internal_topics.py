"""The proxy's internal topics: no client touches them, super users included (issue 26).

The proxy keeps its own state on the cluster it protects: every topic named ``_kafkaguard-*``
(the ACL and SCRAM store topics, the default audit topic) and the configured audit topic.
A client that could write them could grant itself any ACL; one that could read them would
read every principal's decisions. So, whatever the ACLs and ``super_users`` say, an action on
such a topic is denied to every connection none of whose principals (its principal or one of
its ``Group:`` principals, issue 37) the operator has named in
``authorizer.internal_topics.principals``.

:class:`InternalTopicGuard` wraps any :class:`~kafkaguard.policy.authorizer.Authorizer`: every
handler asks its questions through it, so the rule holds before any super-user shortcut or
ACL match of the authorizer inside, and for a pluggable authorizer as well. Kafka keeps its
own internal topics (``__consumer_offsets``, ``__transaction_state``) from clients the same
way in places (``Topic.isInternal``: AddPartitionsToTxn never authorizes them, ReplicaManager
refuses appends); the codes the proxy answers per API are listed in docs/deviations.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field

from kafkaguard.policy.audit_log import DecisionReason, log_decision
from kafkaguard.policy.authorizer import (
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizationResult,
    Authorizer,
    RequestContext,
)
from kafkaguard.policy.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.topic_names import unify_collision_chars

INTERNAL_TOPIC_PREFIX = "_kafkaguard-"
"""Every topic whose name starts so is the proxy's (docs/acl-store.md, docs/audit.md)."""

_TOPIC = ResourceType.TOPIC

_DENIED = AuthorizationResult.DENIED


@dataclass(frozen=True, slots=True)
class InternalTopics:
    """Which topics are the proxy's, and which principals may still touch them."""

    names: frozenset[str] = frozenset()
    """Internal topics beyond the prefix: the configured audit topic."""
    principals: frozenset[str] = frozenset()
    """``authorizer.internal_topics.principals``: ``Type:name`` strings, compared with the
    principal's text and its groups' as ``super_users`` are; their requests are authorized as
    usual."""

    unified: frozenset[str] = field(init=False, repr=False, compare=False)
    """:attr:`names` as :func:`unify_collision_chars` makes them."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "unified", frozenset(map(unify_collision_chars, self.names)))

    def internal(self, topic: str) -> bool:
        """Whether ``topic`` is one of the proxy's, or a name Kafka would refuse beside it
        (``.`` and ``_`` collide): ``.kafkaguard-acls-x`` is answered as ``_kafkaguard-acls-x``
        is, so neither its creation (a squatter the store could never create beside) nor a
        collision error naming the real topic gets through."""
        unified = unify_collision_chars(topic)
        return unified.startswith(INTERNAL_TOPIC_PREFIX) or unified in self.unified

    def named(self, context: RequestContext) -> bool:
        """Whether ``principals`` names the connection: its principal or one of its groups, as
        ``super_users`` is matched (kafkaguard/policy/standard.py; a group named there stands
        for every member, docs/groups.md)."""
        return context.named_in(self.principals)

    def refused(self, context: RequestContext, topic: str) -> bool:
        """Whether ``context``'s principals may not touch ``topic`` at all."""
        return self.internal(topic) and not self.named(context)


class InternalTopicGuard:
    """An :class:`Authorizer` that denies the proxy's internal topics, then asks ``inner``.

    Refused actions are not shown to ``inner`` (a super user would be "Allowed" there); their
    denial is written to ``kafka.authorizer.logger`` with the rule ``InternalTopic``.
    ``rules`` may be replaced at run time (a configuration reload): one reference, read once
    per call.
    """

    __slots__ = ("inner", "rules")

    def __init__(self, inner: Authorizer, rules: InternalTopics) -> None:
        self.inner = inner
        self.rules = rules

    def refused(self, context: RequestContext, topic: str) -> bool:
        """For the handlers' cluster-wide shortcuts (CREATE/DELETE/CLUSTER_ACTION on the
        cluster authorize every topic without naming one): is ``topic`` still out of reach?"""
        return self.rules.refused(context, topic)

    def refusing(
        self,
        context: RequestContext,
        actions: Sequence[Action],
        results: Sequence[AuthorizationResult],
    ) -> list[AuthorizationResult]:
        """``results`` (``enforcement: log_only``'s "as if allowed") with the refusals of this
        rule kept: it is not a policy being tried out, and holds in every mode."""
        rules = self.rules
        return [
            _DENIED
            if action.resource_pattern.resource_type is _TOPIC
            and rules.refused(context, action.resource_pattern.name)
            else result
            for action, result in zip(actions, results, strict=True)
        ]

    def start(self, listeners: Sequence[str]) -> Mapping[str, Awaitable[None]]:
        return self.inner.start(listeners)

    def authorize(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        rules = self.rules
        refused = {
            i
            for i, action in enumerate(actions)
            if action.resource_pattern.resource_type is _TOPIC
            and rules.internal(action.resource_pattern.name)
        }
        if not refused or rules.named(context):
            return self.inner.authorize(context, actions)
        asked = [a for i, a in enumerate(actions) if i not in refused]
        answers = iter(self.inner.authorize(context, asked) if asked else ())
        results: list[AuthorizationResult] = []
        for i, action in enumerate(actions):
            if i in refused:
                log_decision(context, action, _DENIED, DecisionReason.INTERNAL_TOPIC, None)
                results.append(_DENIED)
            else:
                results.append(next(answers))
        return results

    def authorize_by_resource_type(
        self, context: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """ "Any topic" questions (InitProducerId's WRITE, KIP-679) are about the topics a
        principal may use, which the internal ones never add to: asked of ``inner``."""
        return self.inner.authorize_by_resource_type(context, operation, resource_type)

    def authorized_operations(
        self, context: RequestContext, resource: ResourcePattern
    ) -> set[AclOperation]:
        if resource.resource_type is _TOPIC and self.rules.refused(context, resource.name):
            return set()
        return self.inner.authorized_operations(context, resource)

    async def create_acls(
        self, context: RequestContext, bindings: Sequence[AclBinding]
    ) -> list[AclCreateResult]:
        return await self.inner.create_acls(context, bindings)

    async def delete_acls(
        self, context: RequestContext, filters: Sequence[AclBindingFilter]
    ) -> list[AclDeleteResult]:
        return await self.inner.delete_acls(context, filters)

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return self.inner.acls(acl_filter)

    async def close(self) -> None:
        await self.inner.close()
