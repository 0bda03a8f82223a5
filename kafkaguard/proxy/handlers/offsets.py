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

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import ClassVar, Protocol, TypedDict, TypeVar, cast
from uuid import UUID

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload, ResponsePayload
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
    ResponseRewrite,
    StepwiseHandler,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, PartitionIndexed
from kafkaguard.proxy.handlers.support.group_gate import GroupBody, GroupGateHandler
from kafkaguard.proxy.handlers.support.offset_merge import builder_merge, errors_last
from kafkaguard.proxy.handlers.support.questions import listed_topic_ids
from kafkaguard.proxy.handlers.support.responses import (
    BrokerMismatch,
    entity,
    merge_rewrite,
    partition_errors,
    partition_errors_from,
    response_type,
    split,
    topic_entries,
    whole_error,
)

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class _CommitTopic(Protocol):
    """A topic of ``OffsetCommitRequest`` or ``OffsetDeleteRequest``, named by ``name`` (by
    ``topic_id`` in OffsetCommit v10+), which :func:`~authz.topic_key` tells apart."""

    @property
    def partitions(self) -> Sequence[PartitionIndexed]: ...


class _CommitBody(GroupBody, Protocol):
    """What OffsetCommit and OffsetDelete read (kio's, any version)."""

    @property
    def topics(self) -> Sequence[_CommitTopic]: ...


class TopicsBody(GroupBody, Protocol):
    """A one-group request with a topic list (:class:`GroupTopicsHandler`), whose entries are
    read only through :func:`~authz.topic_key`."""

    @property
    def topics(self) -> Sequence[object]: ...


_TB = TypeVar("_TB", bound=TopicsBody)


class _CodedResponse(ErrorCoded, Entity, Protocol):
    """A response with a top-level error code (a coordinator error replaces the topics)."""


_CR = TypeVar("_CR", bound=_CodedResponse)


class _FetchTopic(Protocol):
    """``OffsetFetchRequest``'s topic (named by ``name``, by ``topic_id`` in v10+)."""

    @property
    def partition_indexes(self) -> Sequence[int]: ...


class _FetchGroup(Entity, Protocol):
    """``OffsetFetchRequest.OffsetFetchRequestGroup`` (v8+)."""

    @property
    def group_id(self) -> str: ...

    @property
    def topics(self) -> Sequence[_FetchTopic] | None: ...


class _OffsetFetchBody(Entity, Protocol):
    """What the handler reads of an ``OffsetFetchRequest``: ``group_id`` and ``topics`` in
    v1–7 (``topics`` null from v2: every offset), ``groups`` from v8, each read only there."""

    @property
    def group_id(self) -> str: ...

    @property
    def topics(self) -> Sequence[_FetchTopic] | None: ...

    @property
    def groups(self) -> Sequence[_FetchGroup]: ...


class OffsetsGroup(Entity, Protocol[_T_co]):
    """A group of a batched offset read (OffsetFetch v8+, DescribeShareGroupOffsets), its
    topics of the API's own shape."""

    @property
    def group_id(self) -> str: ...

    @property
    def topics(self) -> Sequence[_T_co] | None: ...


class OffsetsBody(Entity, Protocol[_T_co]):
    @property
    def groups(self) -> Sequence[OffsetsGroup[_T_co]]: ...


class _GroupAnswer(ErrorCoded, Entity, Protocol):
    @property
    def group_id(self) -> str: ...

    @property
    def topics(self) -> Sequence[Entity]: ...


class _GroupsResponse(Entity, Protocol):
    """The answer to a batched offset read."""

    @property
    def groups(self) -> Sequence[_GroupAnswer]: ...


_GR = TypeVar("_GR", bound=_GroupsResponse)


def _partition_indexes(entry: _CommitTopic) -> list[int]:
    return [p.partition_index for p in entry.partitions]


def topics_checked(
    ctx: HandlerContext, operation: AclOperation, topics: Iterable[object]
) -> Generator[Sequence[Action], Sequence[AuthorizationResult], dict[TopicKey, ErrorCode]]:
    """``operation`` on every request topic of ``topics`` (``filterByAuthorized``, one
    reference per entry; an id the proxy cannot name gets no action), as one step: the denied
    keys, 29, or 100 for an id the proxy cannot name. No topic: no step, nothing denied."""
    keys = [topic_key(t) for t in topics]
    if not keys:
        return {}
    checks = TopicChecks(ctx, operation, keys)
    return checks.denied((yield checks.actions))


