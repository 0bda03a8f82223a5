"""Fetch (api key 1): ``KafkaApis.handleFetchRequest``, incremental sessions included.

Checks, as Kafka makes them over every partition of the fetch *context* (the request for a
full fetch, the whole session for an incremental one):

* follower (``replica_id`` ≥ 0, v15+ ``replica_state.replica_id``): CLUSTER_ACTION on the
  cluster; denied → TOPIC_AUTHORIZATION_FAILED (29) on every partition (not 31);
* consumer: READ TOPIC per topic (``filterByAuthorized``, reference count = partitions);
* v13+ topic ids: resolved before authorization, as Kafka does — ids the proxy has not seen
  in a broker answer are looked up with the broker first (``questions.py``); an id the broker does
  not know either → UNKNOWN_TOPIC_ID (100) per partition, never forwarded.

Denied partitions are stripped from the forwarded request and answered with Kafka's
``FetchResponse.partitionResponse(error)`` (high watermark, LSO, log start −1, no records).

Incremental fetch sessions (KIP-227). The broker keeps the session's partitions and returns
their data without the client naming them again, so the proxy mirrors each session per
connection and authorizes it on every request, as Kafka does.

The invariant: **every partition the broker may hold in its session is authorized on every
request that reaches it.** A mirror follows the broker, never the client (``FetchManager``):

* A change takes effect only when the broker's answer confirms it: a new session (epoch 0)
  once its answer carries no error and a session id; an incremental request's additions and
  forgotten partitions once its answer carries no error and the same session id. Until then
  the partitions a request in flight adds count as held (``SessionMirror.may_hold``: the
  confirmed session ∪ every addition in flight) and those it forgets as still held — so a
  request the broker refuses (a wrong epoch, INVALID_FETCH_SESSION_EPOCH 71, leaves Kafka's
  session unchanged) cannot take a partition out of the proxy's checks while the broker keeps
  serving it, nor can pipelined requests or a lost answer. The top-level fields are read by a
  skim of the response's first bytes (:func:`~kafkaguard.protocol.skim.tails.fetch_response_head`);
  records are never decoded.
* Every other answer drops the mirror: FETCH_SESSION_ID_NOT_FOUND (70: the broker evicted the
  session), any other top-level error, or no session id (the broker closed a session that
  became empty, or throttled the request). Dropping is always safe: an incremental request
  naming a session the proxy has no mirror for is answered 70 without reaching the broker —
  the client answers that with a full fetch — so a guessed, foreign or doubtful session id
  never pulls data past the proxy.
* The proxy checks the session as ``FetchManager.newContext`` does, in its order, before
  anything is forwarded: no mirror → 70; an epoch other than the one the broker expects
  (``FetchMetadata.nextEpoch``, counted over the requests forwarded) → 71; a request using topic
  ids on a session that does not, or the reverse → FETCH_SESSION_TOPIC_ID_ERROR (106); each
  answered as Kafka's ``SessionErrorContext`` does, the mirror untouched. A full fetch (epoch 0
  or −1) naming a session closes its mirror at once, as the broker removes the session.
* The broker's session never holds a denied partition: a partition denied while the broker may
  hold it is added to ``forgotten_topics_data`` of the forwarded request; denied partitions are
  never sent. The client still considers them part of its session, so every response carries
  their 29 (Kafka includes erroneous partitions in each incremental response). When READ is
  granted again the proxy re-adds the partition upstream with the fetch position the client
  last sent for it (the client re-sends a partition whenever its position changes, so that is
  the current one). An ACL change therefore takes effect on the next request of every session.
* Incremental requests are always forwarded (even with nothing authorized) so the broker's
  session epoch stays in step with the client's — except one that grows the mirror past
  :data:`MAX_SESSION_PARTITIONS`, answered 70 (the mirror is dropped, the client starts over).
* Whatever is sent upstream is authorized, including a partition named in ``topics`` and in
  ``forgotten_topics_data`` of the same request (outside the session, so outside Kafka's
  check); a requested partition that is dropped means the request is rewritten.

Fast path: nothing denied and no withheld partition → the client's bytes go up unchanged and the
response is not decoded (v12+ responses are walked by their lengths, as they stream, and only
a ``node_endpoints`` tail is rewritten, :mod:`kafkaguard.protocol.skim`; a session's answer is
also read for its error code and session id on the way; v7–11 session answers hold them at a
fixed place and stream too). Sessionless clients (epoch −1) never pay for the mirror.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Protocol, TypeVar, cast

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload, ResponsePayload
from kafkaguard.protocol.inflight import ResponseTransform
from kafkaguard.protocol.skim.tails import (
    FetchHead,
    NodeEndpointsTail,
    fetch_response_has_node_endpoints,
)
from kafkaguard.proxy.handlers.support.addresses import (
    allowed_forward,
    node_endpoints_rewrite,
    node_endpoints_transform,
)
from kafkaguard.proxy.handlers.support.authz import CLUSTER, TopicChecks, TopicKey
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Authorize,
    Forward,
    HandlerContext,
    Request,
    Respond,
    ResponseRewrite,
    Verdict,
    remember_newest,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, PartitionIndexed
from kafkaguard.proxy.handlers.support.questions import listed_topic_ids
from kafkaguard.proxy.handlers.support.responses import chain, split

INITIAL_EPOCH: Final = 0
"""``FetchMetadata.INITIAL_EPOCH``: a full fetch that opens a session."""
FINAL_EPOCH: Final = -1
"""``FetchMetadata.FINAL_EPOCH``: a full fetch without a session (closing the one named)."""
INVALID_SESSION_ID: Final = 0
_MAX_INT32: Final = 2**31 - 1

PartitionKey = tuple[TopicKey, int]
"""A partition as the request names it: topic name (v4–12) or topic id (v13+), and index."""


class _Partition(Protocol):
    """``FetchRequest.FetchPartition`` of any version."""

    @property
    def partition(self) -> int: ...


class _Topic(Protocol):
    """``FetchRequest.FetchTopic``: named by ``topic`` (v4–12) or ``topic_id`` (v13+), which
    the handler reads by the field's name (``_Fetch.tkey``)."""

    @property
    def partitions(self) -> Sequence[_Partition]: ...


