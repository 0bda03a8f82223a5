"""KIP-932 share groups: ShareGroupHeartbeat (76), ShareGroupDescribe (77) and the share-group
offset admin APIs (90–92), as ``KafkaApis.handleShareGroupHeartbeat``, ``handleShareGroupDescribe``,
``handleDescribeShareGroupOffsetsRequest``, ``handleAlterShareGroupOffsetsRequest`` and
``handleDeleteShareGroupOffsetsRequest`` do.

ShareFetch (78) and ShareAcknowledge (79) are refused (absent from :data:`HANDLERS`): Kafka
authorizes READ TOPIC on every partition of the member's *share session* on every ShareFetch,
including partitions added by earlier requests and not named again, and a ShareAcknowledge only
makes sense inside such a session. Enforcing that needs a per-connection mirror of the share
session (as :mod:`fetch` keeps for KIP-227 sessions), which is not written yet; stripping denied
data from the broker's answer instead would let the broker acquire records for the member that
it never delivers (acquisition locks expire, delivery counts rise): not Kafka's behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.authz import group, is_allowed
from kafkaguard.proxy.handlers.base import (
    FORWARD,
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.consumer_groups import (
    DescribedGroupsHandler,
    SubscribedTopicsGateHandler,
)
from kafkaguard.proxy.handlers.groups import (
    ERROR_MESSAGES,
    GroupGateHandler,
    merge_rewrite,
    response_type,
    whole_error,
)
from kafkaguard.proxy.handlers.offsets import authorize_topics, topic_entries, topic_key

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


class DescribeShareGroupOffsetsHandler(ApiHandler):
    """Per group DESCRIBE GROUP (group entry 30 with message); then DESCRIBE TOPIC per named
    topic (29 per partition, start offset −1, zero topic id). ``topics == null``: the broker's
    answer is filtered silently. Groups whose topics are all denied are still forwarded with an
    empty list, as Kafka still asks the coordinator; a group-level error is kept as is."""

    api_key = 90
    decode_request = True

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        body: Any = request.body
        schema = response_type(request)
        group_type = codec.nested_type(schema, "groups")
        topic_type = codec.nested_type(group_type, "topics")
        denied_groups: dict[str, list[Any]] = {}
        fixes: dict[str, Callable[[Any], Any]] = {}
        kept: list[Any] = []
        changed = False
        for g in body.groups:
            if not is_allowed(ctx, request, AclOperation.DESCRIBE, group(g.group_id)):
                denied_groups.setdefault(g.group_id, []).append(
                    codec.make_entity(
                        group_type,
                        _GROUP_DENIED,
                        group_id=g.group_id,
                        error_message=ERROR_MESSAGES[_GROUP_DENIED],
                    )
                )
                changed = True
                continue
            if g.topics is None:
                fixes[g.group_id] = _keep_describable(request, ctx)
            elif g.topics:
                keys = [topic_key(t) for t in g.topics]
                denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
                if denied:
                    entries = topic_entries(
                        topic_type,
                        "partitions",
                        g.topics,
                        denied,
                        lambda t: t.partitions,
                        start_offset=-1,
                        error_message=ERROR_MESSAGES[_TOPIC_DENIED],
                    )
                    fixes[g.group_id] = merge_rewrite(keys, entries, "topics", topic_key)
                    g = codec.replace(
                        g, topics=tuple(t for t in g.topics if topic_key(t) not in denied)
                    )
                    changed = True
            kept.append(g)
        ids = [g.group_id for g in body.groups]
        if not kept:
            groups = tuple(e for k in dict.fromkeys(ids) for e in denied_groups[k])
            return Respond(codec.make_entity(schema, groups=groups))
        if not fixes and not changed:
            return FORWARD
        merge_groups = merge_rewrite(ids, denied_groups, "groups", lambda e: e.group_id)

        def rewrite(response: Any) -> Any:
            groups = tuple(
                fixes[g.group_id](g)
                if g.group_id in fixes and g.error_code == ErrorCode.none
                else g
                for g in response.groups
            )
            return merge_groups(codec.replace(response, groups=groups))

        new_body = codec.replace(body, groups=tuple(kept)) if changed else None
        return Forward(request=new_body, rewrite=rewrite)


def _keep_describable(request: Request, ctx: HandlerContext) -> Callable[[Any], Any]:
    def keep(entry: Any) -> Any:
        keys = [topic_key(t) for t in entry.topics]
        denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
        if not denied:
            return entry
        return codec.replace(
            entry, topics=tuple(t for t in entry.topics if topic_key(t) not in denied)
        )

    return keep


class _ShareOffsetsChangeHandler(GroupGateHandler):
    """Group gate (top-level 30 with message), then READ TOPIC per topic; denied topics answered
    with zero topic id and 29 + message, the rest forwarded (possibly none: Kafka still asks the
    coordinator); a top-level coordinator error is returned as the broker gave it.

    Kafka fills the denied entries' topic id from its metadata cache; the proxy writes the zero
    id instead (it must not reveal an id to a principal that may not describe the topic, and it
    may not know it)."""

    def group_denied(self, request: Request, body: Any) -> Any:
        return whole_error(request, _GROUP_DENIED, message=True)

    def denied_entries(self, request: Request, body: Any, denied: Any) -> dict[Any, list[Any]]:
        raise NotImplementedError

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        keys = [topic_key(t) for t in body.topics]
        denied = authorize_topics(ctx, request, AclOperation.READ, keys)
        if not denied:
            return FORWARD
        merge = merge_rewrite(
            keys, self.denied_entries(request, body, denied), "responses", topic_key
        )

        def rewrite(response: Any) -> Any:
            return response if response.error_code != ErrorCode.none else merge(response)

        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)


class AlterShareGroupOffsetsHandler(_ShareOffsetsChangeHandler):
    """READ GROUP → READ TOPIC per topic; 29 per partition of a denied topic."""

    api_key = 91

    def denied_entries(self, request: Request, body: Any, denied: Any) -> dict[Any, list[Any]]:
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

    def denied_entries(self, request: Request, body: Any, denied: Any) -> dict[Any, list[Any]]:
        topic_type = codec.nested_type(response_type(request), "responses")
        return {
            key: [
                codec.make_entity(
                    topic_type, code, topic_name=key, error_message=ERROR_MESSAGES.get(code)
                )
            ]
            for key, code in denied.items()
        }


HANDLERS: list[ApiHandler] = [
    ShareGroupHeartbeatHandler(),
    ShareGroupDescribeHandler(),
    DescribeShareGroupOffsetsHandler(),
    AlterShareGroupOffsetsHandler(),
    DeleteShareGroupOffsetsHandler(),
]
