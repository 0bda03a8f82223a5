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
    BrokerMismatch,
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
    (:meth:`denied_topics`) in the response's ``response_topics``, the rest forwarded. A
    top-level coordinator error replaces the per-topic results
    (``OffsetDeleteResponse.Builder.merge``): the broker's answer is then returned as it is.

    When every topic is denied Kafka still calls the coordinator (whose group-level error, e.g.
    GROUP_ID_NOT_FOUND, would replace the per-topic 29s); the proxy answers by itself instead
    (fail closed): forwarding the emptied list to a broker that reads an empty list as "every
    topic" would act on topics nobody authorized."""

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
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        if not kept:
            empty: dict[str, Any] = {self.response_topics: ()}
            return Respond(merge(entity(response_type(request), **empty)))

        def rewrite(response: Any) -> Any:
            return response if response.error_code != ErrorCode.none else merge(response)

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
    asks for every offset: the broker's answer is filtered silently.

    Everything is kept per request *position*: a group id may appear more than once, each time
    with its own topics, and Kafka answers one group entry per request entry, in order
    (duplicates included). Every group entry the broker returns gets the filter of the request
    entry it answers; an answer whose groups do not line up with the forwarded ones raises
    :class:`BrokerMismatch` (the connection is closed). A group-level coordinator error is
    returned as the broker gave it, without topics (as Kafka builds it).

    A group whose named topics are all denied is answered by the proxy (every topic 29), where
    Kafka would still ask the coordinator (and could return a group-level error instead):
    forwarding the emptied list to a broker that reads it as "every topic" would leak (fail
    closed). A group sent with an empty list is forwarded as it is, and its answer reduced to
    the (no) topics it named."""
    body: Any = request.body
    schema = response_type(request)
    group_type = codec.nested_type(schema, "groups")
    topic_type = codec.nested_type(group_type, "topics")
    local: dict[int, Any] = {}
    """Request position → the group entry the proxy answers itself."""
    sent: list[Any] = []
    fixes: list[Callable[[Any], Any]] = []
    """One filter per forwarded group, in forwarding order."""
    changed = False
    needs_rewrite = False
    for position, g in enumerate(body.groups):
        if not is_allowed(ctx, request, AclOperation.DESCRIBE, group(g.group_id)):
            code = ErrorCode.group_authorization_failed
            local[position] = entity(group_type, code, message=group_message, group_id=g.group_id)
            continue
        if g.topics is None:
            fixes.append(drop_denied_topics(ctx, request, AclOperation.DESCRIBE))
            sent.append(g)
            needs_rewrite = True
            continue
        keys = [topic_key(t) for t in g.topics]
        denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys) if keys else {}
        entries = (
            topic_entries(
                topic_type, "partitions", g.topics, denied, partition_indexes, **partition_values
            )
            if denied
            else {}
        )
        merge = merge_rewrite(keys, entries, "topics", topic_key)
        if denied:
            kept = tuple(t for t in g.topics if topic_key(t) not in denied)
            if not kept:
                local[position] = merge(entity(group_type, group_id=g.group_id, topics=()))
                continue
            g = codec.replace(g, topics=kept)
            changed = True
        needs_rewrite = needs_rewrite or not keys
        fixes.append(merge)
        sent.append(g)
    count = len(body.groups)
    if not sent:
        return Respond(codec.make_entity(schema, groups=tuple(local[i] for i in range(count))))
    if not local and not changed and not needs_rewrite:
        return FORWARD
    expected = [g.group_id for g in sent]

    def rewrite(response: Any) -> Any:
        answered = [g.group_id for g in response.groups]
        if answered != expected:
            raise BrokerMismatch(
                f"api {request.header.api_key}: the broker answered groups {answered!r} "
                f"to a request for {expected!r}"
            )
        fixed = iter(
            fix(g)
            if g.error_code == ErrorCode.none
            else (codec.replace(g, topics=()) if g.topics else g)
            for g, fix in zip(response.groups, fixes, strict=True)
        )
        groups = tuple(local[i] if i in local else next(fixed) for i in range(count))
        return codec.replace(response, groups=groups)

    new_body = codec.replace(body, groups=tuple(sent)) if local or changed else None
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
    """DELETE GROUP → top-level 30; READ TOPIC per topic → 29 per partition. A top-level
    coordinator error replaces the per-topic results (``OffsetDeleteResponse.Builder.merge``).
    When no topic is authorized the proxy answers alone, where Kafka would still call the
    coordinator (see :class:`GroupTopicsHandler`)."""

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
    answer is filtered silently by DESCRIBE TOPIC (``fetchAllOffsetsForGroup``). When every
    named topic is denied the proxy answers alone (Kafka would still ask the coordinator, see
    :func:`authorize_group_offsets`); a group-level coordinator error is returned as the broker
    gave it."""

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
        denied = authorize_topics(ctx, request, AclOperation.DESCRIBE, keys) if keys else {}
        if not denied and keys:
            return FORWARD
        entries = self._entries(topic_type, body.topics, denied)
        merge = merge_rewrite(keys, entries, "topics", topic_key)

        def rewrite(response: Any) -> Any:
            if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
                return response  # getErrorResponse(group error): top-level code, no topics
            return merge(response)

        if not denied:  # an empty list, sent as it is: nothing but what it named comes back
            return Forward(rewrite=rewrite)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        if not kept:
            # Kafka still asks the coordinator (a group-level error would replace the 29s);
            # the proxy answers alone rather than forward an emptied list (fail closed).
            return Respond(merge(entity(response_type(request), topics=())))
        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)

    @staticmethod
    def _entries(topic_type: type[Any], topics: Any, codes: dict[TopicKey, ErrorCode]) -> Any:
        return topic_entries(
            topic_type, "partitions", topics, codes, _requested_indexes, **_UNKNOWN_OFFSET
        )


HANDLERS: list[ApiHandler] = [OffsetCommitHandler(), OffsetFetchHandler(), OffsetDeleteHandler()]
