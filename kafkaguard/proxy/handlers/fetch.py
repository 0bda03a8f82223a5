"""Fetch (api key 1): ``KafkaApis.handleFetchRequest``, incremental sessions included.

Checks, as Kafka makes them over every partition of the fetch *context* (the request for a
full fetch, the whole session for an incremental one):

* follower (``replica_id`` ≥ 0, v15+ ``replica_state.replica_id``): CLUSTER_ACTION on the
  cluster; denied → TOPIC_AUTHORIZATION_FAILED (29) on every partition (not 31);
* consumer: READ TOPIC per topic (``filterByAuthorized``, reference count = partitions);
* v13+ topic ids: resolved before authorization, as Kafka does — ids the proxy has not seen
  in a broker answer are looked up with the broker first (``ask.py``); an id the broker does
  not know either → UNKNOWN_TOPIC_ID (100) per partition, never forwarded.

Denied partitions are stripped from the forwarded request and answered with Kafka's
``FetchResponse.partitionResponse(error)`` (high watermark, LSO, log start −1, no records).

Incremental fetch sessions (KIP-227). The broker keeps the session's partitions and returns
their data without the client naming them again, so the proxy mirrors each session per
connection and authorizes the whole mirror on every request, as Kafka does:

* A full fetch with epoch 0 creates a session; its response is decoded (only then) to learn the
  session id the *broker* assigned on this connection. An incremental request naming a session
  the proxy did not see created here gets FETCH_SESSION_ID_NOT_FOUND (70) without reaching the
  broker — the client answers that with a new full fetch — so a guessed or foreign session id
  can never pull data past the proxy.
* The broker's session never holds a denied partition: a partition that becomes denied while it
  is in the session is added to ``forgotten_topics_data`` of the forwarded request; denied
  partitions are never sent. The client still considers them part of its session, so every
  response carries their 29 (Kafka includes erroneous partitions in each incremental response).
  When READ is granted again the proxy re-adds the partition upstream with the fetch position
  the client last sent for it (the client re-sends a partition whenever its position changes,
  so that is the current one).
* Incremental requests are always forwarded (even with nothing authorized) so the broker's
  session epoch stays in step with the client's — except one that grows the mirror past
  :data:`MAX_SESSION_PARTITIONS`, answered 70 (the mirror is dropped, the client starts over).
* Whatever is sent upstream is authorized, including a partition named in ``topics`` and in
  ``forgotten_topics_data`` of the same request (outside the session, so outside Kafka's
  check); a requested partition that is dropped means the request is rewritten.

Fast path: nothing denied and no withheld partition → the client's bytes go up unchanged and the
response is not decoded (v16+ responses are walked by their lengths, as they stream, and only
a ``node_endpoints`` tail is rewritten, :mod:`kafkaguard.protocol.skim`; epoch-0 fetches are
decoded to learn the session id). Sessionless clients (epoch −1) never pay for the mirror.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.skim import fetch_response_has_node_endpoints
from kafkaguard.proxy.handlers.addresses import (
    allowed_forward,
    node_endpoints_rewrite,
    node_endpoints_transform,
)
from kafkaguard.proxy.handlers.ask import listed_topic_ids
from kafkaguard.proxy.handlers.authz import CLUSTER, TopicKey, authorize_topics, is_allowed
from kafkaguard.proxy.handlers.base import (
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    ResponseRewrite,
    Verdict,
    remember_newest,
)
from kafkaguard.proxy.handlers.responses import chain, split

PartitionKey = tuple[TopicKey, int]
"""A partition as the request names it: topic name (v4–12) or topic id (v13+), and index."""

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
class SessionMirror:
    """What the client believes its session holds, and which of it the broker does not."""

    version: int
    partitions: dict[PartitionKey, Any]
    """Partition → the latest request entry the client sent for it, in session order."""
    withheld: dict[PartitionKey, ErrorCode] = field(default_factory=dict)
    """Partitions in the client's session but not in the broker's, with their error."""


class FetchSessions:
    """The session mirrors of one connection (its :class:`~base.ConnectionState`)."""

    def __init__(self) -> None:
        self.by_id: dict[int, SessionMirror] = {}

    def add(self, session_id: int, mirror: SessionMirror) -> None:
        remember_newest(self.by_id, session_id, mirror, MAX_SESSIONS_PER_CONNECTION)


def connection_sessions(ctx: HandlerContext) -> FetchSessions:
    """The session mirrors of ``ctx``'s connection (kept as long as the connection lives)."""
    return ctx.connection_state.get(FetchSessions)