class _ForgottenTopic(Protocol):
    """``FetchRequest.ForgottenTopic`` (v7+), named as :class:`_Topic` is."""

    @property
    def partitions(self) -> Sequence[int]: ...


class FetchBody(Entity, Protocol):
    """What the handler reads of a ``FetchRequest`` (kio's, any version). The session's
    fields exist from v7 and are read only there; ``replica_id`` and ``replica_state`` by
    name (:func:`_is_follower`), as the versions hold one or the other."""

    @property
    def topics(self) -> Sequence[_Topic]: ...
    @property
    def session_id(self) -> int: ...
    @property
    def session_epoch(self) -> int: ...
    @property
    def forgotten_topics_data(self) -> Sequence[_ForgottenTopic]: ...


class _SessionAnswer(ErrorCoded, Entity, Protocol):
    """The head of a ``FetchResponse`` of a session (v7+)."""

    @property
    def session_id(self) -> int: ...


class _PartitionData(PartitionIndexed, ErrorCoded, Entity, Protocol):
    """``FetchResponse.PartitionData`` of any version."""


class _TopicResponse(Protocol):
    """``FetchResponse.FetchableTopicResponse``, named as :class:`_Topic` is."""

    @property
    def partitions(self) -> Sequence[_PartitionData]: ...


class _FetchResponse(Entity, Protocol):
    @property
    def responses(self) -> Sequence[_TopicResponse]: ...


_Answer = TypeVar("_Answer", bound=_SessionAnswer)
_Response = TypeVar("_Response", bound=_FetchResponse)

_CHECKED_BEFORE_READING = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.topic_authorization_failed,
    }
)
"""Errors Kafka sets before reading the log (``erroneous`` in ``handleFetchRequest``)."""

MAX_SESSIONS_PER_CONNECTION = 8
"""A client keeps one session per broker connection; older mirrors are evicted (their next
incremental request then gets 70 and the client starts a new session)."""

MAX_SESSION_PARTITIONS = 10_000
"""Partitions one session mirror may hold (denied and withheld ones included), so a client
cannot grow the proxy's memory without bound by naming partitions incrementally — the broker
never sees the denied ones, so its own limits do not apply to them. Kafka has no per-session
partition limit (``max.incremental.fetch.session.cache.slots`` bounds the *number* of cached
sessions per broker, 1000 by default); 10,000 is far above what one consumer fetches from one
broker. An incremental request growing a mirror past it drops the mirror and is answered
FETCH_SESSION_ID_NOT_FOUND (70): the client closes the session and sends a full fetch. A full
fetch above it (epoch 0) is forwarded sessionless (epoch −1): the broker assigns no session id,
so the client keeps sending full fetches, which the proxy authorizes whole each time."""


