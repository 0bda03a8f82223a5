"""Metadata (3) and DescribeTopicPartitions (75): which topics a principal may see.

Metadata follows ``KafkaApis.handleTopicMetadataRequest``:

* **All topics** (``topics`` null; v0 with an empty list): forwarded as sent; the response keeps
  only topics the principal may DESCRIBE (checked with ``logIfDenied=false``).
* **By name**: DESCRIBE per distinct name (``logIfDenied=true``). Denied names never reach the
  broker and are answered (29, name, zero id, isInternal=false) — existence never checked.
* **By id** (v12+, any non-zero id: names are then ignored, as in Kafka): the ids are sent
  upstream (ids are "not sensitive"), the broker resolves them, and each resolved topic the
  principal may not DESCRIBE becomes (29, name null, the id); unknown ids stay 100.
* **Auto-creation** — Kafka checks CREATE CLUSTER (``logIfDenied=false``) then CREATE TOPIC per
  describable topic that does not exist. With CREATE on the cluster, or on every describable
  name, the request goes up as sent. Otherwise the names lacking CREATE go up with
  ``allow_auto_topic_creation=false`` and each one the broker reports missing (3, or 17 for an
  invalid name) becomes Kafka's (29, name, zero id, isInternal(name)); existing ones are
  described. When the request also names topics the principal may create — or is v0–3, which
  cannot switch creation off — the names lacking CREATE are asked about in a question of their
  own first (``questions.py``; v4 for v0–3) and the rest forwarded with creation as sent, so exactly
  the creatable names are created. The CREATE checks also run for names that exist (the
  per-topic ones with ``logIfDenied=false`` so existing topics produce no "Denied" audit
  lines). A broker without Metadata v4 cannot be asked: on v0–3 names lacking CREATE are then
  answered 29 without being forwarded.
* KIP-430 (v8+): ``topic_authorized_operations`` for every topic the broker described (not for
  29/100 entries) and v8–10 ``cluster_authorized_operations`` (0 without DESCRIBE CLUSTER) when
  requested; the "not requested" sentinel otherwise, whatever the broker sent.
* Always: broker addresses rewritten, topic id ↔ name pairs learned for Fetch/Produce v13+.

When the proxy synthesizes no topic entry (by name, every name describable, none held back
from auto-creation; or all topics), the broker's answer is not decoded: it is walked by
lengths and rebuilt from its own bytes, the brokers' addresses and the KIP-430 fields
replaced (``protocol/skim/metadata.py``), the topics chosen by the same code as the decoded
path's. A frame the walk does not take on is decoded and rewritten whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload, ResponsePayload
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.inflight import ResponseTransform
from kafkaguard.protocol.skim.metadata import (
    NOT_REQUESTED,
    MetadataRequestSkim,
    skim_metadata_request,
    walk_metadata_response,
)
from kafkaguard.proxy.handlers.support.addresses import (
    NodeAddress,
    decoded_transform,
    rewrite_metadata_brokers,
)
from kafkaguard.proxy.handlers.support.authz import (
    CLUSTER,
    INTERNAL_TOPICS,
    filter_authorized,
    first_seen,
    is_allowed,
    topic,
)
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    AskFirst,
    Forward,
    HandlerContext,
    Request,
    Respond,
    ResponseRewrite,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, Named, PartitionIndexed
from kafkaguard.proxy.handlers.support.responses import convert, entity, merge_in_request_order

ZERO_UUID = uuid.UUID(int=0)
_MISSING = (ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception)
_DENIED = ErrorCode.topic_authorization_failed


class _Named(Protocol):
    @property
    def name(self) -> str | None: ...


class _RequestTopic(Protocol):
    """``MetadataRequestTopic``: ``topic_id`` from v10, read only where an id may be."""

    @property
    def name(self) -> str | None: ...
    @property
    def topic_id(self) -> uuid.UUID | None: ...


class MetadataBody(Entity, Protocol):
    """What the handler reads of a ``MetadataRequest`` (kio's, any version): the flags from
    the versions that have them (v4, v8, v8–10), read only there."""

    @property
    def topics(self) -> Sequence[_RequestTopic] | None: ...
    @property
    def allow_auto_topic_creation(self) -> bool: ...
    @property
    def include_topic_authorized_operations(self) -> bool: ...
    @property
    def include_cluster_authorized_operations(self) -> bool: ...


class _ResponseTopic(ErrorCoded, Entity, Protocol):
    """A topic of a ``MetadataResponse`` or ``DescribeTopicPartitionsResponse``: ``topic_id``
    (Metadata v10+) and the KIP-430 field (v8+) read where the version has them."""

    @property
    def name(self) -> str | None: ...
    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def topic_authorized_operations(self) -> int: ...


class _MetadataResponse(Entity, Protocol):
    @property
    def topics(self) -> Sequence[_ResponseTopic]: ...
    @property
    def brokers(self) -> Sequence[NodeAddress]: ...
    @property
    def cluster_authorized_operations(self) -> int: ...


class _Cursor(PartitionIndexed, Entity, Protocol):
    """``DescribeTopicPartitions``' ``Cursor``."""

    @property
    def topic_name(self) -> str: ...


class DescribeTopicPartitionsBody(Entity, Protocol):
    @property
    def topics(self) -> Sequence[Named]: ...
    @property
    def cursor(self) -> _Cursor | None: ...


class _DescribeResponse(Entity, Protocol):
    @property
    def topics(self) -> Sequence[_ResponseTopic]: ...
    @property
    def next_cursor(self) -> _Cursor | None: ...


_N = TypeVar("_N", bound=_Named)
_MR = TypeVar("_MR", bound=_MetadataResponse)
_DR = TypeVar("_DR", bound=_DescribeResponse)


def _topic_error(
    topic_type: type[_ResponseTopic],
    code: ErrorCode,
    name: str | None,
    topic_id: uuid.UUID = ZERO_UUID,
    *,
    is_internal: bool = False,
) -> _ResponseTopic:
    """A topic entry that carries only an error, for any version (no id or ``isInternal``
    before the version has them)."""
    return entity(
        topic_type, code, name=name, topic_id=topic_id, is_internal=is_internal, partitions=()
    )


def _describable(
    ctx: HandlerContext, request: Request, topics: Sequence[_N], *, log_if_denied: bool = True
) -> list[_N]:
    """The entries of ``topics`` the principal may DESCRIBE (listing everything)."""
    visible = filter_authorized(
        ctx,
        request,
        AclOperation.DESCRIBE,
        ResourceType.TOPIC,
        [t.name for t in topics if t.name],
        log_if_denied=log_if_denied,
    )
    return [t for t in topics if t.name in visible]


def learn_topic_ids(ctx: HandlerContext, topics: Sequence[_Named]) -> None:
    """Feed the id → name cache from a response's topic entries (non-zero ids only; decoded,
    or the skim's :class:`~kafkaguard.protocol.skim.metadata.TopicEntry`)."""
    pairs = [
        (topic_id, t.name)
        for t in topics
        if (topic_id := getattr(t, "topic_id", None)) is not None and topic_id.int and t.name
    ]
    if pairs:
        ctx.learn_topic_names(pairs)


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


@dataclass(slots=True)
class _Plan:
    """What the response rewrite must do for one Metadata request."""

    all_topics: bool = False
    by_id: bool = False
    request_keys: list[Hashable] = field(default_factory=list)
    """Topic names (or ids) in request order; merge order of the response."""
    denied: dict[Hashable, list[_ResponseTopic]] = field(default_factory=dict)
    """Entries synthesized before forwarding (DESCRIBE / CREATE denied)."""
    no_create: frozenset[str] = frozenset()
    """Names lacking CREATE sent up with auto-creation off: missing ones become 29."""
    forwarded: frozenset[str] = frozenset()
    """Names sent upstream: the only broker entries a by-name answer may contain."""
    asked: tuple[_ResponseTopic, ...] = ()
    """Entries of the ``no_create`` names, from the proxy's question to the broker."""

    @property
    def skimmed(self) -> bool:
        """The answer needs no entry of the proxy's own: the skim's splice makes it."""
        return not (self.by_id or self.denied or self.no_create or self.asked)


def _cluster_ops(ctx: HandlerContext, request: Request, wanted: bool) -> int:
    """v8–10 ``cluster_authorized_operations``: 0 without DESCRIBE CLUSTER."""
    if not wanted:
        return NOT_REQUESTED
    if not is_allowed(ctx, request, AclOperation.DESCRIBE, CLUSTER):
        return 0
    return ctx.authorized_operations(request, CLUSTER)


def _topic_ops(ctx: HandlerContext, request: Request, wanted: bool, name: str | None) -> int:
    """``topic_authorized_operations`` of a described topic (v8+)."""
    if not wanted or name is None:
        return NOT_REQUESTED
    return ctx.authorized_operations(request, topic(name))


def _wanted(request: Request[MetadataBody]) -> tuple[bool, bool]:
    """Whether the request asks for the KIP-430 topic and cluster operations."""
    body = request.body
    version = request.header.api_version
    return (
        version >= 8 and bool(body.include_topic_authorized_operations),
        8 <= version <= 10 and bool(body.include_cluster_authorized_operations),
    )


def _name(entry: _Named) -> Hashable:
    return entry.name


def _asked_for(plan: _Plan, topics: Sequence[_N]) -> list[_N]:
    """The broker's entries of the names sent upstream: a broker may read an empty list as
    "all topics" (Tansu does, even on v1+), and nothing unrequested may reach the client."""
    forwarded = plan.forwarded
    return [t for t in topics if t.name in forwarded]


def _kio_body(request: Request[MetadataBody]) -> MetadataBody:
    """kio's decode of the request, for the paths that send a changed request upstream
    (``codec.replace`` rebuilds a kio entity; the skim is read only)."""
    body = request.body
    if isinstance(body, MetadataRequestSkim):
        decoded = codec.decode_request(request.frame, 3, request.header.api_version)
        return cast(MetadataBody, decoded)
    return body


class MetadataHandler(ApiHandler[MetadataBody]):
    api_key = 3

    def read_request(self, header: RequestHeaderInfo, frame: Frame) -> MetadataBody:
        """The skim of the request (``protocol/skim/metadata.py``), or kio's decode of a frame
        the skim does not take on."""
        skim = skim_metadata_request(frame, header.api_version, header.client_id_end)
        # (the skim has the fields the handler reads, not a kio entity's: _kio_body rebuilds)
        body = skim or codec.decode_request(frame, 3, header.api_version)
        return cast(MetadataBody, body)

    def on_request(self, request: Request[MetadataBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        version = request.header.api_version
        topics = body.topics
        if topics is None or (version == 0 and not topics):
            return self._forward(request, ctx, _Plan(all_topics=True))
        if version < 12 and any(self._id_of(t) is not None for t in topics):
            # handleTopicMetadataRequest: InvalidRequestException → getErrorResponse.
            return Respond(self._error_response(request, topics, ErrorCode.invalid_request))
        ids = [i for t in topics if (i := self._id_of(t)) is not None]
        if ids:
            return self._by_id(request, ctx, ids)
        if any(t.name is None for t in topics):
            return Respond(self._error_response(request, topics, ErrorCode.invalid_request))
        return self._by_name(request, ctx, body, topics)

    @staticmethod
    def _id_of(entry: object) -> uuid.UUID | None:
        topic_id: uuid.UUID | None = getattr(entry, "topic_id", None)
        return topic_id if topic_id is not None and topic_id.int else None

    def _topic_type(self, request: Request) -> type[_ResponseTopic]:
        schema = codec.response_schema(3, request.header.api_version)
        return codec.nested_type(schema, "topics")

    def _error_response(
        self, request: Request, topics: Sequence[_RequestTopic], code: ErrorCode
    ) -> ResponsePayload:
        """``MetadataRequest.getErrorResponse``: every requested topic with the error."""
        topic_type = self._topic_type(request)
        entries = tuple(
            _topic_error(topic_type, code, t.name or "", t.topic_id or ZERO_UUID) for t in topics
        )
        return codec.make_entity(
            codec.response_schema(3, request.header.api_version), code, topics=entries, brokers=()
        )

    def _by_id(
        self, request: Request[MetadataBody], ctx: HandlerContext, ids: list[uuid.UUID]
    ) -> Verdict:
        body = _kio_body(request)
        assert body.topics  # (ids were listed)
        request_type: Callable[..., _RequestTopic] = type(body.topics[0])
        distinct = first_seen(ids)
        upstream = codec.replace(
            body,
            topics=tuple(request_type(topic_id=i, name=None) for i in distinct),
            allow_auto_topic_creation=False,  # an id cannot be auto-created; be explicit
        )
        plan = _Plan(by_id=True, request_keys=list(distinct))
        return self._forward(request, ctx, plan, upstream)

    def _by_name(
        self,
        request: Request[MetadataBody],
        ctx: HandlerContext,
        body: MetadataBody,
        topics: Sequence[_RequestTopic],
    ) -> Verdict:
        version = request.header.api_version
        names = [t.name for t in topics if t.name is not None]  # none is (on_request)
        distinct = first_seen(names)  # Kafka works on a Set: reference count 1
        allowed = filter_authorized(
            ctx, request, AclOperation.DESCRIBE, ResourceType.TOPIC, distinct
        )
        plan = _Plan(request_keys=list(names))
        for name in distinct:
            if name not in allowed:
                plan.denied[name] = [_topic_error(self._topic_type(request), _DENIED, name)]
        describable = [n for n in distinct if n in allowed]
        auto_create = version < 4 or bool(body.allow_auto_topic_creation)
        no_create: set[str] = set()
        if (
            auto_create
            and describable
            and not is_allowed(ctx, request, AclOperation.CREATE, CLUSTER, log_if_denied=False)
        ):
            creatable = filter_authorized(
                ctx,
                request,
                AclOperation.CREATE,
                ResourceType.TOPIC,
                describable,
                log_if_denied=False,
            )
            no_create = {n for n in describable if n not in creatable}
        plan.forwarded = frozenset(describable)
        plan.no_create = frozenset(no_create)
        if not no_create and not plan.denied:
            return self._forward(request, ctx, plan)
        if no_create and (version < 4 or len(no_create) < len(describable)):
            # One request cannot let the broker create some names and not others (and v0–3
            # cannot switch creation off): ask about the names lacking CREATE first.
            return self._ask_then_forward(request, ctx, plan)
        body = _kio_body(request)
        upstream = codec.replace(
            body,
            topics=tuple(t for t in body.topics or () if t.name in plan.forwarded),
            **({"allow_auto_topic_creation": False} if no_create else {}),
        )
        return self._forward(request, ctx, plan, upstream)

    def _ask_then_forward(
        self, request: Request[MetadataBody], ctx: HandlerContext, plan: _Plan
    ) -> Verdict:
        """Kafka creates the missing names the principal may create and answers 29 for the
        missing ones it may not (describing those that exist). The names lacking CREATE are
        looked up with auto-creation off (at the client's version, or v4 for v0–3), the rest
        forwarded with creation as the client asked, and the answers merged."""
        body = request.body
        version = request.header.api_version
        question_version = max(version, 4)
        if question_version not in ctx.supported_versions(3):
            for name in plan.no_create:  # cannot switch auto-creation off: never ask
                plan.denied[name] = [self._create_denied(request, name)]
            plan.forwarded -= plan.no_create
            plan.no_create = frozenset()
            return self._forward_named(request, ctx, plan)
        schema = codec.request_schema(3, question_version)
        topic_type = codec.nested_type(schema, "topics")
        question = entity(
            schema,
            topics=tuple(
                entity(topic_type, name=n, topic_id=ZERO_UUID)
                for n in first_seen(t.name for t in body.topics or () if t.name in plan.no_create)
            ),
            allow_auto_topic_creation=False,
        )

        def then(answer: _MetadataResponse) -> Verdict:
            client_type = self._topic_type(request)
            plan.asked = tuple(
                convert(t, client_type) for t in answer.topics if t.name in plan.no_create
            )
            plan.forwarded -= plan.no_create
            if plan.forwarded:
                return self._forward_named(request, ctx, plan)
            base = convert(answer, codec.response_schema(3, version))
            return Respond(self._rewriter(request, ctx, plan)(codec.replace(base, topics=())))

        return AskFirst(question, then)

    def _forward_named(
        self, request: Request[MetadataBody], ctx: HandlerContext, plan: _Plan
    ) -> Verdict:
        """Only ``plan.forwarded`` goes up (possibly none: the broker still supplies the
        brokers and cluster of the answer)."""
        body = _kio_body(request)
        upstream = codec.replace(
            body, topics=tuple(t for t in body.topics or () if t.name in plan.forwarded)
        )
        return self._forward(request, ctx, plan, upstream)

    def _create_denied(self, request: Request, name: str) -> _ResponseTopic:
        """Kafka's unauthorizedForCreateTopicMetadata entry."""
        return _topic_error(
            self._topic_type(request), _DENIED, name, is_internal=name in INTERNAL_TOPICS
        )

    def _forward(
        self,
        request: Request[MetadataBody],
        ctx: HandlerContext,
        plan: _Plan,
        upstream: Entity | None = None,
    ) -> Forward:
        """Forward the client's request (or ``upstream``); the answer's rewrite made on its
        raw bytes (:meth:`_spliced`) when the plan lets it, decoded otherwise."""
        rewrite = self._rewriter(request, ctx, plan)
        return Forward(
            request=None if upstream is None else _payload(upstream),
            rewrite=rewrite,
            transform=self._spliced(request, ctx, plan, rewrite) if plan.skimmed else None,
        )

    def _spliced(
        self,
        request: Request[MetadataBody],
        ctx: HandlerContext,
        plan: _Plan,
        rewrite: ResponseRewrite,
    ) -> ResponseTransform:
        """:meth:`_rewriter`'s change for a plan that synthesizes no entry, on the raw frame:
        the same topics (describable ones of all; the asked ones, in request order), the same
        KIP-430 fields and addresses, the same ids learned; every other byte the broker's."""
        version = request.header.api_version
        want_topic_ops, want_cluster_ops = _wanted(request)
        decoded = decoded_transform(request, rewrite)

        def transform(frame: Frame) -> Frame:
            walk = walk_metadata_response(frame, version)
            if walk is None:
                return decoded(frame)
            learn_topic_ids(ctx, walk.topics)
            if plan.all_topics:
                topics = _describable(ctx, request, walk.topics, log_if_denied=False)
            else:
                asked = _asked_for(plan, walk.topics)
                topics = list(merge_in_request_order(plan.request_keys, {}, asked, _name))
            cluster_ops = _cluster_ops(ctx, request, want_cluster_ops)
            ops = [_topic_ops(ctx, request, want_topic_ops, t.name) for t in topics]
            return walk.splice(frame, ctx.advertise_node, topics, ops, cluster_ops)

        return transform

    def _rewriter(  # noqa: C901 - the nested rewrite: one step per field KafkaApis.handleTopicMetadataRequest fills
        self, request: Request[MetadataBody], ctx: HandlerContext, plan: _Plan
    ) -> ResponseRewrite:
        version = request.header.api_version
        want_topic_ops, want_cluster_ops = _wanted(request)

        def rewrite(response: _MR) -> _MR:  # noqa: C901 - as _rewriter
            learn_topic_ids(ctx, response.topics)
            response = rewrite_metadata_brokers(response, ctx)
            broker: list[_ResponseTopic] = list(response.topics)
            described: set[int] = set()  # indexes of entries eligible for KIP-430 ops
            if plan.all_topics:
                broker = _describable(ctx, request, broker, log_if_denied=False)
                described = set(range(len(broker)))
            elif plan.by_id:
                broker = self._filter_by_id(request, ctx, plan, broker, described)
            else:
                broker = _asked_for(plan, broker) + list(plan.asked)
                for i, t in enumerate(broker):
                    if t.name is not None and t.name in plan.no_create and t.error_code in _MISSING:
                        broker[i] = self._create_denied(request, t.name)
                    else:
                        described.add(i)
            changes: dict[str, object] = {}
            if 8 <= version <= 10:
                cluster_ops = _cluster_ops(ctx, request, want_cluster_ops)
                if response.cluster_authorized_operations != cluster_ops:
                    changes["cluster_authorized_operations"] = cluster_ops
            if version >= 8:
                for i, t in enumerate(broker):
                    ops = _topic_ops(ctx, request, want_topic_ops and i in described, t.name)
                    if t.topic_authorized_operations != ops:
                        broker[i] = codec.replace(t, topic_authorized_operations=ops)
            if plan.all_topics:
                topics: Sequence[_ResponseTopic] = broker
            else:
                key: Callable[[_ResponseTopic], Hashable] = (
                    (lambda t: t.topic_id) if plan.by_id else _name
                )
                topics = merge_in_request_order(plan.request_keys, plan.denied, broker, key)
            if not _same(topics, response.topics):
                changes["topics"] = tuple(topics)
            return codec.replace(response, **changes) if changes else response

        return rewrite

    def _filter_by_id(
        self,
        request: Request,
        ctx: HandlerContext,
        plan: _Plan,
        broker: list[_ResponseTopic],
        described: set[int],
    ) -> list[_ResponseTopic]:
        """By-id answers: only the requested ids; resolved names need DESCRIBE (else 29 with
        the name withheld), as ``unauthorizedForDescribeTopicMetadata`` with ``useTopicId``."""
        wanted = set(plan.request_keys)
        broker = [t for t in broker if t.topic_id in wanted]
        named = [t.name for t in broker if t.name and t.error_code != ErrorCode.unknown_topic_id]
        allowed = filter_authorized(
            ctx, request, AclOperation.DESCRIBE, ResourceType.TOPIC, first_seen(named)
        )
        out = []
        for t in broker:
            if t.error_code == ErrorCode.unknown_topic_id or not t.name:
                out.append(t)
            elif t.name not in allowed:
                out.append(_topic_error(self._topic_type(request), _DENIED, None, t.topic_id))
            else:
                described.add(len(out))
                out.append(t)
        return out


class DescribeTopicPartitionsHandler(ApiHandler[DescribeTopicPartitionsBody]):
    """``DescribeTopicPartitionsRequestHandler``: cursor validation (42) first; DESCRIBE per
    topic with ``logIfDenied=true`` even when listing all (then filtered silently); named
    denied topics → (29, name, zero id, isInternal=false), appended after the described ones
    as Kafka does; ``topicAuthorizedOperations`` always set on described topics.

    A cursor naming a topic the principal may not DESCRIBE restarts that topic's listing at
    partition 0 (Kafka's ``firstPartitionId`` reset). A ``next_cursor`` the broker sets on a
    topic the principal may not DESCRIBE (possible only when listing all, since named denied
    topics never reach the broker) would reveal its name: it is dropped, ending the listing
    early — a deviation in completeness, never in confidentiality.
    """

    api_key = 75
    decode_request = True

    def on_request(
        self, request: Request[DescribeTopicPartitionsBody], ctx: HandlerContext
    ) -> Verdict:
        body = request.body
        cursor = body.cursor
        cursor_name = cursor.topic_name if cursor is not None else ""
        fetch_all = not body.topics
        names = first_seen(t.name for t in body.topics if t.name >= cursor_name)
        if cursor is not None and not fetch_all and cursor.topic_name not in names:
            return Respond(self._error_response(request, body, ErrorCode.invalid_request))
        schema = codec.response_schema(75, request.header.api_version)
        topic_type: type[_ResponseTopic] = codec.nested_type(schema, "topics")
        denied: list[_ResponseTopic] = []
        changes: dict[str, object] = {}
        if not fetch_all:
            allowed = filter_authorized(
                ctx, request, AclOperation.DESCRIBE, ResourceType.TOPIC, names
            )
            denied = [_topic_error(topic_type, _DENIED, n) for n in names if n not in allowed]
            kept = tuple(t for t in body.topics if t.name in allowed)
            if len(kept) != len(body.topics):
                changes["topics"] = kept
        if cursor is not None and not is_allowed(
            ctx, request, AclOperation.DESCRIBE, topic(cursor_name)
        ):
            if fetch_all:
                changes["cursor"] = codec.replace(cursor, partition_index=0)
            else:
                changes["cursor"] = None  # kept names are all ≥ the cursor already
        if not fetch_all and "topics" in changes and not changes["topics"]:
            return Respond(codec.make_entity(schema, topics=tuple(denied)))
        upstream = codec.replace(body, **changes) if changes else None
        asked = frozenset(t.name for t in (upstream or body).topics)
        return Forward(
            request=_payload(upstream) if upstream is not None else None,
            rewrite=self._rewriter(request, ctx, fetch_all, denied, asked),
        )

    def _rewriter(
        self,
        request: Request,
        ctx: HandlerContext,
        fetch_all: bool,
        denied: list[_ResponseTopic],
        asked: frozenset[str],
    ) -> ResponseRewrite:
        def rewrite(response: _DR) -> _DR:
            learn_topic_ids(ctx, response.topics)
            topics = list(response.topics)
            if not fetch_all:  # only what was asked (see Metadata)
                topics = [t for t in topics if t.name in asked]
            else:
                topics = _describable(ctx, request, topics)
            for i, t in enumerate(topics):
                ops = ctx.authorized_operations(request, topic(t.name)) if t.name else NOT_REQUESTED
                if t.topic_authorized_operations != ops:
                    topics[i] = codec.replace(t, topic_authorized_operations=ops)
            topics += denied
            changes: dict[str, object] = {}
            if not _same(topics, response.topics):
                changes["topics"] = tuple(topics)
            cursor = response.next_cursor
            if (
                fetch_all
                and cursor is not None
                and not is_allowed(
                    ctx,
                    request,
                    AclOperation.DESCRIBE,
                    topic(cursor.topic_name),
                    log_if_denied=False,
                )
            ):
                changes["next_cursor"] = None
            return codec.replace(response, **changes) if changes else response

        return rewrite

    def _error_response(
        self, request: Request, body: DescribeTopicPartitionsBody, code: ErrorCode
    ) -> ResponsePayload:
        """``DescribeTopicPartitionsRequest.getErrorResponse``: each requested name."""
        schema = codec.response_schema(75, request.header.api_version)
        topic_type: type[_ResponseTopic] = codec.nested_type(schema, "topics")
        topics = tuple(_topic_error(topic_type, code, t.name) for t in body.topics)
        return codec.make_entity(schema, topics=topics)


def _payload(body: Entity) -> RequestPayload:
    """A request body rebuilt from the client's (``codec.replace``), as what it is: the
    client's request schema."""
    return cast(RequestPayload, body)


HANDLERS: list[ApiHandler] = [MetadataHandler(), DescribeTopicPartitionsHandler()]
