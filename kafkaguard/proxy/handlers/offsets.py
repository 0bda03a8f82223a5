"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47).

The group check always comes first (a principal without group access learns nothing about
topics), then the topics, as in ``KafkaApis.handleOffsetCommitRequest``,
``handleOffsetFetchRequest`` (``fetchOffsetsForGroup`` / ``fetchAllOffsetsForGroup``) and
``handleOffsetDeleteRequest``.

Topic ids (OffsetCommit/OffsetFetch v10) are resolved from the proxy's id cache, ids it has not
seen by asking the broker first (``questions.py``); an id the broker does not know either is
UNKNOWN_TOPIC_ID (100) and never forwarded. In an all-topics OffsetFetch v10 answer, a
topic id the proxy cannot name cannot be authorized and is dropped (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, ClassVar
from uuid import UUID

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.support.authz import (
    TopicChecks,
    TopicKey,
    drop_denied_topics,
    group_checks,
    topic_key,
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
)
from kafkaguard.proxy.handlers.support.group_gate import GroupGateHandler
from kafkaguard.proxy.handlers.support.offset_merge import builder_merge, errors_last
from kafkaguard.proxy.handlers.support.questions import listed_topic_ids
from kafkaguard.proxy.handlers.support.responses import (
    BrokerMismatch,
    entity,
    merge_rewrite,
    partition_errors,
    response_type,
    split,
    topic_entries,
    whole_error,
)


def _partition_indexes(entry: Any) -> list[int]:
    return [p.partition_index for p in entry.partitions]


def topics_checked(
    ctx: HandlerContext, operation: AclOperation, topics: Iterable[Any]
) -> Generator[Sequence[Action], Sequence[AuthorizationResult], dict[TopicKey, ErrorCode]]:
    """``operation`` on every request topic of ``topics`` (``filterByAuthorized``, one
    reference per entry; an id the proxy cannot name gets no action), as one step: the denied
    keys, 29, or 100 for an id the proxy cannot name. No topic: no step, nothing denied."""
    keys = [topic_key(t) for t in topics]
    if not keys:
        return {}
    checks = TopicChecks(ctx, operation, keys)
    return checks.denied((yield checks.actions))


class GroupTopicsHandler(GroupGateHandler):
    """The group gate, then READ TOPIC per topic; denied topics are answered by the proxy
    (:meth:`denied_topics`) in the response's ``response_topics``, the rest forwarded. A
    top-level coordinator error replaces the per-topic results
    (``OffsetDeleteResponse.Builder.merge``): the broker's answer is then returned as it is.

    When every topic is denied Kafka still calls the coordinator (whose group-level error, e.g.
    GROUP_ID_NOT_FOUND, would replace the per-topic 29s); this base answers by itself instead
    (fail closed): forwarding the emptied list to a broker that reads an empty list as "every
    topic" would act on topics nobody authorized. The share-group offset APIs use it;
    OffsetDelete asks the coordinator with a probe instead (:class:`OffsetDeleteHandler`)."""

    response_topics: ClassVar[str] = "topics"

    def denied_topics(
        self, request: Request, body: Any, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Any]]:
        raise NotImplementedError

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Checks:
        denied = yield from topics_checked(ctx, AclOperation.READ, body.topics)
        if not denied:
            return FORWARD
        entries = self.denied_topics(request, body, denied)
        keys = [topic_key(t) for t in body.topics]
        merge = merge_rewrite(keys, entries, self.response_topics, topic_key)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)

        def rewrite(response: Any) -> Any:
            return response if response.error_code != ErrorCode.none else merge(response)

        # The proxy's own answer has no top-level error, so ``rewrite`` merges it.
        return split(request, "topics", kept, self.response_topics, rewrite)


