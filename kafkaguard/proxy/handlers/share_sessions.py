"""ShareFetch (78) and ShareAcknowledge (79): the KIP-932 share-group data path, as
``KafkaApis.handleShareFetchRequest`` and ``KafkaApis.handleShareAcknowledgeRequest`` do.

Checks, in Kafka's order, each answered for the whole request (no error message, no partition):

* group id null → INVALID_REQUEST (42), before any check;
* READ GROUP → GROUP_AUTHORIZATION_FAILED (30);
* member id null, empty or longer than 36 → 42 (``KafkaApis.isMemberIdValid``);
* ShareFetch v2 with ``IsRenewAck`` and a non-zero MaxBytes, MinBytes, MaxRecords or MaxWaitMs
  → 42; a ShareFetch opening a session (epoch 0) with acknowledgements → 42
  (``SharePartitionManager.newContext``).

Kafka's broker changes nothing in its session cache when it answers these, so the proxy answers
them itself. Then READ TOPIC (``AuthHelper.filterByAuthorized``: one action per topic, one
reference per partition) over the *share fetch context*:

* ShareFetch, epoch 0 (opens a session) and −1 (closes it; ``FinalContext`` fetches nothing):
  the partitions the request names;
* ShareFetch, any other epoch: the whole share session after the request's additions and
  removals (``ShareSession.update``: add, then forget), plus the partitions it names —
  including partitions added by earlier requests and not named again;
* ShareAcknowledge: the partitions it names (``acknowledgeSessionUpdate`` only moves the epoch).

A denied partition of a fetch context is answered TOPIC_AUTHORIZATION_FAILED (29) in every
response (``ShareFetchResponse.partitionResponse``; a session's response always carries its
erroneous partitions, ``CachedSharePartition.maybeUpdateResponseData``). When the request
acknowledges anything, every denied partition it names gets an acknowledgement error
(ShareFetch: ``AcknowledgeErrorCode``; ShareAcknowledge: the partition's ``ErrorCode``): 42 when
its batches are invalid (``KafkaApis.validateAcknowledgementBatches`` runs first), else 29. A
topic id the broker does not know either (resolved first, :mod:`ask`) is answered
UNKNOWN_TOPIC_ID (100) the same way, as ``ShareSessionContext`` means to (Kafka 4.3.1 fails the
whole request instead: docs/deviations.md).

The broker never acquires records for a partition the member may not read, and no acknowledgement
for one reaches it: denied partitions (and their acknowledgement batches) are removed from the
forwarded request and their answers merged into the broker's (the split/merge pattern of
:mod:`responses`). Unlike :func:`~responses.split`, a request with nothing left is still
forwarded: the broker moves the session epoch on every request it accepts (Kafka does too when
every partition is denied), and the client's next epoch must match.

Share sessions. The broker keeps each session's partitions (keyed by group and member id) and
fetches them all on every request, so the proxy keeps, per connection, a mirror of each session
opened on it (as :mod:`fetch` mirrors KIP-227 sessions):

* ``partitions`` — the session as the client sees it, denied partitions included: what Kafka
  authorizes and answers for.
* ``upstream`` — every partition the broker's session may hold: a forwarded epoch 0 replaces
  the broker's session (or removes it), later requests add what they send, and a partition
  leaves only once a response without error confirms that a request forgetting it was applied
  (a request the broker refuses for its epoch changes nothing). Every forwarded request forgets
  upstream each of these the member may not read now or the client no longer has, so a
  partition denied while in the session is never fetched again, whatever epochs were sent; one
  allowed again is re-added.

A ShareFetch continuing a session not opened on this connection is answered
SHARE_SESSION_NOT_FOUND (122) without reaching the broker (the client then opens a new one), so
a guessed session cannot pull data past the proxy; ShareAcknowledge and a closing ShareFetch
need only the partitions they name and are served. Responses are always checked: the broker's
entries are kept only for partitions authorized in this request (anything else the broker's
session might hold is dropped), and ``NodeEndpoints`` carries broker addresses
(``docs/design.md#clients-never-see-a-broker-address``). A skim of the raw response
(:func:`~kafkaguard.protocol.skim.share.skim_share_response`) reads its partitions and whether
it has ``NodeEndpoints``: when every entry is allowed, nothing is to be merged in and there are no
endpoints, the broker's bytes go on undecoded (records included); otherwise it is decoded and
completed. Session errors (122, 123, 133) and
every other top-level error reach the client as the broker gave them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final, Protocol, TypeVar, cast
from uuid import UUID

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.inflight import ResponseTransform
from kafkaguard.protocol.skim.share import skim_share_response
from kafkaguard.proxy.handlers.support.addresses import NodeAddress, rewrite_node_addresses
from kafkaguard.proxy.handlers.support.authz import authorize_topics, group, is_allowed
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    B,
    Close,
    Forward,
    HandlerContext,
    Request,
    Respond,
    ResponseRewrite,
    Verdict,
    remember_newest,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, PartitionIndexed, TopicIded
from kafkaguard.proxy.handlers.support.questions import listed_topic_ids
from kafkaguard.proxy.handlers.support.responses import entity, response_type, whole_error

SharePartition = tuple[UUID, int]
"""A partition as share requests name it: topic id and index."""


# What the handlers read of kio's classes (any version of each schema).
class _AcknowledgementBatch(Protocol):
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def acknowledge_types(self) -> Sequence[int]: ...


class _RequestPartition(PartitionIndexed, Protocol):
    @property
    def acknowledgement_batches(self) -> Sequence[_AcknowledgementBatch]: ...


class _RequestTopic(TopicIded, Entity, Protocol):
    @property
    def partitions(self) -> Sequence[_RequestPartition]: ...


class _ForgottenTopic(Protocol):
    @property
    def topic_id(self) -> UUID | None: ...
    @property
    def partitions(self) -> Sequence[int]: ...


class ShareBody(Entity, Protocol):
    """What ShareFetch and ShareAcknowledge requests share (``is_renew_ack``, v2, is read by
    name)."""

    @property
    def group_id(self) -> str | None: ...
    @property
    def member_id(self) -> str | None: ...
    @property
    def share_session_epoch(self) -> int: ...
    @property
    def topics(self) -> Sequence[_RequestTopic]: ...


class ShareFetchBody(ShareBody, Protocol):
    @property
    def forgotten_topics_data(self) -> Sequence[_ForgottenTopic]: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def min_bytes(self) -> int: ...
    @property
    def max_records(self) -> int: ...
    @property
    def max_wait(self) -> timedelta: ...


class _ResponseTopic(TopicIded, Protocol):
    @property
    def partitions(self) -> Sequence[PartitionIndexed]: ...


class _ShareResponse(ErrorCoded, Entity, Protocol):
    """What ShareFetch and ShareAcknowledge responses share."""

    @property
    def responses(self) -> Sequence[_ResponseTopic]: ...
    @property
    def node_endpoints(self) -> Sequence[NodeAddress]: ...


_R = TypeVar("_R", bound=_ShareResponse)
SessionKey = tuple[str, str]
"""A share session's key in the broker's ``ShareSessionCache``: group id and member id."""

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
"""``ShareRequestMetadata.INITIAL_EPOCH`` / ``FINAL_EPOCH``."""

MAX_MEMBER_ID_LENGTH: Final = 36
"""``KafkaApis.isMemberIdValid``: a member id is a UUID string at most."""
RENEW: Final = 4
"""``AcknowledgeType.RENEW`` (KIP-1222, ShareFetch/ShareAcknowledge v2)."""

MAX_SHARE_SESSIONS_PER_CONNECTION: Final = 8
"""A share consumer keeps one session per broker connection (``ShareSessionHandler`` per node);
older mirrors are evicted, and their next ShareFetch is answered 122 (the client opens a new
session)."""

MAX_SHARE_SESSION_PARTITIONS: Final = 10_000
"""Partitions one session mirror may hold, in the client's view or possibly in the broker's,
so a client cannot grow the proxy's memory without bound by naming partitions request after
request (the broker never sees the denied ones, so its own limits do not cover them). Kafka has
no such limit (``group.share.max.share.sessions`` bounds the number of sessions); 10,000 is far
above what one member fetches from one broker. A request taking a mirror past it closes the
connection (docs/deviations.md)."""


@dataclass(slots=True)
class ShareSessionMirror:
    """One share session opened on this connection."""

    partitions: dict[SharePartition, None]
    """The session as the client sees it, in order: what Kafka's context is."""
    upstream: dict[SharePartition, int] = field(default_factory=dict)
    """Partitions the broker's session may hold → number of the last request that sent them."""
    sent: int = 0
    """Requests forwarded for this session."""

    def too_large(self) -> bool:
        return max(len(self.partitions), len(self.upstream)) > MAX_SHARE_SESSION_PARTITIONS