@dataclass(slots=True)
class _Step:
    """What one forwarded incremental request changes in the broker's session, if accepted
    (``FetchSession.update``: add or update ``sent``, then drop ``forgotten``)."""

    sent: set[PartitionKey]
    forgotten: set[PartitionKey]


@dataclass(slots=True)
class SessionMirror:
    """The proxy's copy of one fetch session: what the client's session holds, and what the
    broker's does and may."""

    version: int
    partitions: dict[PartitionKey, _Partition]
    """The client's session once every request in flight is accepted: partition → the latest
    request entry the client sent for it, in session order (denied partitions included)."""
    upstream: set[PartitionKey]
    """The broker's session once every request in flight is accepted (``partitions`` minus the
    withheld ones)."""
    confirmed: set[PartitionKey]
    """The broker's session as its last answer confirmed it."""
    epoch: int = 1
    """The epoch the next incremental request must carry: the broker's ``FetchSession.epoch``
    once every request in flight is accepted (a new session starts at 1)."""
    in_flight: deque[_Step] = field(default_factory=deque)
    """The forwarded requests not answered yet, oldest first."""

    def may_hold(self) -> set[PartitionKey]:
        """Every partition the broker's session may hold now, whichever requests in flight it
        accepts: the confirmed session and every addition in flight."""
        held = self.confirmed
        for step in self.in_flight:
            held = held | step.sent
        return held


class FetchSessions:
    """The session mirrors of one connection (its :class:`~base.ConnectionState`)."""

    def __init__(self) -> None:
        self.by_id: dict[int, SessionMirror] = {}

    def add(self, session_id: int, mirror: SessionMirror) -> None:
        remember_newest(self.by_id, session_id, mirror, MAX_SESSIONS_PER_CONNECTION)

    def drop(self, session_id: int, mirror: SessionMirror) -> None:
        """Forget ``mirror`` if it is still the one kept for ``session_id``."""
        if self.by_id.get(session_id) is mirror:
            del self.by_id[session_id]


def connection_sessions(ctx: HandlerContext) -> FetchSessions:
    """The session mirrors of ``ctx``'s connection (kept as long as the connection lives)."""
    return ctx.connection_state.get(FetchSessions)


def next_epoch(epoch: int) -> int:
    """``FetchMetadata.nextEpoch``: the epoch after ``epoch`` (after ``Integer.MAX_VALUE``: 1)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_INT32 else epoch + 1


def _session_created(
    sessions: FetchSessions,
    version: int,
    requested: dict[PartitionKey, _Partition],
    sent: list[PartitionKey],
) -> FetchHead:
    """The answer to a full fetch with epoch 0: a session id without error means the broker
    created a session holding exactly the partitions sent (``FullFetchContext``)."""

    def created(error_code: int, session_id: int) -> None:
        if error_code == ErrorCode.none and session_id != INVALID_SESSION_ID:
            mirror = SessionMirror(version, dict(requested), set(sent), set(sent))
            sessions.add(session_id, mirror)

    return created


def _step_answered(
    sessions: FetchSessions, session_id: int, mirror: SessionMirror, step: _Step
) -> FetchHead:
    """The answer to an incremental request: its step is confirmed when the broker answers
    without error for the same session, else the mirror is dropped (module docstring)."""

    def answered(error_code: int, answered_id: int) -> None:
        if not mirror.in_flight or mirror.in_flight[0] is not step:
            sessions.drop(session_id, mirror)  # answers out of step: no longer known
            return
        mirror.in_flight.popleft()
        if error_code == ErrorCode.none and answered_id == session_id:
            mirror.confirmed |= step.sent  # in place: work in proportion to the change
            mirror.confirmed -= step.forgotten
        else:
            sessions.drop(session_id, mirror)

    return answered


def _observed(head: FetchHead) -> ResponseRewrite:
    """``head`` told the fields of a response that is decoded anyway."""

    def observe(response: _Answer) -> _Answer:
        head(int(response.error_code), int(response.session_id))
        return response

    return observe


class _Fetch:
    """What the handler reads of a Fetch request (a plain slots class: one per request)."""

    __slots__ = ("epoch", "requested", "session_id", "tkey", "version")

    def __init__(self, request: Request[FetchBody]) -> None:
        body = request.body
        version = self.version = request.header.api_version
        tkey = self.tkey = "topic" if version < 13 else "topic_id"
        """The field naming a topic: ``topic`` (v4–12) or ``topic_id`` (v13+)."""
        sessions_on = version >= 7
        self.session_id: int = int(body.session_id) if sessions_on else 0
        self.epoch: int = int(body.session_epoch) if sessions_on else -1
        """−1 without sessions (v0–6, or a sessionless client), 0 opens one, any other
        continues one."""
        self.requested: dict[PartitionKey, _Partition] = {
            (getattr(t, tkey), p.partition): p for t in body.topics for p in t.partitions
        }
        """Partition → its request entry, in request order."""


@dataclass(slots=True)
class _SessionUpdate:
    """An incremental request's session, between its update and its checks."""

    sessions: FetchSessions
    mirror: SessionMirror
    may_hold: set[PartitionKey]
    """What the broker's session may hold before this request."""
    forgotten: set[PartitionKey]
    """What this request forgets."""
    context: list[PartitionKey]
    """The session's partitions after this request: Kafka's fetch context."""


