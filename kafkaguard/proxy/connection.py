"""One client connection and its upstream connection: the thin asyncio shell.

Theory of operation. A client connection owns exactly one upstream connection, to the broker
its listener port stands for (the bootstrap port goes to a bootstrap server). Both sides are
``asyncio.Protocol`` objects (no stream wrappers: fewer copies and tasks on the hot path).
The upstream connection is opened when the first request must go to the broker: at once on
PLAINTEXT/SSL listeners, and on SASL listeners only after the client authenticated (before,
the proxy answers ApiVersions and SASL itself), so an anonymous client never makes the proxy
connect to a broker and a storm of failed logins costs no broker connection.

Request path: bytes → :class:`FrameBuffer` → header peek → registry lookup and version gate →
handler verdict (synchronous) → the original frame (or a rewritten one) is queued for the
broker; all frames completed by one read are written with one ``writelines``. A handler that
must ask the broker first (:class:`AskFirst`) has its question sent instead; later requests are
held until the answer has been turned into the verdict, so nothing overtakes it.

Response path: bytes → frames → each claims the oldest upstream slot of the
:class:`InflightQueue` (correlation ids must match) → the slot's transform runs only when the
handler asked to rewrite → ready responses leave strictly in request order. Cut-through: a
large response (≥ 64 KiB) that is next in line and needs no rewrite is written to the client
chunk by chunk as it arrives; until its last byte, nothing else is written to that client.

Flow control: client reads pause while the in-flight queue is full (checked after each read,
so the cap is exceeded by at most one read's worth of requests) or while the broker side's
write buffer is over its high-water mark; broker reads pause while the client's write buffer is
full. Any protocol error closes this connection only, with one log line naming the peer and the
reason; every close has a :class:`~kafkaguard.proxy.quotas.CloseCause`, counted
by the listener, whose lines are rate-limited per (listener, cause) so a flood of bad clients
cannot flood the log.

Limits and shutdown (the listener drives them): reads and writes mark the connection's
:class:`~kafkaguard.proxy.quotas.Liveness` active for the listener's idle sweep;
:meth:`ClientConnection.drain` stops reading and closes once the requests in flight are
answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, cast
from uuid import UUID

from kafkaguard.audit.config import ENFORCED_IN_LOG_ONLY, dry_run_results
from kafkaguard.policy.authorizer import (
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizationResult,
    RequestContext,
    operations_bitfield,
)
from kafkaguard.policy.model import (
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.principal_mapping import NoMatchingRuleError
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ResponsePayload
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame, FrameBuffer
from kafkaguard.protocol.header import RequestHeaderInfo, peek_correlation_id, peek_request_header
from kafkaguard.protocol.inflight import InflightQueue, ResponseTransform
from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.ask import decide
from kafkaguard.proxy.handlers.base import (
    AskFirst,
    Close,
    ConnectionState,
    Forward,
    Request,
    Respond,
    RespondLater,
    ResponseRewrite,
    Verdict,
)
from kafkaguard.proxy.quotas import CloseCause, Liveness
from kafkaguard.proxy.sasl.authenticator import SASL_AUTHENTICATE, SaslAuthenticator
from kafkaguard.proxy.sasl.authenticator import State as SaslState
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError, UpstreamSaslExchange
from kafkaguard.proxy.session import Session, peer_address

if TYPE_CHECKING:
    from kafkaguard.proxy.listener import ListenerRuntime

log = logging.getLogger("kafkaguard.proxy")

_CUT_THROUGH_MIN = 64 * 1024
"""Broker responses at least this large that need no rewrite are streamed as they arrive
instead of being buffered whole (a 1 MB Fetch response would otherwise reach the client only
after its last byte, adding its whole transfer time to every fetch cycle)."""
_UPSTREAM_MAX_FRAME = (1 << 31) - 1  # the broker is trusted to size its own responses

# Reasons client reading is paused; reading resumes when none is left.
_PAUSE_CONNECTING = "connecting"
_PAUSE_INFLIGHT = "inflight"
_PAUSE_UPSTREAM_FULL = "upstream-full"
_PAUSE_CLOSING = "closing"
_PAUSE_DRAINING = "draining"
_CLOSE_GRACE_S = 0.5
"""After the last response before a close (e.g. a failed SASL authentication) is written, how
long the client has to read it and close first. Nothing is read meanwhile."""


_INTERNAL_ERROR = Close("internal error while authorizing the request")
"""The verdict standing for a fault in a handler (closed as INTERNAL_ERROR, not BAD_REQUEST)."""


class _Traceback:
    """The current exception's traceback, formatted only if the rate-limited line is written."""

    __slots__ = ("_exc",)

    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def __str__(self) -> str:
        return "".join(traceback.format_exception(self._exc)).rstrip()


