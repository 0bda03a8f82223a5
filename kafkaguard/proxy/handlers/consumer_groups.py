"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Also holds :class:`DescribedGroupsHandler`, the shape shared by the Consumer/Share/Streams
``GroupDescribe`` APIs (DESCRIBE GROUP per id, then every topic the described group uses needs
DESCRIBE TOPIC or the entry is replaced by a 29 entry without members).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from kafkaguard.policy.authorizer import AuthorizationResult
from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode
from kafkaguard.proxy.handlers.support.authz import (
    allowed_names,
    authorized_operations_rewrite,
    filter_authorized,
    first_seen,
    group_checks,
    name_actions,
)
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    Checks,
    Forward,
    HandlerContext,
    Request,
    Respond,
    StepwiseHandler,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded
from kafkaguard.proxy.handlers.support.group_gate import GroupBody, GroupGateHandler
from kafkaguard.proxy.handlers.support.regex_subscriptions import HeartbeatBody, heartbeat_verdict
from kafkaguard.proxy.handlers.support.responses import chain, response_type, split, whole_error


class SubscribedBody(GroupBody, Protocol):
    """A KIP-848/932 heartbeat: its group and the topic names it subscribes to."""

    @property
    def subscribed_topic_names(self) -> Sequence[str] | None: ...


_S = TypeVar("_S", bound=SubscribedBody)


class _DescribeBody(Entity, Protocol):
    """``ConsumerGroupDescribeRequest`` and its share/streams siblings."""

    @property
    def group_ids(self) -> Sequence[str]: ...

    @property
    def include_authorized_operations(self) -> bool: ...


class DescribedGroup(ErrorCoded, Entity, Protocol):
    """A group of a ``GroupDescribe`` answer, what every API's entry has."""

    @property
    def group_id(self) -> str: ...


class _DescribedResponse(Entity, Protocol):
    @property
    def groups(self) -> Sequence[DescribedGroup]: ...


_DR = TypeVar("_DR", bound=_DescribedResponse)


class _TopicPartitions(Protocol):
    @property
    def topic_name(self) -> str: ...


class Assignment(Protocol):
    @property
    def topic_partitions(self) -> Sequence[_TopicPartitions]: ...


class _Member(Protocol):
    @property
    def assignment(self) -> Assignment: ...

    @property
    def target_assignment(self) -> Assignment: ...


class _ConsumerGroup(DescribedGroup, Protocol):
    """``ConsumerGroupDescribeResponse.DescribedGroup``."""

    @property
    def members(self) -> Sequence[_Member]: ...


class SubscribedTopicsGateHandler(GroupGateHandler[_S]):
    """READ GROUP (30, whole); then, if ``subscribedTopicNames`` is non-empty, DESCRIBE TOPIC on
    all of them (``filterByAuthorized``): any denied → a bare response with error 29 and no
    message (``KafkaApis.handleConsumerGroupHeartbeat`` / ``handleShareGroupHeartbeat``).

    Kafka 4.3 compares ``authorizedTopics.size < subscribedTopicSet.size`` over the *set* of
    names, so a subscription naming a topic twice passes when the topic is allowed.
    """

    def after_group(self, request: Request[_S], body: _S, ctx: HandlerContext) -> Checks:
        names = body.subscribed_topic_names
        if names:
            actions = name_actions(AclOperation.DESCRIBE, ResourceType.TOPIC, set(names))
            if len(allowed_names(actions, (yield actions))) < len(actions):
                return Respond(whole_error(request, ErrorCode.topic_authorization_failed))
        return self.after_topics(request, body, ctx)

    def after_topics(self, request: Request[_S], body: _S, ctx: HandlerContext) -> Verdict:
        return FORWARD


class ConsumerGroupHeartbeatHandler(SubscribedTopicsGateHandler[HeartbeatBody]):
    """v0–1. v1 (KIP-848, KIP-1082) adds ``subscribedTopicRegex`` and client-generated member
    ids; librdkafka ≥ 2.10 needs v1 for ``group.protocol=consumer`` even without a regex.

    After the group and topic-name checks (``KafkaApis.handleConsumerGroupHeartbeat``), a
    regex subscription is resolved by the proxy — the coordinator's part in Kafka
    (``GroupMetadataManager``, ``TopicRegexResolver``), which the broker behind the proxy cannot
    do without an authorizer: ``regex_subscriptions.py``. A heartbeat without a regex of a
    member that never subscribed with one is forwarded as it is.
    """

    api_key = 68
    max_version = 1

    def after_topics(
        self, request: Request[HeartbeatBody], body: HeartbeatBody, ctx: HandlerContext
    ) -> Verdict:
        return heartbeat_verdict(request, body, ctx)


