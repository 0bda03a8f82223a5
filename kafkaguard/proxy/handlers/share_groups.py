"""KIP-932 share groups: ShareGroupHeartbeat (76), ShareGroupDescribe (77) and the share-group
offset admin APIs (90–92), as ``KafkaApis.handleShareGroupHeartbeat``, ``handleShareGroupDescribe``,
``handleDescribeShareGroupOffsetsRequest``, ``handleAlterShareGroupOffsetsRequest`` and
``handleDeleteShareGroupOffsetsRequest`` do.

ShareFetch (78) and ShareAcknowledge (79), the share-group data path, are in
:mod:`share_sessions`: Kafka re-authorizes every partition of the member's share session on each
ShareFetch, so those handlers keep a per-connection mirror of each share session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.consumer_groups import (
    Assignment,
    DescribedGroup,
    DescribedGroupsHandler,
    SubscribedBody,
    SubscribedTopicsGateHandler,
)
from kafkaguard.proxy.handlers.offsets import (
    GroupTopicsHandler,
    OffsetsBody,
    TopicsBody,
    authorize_group_offsets,
)
from kafkaguard.proxy.handlers.support.authz import TopicKey
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Checks,
    HandlerContext,
    Request,
    StepwiseHandler,
)
from kafkaguard.proxy.handlers.support.fields import PartitionIndexed
from kafkaguard.proxy.handlers.support.responses import (
    ERROR_MESSAGES,
    entity,
    response_type,
    topic_entries,
    whole_error,
)

_TOPIC_DENIED = ErrorCode.topic_authorization_failed
_GROUP_DENIED = ErrorCode.group_authorization_failed


class _ShareMember(Protocol):
    @property
    def assignment(self) -> Assignment: ...


class _ShareGroup(DescribedGroup, Protocol):
    """``ShareGroupDescribeResponse.DescribedGroup``."""

    @property
    def members(self) -> Sequence[_ShareMember]: ...


class _DescribedTopic(Protocol):
    """``DescribeShareGroupOffsetsRequest``'s topic, named by ``topic_name``."""

    @property
    def partitions(self) -> Sequence[int]: ...


class _AlteredTopic(Protocol):
    """``AlterShareGroupOffsetsRequest``'s topic, named by ``topic_name``."""

    @property
    def partitions(self) -> Sequence[PartitionIndexed]: ...


class _AlterBody(TopicsBody, Protocol):
    @property
    def topics(self) -> Sequence[_AlteredTopic]: ...


_TB = TypeVar("_TB", bound=TopicsBody)


class ShareGroupHeartbeatHandler(SubscribedTopicsGateHandler[SubscribedBody]):
    """READ GROUP (30 whole); DESCRIBE TOPIC on all ``subscribedTopicNames`` (29 whole)."""

    api_key = 76


class ShareGroupDescribeHandler(DescribedGroupsHandler):
    """Topics: every topic of each member's assignment (share members have no target one)."""

    api_key = 77

    def topics_of(self, described: _ShareGroup) -> Iterable[str]:
        for member in described.members:
            for tp in member.assignment.topic_partitions:
                yield tp.topic_name


class DescribeShareGroupOffsetsHandler(StepwiseHandler[OffsetsBody[_DescribedTopic]]):
    """Per group DESCRIBE GROUP (group entry 30 with message); then DESCRIBE TOPIC per named
    topic (29 per partition, start offset −1, zero topic id). ``topics == null``: the broker's
    answer is filtered silently. Groups whose topics are all denied are answered by the proxy
    (Kafka would still ask the coordinator: see :func:`~offsets.authorize_group_offsets`); a
    group-level error is kept as is."""

    api_key = 90
    decode_request = True

    def checks(self, request: Request[OffsetsBody[_DescribedTopic]], ctx: HandlerContext) -> Checks:
        return authorize_group_offsets(
            request,
            ctx,
            lambda t: t.partitions,
            group_message=True,
            start_offset=-1,
            error_message=ERROR_MESSAGES[_TOPIC_DENIED],
        )


class _ShareOffsetsChangeHandler(GroupTopicsHandler[_TB]):
    """Group gate (top-level 30 with message), then READ TOPIC per topic; denied topics answered
    with zero topic id and 29 + message, the rest forwarded; when none is left the proxy answers
    alone, where Kafka would still ask the coordinator (fail closed, see
    :class:`~offsets.GroupTopicsHandler`); a top-level coordinator error is returned as the
    broker gave it.

    Kafka fills the denied entries' topic id from its metadata cache; the proxy writes the zero
    id instead (it must not reveal an id to a principal that may not describe the topic, and it
    may not know it)."""

    response_topics = "responses"

    def group_denied(self, request: Request[_TB], body: _TB) -> ResponsePayload:
        return whole_error(request, _GROUP_DENIED, message=True)


class AlterShareGroupOffsetsHandler(_ShareOffsetsChangeHandler[_AlterBody]):
    """READ GROUP → READ TOPIC per topic; 29 per partition of a denied topic."""

    api_key = 91

    def denied_topics(
        self, request: Request[_AlterBody], body: _AlterBody, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Entity]]:
        topic_type = codec.nested_type(response_type(request), "responses")
        return topic_entries(
            topic_type,
            "partitions",
            body.topics,
            denied,
            lambda t: [p.partition_index for p in t.partitions],
            error_message=ERROR_MESSAGES[_TOPIC_DENIED],
        )


class DeleteShareGroupOffsetsHandler(_ShareOffsetsChangeHandler[TopicsBody]):
    """DELETE GROUP → READ TOPIC per topic; 29 per denied topic."""

    api_key = 92
    group_operation = AclOperation.DELETE

    def denied_topics(
        self, request: Request[TopicsBody], body: TopicsBody, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Entity]]:
        topic_type = codec.nested_type(response_type(request), "responses")
        return {
            key: [entity(topic_type, code, message=True, topic_name=key)]
            for key, code in denied.items()
        }


HANDLERS: list[ApiHandler] = [
    ShareGroupHeartbeatHandler(),
    ShareGroupDescribeHandler(),
    DescribeShareGroupOffsetsHandler(),
    AlterShareGroupOffsetsHandler(),
    DeleteShareGroupOffsetsHandler(),
]