class ShareSessions:
    """The share-session mirrors of one connection (its :class:`~base.ConnectionState`)."""

    def __init__(self) -> None:
        self.by_key: dict[SessionKey, ShareSessionMirror] = {}

    def open(self, key: SessionKey, mirror: ShareSessionMirror) -> None:
        remember_newest(self.by_key, key, mirror, MAX_SHARE_SESSIONS_PER_CONNECTION)


def share_sessions(ctx: HandlerContext) -> ShareSessions:
    """The share-session mirrors of ``ctx``'s connection (kept as long as it lives)."""
    return ctx.connection_state.get(ShareSessions)


# -- reading requests -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Named:
    """What a ShareFetch or ShareAcknowledge request names."""

    partitions: list[SharePartition]
    """Distinct, in request order."""
    batches: dict[SharePartition, tuple[_AcknowledgementBatch, ...]]
    """Each partition's acknowledgement batches (the last entry's, as Kafka's map keeps)."""
    acknowledges: bool
    """Some batch at all (``isAcknowledgeDataPresentInFetchRequest``)."""

    @classmethod
    def of(cls, body: ShareBody) -> _Named:
        batches: dict[SharePartition, tuple[_AcknowledgementBatch, ...]] = {}
        acknowledges = False
        for topic in body.topics:
            for partition in topic.partitions:
                key = (topic.topic_id, int(partition.partition_index))
                batches[key] = tuple(partition.acknowledgement_batches)
                acknowledges = acknowledges or bool(batches[key])
        return cls(list(batches), batches, acknowledges)