@dataclass(frozen=True, slots=True)
class _Fetch:
    """What the handler reads of a Fetch request."""

    version: int
    tkey: str
    """The field naming a topic: ``topic`` (v4–12) or ``topic_id`` (v13+)."""
    session_id: int
    epoch: int
    """−1 without sessions (v0–6, or a sessionless client), 0 opens one, > 0 continues one."""
    requested: dict[PartitionKey, Any]
    """Partition → its request entry, in request order."""

    @classmethod
    def of(cls, request: Request) -> _Fetch:
        body: Any = request.body
        version = request.header.api_version
        tkey = "topic" if version < 13 else "topic_id"
        sessions_on = version >= 7
        return cls(
            version,
            tkey,
            int(body.session_id) if sessions_on else 0,
            int(body.session_epoch) if sessions_on else -1,
            {(getattr(t, tkey), p.partition): p for t in body.topics for p in t.partitions},
        )


@dataclass(frozen=True, slots=True)
class _MirrorUpdate:
    """A session mirror after an incremental request, and what the broker's session held
    before it (what may need forgetting upstream)."""

    mirror: SessionMirror
    broker_has: set[PartitionKey]
    """Partitions of the broker's session before this request."""


def _update_mirror(ctx: HandlerContext, body: Any, fetch: _Fetch) -> _MirrorUpdate | None:
    """The session-mirror step (KIP-227): apply an incremental request to the proxy's copy of
    the client's session as the broker applies it to its own (``FetchSession.update``: add or
    update the named partitions, then drop the forgotten ones). ``None`` when the request must
    be answered FETCH_SESSION_ID_NOT_FOUND (70): a session not created on this connection (or
    at another version), or one grown past :data:`MAX_SESSION_PARTITIONS` (its mirror is
    dropped)."""
    sessions = connection_sessions(ctx)
    mirror = sessions.by_id.get(fetch.session_id)
    if mirror is None or mirror.version != fetch.version:
        return None
    broker_has = {k for k in mirror.partitions if k not in mirror.withheld}
    mirror.partitions.update(fetch.requested)
    for key in _forgotten(body, fetch.tkey):
        mirror.partitions.pop(key, None)
        mirror.withheld.pop(key, None)
    if len(mirror.partitions) > MAX_SESSION_PARTITIONS:
        del sessions.by_id[fetch.session_id]
        return None
    return _MirrorUpdate(mirror, broker_has)


def _forgotten(body: Any, tkey: str) -> Iterator[PartitionKey]:
    for topic in body.forgotten_topics_data:
        for index in topic.partitions:
            yield getattr(topic, tkey), index