def authorize_group_offsets(  # noqa: C901 - KafkaApis' per-group, per-topic checks in Kafka's order
    request: Request,
    ctx: HandlerContext,
    partition_indexes: Callable[[Any], Iterable[int]],
    *,
    group_message: bool = False,
    fetch_order: bool = False,
    **partition_values: Any,
) -> Checks:
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

    Without ``fetch_order``, a group whose named topics are all denied is answered by the proxy
    (every topic 29), where Kafka would still ask the coordinator (and could return a
    group-level error instead), and the denied entries take their request positions.

    With ``fetch_order`` (OffsetFetch, as ``fetchOffsetsForGroup``): one 29 entry per denied
    request topic, after the coordinator's topics (:func:`~offset_merge.errors_last`); a group
    whose topics are all denied is still forwarded, with an empty list, so a group-level error
    of the coordinator replaces the 29s as in Kafka. An empty list asks for no topic (only
    ``null`` means all, ``OffsetFetchRequest.requestAllOffsets``), and whatever the broker
    answers for it is dropped all the same: only topics that were sent get through.
    A group sent with an empty list is forwarded as it is, and its answer reduced to the (no)
    topics it named.

    The checks are made group after group, each group's topics only once the group is allowed,
    as Kafka makes them: each is a step yielded to the dispatcher (``base.Checks``)."""
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
        (allowed,) = yield group_checks(AclOperation.DESCRIBE, (g.group_id,))
        if allowed is not AuthorizationResult.ALLOWED:
            code = ErrorCode.group_authorization_failed
            local[position] = entity(group_type, code, message=group_message, group_id=g.group_id)
            continue
        if g.topics is None:
            fixes.append(drop_denied_topics(ctx, request, AclOperation.DESCRIBE))
            sent.append(g)
            needs_rewrite = True
            continue
        keys = [topic_key(t) for t in g.topics]
        denied = yield from topics_checked(ctx, AclOperation.DESCRIBE, g.topics)
        if fetch_order:
            errors = {
                i: _error_topic(topic_type, t, denied[key], partition_indexes, partition_values)
                for i, t in enumerate(g.topics)
                if (key := topic_key(t)) in denied
            }
            fixes.append(errors_last(g.topics, errors, [k for k in keys if k not in denied]))
            if denied:
                kept = tuple(t for t in g.topics if topic_key(t) not in denied)
                g = codec.replace(g, topics=kept)
                changed = True
            needs_rewrite = needs_rewrite or bool(denied) or not keys
            sent.append(g)
            continue
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


def _error_topic(
    topic_type: type[Any],
    request_topic: Any,
    code: ErrorCode,
    partition_indexes: Callable[[Any], Iterable[int]],
    partition_values: dict[str, Any],
) -> Any:
    """``buildErrorResponse(topic, error)`` of ``fetchOffsetsForGroup``: one entry per request
    topic, the code on each of its partitions."""
    key_field = next(f for f in ("name", "topic_id") if f in topic_type.__dataclass_fields__)
    partitions = partition_errors(
        topic_type, "partitions", partition_indexes(request_topic), code, **partition_values
    )
    return codec.make_entity(
        topic_type,
        ErrorCode.none,
        **{key_field: topic_key(request_topic), "partitions": partitions},
    )


# -- OffsetCommit ------------------------------------------------------------------------------


class OffsetCommitHandler(GroupGateHandler):
    """READ GROUP → ``OffsetCommitRequest.getErrorResponse(30)`` (every requested partition,
    whole); then READ TOPIC per topic (29 per partition of a denied topic). When no topic is
    left Kafka answers without the coordinator, and so does the proxy."""

    api_key = 8

    def topic_ids(self, request: Request) -> Iterable[UUID]:
        return listed_topic_ids(request.body, "topics")

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

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Checks:
        denied = yield from topics_checked(ctx, AclOperation.READ, body.topics)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        merge = builder_merge(topic_type, body.topics, denied, _partition_indexes)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return split(request, "topics", kept, "topics", merge)


# -- OffsetDelete ------------------------------------------------------------------------------


class OffsetDeleteHandler(GroupGateHandler):
    """``handleOffsetDeleteRequest``: DELETE GROUP → top-level 30; READ TOPIC per topic → 29
    per partition, in the response builder's order (:func:`~offset_merge.builder_merge`). A
    top-level coordinator error replaces the per-topic results
    (``OffsetDeleteResponse.Builder.merge``): the broker's answer is then returned as it is.

    Kafka calls the coordinator even when no topic is authorized, so a group-level error
    (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, …) replaces the 29s. The proxy does the same with a
    *probe*: the request with one topic named "" and no partitions. Kafka answers "" locally
    (no such topic can exist) and asks the coordinator about no partition at all; a broker that
    took the name literally would delete offsets of no partition of a topic that cannot exist,
    and one that read an empty list as "every topic" never sees an empty list (fail closed)."""

    api_key = 47
    group_operation = AclOperation.DELETE

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Checks:
        denied = yield from topics_checked(ctx, AclOperation.READ, body.topics)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        merge = builder_merge(topic_type, body.topics, denied, _partition_indexes)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        if not kept:
            probe_type = codec.nested_type(type(body), "topics")
            kept = (probe_type(name="", partitions=()),)

        def rewrite(response: Any) -> Any:
            return response if response.error_code != ErrorCode.none else merge(response)

        return Forward(request=codec.replace(body, topics=kept), rewrite=rewrite)


# -- OffsetFetch -------------------------------------------------------------------------------

_FIRST_BATCHED = 8
_UNKNOWN_OFFSET: dict[str, Any] = {"committed_offset": -1, "metadata": ""}
"""What Kafka's OffsetFetch puts on a partition it answers with an error."""