class DescribedGroupsHandler(StepwiseHandler[_DescribeBody]):
    """``handleConsumerGroupDescribe`` and its share/streams siblings.

    1. DESCRIBE GROUP per requested id, in order; denied → ``(groupId, 30)``, not forwarded;
       Kafka lists them first, then the coordinator's answer.
    2. On the broker's answer, every topic a NONE group uses must be DESCRIBE-able; otherwise the
       entry becomes ``(groupId, 29, message)`` with no members (and no topology).
    3. KIP-430 operations, if requested, for the groups still NONE.
    """

    decode_request = True
    topic_denied_message: ClassVar[str] = (
        "The group has described topic(s) that the client is not authorized to describe."
    )
    topic_denied_values: ClassVar[dict[str, object]] = {"members": ()}

    # Any: the described group of the subclass's API, which names it (a Protocol); the base's
    # rewrites are generic in the response they return, which a class parameter cannot be.
    def topics_of(self, described: Any) -> Iterable[str]:
        raise NotImplementedError

    def checks(self, request: Request[_DescribeBody], ctx: HandlerContext) -> Checks:
        body = request.body
        ids = list(body.group_ids)
        results = yield group_checks(AclOperation.DESCRIBE, ids)
        group_type = codec.nested_type(response_type(request), "groups")
        denied: dict[str, list[Entity]] = {}
        for g, result in zip(ids, results, strict=True):
            if result is not AuthorizationResult.ALLOWED:
                denied.setdefault(g, []).append(
                    codec.make_entity(group_type, ErrorCode.group_authorization_failed, group_id=g)
                )
        kept = tuple(g for g in ids if g not in denied)
        errors = tuple(denied[g][0] for g in ids if g in denied)  # one per occurrence
        fill = (
            authorized_operations_rewrite(request, ctx)
            if body.include_authorized_operations
            else None
        )

        def check_topics(response: _DR) -> _DR:
            return self._check_topics(request, ctx, group_type, response)

        if kept and not denied:
            return Forward(rewrite=chain(check_topics, fill))
        sent = set(kept)

        def errors_first(response: _DR) -> _DR:
            broker = tuple(g for g in response.groups if g.group_id in sent)
            return codec.replace(response, groups=errors + broker)

        return split(
            request, "group_ids", kept, "groups", errors_first, rewrite=chain(check_topics, fill)
        )

    def _check_topics(
        self,
        request: Request,
        ctx: HandlerContext,
        group_type: type[Entity],
        response: _DR,
    ) -> _DR:
        used = {
            g.group_id: first_seen(self.topics_of(g))
            for g in response.groups
            if g.error_code == ErrorCode.none
        }
        everything = [t for topics in used.values() for t in topics]
        if not everything:
            return response
        allowed = filter_authorized(
            ctx, request, AclOperation.DESCRIBE, ResourceType.TOPIC, everything
        )
        if len(allowed) == len(set(everything)):
            return response
        groups = tuple(
            codec.make_entity(
                group_type,
                ErrorCode.topic_authorization_failed,
                group_id=g.group_id,
                error_message=self.topic_denied_message,
                **self.topic_denied_values,
            )
            if g.error_code == ErrorCode.none and not set(used[g.group_id]) <= allowed
            else g
            for g in response.groups
        )
        return codec.replace(response, groups=groups)


class ConsumerGroupDescribeHandler(DescribedGroupsHandler):
    """Topics: every topic of each member's current and target assignment (Kafka 4.x)."""

    api_key = 69

    def topics_of(self, described: _ConsumerGroup) -> Iterable[str]:
        for member in described.members:
            for assignment in (member.assignment, member.target_assignment):
                for tp in assignment.topic_partitions:
                    yield tp.topic_name


HANDLERS: list[ApiHandler] = [ConsumerGroupHeartbeatHandler(), ConsumerGroupDescribeHandler()]
