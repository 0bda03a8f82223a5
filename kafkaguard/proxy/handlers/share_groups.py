"""KIP-932 share groups: ShareGroupHeartbeat (76), ShareGroupDescribe (77) and the share-group
offset admin APIs (90–92), as ``KafkaApis.handleShareGroupHeartbeat``, ``handleShareGroupDescribe``,
``handleDescribeShareGroupOffsetsRequest``, ``handleAlterShareGroupOffsetsRequest`` and
``handleDeleteShareGroupOffsetsRequest`` do.

ShareFetch (78) and ShareAcknowledge (79), the share-group data path, are in
:mod:`share_sessions`: Kafka re-authorizes every partition of the member's share session on each
ShareFetch, so those handlers keep a per-connection mirror of each share session.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.consumer_groups import (
    DescribedGroupsHandler,
    SubscribedTopicsGateHandler,
)
from kafkaguard.proxy.handlers.offsets import GroupTopicsHandler, authorize_group_offsets
from kafkaguard.proxy.handlers.support.authz import TopicKey
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Checks,
    HandlerContext,
    Request,
    StepwiseHandler,
)
from kafkaguard.proxy.handlers.support.responses import (
    ERROR_MESSAGES,
    entity,
    response_type,
    topic_entries,
    whole_error,
)

_TOPIC_DENIED = ErrorCode.topic_authorization_failed
_GROUP_DENIED = ErrorCode.group_authorization_failed


class ShareGroupHeartbeatHandler(SubscribedTopicsGateHandler):
    """READ GROUP (30 whole); DESCRIBE TOPIC on all ``subscribedTopicNames`` (29 whole)."""

    api_key = 76


class ShareGroupDescribeHandler(DescribedGroupsHandler):
    """Topics: every topic of each member's assignment (share members have no target one)."""

    api_key = 77

    def topics_of(self, described: Any) -> Iterable[str]:
        for member in described.members:
            for tp in member.assignment.topic_partitions:
                yield tp.topic_name


class DescribeShareGroupOffsetsHandler(StepwiseHandler):
    """Per group DESCRIBE GROUP (group entry 30 with message); then DESCRIBE TOPIC per named
    topic (29 per partition, start offset −1, zero topic id). ``topics == null``: the broker's
    answer is filtered silently. Groups whose topics are all denied are answered by the proxy
    (Kafka would still ask the coordinator: see :func:`~offsets.authorize_group_offsets`); a
    group-level error is kept as is."""

    api_key = 90
    decode_request = True

    def checks(self, request: Request, ctx: HandlerContext) -> Checks:
        return authorize_group_offsets(
            request,
            ctx,
            lambda t: t.partitions,
            group_message=True,
            start_offset=-1,
            error_message=ERROR_MESSAGES[_TOPIC_DENIED],
        )


class _ShareOffsetsChangeHandler(GroupTopicsHandler):
    """Group gate (top-level 30 with message), then READ TOPIC per topic; denied topics answered
    with zero topic id and 29 + message, the rest forwarded; when none is left the proxy answers
    alone, where Kafka would still ask the coordinator (fail closed, see
    :class:`~offsets.GroupTopicsHandler`); a top-level coordinator error is returned as the
    broker gave it.

    Kafka fills the denied entries' topic id from its metadata cache; the proxy writes the zero
    id instead (it must not reveal an id to a principal that may not describe the topic, and it
    may not know it)."""

    response_topics = "responses"

    def group_denied(self, request: Request, body: Any) -> Any:
        return whole_error(request, _GROUP_DENIED, message=True)


class AlterShareGroupOffsetsHandler(_ShareOffsetsChangeHandler):
    """READ GROUP → READ TOPIC per topic; 29 per partition of a denied topic."""

    api_key = 91

    def denied_topics(
        self, request: Request, body: Any, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Any]]:
        topic_type = codec.nested_type(response_type(request), "responses")
        return topic_entries(
            topic_type,
            "partitions",
            body.topics,
            denied,
            lambda t: [p.partition_index for p in t.partitions],
            error_message=ERROR_MESSAGES[_TOPIC_DENIED],
        )


class DeleteShareGroupOffsetsHandler(_ShareOffsetsChangeHandler):
    """DELETE GROUP → READ TOPIC per topic; 29 per denied topic."""

    api_key = 92
    group_operation = AclOperation.DELETE

    def denied_topics(
        self, request: Request, body: Any, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Any]]:
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