def _forgotten(body: ShareFetchBody) -> list[SharePartition]:
    return [
        (topic.topic_id, int(index))
        for topic in body.forgotten_topics_data
        if topic.topic_id is not None
        for index in topic.partitions
    ]


def _member_id_valid(member_id: str | None) -> bool:
    """``KafkaApis.isMemberIdValid``; Java's ``String.length`` counts UTF-16 code units."""
    if not member_id:
        return False
    return len(member_id.encode("utf-16-le")) // 2 <= MAX_MEMBER_ID_LENGTH


def _is_renew_ack(request: Request) -> bool:
    """KIP-1222 (v2): acknowledgements may RENEW acquisition locks, and the fetch is skipped."""
    return request.header.api_version >= 2 and bool(getattr(request.body, "is_renew_ack", False))


def _renew_ack_invalid(request: Request[ShareFetchBody]) -> bool:
    """``handleShareFetchRequest``: a renew-acknowledgement ShareFetch must fetch nothing."""
    if not _is_renew_ack(request):
        return False
    body = request.body
    limits = (int(body.max_bytes), int(body.min_bytes), int(body.max_records))
    return any(limits) or body.max_wait != timedelta(0)


def _batches_invalid(batches: Sequence[_AcknowledgementBatch], version: int, renew: bool) -> bool:
    """``KafkaApis.validateAcknowledgementBatches`` for one partition: offsets ascending and
    non-overlapping, one type per offset (or one for the whole batch), types 0–3 (0–4 from v2),
    RENEW only in a renew-acknowledgement request."""
    highest_type = RENEW if version >= 2 else RENEW - 1
    previous_last = -1
    for batch in batches:
        first, last, types = (
            int(batch.first_offset),
            int(batch.last_offset),
            batch.acknowledge_types,
        )
        if first > last or first < previous_last or not types:
            return True
        if len(types) > 1 and last - first != len(types) - 1:
            return True
        if any(t < 0 or t > highest_type for t in types) or (RENEW in types and not renew):
            return True
        previous_last = last
    return False