def _is_follower(body: Any) -> bool:
    state = getattr(body, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(body, "replica_id", -1)
    return int(replica_id) >= 0


class FetchHandler(ApiHandler):
    api_key = 1
    decode_request = True

    def topic_ids(self, request: Request) -> Iterable[uuid.UUID]:
        return listed_topic_ids(request.body, "topics")

    # -- deciding ----------------------------------------------------------------------------
    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        fetch = _Fetch.of(request)
        if fetch.epoch > 0:
            update = _update_mirror(ctx, request.body, fetch)
            if update is None:
                return Respond(self._session_error(request))
            return self._incremental(request, ctx, fetch, update)
        if fetch.session_id:  # epoch 0/-1 with an id closes that session
            connection_sessions(ctx).by_id.pop(fetch.session_id, None)
        denied = self._decide(request, ctx, list(fetch.requested))
        return self._full(request, ctx, fetch, denied)

    def _decide(
        self, request: Request, ctx: HandlerContext, partitions: list[PartitionKey]
    ) -> dict[PartitionKey, ErrorCode]:
        """Denied partitions of the fetch context, in context order."""
        if not partitions:
            return {}
        if _is_follower(request.body):
            if not is_allowed(ctx, request, AclOperation.CLUSTER_ACTION, CLUSTER):
                return dict.fromkeys(partitions, ErrorCode.topic_authorization_failed)
            topics: dict[TopicKey, ErrorCode] = {
                key: ErrorCode.unknown_topic_id
                for key, _ in partitions
                if not isinstance(key, str) and ctx.topic_name(key) is None
            }
        else:  # one reference per partition, as Kafka counts them
            topics = authorize_topics(ctx, request, AclOperation.READ, [k for k, _ in partitions])
        return {part: topics[part[0]] for part in partitions if part[0] in topics}

    # -- full fetches --------------------------------------------------------------------------
    def _full(
        self,
        request: Request,
        ctx: HandlerContext,
        fetch: _Fetch,
        denied: dict[PartitionKey, ErrorCode],
    ) -> Verdict:
        body: Any = request.body
        requested = fetch.requested
        new_session = fetch.epoch == 0
        sessionless = new_session and len(requested) > MAX_SESSION_PARTITIONS
        learn = (
            self._session_learner(ctx, fetch.version, requested, denied)
            if new_session and not sessionless
            else None
        )
        changes: dict[str, Any] = {"session_epoch": -1} if sessionless else {}
        if not denied:
            upstream = codec.replace(body, **changes) if changes else None
            return self._forward(request, ctx, upstream, learn)
        kept = self._topics(body, fetch.tkey, [k for k in requested if k not in denied], requested)
        merge = self._merger(request, list(requested), denied)
        # With a merge the response is always decoded: ``_forward``'s skim has no part here.
        rewrite = chain(node_endpoints_rewrite(request, ctx), learn)
        return split(request, "topics", kept, "responses", merge, rewrite=rewrite, changes=changes)

    def _session_learner(
        self,
        ctx: HandlerContext,
        version: int,
        requested: dict[PartitionKey, Any],
        denied: dict[PartitionKey, ErrorCode],
    ) -> ResponseRewrite:
        sessions = connection_sessions(ctx)

        def learn(response: Any) -> Any:
            if response.error_code == ErrorCode.none and response.session_id:
                mirror = SessionMirror(version, dict(requested), dict(denied))
                sessions.add(int(response.session_id), mirror)
            return response

        return learn

    # -- incremental fetches -------------------------------------------------------------------
    def _incremental(
        self, request: Request, ctx: HandlerContext, fetch: _Fetch, update: _MirrorUpdate
    ) -> Verdict:
        """The authorization step of an incremental fetch: the whole session is authorized,
        as ``handleFetchRequest`` authorizes its fetch context, and the broker's session is
        kept to what is authorized: newly denied partitions are forgotten upstream, regranted
        ones re-added."""
        mirror, requested = update.mirror, fetch.requested
        context = list(mirror.partitions)
        # Everything sent upstream is authorized: the context (Kafka's check) plus partitions
        # named in ``topics`` and also forgotten by the same request, which leave the session
        # (Kafka adds, then forgets) yet would still be forwarded.
        also_sent = [k for k in requested if k not in mirror.partitions]
        checked = self._decide(request, ctx, context + also_sent)
        denied = {k: code for k, code in checked.items() if k in mirror.partitions}
        dropped = [k for k in also_sent if k in checked]
        forget = [k for k in denied if k in update.broker_has]
        readd = [k for k in mirror.withheld if k not in denied and k not in requested]
        mirror.withheld = denied
        if not denied and not readd and not dropped:
            return self._forward(request, ctx, None, None)
        upstream = self._incremental_request(
            request.body, fetch.tkey, mirror, requested, checked, forget, readd
        )
        return self._forward(request, ctx, upstream, self._merger(request, context, denied))

    def _incremental_request(
        self,
        body: Any,
        tkey: str,
        mirror: SessionMirror,
        requested: dict[PartitionKey, Any],
        denied: dict[PartitionKey, ErrorCode],
        forget: list[PartitionKey],
        readd: list[PartitionKey],
    ) -> Any:
        """``denied`` covers every requested partition (in the session or not)."""
        sent = [k for k in requested if k not in denied] + readd
        topics = self._topics(body, tkey, sent, {**requested, **mirror.partitions})
        forgotten = list(body.forgotten_topics_data)
        if forget:
            forgotten_type = codec.nested_type(type(body), "forgotten_topics_data")
            for key, indexes in _group(forget).items():
                forgotten.append(forgotten_type(**{tkey: key, "partitions": tuple(indexes)}))
        return codec.replace(body, topics=topics, forgotten_topics_data=tuple(forgotten))

    @staticmethod
    def _topics(
        body: Any, tkey: str, keys: list[PartitionKey], entries: dict[PartitionKey, Any]
    ) -> tuple[Any, ...]:
        """Topic entries for ``keys``, in their order: consecutive partitions of one topic share
        an entry, so the broker's context keeps the client's partition order."""
        topic_type = codec.nested_type(type(body), "topics")
        runs: list[tuple[TopicKey, list[Any]]] = []
        for key, index in keys:
            if runs and runs[-1][0] == key:
                runs[-1][1].append(entries[(key, index)])
            else:
                runs.append((key, [entries[(key, index)]]))
        return tuple(topic_type(**{tkey: k, "partitions": tuple(v)}) for k, v in runs)

    # -- responses -----------------------------------------------------------------------------
    def _merger(
        self, request: Request, order: list[PartitionKey], denied: dict[PartitionKey, ErrorCode]
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
        synthesized = {
            part: codec.make_entity(partition_type, code, partition_index=part[1], **values)
            for part, code in denied.items()
        }
        denied_topics = {key for key, _ in denied}
        in_context = set(order)

        def merge(response: Any) -> Any:
            # only partitions sent upstream: nothing else may reach the client
            from_broker: dict[PartitionKey, Any] = {}
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
            runs: list[tuple[TopicKey, list[Any]]] = []
            for key, index in sequence:
                entry = synthesized.get((key, index)) or from_broker[(key, index)]
                if runs and runs[-1][0] == key:
                    runs[-1][1].append(entry)
                else:
                    runs.append((key, [entry]))
            merged = tuple(topic_type(**{tkey: k, "partitions": tuple(ps)}) for k, ps in runs)
            return codec.replace(response, responses=merged)

        return merge

    def _session_error(self, request: Request) -> Any:
        """``FetchResponse.of(FETCH_SESSION_ID_NOT_FOUND, 0, INVALID_SESSION_ID, empty)``."""
        schema = codec.response_schema(1, request.header.api_version)
        return codec.make_entity(
            schema, ErrorCode.fetch_session_id_not_found, session_id=0, responses=()
        )

    def _forward(
        self,
        request: Request,
        ctx: HandlerContext,
        upstream: Any,
        rewrite: ResponseRewrite | None,
    ) -> Verdict:
        if rewrite is None and upstream is None:
            # Only the KIP-951 addresses may need rewriting, and brokers rarely send them:
            # the raw response is walked for them (as it streams, when large) and only its
            # tail is rewritten; no record batch is decoded.
            return allowed_forward(request, ctx)
        endpoints = node_endpoints_rewrite(request, ctx)
        if endpoints is not None and rewrite is None:
            version = request.header.api_version
            return Forward(
                request=upstream,
                rewrite=endpoints,
                decode_if=lambda frame: fetch_response_has_node_endpoints(frame, version),
                transform=node_endpoints_transform(request, ctx, endpoints),
            )
        return Forward(request=upstream, rewrite=chain(endpoints, rewrite))


def _group(keys: Iterable[PartitionKey]) -> dict[TopicKey, list[int]]:
    out: dict[TopicKey, list[int]] = {}
    for key, index in keys:
        out.setdefault(key, []).append(index)
    return out


HANDLERS: list[ApiHandler] = [FetchHandler()]