class _Checks:
    """The checks of a fetch (two phases, base.Authorize): CLUSTER_ACTION for a follower,
    else READ on each topic (one reference per partition, as Kafka counts them)."""

    __slots__ = ("actions", "fetch", "partitions", "session", "topics")

    def __init__(
        self,
        request: Request[FetchBody],
        ctx: HandlerContext,
        partitions: list[PartitionKey],
        fetch: _Fetch,
        session: _SessionUpdate | None = None,
    ) -> None:
        self.partitions = partitions
        self.fetch = fetch
        self.session = session
        """The session an incremental fetch updated (None: a full fetch)."""
        self.topics: TopicChecks | None = None
        """None for a follower."""
        if not partitions:
            self.actions: Sequence[Action] = ()
        elif _is_follower(request.body):
            self.actions = [Action(AclOperation.CLUSTER_ACTION, CLUSTER, 1, True, True)]
        else:
            self.topics = TopicChecks(ctx, AclOperation.READ, [k for k, _ in partitions])
            self.actions = self.topics.actions

    def denied(
        self, request: Request, ctx: HandlerContext, results: Sequence[AuthorizationResult]
    ) -> dict[PartitionKey, ErrorCode]:
        """Denied partitions of the fetch context, in context order."""
        partitions = self.partitions
        if not partitions:
            return {}
        if self.topics is not None:
            topics = self.topics.denied(results)
            if not topics:
                return {}
        elif results[0] is not AuthorizationResult.ALLOWED:
            return dict.fromkeys(partitions, ErrorCode.topic_authorization_failed)
        else:
            topics = {}
            for key, _ in partitions:
                name = key if isinstance(key, str) else ctx.topic_name(key)
                if name is None:
                    topics[key] = ErrorCode.unknown_topic_id
                elif ctx.internal_topic(request, name):  # the proxy's, whoever follows
                    topics[key] = ErrorCode.topic_authorization_failed
        return {part: topics[part[0]] for part in partitions if part[0] in topics}


def _forgotten(body: FetchBody, tkey: str) -> Iterator[PartitionKey]:
    for topic in body.forgotten_topics_data:
        for index in topic.partitions:
            yield getattr(topic, tkey), index