def _refusal(request: Request[ShareBody], ctx: HandlerContext) -> Respond | None:
    """The whole-request answers both APIs give before their topic checks, in Kafka's order."""
    body = request.body
    if body.group_id is None:
        return Respond(whole_error(request, ErrorCode.invalid_request))
    if not is_allowed(ctx, request, AclOperation.READ, group(body.group_id)):
        return Respond(whole_error(request, ErrorCode.group_authorization_failed))
    if not _member_id_valid(body.member_id):
        return Respond(whole_error(request, ErrorCode.invalid_request))
    return None


def _decide(
    ctx: HandlerContext, request: Request, partitions: Sequence[SharePartition]
) -> dict[SharePartition, ErrorCode]:
    """The denied partitions of a context and their code: 29, or 100 for an id nobody knows
    (``filterByAuthorized`` over the context, one reference per partition)."""
    if not partitions:
        return {}
    topics = authorize_topics(ctx, request, AclOperation.READ, [t for t, _ in partitions])
    return {p: topics[p[0]] for p in partitions if p[0] in topics}


def _acknowledgement_errors(
    request: Request, named: _Named, denied: Mapping[SharePartition, ErrorCode]
) -> dict[SharePartition, ErrorCode]:
    """What ``handleAcknowledgements`` answers for each denied partition the request names:
    100 for an unknown id (``getAcknowledgeBatchesFrom…``), 42 for invalid batches, else 29."""
    version, renew = request.header.api_version, _is_renew_ack(request)
    errors: dict[SharePartition, ErrorCode] = {}
    for key in named.partitions:
        code = denied.get(key)
        if code is None:
            continue
        if code == ErrorCode.topic_authorization_failed and _batches_invalid(
            named.batches[key], version, renew
        ):
            code = ErrorCode.invalid_request
        errors[key] = code
    return errors


# -- the forwarded request --------------------------------------------------------------------


def _group(keys: Iterable[SharePartition]) -> dict[UUID, list[int]]:
    out: dict[UUID, list[int]] = {}
    for topic_id, index in keys:
        out.setdefault(topic_id, []).append(index)
    return out


def _upstream_body(
    body: ShareBody,
    denied: Mapping[SharePartition, ErrorCode],
    readd: Sequence[SharePartition] = (),
    forget: Sequence[SharePartition] = (),
    forgotten: Sequence[_ForgottenTopic] = (),
) -> RequestPayload | None:
    """``body`` without the ``denied`` partitions (their batches with them), with ``readd``
    named again (no batches) and ``forget`` added to its ``forgotten`` topics (ShareFetch's
    ``forgotten_topics_data``); ``None`` when that is the client's request as it is."""
    named = [(t.topic_id, int(p.partition_index)) for t in body.topics for p in t.partitions]
    if not readd and not forget and not any(k in denied for k in named):
        return None
    topic_type = codec.nested_type(type(body), "topics")
    topics: list[Entity] = []
    for topic in body.topics:
        kept = tuple(
            p for p in topic.partitions if (topic.topic_id, int(p.partition_index)) not in denied
        )
        if kept:
            topics.append(codec.replace(topic, partitions=kept))
    partition_type = codec.nested_type(topic_type, "partitions")
    for topic_id, indexes in _group(readd).items():
        partitions = tuple(
            partition_type(partition_index=i, acknowledgement_batches=()) for i in indexes
        )
        topics.append(topic_type(topic_id=topic_id, partitions=partitions))
    changes: dict[str, object] = {"topics": tuple(topics)}
    if forget:
        forgotten_type = codec.nested_type(type(body), "forgotten_topics_data")
        extra = [forgotten_type(topic_id=t, partitions=tuple(i)) for t, i in _group(forget).items()]
        changes["forgotten_topics_data"] = (*forgotten, *extra)
    return cast(RequestPayload, codec.replace(body, **changes))  # the client's schema


