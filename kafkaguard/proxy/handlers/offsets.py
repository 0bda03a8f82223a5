"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47).

The group check always comes first (spec §5.3: a principal without group access learns nothing
about topics), then the topics, as in ``KafkaApis.handleOffsetCommitRequest``,
``handleOffsetFetchRequest`` (``fetchOffsetsForGroup`` / ``fetchAllOffsetsForGroup``) and
``handleOffsetDeleteRequest``.

Topic ids (OffsetCommit/OffsetFetch v10) are resolved from the proxy's id cache; an id it never
saw is UNKNOWN_TOPIC_ID (100) and never forwarded. In an all-topics OffsetFetch v10 answer, a
topic id the proxy cannot name cannot be authorized and is dropped (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.authz import (
    TopicKey,
    authorize_topics,
    drop_denied_topics,
    group,
    is_allowed,
    topic_key,
)
from kafkaguard.proxy.handlers.base import (
    FORWARD,
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.groups import GroupGateHandler
from kafkaguard.proxy.handlers.responses import (
    entity,
    merge_rewrite,
    partition_errors,
    response_type,
    topic_entries,
    whole_error,
)


def _partition_indexes(entry: Any) -> list[int]:
    return [p.partition_index for p in entry.partitions]


class GroupTopicsHandler(GroupGateHandler):
    """The group gate, then READ TOPIC per topic; denied topics are answered by the proxy
    (:meth:`denied_topics`) in the response's ``response_topics``, the rest forwarded —
    possibly none, as Kafka still calls the coordinator. A top-level coordinator error
    replaces the per-topic results (``OffsetDeleteResponse.Builder.merge``): the broker's
    answer is then returned as it is."""

    response_topics: ClassVar[str] = "topics"

    def denied_topics(
        self, request: Request, body: Any, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Any]]:
        raise NotImplementedError

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        keys = [topic_key(t) for t in body.topics]
        denied = authorize_topics(ctx, request, AclOperation.READ, keys)
        if not denied:
            return FORWARD
        entries = self.denied_topics(request, body, denied)
        merge = merge_rewrite(keys, entries, self.response_topics, topic_key)

        def rewrite(response: Any) -> Any:
            return response if response.error_code != ErrorCode.none else merge(response)

        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)


def authorize_group_offsets(
    request: Request,
    ctx: HandlerContext,
    partition_indexes: Callable[[Any], Iterable[int]],
    *,
    group_message: bool = False,
    **partition_values: Any,
) -> Verdict:
    """Batched offset reads (OffsetFetch v8+, DescribeShareGroupOffsets): per group DESCRIBE
    GROUP (a 30 group entry, with Kafka's message when ``group_message``), then DESCRIBE TOPIC
    per named topic (29 on each partition, with ``partition_values``). ``topics == null``
    asks for every offset: the broker's answer is filtered silently. Groups whose topics are
    all denied are still forwarded with an empty list, as Kafka still asks the coordinator;
    a group-level coordinator error is returned as the broker gave it."""
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
            code = ErrorCode.group_authorization_failed
            denied_groups.setdefault(g.group_id, []).append(
                entity(group_type, code, message=group_message, group_id=g.group_id)
            )
            changed = True
            continue
        if g.topics is None:
            fixes[g.group_id] = drop_denied_topics(ctx, request, AclOperation.DESCRIBE)
        elif g.topics:
            keys = [topic_key(t) for t in g.topics]
            denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
            if denied:
                entries = topic_entries(
                    topic_type,
                    "partitions",
                    g.topics,
                    denied,
                    partition_indexes,
                    **partition_values,
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
            fixes[g.group_id](g) if g.group_id in fixes and g.error_code == ErrorCode.none else g
            for g in response.groups
        )
        return merge_groups(codec.replace(response, groups=groups))

    new_body = codec.replace(body, groups=tuple(kept)) if changed else None
    return Forward(request=new_body, rewrite=rewrite)


# -- OffsetCommit ------------------------------------------------------------------------------