class ClientConnection(asyncio.Protocol):
    """The client side; also the :class:`HandlerContext` its handlers see."""

    def __init__(self, listener: ListenerRuntime, node_id: int | None, accepted_at: float) -> None:
        self._listener = listener
        self._node_id = node_id
        self._frames = FrameBuffer(listener.limits.max_frame_bytes)
        self._inflight = InflightQueue(listener.limits.max_inflight_requests)
        self._transport: asyncio.Transport | None = None
        self._upstream: UpstreamConnection | None = None
        self._upstream_opening = False
        """The upstream connection is being opened, or open (it is opened once)."""
        self._paused: set[str] = set()
        self._held: deque[Frame] = deque()
        """Requests received but not yet handled because the in-flight queue is full."""
        self._backlog: list[Frame] = []
        """Requests accepted before the upstream connection is up (uvloop starts reading
        right after ``connection_made``, whatever ``pause_reading`` said)."""
        self._closed = False
        self._asking = False
        """A question to the broker is outstanding (:class:`AskFirst`): later requests wait."""
        self._streaming = False
        """A broker response is being streamed to the client (cut-through)."""
        self.peer = "?"
        self.session = Session(listener.config.name, listener.security_protocol, peer_address(None))
        self._context_header: RequestHeaderInfo | None = None
        self._context: RequestContext | None = None
        self.connection_state = ConnectionState()
        # --- SASL (kafkaguard/proxy/sasl) ---
        self.sasl: SaslAuthenticator | None = None
        """The SASL state machine on SASL_PLAINTEXT/SASL_SSL listeners; gates every request."""
        self._closing: str | None = None
        """Set by :meth:`close_after_responses`: close once pending responses are written."""
        self._close_scheduled = False
        self._sasl_answers: set[asyncio.Task[None]] = set()
        """Pending SaslAuthenticate answers: abandoned with the connection, so that a password
        hash still waiting for the executor never runs for a client that left."""
        # --- end SASL ---
        self._upstream_refused = False
        """The upstream connection being set up must not be used (upstream SASL)."""
        # --- limits and shutdown (kafkaguard/proxy/quotas.py, ListenerRuntime) ---
        self.liveness = Liveness(accepted_at)
        """Idle and authentication deadlines, checked by the listener's sweep."""
        self.quota_host: str | None = None
        """The address the listener's ConnectionQuotas counted; cleared when released."""
        self._draining = False
        # --- end limits and shutdown ---

    # -- HandlerContext --------------------------------------------------------------------
    @property
    def listener_name(self) -> str:
        return self._listener.config.name

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self._listener.advertise_node(node_id, host, port)

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        return self._listener.advertised_node(node_id)

    @property
    def upstream_deferred(self) -> bool:
        return not self.authenticated

    def record_broker_api_versions(self, response: ResponsePayload) -> None:
        self._listener.cluster.record_broker_api_versions(response)

    def latest_api_versions(self, version: int) -> ResponsePayload | None:
        return self._listener.cluster.latest_api_versions(version)

    def supported_versions(self, api_key: int) -> range:
        return self._listener.cluster.supported_versions(api_key)

    def _request_context(self, request: Request) -> RequestContext:
        """KIP-504 context of ``request``, built once per request however many checks run."""
        header = request.header
        if self._context_header is not header or self._context is None:
            self._context = self.session.request_context(header)
            self._context_header = header
        return self._context

    # log_only (kafkaguard/audit): the authorizer decides and audits as usual; the request is
    # then handled as if allowed (dry_run_results), except ACL and credential administration.
    def _dry_run(self, request: Request) -> bool:
        return self._listener.log_only and request.header.api_key not in ENFORCED_IN_LOG_ONLY

    def authorize(self, request: Request, actions: Sequence[Action]) -> list[AuthorizationResult]:
        results = self._listener.authorizer.authorize(self._request_context(request), actions)
        if self._dry_run(request):
            return dry_run_results(actions, results)
        return results

    def authorize_by_resource_type(
        self, request: Request, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        result = self._listener.authorizer.authorize_by_resource_type(
            self._request_context(request), operation, resource_type
        )
        return AuthorizationResult.ALLOWED if self._dry_run(request) else result

    def authorized_operations(self, request: Request, resource: ResourcePattern) -> int:
        operations = self._listener.authorizer.authorized_operations(
            self._request_context(request), resource
        )
        if self._dry_run(request):  # as if allowed: every operation the resource supports
            operations = set(SUPPORTED_OPERATIONS.get(resource.resource_type, ()))
        return operations_bitfield(operations)

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return self._listener.authorizer.acls(acl_filter)

    def create_acls(
        self, request: Request, bindings: Sequence[AclBinding]
    ) -> Awaitable[list[AclCreateResult]]:
        return self._listener.authorizer.create_acls(self._request_context(request), bindings)

    def delete_acls(
        self, request: Request, filters: Sequence[AclBindingFilter]
    ) -> Awaitable[list[AclDeleteResult]]:
        return self._listener.authorizer.delete_acls(self._request_context(request), filters)

    def topic_name(self, topic_id: UUID) -> str | None:
        return self._listener.cluster.topic_names.get(topic_id)

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None:
        self._listener.cluster.learn_topic_names(topics)

    # -- client side -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._closed:  # closed while its transport was being set up (shutdown)
            transport.close()
            return
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")  # self.peer: set by the listener
        self.session = Session(
            self._listener.config.name, self._listener.security_protocol, peer_address(peer)
        )
        self._listener.connections.add(self)
        # --- TLS: principal from the client certificate (kafkaguard/certs) ---
        tls = self._listener.tls
        if tls is not None and self._listener.config.security_protocol == "SSL":
            try:
                self.session.principal = tls.authenticate(transport.get_extra_info("ssl_object"))
            except NoMatchingRuleError as exc:
                self.close(
                    f"SSL authentication failed: {exc}", cause=CloseCause.AUTHENTICATION_FAILED
                )
                return
            log.debug("%s: authenticated as %s", self.peer, self.session.principal)
        # --- end TLS ---
        if self._listener.sasl is not None:  # SASL: authenticate before anything else
            self.sasl = SaslAuthenticator(self._listener.sasl, self.session)
        else:
            self._open_upstream()

    def _open_upstream(self) -> None:
        """Start connecting to the broker; requests wait in ``_backlog`` meanwhile."""
        self._upstream_opening = True
        self._pause(_PAUSE_CONNECTING)
        self._listener.spawn(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        cluster = self._listener.cluster
        if self._node_id is None:
            targets = list(cluster.bootstrap_servers)
        else:
            address = cluster.node_address(self._node_id)
            targets = [address] if address is not None else []
        if not targets:
            self.close(
                f"no known address for upstream node {self._node_id}", cause=CloseCause.UPSTREAM
            )
            return
        error: BaseException | None = None
        tls = cluster.ssl_context  # upstream.ssl
        for target in targets:
            try:
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(
                        partial(UpstreamConnection, self, target),
                        target.host,
                        target.port,
                        ssl=tls,
                        server_hostname=target.host if tls is not None else None,
                    ),
                    timeout=cluster.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                error = exc
                continue
            if self._closed:
                upstream.close()
                return
            # --- upstream SASL: authenticate before any client request is written; the
            # client's requests wait in self._backlog meanwhile (kafkaguard/proxy/sasl/client.py)
            if cluster.sasl is not None:
                outcome = await self._authenticate_upstream(upstream, target)
                if outcome is not None:
                    error = outcome
                    continue
                if self._upstream_refused:
                    return
            # --- end upstream SASL ---
            self._upstream = upstream
            if self._backlog:
                upstream.send(self._backlog)
                self._backlog = []
            self._resume(_PAUSE_CONNECTING)
            return
        self.close(
            f"cannot connect upstream ({', '.join(map(str, targets))}): {error}",
            cause=CloseCause.UPSTREAM,
        )

    # --- upstream SASL (kafkaguard/proxy/sasl/client.py) ---
    async def _authenticate_upstream(
        self, upstream: UpstreamConnection, target: HostPort
    ) -> BaseException | None:
        """The proxy's SASL exchange on a new upstream connection. Returns a connection error
        (try the next target); None otherwise, with ``_upstream_refused`` set when the
        connection must not be used (credentials refused → this client connection is closed
        with a log line; or the client left meanwhile)."""
        cluster = self._listener.cluster
        assert cluster.sasl is not None
        try:
            exchange = cluster.sasl_exchange()
            assert exchange is not None
            await asyncio.wait_for(
                upstream.authenticate(exchange), timeout=cluster.connect_timeout_s
            )
        except UpstreamAuthenticationError as exc:
            upstream.close()
            self._upstream_refused = True
            self.close(
                f"upstream {target} refused the proxy's SASL authentication "
                f"({cluster.sasl.describe()}): {exc}",
                cause=CloseCause.UPSTREAM,
                level=logging.ERROR,
            )
            return None
        except (OSError, TimeoutError) as exc:
            upstream.close()
            return exc if str(exc) else TimeoutError("SASL authentication timed out")
        if self._closed:
            upstream.close()
            self._upstream_refused = True
        return None

    # --- end upstream SASL ---

    def data_received(self, data: bytes) -> None:
        if self._closed or self._draining:  # shutting down: no new request is started
            return
        self.liveness.active = True
        try:
            self._held.extend(self._frames.feed(data))
        except ProtocolError as exc:
            self.close(f"bad request: {exc}", cause=CloseCause.BAD_REQUEST)
            return
        # --- SASL: refuse an oversized request before authentication before buffering it ---
        if self.sasl is not None and not self.sasl.complete:
            pending = self._frames.partial_frame_size - 4
            if pending > self.sasl.server.config.max_receive_size:
                self.close(
                    f"request of {pending} bytes during SASL authentication exceeds "
                    f"max_receive_size {self.sasl.server.config.max_receive_size}",
                    cause=CloseCause.BAD_REQUEST,
                )
                return
        # --- end SASL ---
        self._process()

    def _process(self) -> None:
        """Handle received requests while the in-flight queue has room. Requests beyond the
        cap stay held (reading is paused) until responses free slots: the cap is exact even
        when one read carries thousands of small requests."""
        held = self._held
        while held and not self._closed:
            outgoing: list[Frame] = []
            try:
                while held and not self._inflight.full and not self._waiting:
                    if not self._on_request(held.popleft(), outgoing):
                        return
            except ProtocolError as exc:
                self.close(f"bad request: {exc}", cause=CloseCause.BAD_REQUEST)
                return
            self._send(outgoing)
            self._write_ready()
            if self._inflight.full or self._waiting:
                break
        # A SASL step alone leaves reading on: a client leaving meanwhile is seen at once.
        if held or self._inflight.full or self._asking:
            self._pause(_PAUSE_INFLIGHT)
        else:
            self._resume(_PAUSE_INFLIGHT)

    @property
    def _waiting(self) -> bool:
        """Later requests must wait: for the broker's answer to a question (AskFirst), or for
        a SASL token's evaluation, whose outcome decides whether they may pass the gate at all
        (SaslServerAuthenticator reads the next request only once a token is handled, so a
        request pipelined right after the last SaslAuthenticate is the first authenticated
        one)."""
        return self._asking or (self.sasl is not None and self.sasl.state is SaslState.STEPPING)

    def _send(self, outgoing: list[Frame]) -> None:
        if outgoing:
            if self._upstream is not None:
                self._upstream.send(outgoing)
            else:
                self._backlog += outgoing
                if not self._upstream_opening:  # SASL: the first request after authentication
                    self._open_upstream()

    def _on_request(self, frame: Frame, outgoing: list[Frame]) -> bool:
        """Route one request; returns False when the connection was closed."""
        header = peek_request_header(frame)
        # --- SASL gate: nothing but ApiVersions/SASL before authentication (fail closed) ---
        if self._closing is not None:  # answering a failed authentication, then closing
            self._held.clear()
            return True
        if self.sasl is not None:
            refused = self.sasl.check(header.api_key, len(frame), time.monotonic())
            if refused is not None:
                self.close(
                    f"{refused} (correlation id {header.correlation_id})",
                    cause=CloseCause.AUTHENTICATION_FAILED,
                )
                return False
        # --- end SASL ---
        handler = REGISTRY.get(header.api_key)
        if handler is None:
            self.close(
                f"api key {header.api_key} is not served by the proxy "
                f"(correlation id {header.correlation_id})",
                cause=CloseCause.BAD_REQUEST,
            )
            return False
        verdict: Verdict
        if header.api_version not in self.supported_versions(header.api_key):
            self._listener.rate_log.log(
                (self.listener_name, "unsupported_version"),
                logging.INFO,
                "%s: %s v%d is not supported (correlation id %d)",
                self.peer,
                codec.API_NAMES.get(header.api_key, header.api_key),
                header.api_version,
                header.correlation_id,
            )
            verdict = handler.unsupported_version(header, self)
        else:
            body = (
                codec.decode_request(frame, header.api_key, header.api_version)
                if handler.decode_request
                else None
            )
            request = Request(header, frame, body)
            verdict = self._decide(header, partial(decide, handler, request, self))
        return self._apply(verdict, header, frame, outgoing)

    def _decide(self, header: RequestHeaderInfo, run: Callable[[], Verdict]) -> Verdict:
        """Run the handler; a fault in it closes this connection (fail closed), never the
        process and never by forwarding."""
        try:
            return run()
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug: traceback, at most 1 line/s per API
            api = codec.API_NAMES.get(header.api_key, header.api_key)
            self._listener.rate_log.log(
                (self.listener_name, CloseCause.INTERNAL_ERROR, api),
                logging.ERROR,
                "%s: handler for %s failed (correlation id %d)\n%s",
                self.peer,
                api,
                header.correlation_id,
                _Traceback(exc),
            )
            return _INTERNAL_ERROR

    def _answered(
        self, ask: AskFirst, header: RequestHeaderInfo, frame: Frame, answer_frame: Frame
    ) -> bool:
        """The broker answered the proxy's question: decide, then let later requests go.
        Returns False when the connection was closed."""
        question = ask.question
        answer = codec.decode_response(
            answer_frame, int(question.__api_key__), int(question.__version__)
        )
        self._asking = False
        outgoing: list[Frame] = []
        try:
            verdict = self._decide(header, partial(ask.then, answer))
        except ProtocolError as exc:
            self.close(f"bad request: {exc}", cause=CloseCause.BAD_REQUEST)
            return False
        if not self._apply(verdict, header, frame, outgoing):
            return False
        self._send(outgoing)
        return True

    def _apply(
        self, verdict: Verdict, header: RequestHeaderInfo, frame: Frame, outgoing: list[Frame]
    ) -> bool:
        if isinstance(verdict, Forward):
            if verdict.request is not None:
                frame = codec.encode_request(
                    verdict.request, header.correlation_id, header.client_id
                )
            if verdict.expects_response:
                transform = None
                if verdict.rewrite is not None:
                    transform = _transform(verdict.rewrite, header, verdict.decode_if)
                self._inflight.forward(
                    header.correlation_id, header.api_key, header.api_version, transform
                )
            outgoing.append(frame)
            return True
        if isinstance(verdict, Respond):
            self._inflight.respond(
                header.correlation_id,
                header.api_key,
                header.api_version,
                codec.encode_response(verdict.response, header.correlation_id),
            )
            return True
        if isinstance(verdict, RespondLater):
            slot = self._inflight.reserve(header.correlation_id, header.api_key, header.api_version)

            async def answer() -> None:
                try:
                    response = await verdict.response()
                    slot.response = codec.encode_response(response, header.correlation_id)
                    self._flush()  # may handle held requests: a fault there closes too
                except Exception as exc:  # noqa: BLE001 - a bug: traceback, rate-limited
                    self._listener.rate_log.log(
                        (self.listener_name, CloseCause.INTERNAL_ERROR, header.api_key),
                        logging.ERROR,
                        "%s: answering correlation id %d failed\n%s",
                        self.peer,
                        slot.correlation_id,
                        _Traceback(exc),
                    )
                    self.close(
                        "internal error while answering the request",
                        cause=CloseCause.INTERNAL_ERROR,
                    )

            task = self._listener.spawn(answer())
            if header.api_key == SASL_AUTHENTICATE:
                self._sasl_answers.add(task)
                task.add_done_callback(self._sasl_answers.discard)
            return True
        if isinstance(verdict, AskFirst):
            question = verdict.question
            self._inflight.ask(
                header.correlation_id,
                int(question.__api_key__),
                int(question.__version__),
                partial(self._answered, verdict, header, frame),
            )
            outgoing.append(codec.encode_request(question, header.correlation_id, header.client_id))
            self._asking = True
            return True
        assert isinstance(verdict, Close)
        cause = CloseCause.INTERNAL_ERROR if verdict is _INTERNAL_ERROR else CloseCause.BAD_REQUEST
        self.close(verdict.reason, cause=cause)
        return False

    def _write_ready(self) -> None:
        if self._streaming:  # a response is being streamed: nothing may interleave
            return
        ready = self._inflight.take_ready()
        if ready and self._transport is not None and not self._closed:
            self.liveness.active = True
            self._transport.writelines(ready)
        if self._closing is not None and not len(self._inflight) and not self._close_scheduled:
            # Let the client read the answer before the FIN reaches it: some clients
            # (kafka-python) drop data that arrives together with the end of the stream.
            self._close_scheduled = True
            asyncio.get_running_loop().call_later(
                _CLOSE_GRACE_S,
                partial(
                    self.close,
                    self._closing,
                    cause=CloseCause.AUTHENTICATION_FAILED,
                    level=logging.INFO,
                ),
            )
        elif self._draining and not self.busy:  # shutdown: every response written
            self.close(cause=CloseCause.SHUTDOWN)

    def close_after_responses(self, reason: str) -> None:
        """Read nothing more; close once every pending response has been written (a failed
        SASL authentication is answered, then the connection closed, as Kafka does)."""
        if self._closing is None:
            self._closing = reason
            self._pause(_PAUSE_CLOSING)

    def _flush(self) -> None:
        """Write the responses now due; a freed slot lets held requests proceed."""
        self._write_ready()
        if _PAUSE_INFLIGHT in self._paused and not self._inflight.full and not self._waiting:
            self._process()

    # -- responses from the broker -----------------------------------------------------------
    def may_stream(self, response_head: bytes | memoryview) -> bool:
        """Cut-through: may an incomplete broker response be written to the client as it
        arrives? Only when it is next in line and its request asked for no rewrite."""
        return (
            not self._closed
            and not self._streaming
            and self._transport is not None
            and len(response_head) >= 8
            and self._inflight.can_stream(peek_correlation_id(response_head))
        )

    def start_stream(self, chunks: list[bytes | memoryview]) -> None:
        """Write the first chunks of a response :meth:`may_stream` allowed; the rest follows
        through :meth:`stream`, and nothing else reaches the client meanwhile."""
        assert self._transport is not None
        self._inflight.claim_for_stream()
        self._streaming = True
        self.liveness.active = True
        self._transport.writelines(chunks)

    def stream(self, data: bytes | memoryview, done: bool) -> None:
        if self._closed or self._transport is None:
            return
        self.liveness.active = True
        self._transport.write(data)
        if done:
            self._streaming = False
            self._flush()

    def on_responses(self, frames: list[Frame]) -> None:
        if self._closed:
            return
        try:
            for frame in frames:
                slot = self._inflight.claim(peek_correlation_id(frame))
                if slot.answer is not None:
                    if not slot.answer(frame):
                        return
                else:
                    slot.response = frame if slot.transform is None else slot.transform(frame)
        except ProtocolError as exc:  # the broker's answer is malformed or out of order
            self.close(f"cannot relay the broker's response: {exc}", cause=CloseCause.UPSTREAM)
            return
        except Exception as exc:  # noqa: BLE001 - a bug in a rewrite: traceback, this pair only
            self._listener.rate_log.log(
                (self.listener_name, CloseCause.INTERNAL_ERROR, "response"),
                logging.ERROR,
                "%s: rewriting a broker response failed\n%s",
                self.peer,
                _Traceback(exc),
            )
            self.close("internal error while relaying a response", cause=CloseCause.INTERNAL_ERROR)
            return
        self._flush()

    # -- flow control ----------------------------------------------------------------------
    def _pause(self, reason: str) -> None:
        if not self._paused and self._transport is not None:
            self._transport.pause_reading()
        self._paused.add(reason)

    def _resume(self, reason: str) -> None:
        self._paused.discard(reason)
        if not self._paused and self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def upstream_pause_writing(self) -> None:
        self._pause(_PAUSE_UPSTREAM_FULL)

    def upstream_resume_writing(self) -> None:
        self._resume(_PAUSE_UPSTREAM_FULL)

    def pause_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.pause_reading()

    def resume_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.resume_reading()

    # -- limits and shutdown (driven by ListenerRuntime) --------------------------------------
    @property
    def busy(self) -> bool:
        """Requests in flight (a long-poll Fetch at the broker is not idle) or a response
        being streamed."""
        return bool(len(self._inflight)) or self._streaming

    @property
    def authenticated(self) -> bool:
        """TLS (done before the connection exists) and SASL, if the listener has it, completed
        at least once (a KIP-368 re-authentication in progress counts as authenticated)."""
        sasl = self.sasl
        return sasl is None or sasl.complete or sasl.reauthenticating

    @property
    def unanswered(self) -> int:
        return len(self._inflight) + len(self._held)

    def drain(self) -> tuple[int, int]:
        """Shutdown: read nothing more and start nothing new; close once every request in
        flight is answered and its response written. Returns (requests in flight, requests
        received but not started, which are dropped)."""
        if self._closed:
            return 0, 0
        self._draining = True
        self._pause(_PAUSE_DRAINING)
        dropped = len(self._held)
        self._held.clear()
        waiting = len(self._inflight)
        if not self.busy and self._closing is None:
            self.close(cause=CloseCause.SHUTDOWN)
        return waiting, dropped

    # -- closing ---------------------------------------------------------------------------
    def close(
        self, reason: str | None = None, *, cause: CloseCause, level: int = logging.WARNING
    ) -> None:
        """Close both sides. Counted under ``cause``; ``reason`` is logged (rate-limited per
        listener and cause), None logs nothing."""
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()
        for task in self._sasl_answers:
            task.cancel()
        self._listener.connection_closed(self, cause, reason, level)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closed:
            return
        if self._closing is not None:  # the client left after its last answer (SASL failure)
            self.close(self._closing, cause=CloseCause.AUTHENTICATION_FAILED, level=logging.INFO)
            return
        partial = self._frames.pending_bytes
        if partial:
            self.close(
                f"client disconnected mid-request ({partial} bytes of an unfinished one)",
                cause=CloseCause.CLIENT_CLOSED,
            )
        elif len(self._inflight) or self._held:
            # Normal for consumers: closing while a long-poll Fetch is outstanding.
            self.close(
                "client disconnected with requests unanswered",
                cause=CloseCause.CLIENT_CLOSED,
                level=logging.INFO,
            )
        else:
            log.debug("client %s disconnected", self.peer)
            self.close(cause=CloseCause.CLIENT_CLOSED)

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            detail = f": {exc}" if exc else ""
            self.close(f"the broker closed the connection{detail}", cause=CloseCause.UPSTREAM)


def _transform(
    rewrite: ResponseRewrite,
    header: RequestHeaderInfo,
    decode_if: Callable[[Frame], bool] | None = None,
) -> ResponseTransform:
    """Decode → rewrite → re-encode, or the broker's own bytes when nothing changed."""

    def transform(frame: Frame) -> Frame:
        if decode_if is not None and not decode_if(frame):
            return frame
        body = codec.decode_response(frame, header.api_key, header.api_version)
        new = rewrite(body)
        if new is body:
            return frame
        return codec.encode_response(new, header.correlation_id)

    return transform


class UpstreamConnection(asyncio.Protocol):
    """The broker side of one client connection."""

    def __init__(self, client: ClientConnection, target: HostPort) -> None:
        self._client = client
        self._target = target
        self._frames = FrameBuffer(_UPSTREAM_MAX_FRAME)
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._passthrough = 0
        """Bytes of a streamed response still to come (cut-through)."""
        self._auth: UpstreamSaslExchange | None = None
        """The proxy's own SASL exchange with the broker, while it runs (upstream.sasl)."""
        self._auth_done: asyncio.Future[None] | None = None
        self._auth_ok = False
        """Authenticated: only then is this connection the client's (and its loss theirs)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, frames: list[Frame]) -> None:
        if self._transport is not None:
            self._transport.writelines(frames)

    # --- upstream SASL (kafkaguard/proxy/sasl/client.py) ---
    def authenticate(self, exchange: UpstreamSaslExchange) -> asyncio.Future[None]:
        """Run ``exchange`` on this connection before anything else is sent on it; the
        future completes when the broker accepted the proxy's credentials, or fails with
        :class:`UpstreamAuthenticationError` (refused) / ``OSError`` (connection lost)."""
        self._auth = exchange
        self._auth_done = asyncio.get_running_loop().create_future()
        self.send([exchange.start()])
        return self._auth_done

    def _auth_failed(self, exc: BaseException) -> None:
        self._auth = None
        if self._auth_done is not None and not self._auth_done.done():
            self._auth_done.set_exception(exc)

    def _auth_received(self, data: bytes) -> None:
        exchange = self._auth
        assert exchange is not None
        try:
            for frame in self._frames.feed(data):
                if exchange.done:
                    raise UpstreamAuthenticationError("unexpected response after SASL")
                request = exchange.receive(frame)
                if request is not None:
                    self.send([request])
        except UpstreamAuthenticationError as exc:
            self._auth_failed(exc)
            return
        except ProtocolError as exc:
            self._auth_failed(UpstreamAuthenticationError(f"bad response from the broker: {exc}"))
            return
        if exchange.done and not self._frames.pending_bytes:
            self._auth = None
            self._auth_ok = True
            if self._auth_done is not None and not self._auth_done.done():
                self._auth_done.set_result(None)

    # --- end upstream SASL ---

    def data_received(self, data: bytes) -> None:
        if self._auth is not None:
            self._auth_received(data)
            return
        if self._passthrough:
            n = self._passthrough
            if len(data) <= n:
                self._passthrough -= len(data)
                self._client.stream(data, self._passthrough == 0)
                return
            view = memoryview(data)
            self._passthrough = 0
            self._client.stream(view[:n], True)
            data = view[n:]  # type: ignore[assignment]
        try:
            frames = self._frames.feed(data)
        except ProtocolError as exc:
            self._client.close(
                f"bad response from broker {self._target}: {exc}", cause=CloseCause.UPSTREAM
            )
            return
        if frames:
            self._client.on_responses(frames)
        if self._frames.partial_frame_size >= _CUT_THROUGH_MIN and self._client.may_stream(
            self._frames.partial_head(8)
        ):
            chunks, self._passthrough = self._frames.take_partial()
            self._client.start_stream(chunks)

    def pause_writing(self) -> None:
        self._client.upstream_pause_writing()

    def resume_writing(self) -> None:
        self._client.upstream_resume_writing()

    def pause_reading(self) -> None:
        if self._transport is not None and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._auth_done is not None and not self._auth_ok:  # SASL never completed on it
            self._auth_failed(
                OSError(f"the broker closed the connection during SASL authentication: {exc}")
                if exc
                else OSError("the broker closed the connection during SASL authentication")
            )
            return
        self._client.upstream_lost(exc)


ConnectionFactory = Callable[[], ClientConnection]