# -- the response -----------------------------------------------------------------------------


def _merge(
    response: _R, allowed: set[SharePartition], synthesized: Mapping[SharePartition, Entity]
) -> _R:
    """The broker's answer with only the ``allowed`` partitions' entries, then the proxy's own
    ones; each topic once, as ``ShareFetchResponse.toMessage`` groups them. A top-level error
    is answered as the broker gave it: Kafka answers those with no partition."""
    if response.error_code != ErrorCode.none:
        synthesized = {}
    topics: dict[UUID, list[object]] = {}
    dropped = False
    for topic in response.responses:
        for partition in topic.partitions:
            if (topic.topic_id, int(partition.partition_index)) in allowed:
                topics.setdefault(topic.topic_id, []).append(partition)
            else:
                dropped = True
    if not dropped and not synthesized:
        return response
    for (topic_id, _), entry in synthesized.items():
        topics.setdefault(topic_id, []).append(entry)
    topic_type = codec.nested_type(type(response), "responses")
    merged = tuple(topic_type(topic_id=t, partitions=tuple(ps)) for t, ps in topics.items())
    return codec.replace(response, responses=merged)


def _node_endpoints(response: _R, ctx: HandlerContext) -> _R:
    """Both responses carry ``NodeEndpoints`` (leaders of NOT_LEADER_OR_FOLLOWER partitions)."""
    if not response.node_endpoints:
        return response
    endpoints = rewrite_node_addresses(response.node_endpoints, ctx, "node_id")
    if endpoints is response.node_endpoints:
        return response
    return codec.replace(response, node_endpoints=endpoints)


def _skimmed(
    request: Request,
    complete: ResponseRewrite,
    allowed: set[SharePartition],
    synthesizes: bool,
    confirm: Callable[[], None] | None,
) -> ResponseTransform:
    """``complete`` on the raw response: when a skim shows it would change nothing (every
    partition allowed, none of the proxy's own entries to add, no ``NodeEndpoints``), the
    broker's bytes are passed on undecoded — records and all; otherwise the response is decoded
    and completed as before. ``confirm`` runs as ``complete`` would run it on an error-free
    response."""
    header = request.header
    api_key, version, correlation_id = header.api_key, header.api_version, header.correlation_id

    def transform(frame: Frame) -> Frame:
        skim = skim_share_response(frame, api_key, version)
        if (
            skim is None
            or skim.has_node_endpoints
            or (synthesizes and skim.error_code == ErrorCode.none)
            or any(key not in allowed for key in skim.partitions)
        ):
            body = codec.decode_response(frame, api_key, version)
            new = complete(body)
            return frame if new is body else codec.encode_response(new, correlation_id)
        if confirm is not None and skim.error_code == ErrorCode.none:
            confirm()
        return frame

    return transform


def _partition_type(request: Request) -> type[Entity]:
    return codec.nested_type(codec.nested_type(response_type(request), "responses"), "partitions")


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one ShareFetch sends upstream and how its answer is completed."""

    allowed: set[SharePartition]
    """Partitions authorized in this request: the only ones whose broker entries pass."""
    fetch_errors: dict[SharePartition, ErrorCode]
    """Denied partitions of the fetch context, in context order."""
    ack_errors: dict[SharePartition, ErrorCode]
    """Acknowledgement errors of the denied partitions the request names."""
    upstream: RequestPayload | None
    """The body to forward; ``None``: the client's own bytes."""
    forgotten: tuple[SharePartition, ...] = ()
    """What the forwarded request forgets (checked against ``mirror.upstream`` once answered)."""