class GroupTopicsHandler(GroupGateHandler[_TB]):
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
        self, request: Request[_TB], body: _TB, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Entity]]:
        raise NotImplementedError

    def after_group(self, request: Request[_TB], body: _TB, ctx: HandlerContext) -> Checks:
        denied = yield from topics_checked(ctx, AclOperation.READ, body.topics)
        if not denied:
            return FORWARD
        entries = self.denied_topics(request, body, denied)
        keys = [topic_key(t) for t in body.topics]
        merge = merge_rewrite(keys, entries, self.response_topics, topic_key)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)

        def rewrite(response: _CR) -> _CR | ResponsePayload:
            return response if response.error_code != ErrorCode.none else merge(response)

        # The proxy's own answer has no top-level error, so ``rewrite`` merges it.
        return split(request, "topics", kept, self.response_topics, rewrite)


def authorize_group_offsets(  # noqa: C901 - KafkaApis' per-group, per-topic checks in Kafka's order
    request: Request[OffsetsBody[_T]],
    ctx: HandlerContext,
    partition_indexes: Callable[[_T], Iterable[int]],
    *,
    group_message: bool = False,
    fetch_order: bool = False,
    **partition_values: object,
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
    body = request.body
    schema = response_type(request)
    group_type = codec.nested_type(schema, "groups")
    topic_type = codec.nested_type(group_type, "topics")
    local: dict[int, Entity] = {}
    """Request position → the group entry the proxy answers itself."""
    sent: list[OffsetsGroup[_T]] = []
    fixes: list[ResponseRewrite] = []
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
        topics: Sequence[_T] = g.topics
        keys = [topic_key(t) for t in topics]
        denied = yield from topics_checked(ctx, AclOperation.DESCRIBE, topics)
        if fetch_order:
            errors = {
                i: _error_topic(topic_type, t, denied[key], partition_indexes, partition_values)
                for i, t in enumerate(topics)
                if (key := topic_key(t)) in denied
            }
            fixes.append(errors_last(topics, errors, [k for k in keys if k not in denied]))
            if denied:
                kept = tuple(t for t in topics if topic_key(t) not in denied)
                g = codec.replace(g, topics=kept)
                changed = True
            needs_rewrite = needs_rewrite or bool(denied) or not keys
            sent.append(g)
            continue
        entries = (
            topic_entries(
                topic_type, "partitions", topics, denied, partition_indexes, **partition_values
            )
            if denied
            else {}
        )
        merge = merge_rewrite(keys, entries, "topics", topic_key)
        if denied:
            kept = tuple(t for t in topics if topic_key(t) not in denied)
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

    def rewrite(response: _GR) -> _GR:
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
    # the client's schema, rebuilt
    return Forward(request=cast("RequestPayload | None", new_body), rewrite=rewrite)


def _error_topic(
    topic_type: type[Entity],
    request_topic: _T,
    code: ErrorCode,
    partition_indexes: Callable[[_T], Iterable[int]],
    partition_values: Mapping[str, object],
) -> Entity:
    """``buildErrorResponse(topic, error)`` of ``fetchOffsetsForGroup``: one entry per request
    topic, the code on each of its partitions."""
    key_field = next(f for f in ("name", "topic_id") if f in topic_type.__dataclass_fields__)
    partitions = partition_errors_from(
        topic_type,
        "partitions",
        partition_indexes(request_topic),
        code,
        "partition_index",
        partition_values,
    )
    return codec.make_entity(
        topic_type,
        ErrorCode.none,
        **{key_field: topic_key(request_topic), "partitions": partitions},
    )


# -- OffsetCommit ------------------------------------------------------------------------------


class OffsetCommitHandler(GroupGateHandler[_CommitBody]):
    """READ GROUP → ``OffsetCommitRequest.getErrorResponse(30)`` (every requested partition,
    whole); then READ TOPIC per topic (29 per partition of a denied topic). When no topic is
    left Kafka answers without the coordinator, and so does the proxy."""

    api_key = 8

    def topic_ids(self, request: Request[_CommitBody]) -> Iterable[UUID]:
        return listed_topic_ids(request.body, "topics")

    def group_denied(self, request: Request[_CommitBody], body: _CommitBody) -> ResponsePayload:
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

    def after_group(
        self, request: Request[_CommitBody], body: _CommitBody, ctx: HandlerContext
    ) -> Checks:
        denied = yield from topics_checked(ctx, AclOperation.READ, body.topics)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        merge = builder_merge(topic_type, body.topics, denied, _partition_indexes)
        kept = tuple(t for t in body.topics if topic_key(t) not in denied)
        return split(request, "topics", kept, "topics", merge)


# -- OffsetDelete ------------------------------------------------------------------------------


class OffsetDeleteHandler(GroupGateHandler[_CommitBody]):
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

    def after_group(
        self, request: Request[_CommitBody], body: _CommitBody, ctx: HandlerContext
    ) -> Checks:
        denied = yield from topics_checked(ctx, AclOperation.READ, body.topics)
        if not denied:
            return FORWARD
        topic_type = codec.nested_type(response_type(request), "topics")
        merge = builder_merge(topic_type, body.topics, denied, _partition_indexes)
        kept: tuple[object, ...] = tuple(t for t in body.topics if topic_key(t) not in denied)
        if not kept:
            probe_type = codec.nested_type(type(body), "topics")
            kept = (probe_type(name="", partitions=()),)

        def rewrite(response: _CR) -> _CR | ResponsePayload:
            return response if response.error_code != ErrorCode.none else merge(response)

        upstream = cast(RequestPayload, codec.replace(body, topics=kept))  # the client's schema
        return Forward(request=upstream, rewrite=rewrite)


# -- OffsetFetch -------------------------------------------------------------------------------

_FIRST_BATCHED = 8


class _UnknownOffset(TypedDict):
    committed_offset: int
    metadata: str


_UNKNOWN_OFFSET: _UnknownOffset = {"committed_offset": -1, "metadata": ""}
"""What Kafka's OffsetFetch puts on a partition it answers with an error."""


def _requested_indexes(entry: _FetchTopic) -> Sequence[int]:
    return entry.partition_indexes


class OffsetFetchHandler(StepwiseHandler[_OffsetFetchBody]):
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

    def topic_ids(self, request: Request[_OffsetFetchBody]) -> Iterable[UUID]:
        return listed_topic_ids(request.body, "groups", "topics")

    def checks(self, request: Request[_OffsetFetchBody], ctx: HandlerContext) -> Checks:
        if request.header.api_version >= _FIRST_BATCHED:
            return authorize_group_offsets(
                request, ctx, _requested_indexes, fetch_order=True, **_UNKNOWN_OFFSET
            )
        return self._single(request, request.body, ctx)

    # v1–7: one group, top-level topics
    def _single(
        self, request: Request[_OffsetFetchBody], body: _OffsetFetchBody, ctx: HandlerContext
    ) -> Checks:
        version = request.header.api_version
        topic_type = codec.nested_type(response_type(request), "topics")
        (allowed,) = yield group_checks(AclOperation.DESCRIBE, (body.group_id,))
        if allowed is not AuthorizationResult.ALLOWED:
            code = ErrorCode.group_authorization_failed
            if version >= 2:
                return Respond(whole_error(request, code))
            # v1: ``topics`` is not nullable before v2, so ``or ()`` never applies
            answered = tuple(
                _error_topic(topic_type, t, code, _requested_indexes, _UNKNOWN_OFFSET)
                for t in body.topics or ()
            )
            return Respond(codec.make_entity(response_type(request), topics=answered))
        if body.topics is None:
            return Forward(rewrite=drop_denied_topics(ctx, request, AclOperation.DESCRIBE))
        topics: Sequence[_FetchTopic] = body.topics
        keys = [topic_key(t) for t in topics]
        denied = yield from topics_checked(ctx, AclOperation.DESCRIBE, topics)
        if not denied and keys:
            return FORWARD
        errors = {
            i: _error_topic(topic_type, t, denied[key], _requested_indexes, _UNKNOWN_OFFSET)
            for i, t in enumerate(topics)
            if (key := topic_key(t)) in denied
        }
        merge = errors_last(topics, errors, [k for k in keys if k not in denied])

        def rewrite(response: ResponsePayload) -> ResponsePayload:
            if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
                return response  # getErrorResponse(group error): top-level code, no topics
            return merge(response)

        # Denied topics leave the request; when none is left the emptied list is still sent
        # (Kafka asks the coordinator too, whose group-level error replaces the 29s). Only
        # topics that were sent come back from the broker's answer.
        kept = tuple(t for t in topics if topic_key(t) not in denied)
        upstream = codec.replace(body, topics=kept) if denied else None
        return Forward(request=cast("RequestPayload | None", upstream), rewrite=rewrite)


HANDLERS: list[ApiHandler] = [OffsetCommitHandler(), OffsetFetchHandler(), OffsetDeleteHandler()]