def _is_follower(body: FetchBody) -> bool:
    state = getattr(body, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(body, "replica_id", -1)
    return int(replica_id) >= 0


class FetchHandler(ApiHandler[FetchBody, _Checks]):
    api_key = 1
    decode_request = True

    def topic_ids(self, request: Request[FetchBody]) -> Iterable[uuid.UUID]:
        if request.header.api_version < 13:  # topics by name: nothing to walk
            return ()
        return listed_topic_ids(request.body, "topics")

    # -- deciding ----------------------------------------------------------------------------
    def on_request(
        self, request: Request[FetchBody], ctx: HandlerContext
    ) -> Verdict | Authorize[_Checks]:
        """Two phases (base.Authorize): the checks of the fetch context (a full fetch's
        partitions, or an incremental one's session once updated, :meth:`_incremental`), then
        the verdict (:meth:`on_authorized`)."""
        fetch = _Fetch(request)
        if fetch.epoch not in (INITIAL_EPOCH, FINAL_EPOCH):  # ``FetchMetadata.isFull``
            return self._incremental(request, ctx, fetch)
        if fetch.session_id:  # a full fetch naming a session closes it
            connection_sessions(ctx).by_id.pop(fetch.session_id, None)
        checks = _Checks(request, ctx, list(fetch.requested), fetch)
        return Authorize(checks.actions, checks)

    def on_authorized(
        self,
        request: Request[FetchBody],
        ctx: HandlerContext,
        state: _Checks,
        results: Sequence[AuthorizationResult],
    ) -> Verdict:
        checks = state
        denied = checks.denied(request, ctx, results)
        if checks.session is None:
            return self._full(request, ctx, checks.fetch, denied)
        return self._incremental_checked(request, ctx, checks.fetch, checks.session, denied)

    # -- full fetches --------------------------------------------------------------------------
    def _full(
        self,
        request: Request[FetchBody],
        ctx: HandlerContext,
        fetch: _Fetch,
        denied: dict[PartitionKey, ErrorCode],
    ) -> Verdict:
        body = request.body
        requested = fetch.requested
        new_session = fetch.epoch == INITIAL_EPOCH
        sessionless = new_session and len(requested) > MAX_SESSION_PARTITIONS
        sent = [k for k in requested if k not in denied]
        head = (
            _session_created(connection_sessions(ctx), fetch.version, requested, sent)
            if new_session and not sessionless
            else None
        )
        if not denied:
            upstream = codec.replace(body, session_epoch=FINAL_EPOCH) if sessionless else None
            return self._forward(request, ctx, cast(RequestPayload | None, upstream), None, head)
        changes: dict[str, object] = {"session_epoch": FINAL_EPOCH} if sessionless else {}
        kept = self._topics(body, fetch.tkey, sent, requested)
        merge = self._merger(request, list(requested), denied)
        # With a merge the response is always decoded: ``_forward``'s skim has no part here.
        learn = None if head is None else _observed(head)
        rewrite = chain(learn, node_endpoints_rewrite(request, ctx))
        return split(request, "topics", kept, "responses", merge, rewrite=rewrite, changes=changes)

    # -- incremental fetches -------------------------------------------------------------------
    def _incremental(
        self, request: Request[FetchBody], ctx: HandlerContext, fetch: _Fetch
    ) -> Verdict | Authorize[_Checks]:
        """``FetchManager.newContext`` on the mirror (session, epoch, topic ids, update), then
        the checks: every partition of the session and every partition the broker may hold is
        authorized, as ``handleFetchRequest`` authorizes its fetch context
        (:meth:`_incremental_checked` reads the results)."""
        sessions = connection_sessions(ctx)
        mirror = sessions.by_id.get(fetch.session_id)
        if mirror is None:
            return Respond(self._session_error(request, ErrorCode.fetch_session_id_not_found))
        if fetch.epoch != mirror.epoch:
            return Respond(self._session_error(request, ErrorCode.invalid_fetch_session_epoch))
        if (mirror.version >= 13) != (fetch.version >= 13):
            return Respond(self._session_error(request, ErrorCode.fetch_session_topic_id_error))
        if mirror.version != fetch.version:
            return Respond(self._session_error(request, ErrorCode.fetch_session_id_not_found))
        body = request.body
        requested = fetch.requested
        may_hold = mirror.may_hold()
        partitions = mirror.partitions
        partitions.update(requested)
        forgotten = set(_forgotten(body, fetch.tkey))
        for key in forgotten:
            partitions.pop(key, None)
        if len(partitions) > MAX_SESSION_PARTITIONS:
            del sessions.by_id[fetch.session_id]
            return Respond(self._session_error(request, ErrorCode.fetch_session_id_not_found))
        mirror.epoch = next_epoch(mirror.epoch)
        context = list(partitions)
        # Everything the broker may read for this request is authorized: the context (Kafka's
        # check), what the broker may still hold outside it (added by a request in flight; what
        # this request forgets is dropped before the broker reads), and partitions named in
        # ``topics`` and forgotten by the same request (Kafka adds, then forgets) yet forwarded.
        outside = [k for k in requested if k not in partitions]
        held = (k for k in may_hold if k not in partitions and k not in forgotten)
        outside += sorted(held, key=lambda k: (str(k[0]), k[1]))  # a set: a stable order
        update = _SessionUpdate(sessions, mirror, may_hold, forgotten, context)
        checks = _Checks(request, ctx, context + outside, fetch, update)
        return Authorize(checks.actions, checks)

    def _incremental_checked(
        self,
        request: Request[FetchBody],
        ctx: HandlerContext,
        fetch: _Fetch,
        update: _SessionUpdate,
        checked: dict[PartitionKey, ErrorCode],
    ) -> Verdict:
        """The broker's session kept to what is authorized: newly denied partitions forgotten
        upstream, regranted ones re-added; denied ones answered by the proxy."""
        sessions, mirror, may_hold = update.sessions, update.mirror, update.may_hold
        forgotten, context = update.forgotten, update.context
        body = request.body
        requested = fetch.requested
        partitions = mirror.partitions
        denied = {k: code for k, code in checked.items() if k in partitions}
        forget = [k for k in checked if k in may_hold and k not in forgotten]
        readd = [
            k
            for k in context
            if k not in checked and k not in requested and k not in mirror.upstream
        ]
        sent = [k for k in requested if k not in checked] + readd
        step = _Step(set(sent), forgotten.union(forget))
        mirror.upstream |= step.sent
        mirror.upstream -= step.forgotten
        mirror.in_flight.append(step)
        head = _step_answered(sessions, fetch.session_id, mirror, step)
        if not checked and not readd:
            return self._forward(request, ctx, None, None, head)
        topics = self._topics(body, fetch.tkey, sent, {**requested, **partitions})
        upstream_forgotten: list[_ForgottenTopic] = list(body.forgotten_topics_data)
        if forget:
            forgotten_type = codec.nested_type(type(body), "forgotten_topics_data")
            for topic, indexes in _group(forget).items():
                upstream_forgotten.append(
                    forgotten_type(**{fetch.tkey: topic, "partitions": tuple(indexes)})
                )
        upstream = codec.replace(
            body, topics=topics, forgotten_topics_data=tuple(upstream_forgotten)
        )
        merge = self._merger(request, context, denied)
        return self._forward(request, ctx, cast(RequestPayload, upstream), merge, head)

    @staticmethod
    def _topics(
        body: FetchBody,
        tkey: str,
        keys: list[PartitionKey],
        entries: dict[PartitionKey, _Partition],
    ) -> tuple[Entity, ...]:
        """Topic entries for ``keys``, in their order: consecutive partitions of one topic share
        an entry, so the broker's context keeps the client's partition order."""
        topic_type = codec.nested_type(type(body), "topics")
        runs: list[tuple[TopicKey, list[_Partition]]] = []
        for key, index in keys:
            if runs and runs[-1][0] == key:
                runs[-1][1].append(entries[(key, index)])
            else:
                runs.append((key, [entries[(key, index)]]))
        return tuple(topic_type(**{tkey: k, "partitions": tuple(v)}) for k, v in runs)

    # -- responses -----------------------------------------------------------------------------
    def _merger(
        self,
        request: Request[FetchBody],
        order: list[PartitionKey],
        denied: dict[PartitionKey, ErrorCode],
    ) -> ResponseRewrite:
        """Put ``FetchResponse.partitionResponse(error)`` entries for ``denied`` among the
        broker's partitions in Kafka's order (``KafkaApis.handleFetchRequest``): first the
        partitions read from the log, then the ``erroneous`` ones (denied, unknown topic id,
        unknown partition), each in the fetch context's order; consecutive partitions of one
        topic share a topic entry (``FetchResponse.toMessage``)."""
        version = request.header.api_version
        schema = codec.response_schema(1, version)
        topic_type = codec.nested_type(schema, "responses")
        partition_type = codec.nested_type(topic_type, "partitions")
        tkey = "topic" if version < 13 else "topic_id"
        fields = partition_type.__dataclass_fields__
        values = {
            k: v
            for k, v in {
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "preferred_read_replica": -1,
                "aborted_transactions": (),
                "records": b"",
            }.items()
            if k in fields
        }
        synthesized: dict[PartitionKey, Entity] = {
            part: codec.make_entity(partition_type, code, partition_index=part[1], **values)
            for part, code in denied.items()
        }
        denied_topics = {key for key, _ in denied}
        in_context = set(order)

        def merge(response: _Response) -> _Response:
            # only partitions sent upstream: nothing else may reach the client
            from_broker: dict[PartitionKey, _PartitionData] = {}
            for t in response.responses:
                key = getattr(t, tkey)
                if key in denied_topics:
                    continue
                for p in t.partitions:
                    part = (key, int(p.partition_index))
                    if part in in_context:
                        from_broker.setdefault(part, p)
            present = [k for k in order if k in synthesized or k in from_broker]
            code = {k: denied[k] if k in denied else from_broker[k].error_code for k in present}
            # Kafka: partitions read from the log; then unknown topic ids (resolved first);
            # then the partitions its authorization/metadata pass rejected.
            sequence = [k for k in present if code[k] not in _CHECKED_BEFORE_READING]
            sequence += [k for k in present if code[k] == ErrorCode.unknown_topic_id]
            sequence += [
                k
                for k in present
                if code[k] in _CHECKED_BEFORE_READING and code[k] != ErrorCode.unknown_topic_id
            ]
            runs: list[tuple[TopicKey, list[Entity]]] = []
            for key, index in sequence:
                entry = synthesized.get((key, index)) or from_broker[(key, index)]
                if runs and runs[-1][0] == key:
                    runs[-1][1].append(entry)
                else:
                    runs.append((key, [entry]))
            merged = tuple(topic_type(**{tkey: k, "partitions": tuple(ps)}) for k, ps in runs)
            return codec.replace(response, responses=merged)

        return merge

    def _session_error(self, request: Request[FetchBody], code: ErrorCode) -> ResponsePayload:
        """``SessionErrorContext``: ``FetchResponse.of(error, 0, INVALID_SESSION_ID, empty)``."""
        schema = codec.response_schema(1, request.header.api_version)
        return codec.make_entity(schema, code, session_id=INVALID_SESSION_ID, responses=())

    def _forward(
        self,
        request: Request[FetchBody],
        ctx: HandlerContext,
        upstream: RequestPayload | None,
        rewrite: ResponseRewrite | None,
        head: FetchHead | None,
    ) -> Verdict:
        if rewrite is not None:
            learn = None if head is None else _observed(head)
            endpoints = node_endpoints_rewrite(request, ctx)
            return Forward(request=upstream, rewrite=chain(learn, endpoints, rewrite))
        if head is not None:
            return Forward(request=upstream, transform=self._head_transform(request, ctx, head))
        if upstream is None:
            # Only the KIP-951 addresses may need rewriting, and brokers rarely send them:
            # the raw response is walked for them (as it streams, when large) and only its
            # tail is rewritten; no record batch is decoded.
            return allowed_forward(request, ctx)
        endpoints = node_endpoints_rewrite(request, ctx)
        if endpoints is None:
            return Forward(request=upstream)
        version = request.header.api_version
        return Forward(
            request=upstream,
            rewrite=endpoints,
            decode_if=lambda frame: fetch_response_has_node_endpoints(frame, version),
            transform=node_endpoints_transform(request, ctx, endpoints),
        )

    @staticmethod
    def _head_transform(
        request: Request[FetchBody], ctx: HandlerContext, head: FetchHead
    ) -> ResponseTransform:
        """The raw response of a session request, told to ``head`` without decoding it, as it
        streams: v12+ walked by its lengths (with its ``node_endpoints`` tail rewritten), v7–11
        read at the fixed place of their head."""
        version = request.header.api_version
        tail = node_endpoints_transform(request, ctx)
        if tail is None:  # v7–15: no addresses; a frame that cannot be walked goes as is
            return NodeEndpointsTail(1, version, ctx.advertise_node, lambda frame: frame, head)
        return replace(tail, head=head)


def _group(keys: Iterable[PartitionKey]) -> dict[TopicKey, list[int]]:
    out: dict[TopicKey, list[int]] = {}
    for key, index in keys:
        out.setdefault(key, []).append(index)
    return out


HANDLERS: list[ApiHandler] = [FetchHandler()]