def _share_fetch_entries(request: Request, plan: _Plan) -> dict[SharePartition, Entity]:
    """``ShareFetchResponse.partitionResponse`` for each denied partition of the context (its
    acknowledgement error folded in, as ``handleShareFetchRequest`` combines them), then an
    entry with only the acknowledgement error for a denied partition outside the context."""
    partition_type = _partition_type(request)
    entries = {
        key: entity(
            partition_type,
            code,
            partition_index=key[1],
            acknowledge_error_code=int(plan.ack_errors.get(key, ErrorCode.none)),
            records=b"",
        )
        for key, code in plan.fetch_errors.items()
    }
    for key, code in plan.ack_errors.items():
        if key not in entries:
            entries[key] = entity(
                partition_type,
                partition_index=key[1],
                acknowledge_error_code=int(code),
                records=b"",
            )
    return entries


class _ShareSessionHandler(ApiHandler[B]):
    """What ShareFetch and ShareAcknowledge share: decoded, keyed by topic id, v2 at most
    (KIP-1206, KIP-1222: the newest versions these handlers reason about)."""

    max_version = 2
    decode_request = True

    def topic_ids(self, request: Request[B]) -> Iterable[UUID]:
        return listed_topic_ids(request.body, "topics")


class ShareFetchHandler(_ShareSessionHandler[ShareFetchBody]):
    """``KafkaApis.handleShareFetchRequest``; see the module docstring."""

    api_key = 78

    def on_request(self, request: Request[ShareFetchBody], ctx: HandlerContext) -> Verdict:
        refusal = _refusal(request, ctx)
        if refusal is not None:
            return refusal
        body = request.body
        named = _Named.of(body)
        epoch = int(body.share_session_epoch)
        if _renew_ack_invalid(request) or (epoch == INITIAL_EPOCH and named.acknowledges):
            return Respond(whole_error(request, ErrorCode.invalid_request))
        key: SessionKey = (body.group_id or "", body.member_id or "")  # neither null: _refusal
        if epoch == INITIAL_EPOCH:
            return self._open(request, ctx, key, named)
        if epoch == FINAL_EPOCH:
            share_sessions(ctx).by_key.pop(key, None)
            return self._close(request, ctx, named)
        mirror = share_sessions(ctx).by_key.get(key)
        if mirror is None:
            return Respond(whole_error(request, ErrorCode.share_session_not_found))
        return self._continue(request, ctx, key, mirror, named)

    def _open(
        self, request: Request[ShareFetchBody], ctx: HandlerContext, key: SessionKey, named: _Named
    ) -> Verdict:
        """Epoch 0: the broker replaces any session of this key with the partitions sent."""
        if len(named.partitions) > MAX_SHARE_SESSION_PARTITIONS:
            share_sessions(ctx).by_key.pop(key, None)
            return Close(f"share session of {len(named.partitions)} partitions: over the limit")
        denied = _decide(ctx, request, named.partitions)
        allowed = [p for p in named.partitions if p not in denied]
        mirror = ShareSessionMirror(dict.fromkeys(named.partitions), dict.fromkeys(allowed, 1), 1)
        share_sessions(ctx).open(key, mirror)
        plan = _Plan(set(allowed), denied, {}, _upstream_body(request.body, denied))
        return self._forward(request, ctx, plan, None)

    def _close(
        self, request: Request[ShareFetchBody], ctx: HandlerContext, named: _Named
    ) -> Verdict:
        """Epoch −1 (``FinalContext``): acknowledgements only, then the session is released."""
        denied = _decide(ctx, request, named.partitions)
        acks = _acknowledgement_errors(request, named, denied) if named.acknowledges else {}
        allowed = {p for p in named.partitions if p not in denied}
        plan = _Plan(allowed, {}, acks, _upstream_body(request.body, denied))
        return self._forward(request, ctx, plan, None)

    def _continue(
        self,
        request: Request[ShareFetchBody],
        ctx: HandlerContext,
        key: SessionKey,
        mirror: ShareSessionMirror,
        named: _Named,
    ) -> Verdict:
        """Every other epoch: the whole session is authorized, and the broker's session is kept
        to what is authorized and what the client still has."""
        plan = _continue_plan(request, ctx, mirror, named)
        if mirror.too_large():
            share_sessions(ctx).by_key.pop(key, None)
            return Close(f"share session over {MAX_SHARE_SESSION_PARTITIONS} partitions")
        return self._forward(request, ctx, plan, mirror)

    def _forward(
        self, request: Request, ctx: HandlerContext, plan: _Plan, mirror: ShareSessionMirror | None
    ) -> Verdict:
        entries = _share_fetch_entries(request, plan)
        number = mirror.sent if mirror is not None else 0

        def confirm() -> None:
            if mirror is not None:
                _confirm_forgotten(mirror, plan.forgotten, number)

        def complete(response: _R) -> _R:
            if response.error_code == ErrorCode.none:
                confirm()
            return _node_endpoints(_merge(response, plan.allowed, entries), ctx)

        return Forward(
            request=plan.upstream,
            rewrite=complete,
            transform=_skimmed(request, complete, plan.allowed, bool(entries), confirm),
        )