class OffsetCommitHandler(GroupGateHandler):
    """READ GROUP → ``OffsetCommitRequest.getErrorResponse(30)`` (every requested partition,
    whole); then READ TOPIC per topic (29 per partition of a denied topic). When no topic is
    left Kafka answers without the coordinator, and so does the proxy."""

    api_key = 8

    def group_denied(self, request: Request, body: Any) -> Any:
        schema = response_type(request)
        topic_type = codec.nested_type(schema, "topics")
        key_field = "name" if "name" in topic_type.__dataclass_fields__ else "topic_id"
        code = ErrorCode.group_authorization_failed
        topics = tuple(
            codec.make_entity(
                topic_type,
                ErrorCode.none,
                **{
                    key_field: topic_key(t),
                    "partitions": partition_errors(
                        topic_type, "partitions", _partition_indexes(t), code
                    ),
                },
            )
            for t in body.topics
        )
        return codec.make_entity(schema, topics=topics)

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        keys = [topic_key(t) for t in body.topics]
        denied = authorize_topics(ctx, request, AclOperation.READ, keys)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        entries = topic_entries(topic_type, "partitions", body.topics, denied, _partition_indexes)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        if not kept:
            return Respond(
                codec.make_entity(
                    response_type(request),
                    topics=tuple(e for k in dict.fromkeys(keys) for e in entries[k]),
                )
            )
        return Forward(
            request=codec.replace(body, topics=kept),
            rewrite=merge_rewrite(keys, entries, "topics", topic_key),
        )


# -- OffsetDelete ------------------------------------------------------------------------------


class OffsetDeleteHandler(GroupTopicsHandler):
    """DELETE GROUP → top-level 30; READ TOPIC per topic → 29 per partition. Kafka calls the
    coordinator even when no topic is authorized and a top-level coordinator error replaces the
    per-topic results (``OffsetDeleteResponse.Builder.merge``): so does the proxy."""

    api_key = 47
    group_operation = AclOperation.DELETE

    def denied_topics(
        self, request: Request, body: Any, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Any]]:
        topic_type = codec.nested_type(response_type(request), "topics")
        return topic_entries(topic_type, "partitions", body.topics, denied, _partition_indexes)


# -- OffsetFetch -------------------------------------------------------------------------------

_FIRST_BATCHED = 8
_UNKNOWN_OFFSET: dict[str, Any] = {"committed_offset": -1, "metadata": ""}
"""What Kafka's OffsetFetch puts on a partition it answers with an error."""


def _requested_indexes(entry: Any) -> Any:
    return entry.partition_indexes


class OffsetFetchHandler(ApiHandler):
    """Per group DESCRIBE GROUP (30: v8+ on the group entry, v2–7 top-level, v1 on every
    requested partition), then DESCRIBE TOPIC per topic (29 per partition, committed offset −1,
    leader epoch −1, metadata ""). ``topics == null`` asks for every offset: the broker's
    answer is filtered silently by DESCRIBE TOPIC (``fetchAllOffsetsForGroup``). Kafka asks the
    coordinator even when every named topic is denied, so the group is forwarded with an empty
    topic list; a group-level coordinator error is returned as the broker gave it."""

    api_key = 9
    decode_request = True

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        if request.header.api_version >= _FIRST_BATCHED:
            return authorize_group_offsets(request, ctx, _requested_indexes, **_UNKNOWN_OFFSET)
        return self._single(request, request.body, ctx)

    # v1–7: one group, top-level topics
    def _single(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        version = request.header.api_version
        topic_type = codec.nested_type(response_type(request), "topics")
        if not is_allowed(ctx, request, AclOperation.DESCRIBE, group(body.group_id)):
            code = ErrorCode.group_authorization_failed
            if version >= 2:
                return Respond(whole_error(request, code))
            denied_all = {topic_key(t): code for t in body.topics}
            entries = self._entries(topic_type, body.topics, denied_all)
            topics = tuple(e for k in dict.fromkeys(denied_all) for e in entries[k])
            return Respond(codec.make_entity(response_type(request), topics=topics))
        if body.topics is None:
            return Forward(rewrite=drop_denied_topics(ctx, request, AclOperation.DESCRIBE))
        keys = [topic_key(t) for t in body.topics]
        denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
        if not denied:
            return FORWARD
        entries = self._entries(topic_type, body.topics, denied)
        merge = merge_rewrite(keys, entries, "topics", topic_key)

        def rewrite(response: Any) -> Any:
            if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
                return response  # getErrorResponse(group error): top-level code, no topics
            return merge(response)

        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)

    @staticmethod
    def _entries(topic_type: type[Any], topics: Any, codes: dict[TopicKey, ErrorCode]) -> Any:
        return topic_entries(
            topic_type, "partitions", topics, codes, _requested_indexes, **_UNKNOWN_OFFSET
        )


HANDLERS: list[ApiHandler] = [OffsetCommitHandler(), OffsetFetchHandler(), OffsetDeleteHandler()]
