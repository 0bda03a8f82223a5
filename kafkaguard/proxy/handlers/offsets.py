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

from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.authz import filter_authorized, group, is_allowed
from kafkaguard.proxy.handlers.base import (
    FORWARD,
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.groups import (
    GroupGateHandler,
    merge_rewrite,
    response_type,
    whole_error,
)

TopicKey = str | UUID


def topic_key(entry: Any) -> TopicKey:
    """A request/response topic's identity: its name, or its id in the id-keyed versions."""
    for field in ("name", "topic_name"):
        if hasattr(entry, field):
            return str(getattr(entry, field))
    topic_id: UUID = entry.topic_id
    return topic_id


def authorize_topics(
    ctx: HandlerContext,
    request: Request,
    operation: AclOperation,
    keys: Sequence[TopicKey],
) -> dict[TopicKey, ErrorCode]:
    """``filterByAuthorized`` over the topics named by ``keys``; returns the denied keys and
    their code: 29, or 100 for an id the proxy cannot name (checked before authorization, as
    the broker resolves ids first)."""
    names = {k: (k if isinstance(k, str) else ctx.topic_name(k)) for k in keys}
    allowed = filter_authorized(
        ctx,
        request,
        operation,
        ResourceType.TOPIC,
        [name for k in keys if (name := names[k]) is not None],
    )
    denied: dict[TopicKey, ErrorCode] = {}
    for key, name in names.items():
        if name is None:
            denied[key] = ErrorCode.unknown_topic_id
        elif name not in allowed:
            denied[key] = ErrorCode.topic_authorization_failed
    return denied


def topic_entries(
    topic_type: type[Any],
    partitions_field: str,
    topics: Iterable[Any],
    codes: dict[TopicKey, ErrorCode],
    partition_indexes: Callable[[Any], Iterable[int]],
    **partition_values: Any,
) -> dict[TopicKey, list[Any]]:
    """One response topic per denied key (the partitions of every request entry naming it,
    like Kafka's ``Response.Builder.addPartitions``), each partition carrying the key's code."""
    partition_type = codec.nested_type(topic_type, partitions_field)
    key_field = next(
        f for f in ("name", "topic_name", "topic_id") if f in topic_type.__dataclass_fields__
    )
    grouped: dict[TopicKey, list[int]] = {}
    for entry in topics:
        key = topic_key(entry)
        if key in codes:
            grouped.setdefault(key, []).extend(partition_indexes(entry))
    return {
        key: [
            codec.make_entity(
                topic_type,
                ErrorCode.none,
                **{
                    key_field: key,
                    partitions_field: tuple(
                        codec.make_entity(
                            partition_type, codes[key], partition_index=i, **partition_values
                        )
                        for i in indexes
                    ),
                },
            )
        ]
        for key, indexes in grouped.items()
    }


def _partition_indexes(entry: Any) -> list[int]:
    return [p.partition_index for p in entry.partitions]


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
        partition_type = codec.nested_type(topic_type, "partitions")
        code = ErrorCode.group_authorization_failed
        topics = tuple(
            codec.make_entity(
                topic_type,
                ErrorCode.none,
                **{
                    key_field: topic_key(t),
                    "partitions": tuple(
                        codec.make_entity(partition_type, code, partition_index=p.partition_index)
                        for p in t.partitions
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


class OffsetDeleteHandler(GroupGateHandler):
    """DELETE GROUP → top-level 30; READ TOPIC per topic → 29 per partition. Kafka calls the
    coordinator even when no topic is authorized and a top-level coordinator error replaces the
    per-topic results (``OffsetDeleteResponse.Builder.merge``): so does the proxy."""

    api_key = 47
    group_operation = AclOperation.DELETE

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        keys = [topic_key(t) for t in body.topics]
        denied = authorize_topics(ctx, request, AclOperation.READ, keys)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        entries = topic_entries(topic_type, "partitions", body.topics, denied, _partition_indexes)
        merge = merge_rewrite(keys, entries, "topics", topic_key)

        def rewrite(response: Any) -> Any:
            return response if response.error_code != ErrorCode.none else merge(response)

        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)


# -- OffsetFetch -------------------------------------------------------------------------------

_FIRST_BATCHED = 8


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
        body: Any = request.body
        if request.header.api_version >= _FIRST_BATCHED:
            return self._batched(request, body, ctx)
        return self._single(request, body, ctx)

    # v1–7: one group, top-level topics
    def _single(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        version = request.header.api_version
        if not is_allowed(ctx, request, AclOperation.DESCRIBE, group(body.group_id)):
            code = ErrorCode.group_authorization_failed
            if version >= 2:
                return Respond(whole_error(request, code))
            topic_type = codec.nested_type(response_type(request), "topics")
            denied_all = {topic_key(t): code for t in body.topics}
            entries = self._entries(topic_type, body.topics, denied_all)
            topics = tuple(e for k in dict.fromkeys(denied_all) for e in entries[k])
            return Respond(codec.make_entity(response_type(request), topics=topics))
        if body.topics is None:
            return Forward(rewrite=self._filter_all(request, ctx, "topics"))
        keys = [topic_key(t) for t in body.topics]
        denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        merge = merge_rewrite(
            keys, self._entries(topic_type, body.topics, denied), "topics", topic_key
        )

        def rewrite(response: Any) -> Any:
            if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
                return response  # getErrorResponse(group error): top-level code, no topics
            return merge(response)

        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)

    # v8+: batched groups
    def _batched(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict:
        schema = response_type(request)
        group_type = codec.nested_type(schema, "groups")
        topic_type = codec.nested_type(group_type, "topics")
        denied_groups: dict[str, list[Any]] = {}
        topic_merges: dict[str, Callable[[Any], Any]] = {}
        filter_all: dict[str, Callable[[Any], Any]] = {}
        kept_groups: list[Any] = []
        changed = False
        for g in body.groups:
            if not is_allowed(ctx, request, AclOperation.DESCRIBE, group(g.group_id)):
                denied_groups.setdefault(g.group_id, []).append(
                    codec.make_entity(
                        group_type, ErrorCode.group_authorization_failed, group_id=g.group_id
                    )
                )
                changed = True
                continue
            if g.topics is None:
                filter_all[g.group_id] = self._filter_all(request, ctx, "topics")
                kept_groups.append(g)
                continue
            keys = [topic_key(t) for t in g.topics]
            denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
            if denied:
                entries = self._entries(topic_type, g.topics, denied)
                topic_merges[g.group_id] = merge_rewrite(keys, entries, "topics", topic_key)
                kept = tuple(t for t in g.topics if topic_key(t) not in denied)
                g = codec.replace(g, topics=kept)
                changed = True
            kept_groups.append(g)
        group_ids = [g.group_id for g in body.groups]
        if not kept_groups:
            groups = tuple(e for k in dict.fromkeys(group_ids) for e in denied_groups[k])
            return Respond(codec.make_entity(schema, groups=groups))
        if not changed and not filter_all:
            return FORWARD
        merge_groups = merge_rewrite(group_ids, denied_groups, "groups", lambda e: e.group_id)

        def rewrite(response: Any) -> Any:
            groups = []
            for entry in response.groups:
                fix = topic_merges.get(entry.group_id) or filter_all.get(entry.group_id)
                if fix is not None and entry.error_code == ErrorCode.none:
                    entry = fix(entry)
                groups.append(entry)
            return merge_groups(codec.replace(response, groups=tuple(groups)))

        new_body = codec.replace(body, groups=tuple(kept_groups)) if changed else None
        return Forward(request=new_body, rewrite=rewrite)

    @staticmethod
    def _entries(topic_type: type[Any], topics: Any, codes: dict[TopicKey, ErrorCode]) -> Any:
        values: dict[str, Any] = {"committed_offset": -1, "metadata": ""}
        return topic_entries(
            topic_type, "partitions", topics, codes, lambda t: t.partition_indexes, **values
        )

    @staticmethod
    def _filter_all(request: Request, ctx: HandlerContext, field: str) -> Callable[[Any], Any]:
        """All-offsets form: keep only topics the principal may DESCRIBE (silently)."""

        def keep(holder: Any) -> Any:
            topics = getattr(holder, field)
            if not topics:
                return holder
            keys = [topic_key(t) for t in topics]
            denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys)
            if not denied:
                return holder
            return codec.replace(
                holder, **{field: tuple(t for t in topics if topic_key(t) not in denied)}
            )

        return keep


HANDLERS: list[ApiHandler] = [OffsetCommitHandler(), OffsetFetchHandler(), OffsetDeleteHandler()]