def _requested_indexes(entry: Any) -> Any:
    return entry.partition_indexes


class OffsetFetchHandler(StepwiseHandler):
    """Per group DESCRIBE GROUP (30: v8+ on the group entry, v2–7 top-level, v1 on every
    requested partition), then DESCRIBE TOPIC per topic (29 per partition, committed offset −1,
    leader epoch −1, metadata ""). ``topics == null`` asks for every offset: the broker's
    answer is filtered silently by DESCRIBE TOPIC (``fetchAllOffsetsForGroup``). Denied topics
    come after the coordinator's, one entry per request topic (``fetchOffsetsForGroup``); when
    every named topic is denied the emptied list is still sent, as Kafka still asks the
    coordinator (see :func:`authorize_group_offsets`), and a group-level coordinator error is
    returned as the broker gave it."""

    api_key = 9
    decode_request = True

    def topic_ids(self, request: Request) -> Iterable[UUID]:
        return listed_topic_ids(request.body, "groups", "topics")

    def checks(self, request: Request, ctx: HandlerContext) -> Checks:
        if request.header.api_version >= _FIRST_BATCHED:
            return authorize_group_offsets(
                request, ctx, _requested_indexes, fetch_order=True, **_UNKNOWN_OFFSET
            )
        return self._single(request, request.body, ctx)

    # v1–7: one group, top-level topics
    def _single(self, request: Request, body: Any, ctx: HandlerContext) -> Checks:
        version = request.header.api_version
        topic_type = codec.nested_type(response_type(request), "topics")
        (allowed,) = yield group_checks(AclOperation.DESCRIBE, (body.group_id,))
        if allowed is not AuthorizationResult.ALLOWED:
            code = ErrorCode.group_authorization_failed
            if version >= 2:
                return Respond(whole_error(request, code))
            topics = tuple(
                _error_topic(topic_type, t, code, _requested_indexes, _UNKNOWN_OFFSET)
                for t in body.topics
            )
            return Respond(codec.make_entity(response_type(request), topics=topics))
        if body.topics is None:
            return Forward(rewrite=drop_denied_topics(ctx, request, AclOperation.DESCRIBE))
        keys = [topic_key(t) for t in body.topics]
        denied = yield from topics_checked(ctx, AclOperation.DESCRIBE, body.topics)
        if not denied and keys:
            return FORWARD
        errors = {
            i: _error_topic(topic_type, t, denied[key], _requested_indexes, _UNKNOWN_OFFSET)
            for i, t in enumerate(body.topics)
            if (key := topic_key(t)) in denied
        }
        merge = errors_last(body.topics, errors, [k for k in keys if k not in denied])

        def rewrite(response: Any) -> Any:
            if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
                return response  # getErrorResponse(group error): top-level code, no topics
            return merge(response)

        # Denied topics leave the request; when none is left the emptied list is still sent
        # (Kafka asks the coordinator too, whose group-level error replaces the 29s). Only
        # topics that were sent come back from the broker's answer.
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return Forward(
            request=codec.replace(body, topics=kept) if denied else None, rewrite=rewrite
        )


HANDLERS: list[ApiHandler] = [OffsetCommitHandler(), OffsetFetchHandler(), OffsetDeleteHandler()]