def _continue_plan(
    request: Request[ShareFetchBody], ctx: HandlerContext, mirror: ShareSessionMirror, named: _Named
) -> _Plan:
    """Apply a continuing ShareFetch to ``mirror`` (``ShareSession.update``: add, then forget)
    and decide it: Kafka's context is the session plus what the request names; upstream, denied
    partitions are neither sent nor kept, withheld ones allowed again are re-added, and what
    the broker may hold that the client dropped or may not read is forgotten."""
    body = request.body
    client_forgets = _forgotten(body)
    mirror.partitions.update(dict.fromkeys(named.partitions))
    for forgotten in client_forgets:
        mirror.partitions.pop(forgotten, None)
    view = mirror.partitions
    context = [*view, *(p for p in named.partitions if p not in view)]
    denied = _decide(ctx, request, context)
    readd = [
        p for p in view if p not in denied and p not in mirror.upstream and p not in named.batches
    ]
    mirror.sent += 1
    for sent in [*(p for p in named.partitions if p not in denied), *readd]:
        mirror.upstream[sent] = mirror.sent
    already = set(client_forgets)
    forget = [p for p in mirror.upstream if (p in denied or p not in view) and p not in already]
    fetched = {} if _is_renew_ack(request) else {p: denied[p] for p in view if p in denied}
    return _Plan(
        {p for p in context if p not in denied},
        fetched,
        _acknowledgement_errors(request, named, denied) if named.acknowledges else {},
        _upstream_body(body, denied, readd, forget, body.forgotten_topics_data),
        (*client_forgets, *forget),
    )


def _confirm_forgotten(
    mirror: ShareSessionMirror, forgotten: Iterable[SharePartition], number: int
) -> None:
    """Request ``number`` was applied (its answer has no error): what it forgot left the
    broker's session, unless a later request (already forwarded) sent it again."""
    for key in forgotten:
        if mirror.upstream.get(key, number + 1) <= number:
            del mirror.upstream[key]


class ShareAcknowledgeHandler(_ShareSessionHandler[ShareBody]):
    """``KafkaApis.handleShareAcknowledgeRequest``: the partitions named are checked; denied
    ones are answered 29 (42 for invalid batches, 100 for an unknown id) and never sent. The
    request is always forwarded, as the broker moves the session epoch on each one."""

    api_key = 79

    def on_request(self, request: Request[ShareBody], ctx: HandlerContext) -> Verdict:
        refusal = _refusal(request, ctx)
        if refusal is not None:
            return refusal
        body = request.body
        if int(body.share_session_epoch) == FINAL_EPOCH:
            share_sessions(ctx).by_key.pop((body.group_id or "", body.member_id or ""), None)
        named = _Named.of(body)
        denied = _decide(ctx, request, named.partitions)
        allowed = {p for p in named.partitions if p not in denied}
        partition_type = _partition_type(request)
        entries = {
            key: entity(partition_type, code, partition_index=key[1])
            for key, code in _acknowledgement_errors(request, named, denied).items()
        }

        def complete(response: _R) -> _R:
            return _node_endpoints(_merge(response, allowed, entries), ctx)

        return Forward(
            request=_upstream_body(body, denied),
            rewrite=complete,
            transform=_skimmed(request, complete, allowed, bool(entries), None),
        )


HANDLERS: list[ApiHandler] = [ShareFetchHandler(), ShareAcknowledgeHandler()]
