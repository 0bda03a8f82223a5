"""The request/response exchange of one client connection, without I/O.

Theory of operation (modelled on h11's ``Connection``). The asyncio shell
(:mod:`kafkaguard.proxy.net.connection`) feeds events in — bytes from the client
(:meth:`Exchange.receive_client`), bytes from the broker (:meth:`Exchange.receive_broker`),
the broker connection opening or closing, an asynchronous answer being ready, the clock — and
carries out the commands each call returns (:mod:`kafkaguard.proxy.core.commands`), in order:
:class:`SendBroker`, :class:`SendClient`,
:class:`OpenBroker`, :class:`PauseClient` / :class:`ResumeClient`, :class:`Await`,
:class:`CloseConnection`. The exchange never calls back into the shell, so tests drive it in
memory (``tests/proxy/core/test_exchange.py``). See docs/design.md#request-path.

Request path: bytes → :class:`FrameBuffer` (the listener's ``max_frame_bytes``) → header peek →
SASL gate (nothing but ApiVersions and SASL before authentication, ``SaslServerAuthenticator``)
→ the request's decision, synchronous (``dispatch.handle_request``: registry, version gate, the
handler's checks and verdict) → the original frame (or a rewritten one) goes to the broker;
every frame completed by one read leaves in one :class:`SendBroker`. A handler that must ask
the broker first (:class:`AskFirst`) has its question sent instead, and later requests are held
until the answer has been turned into the verdict, so nothing overtakes it; a SASL token being
evaluated holds later requests the same way (Kafka reads the next request only once a token is
handled).

Response path: each broker frame claims the oldest upstream slot of the :class:`InflightQueue`
(correlation ids must match); the slot's transform runs only when the handler asked to rewrite;
ready responses leave strictly in request order. Cut-through: a broker response of at least
64 KiB that is next in line and needs no rewrite is sent to the client chunk by chunk as it
arrives; until its last byte, nothing else is sent to that client.

Flow control: client reads pause while the in-flight queue is full (``max_inflight_requests``:
checked after each read, so the cap is exceeded by at most one read's worth of requests),
while a question or SASL token is outstanding with requests held, while the broker connection is
being opened, while the broker side's write buffer is full, and for good once closing or
draining. Any protocol error closes this connection only, with one reason and a
:class:`~kafkaguard.proxy.core.commands.CloseCause`.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from kafkaguard.policy.authorizer import DecisionPendingError
from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame, FrameBuffer
from kafkaguard.protocol.header import RequestHeaderInfo, peek_correlation_id, peek_request_header
from kafkaguard.protocol.inflight import InflightQueue, Slot
from kafkaguard.protocol.skim.tails import NodeEndpointsTail, TailStream
from kafkaguard.proxy.core.commands import (
    Await,
    AwaitDecisions,
    CloseCause,
    CloseConnection,
    Command,
    OpenBroker,
    PauseClient,
    ResumeClient,
    SendBroker,
    SendClient,
)
from kafkaguard.proxy.core.context import ConnectionContext
from kafkaguard.proxy.core.dispatch import handle_request, response_transform
from kafkaguard.proxy.core.limits import Liveness
from kafkaguard.proxy.core.stats import ListenerStats
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.support.base import (
    AskFirst,
    Close,
    Forward,
    Respond,
    RespondLater,
    Verdict,
)
from kafkaguard.proxy.sasl.authenticator import SASL_AUTHENTICATE

if TYPE_CHECKING:
    from kafkaguard.proxy.config import LimitsConfig
    from kafkaguard.proxy.log_limit import RateLimitedLog

log = logging.getLogger("kafkaguard.proxy")

CUT_THROUGH_MIN = 64 * 1024
"""Broker responses at least this large that need no rewrite are streamed as they arrive
instead of being buffered whole (a 1 MB Fetch response would otherwise reach the client only
after its last byte, adding its whole transfer time to every fetch cycle)."""
_UPSTREAM_MAX_FRAME = (1 << 31) - 1  # the broker is trusted to size its own responses
CLOSE_GRACE_S = 0.5
"""After the last response before a close (e.g. a failed SASL authentication) is written, how
long the client has to read it and close first: some clients (kafka-python) drop data that
arrives together with the end of the stream. Nothing is read meanwhile."""

# Reasons client reading is paused; reading resumes when none is left.
_PAUSE_CONNECTING = "connecting"
_PAUSE_INFLIGHT = "inflight"
_PAUSE_UPSTREAM_FULL = "upstream-full"
_PAUSE_CLOSING = "closing"
_PAUSE_DRAINING = "draining"

_INTERNAL_ERROR = Close("internal error while authorizing the request")
"""The verdict standing for a fault in a handler (closed as INTERNAL_ERROR, not BAD_REQUEST)."""


_PAUSE = PauseClient()
_RESUME = ResumeClient()
_OPEN = OpenBroker()


class _Traceback:
    """The exception's traceback, formatted only if the rate-limited line is written."""

    __slots__ = ("_exc",)

    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def __str__(self) -> str:
        return "".join(traceback.format_exception(self._exc)).rstrip()


class Exchange:
    """One client connection's protocol state; every input returns the commands to carry out."""

    def __init__(
        self,
        context: ConnectionContext,
        limits: LimitsConfig,
        rate_log: RateLimitedLog,
        accepted_at: float,
        *,
        stats: ListenerStats | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context = context
        self.stats = stats if stats is not None else ListenerStats()
        """The listener's counters (shared by its connections; read by /metrics)."""
        self._monotonic = clock
        """Seconds, for the SASL gate's session deadlines (KIP-368)."""
        self._limits = limits
        self._rate_log = rate_log
        self.liveness = Liveness(accepted_at)
        """Idle and authentication deadlines, checked by :meth:`clock`."""
        self._frames = FrameBuffer(limits.max_frame_bytes)
        self._broker_frames = FrameBuffer(_UPSTREAM_MAX_FRAME)
        self._inflight = InflightQueue(limits.max_inflight_requests)
        self._out: list[Command] = []
        self._read_at = accepted_at
        """When the current read (client or broker) arrived: the time of its requests."""
        self._paused: tuple[str, ...] = ()
        """Why reading is paused; a tuple, rebuilt on a change (rare), so that an idle
        connection holds the shared empty one instead of an empty set (216 B)."""
        self._held: list[Frame] = []
        """Requests received but not yet handled (in-flight queue full, or waiting), the next
        one LAST: a list, not a deque (an empty deque holds a 64-item block, ~760 B per idle
        connection), taken from its end so that a read of thousands of tiny requests costs one
        move of the list per read, not one per request (``pop(0)``: quadratic in the read)."""
        self._backlog: list[Frame] = []
        """Requests accepted before the broker connection is up."""
        self._broker_opening = False
        """The broker connection is being opened, or open (it is opened once)."""
        self._broker_open = False
        self._asking = False
        """A question to the broker is outstanding (:class:`AskFirst`)."""
        self._sasl_step: Slot | None = None
        """A SaslAuthenticate answer is being computed: later requests wait for its outcome."""
        self._deciding = False
        """The authorizer is looking decisions up (``DecisionPendingError``, OPA): the request
        is held and asked again, later ones wait (:meth:`decisions_ready`)."""
        self._retry: Callable[[], bool] | None = None
        """What asks again when the held decision is a step or an answered question's verdict
        (``AskFirst.then``); ``None`` when the held request is handled again from the start."""
        self._held_header: tuple[Frame, RequestHeaderInfo] | None = None
        """The header of the request held for decisions: asked again with the same header,
        it has the same ``RequestContext`` object, by which the authorizer knows it."""
        self._streaming = False
        """A broker response is being streamed to the client (cut-through)."""
        self._local = False
        """A request was answered by the proxy since the last write: :meth:`_write_ready` may
        have a response to release (a forwarded request alone never has, so the request path
        skips it)."""
        self._passthrough = 0
        """Bytes of the streamed response still to come from the broker."""
        self._tail: TailStream | None = None
        """The walk of a streamed response whose tail may need rewriting (Fetch v16+)."""
        self._closing: str | None = None
        """Answer what is pending, then close (a failed SASL authentication, as Kafka does)."""
        self._broker_gone: str | None = None
        """The broker closed while answers of the proxy's own were owed: write them, then
        close with this reason."""
        self._draining = False
        self.closed = False

    # -- state the listener reads ------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Requests in flight (a long-poll Fetch at the broker is not idle) or a response
        being streamed."""
        return bool(len(self._inflight)) or self._streaming

    @property
    def authenticated(self) -> bool:
        """SASL, if the listener has it, completed at least once (TLS completed before the
        exchange existed)."""
        return not self.context.upstream_deferred

    @property
    def unanswered(self) -> int:
        return len(self._inflight) + len(self._held) + (self._retry is not None)

    # -- inputs ------------------------------------------------------------------------------
    def _begin(self) -> list[Command]:
        out: list[Command] = []
        self._out = out
        return out

    def client_connected(self) -> list[Command]:
        """The client connection is set up (TLS done): open the broker connection now, unless
        the listener authenticates with SASL first (an anonymous client never makes the proxy
        connect to a broker)."""
        out = self._begin()
        if self.context.sasl is None:
            self._open_broker()
        return out

    def receive_client(self, data: bytes) -> list[Command]:
        out = self._begin()
        if self.closed or self._draining:  # shutting down: no new request is started
            return out
        self.liveness.active = True
        self._read_at = self._monotonic()
        self.stats.bytes_from_client += len(data)
        try:
            self._held[:0] = self._frames.feed(data)[::-1]
        except ProtocolError as exc:
            self._close(f"bad request: {exc}", CloseCause.BAD_REQUEST)
            return out
        sasl = self.context.sasl
        if sasl is not None and not sasl.complete:
            # Refuse an oversized request before authentication before buffering it.
            pending = self._frames.partial_frame_size - 4
            limit = sasl.server.config.max_receive_size
            if pending > limit:
                self._close(
                    f"request of {pending} bytes during SASL authentication exceeds "
                    f"max_receive_size {limit}",
                    CloseCause.BAD_REQUEST,
                )
                return out
        self._process()
        return out

    def client_closed(self) -> list[Command]:
        """The client closed its side."""
        out = self._begin()
        if self.closed:
            return out
        partial_bytes = self._frames.pending_bytes
        if self._closing is not None:  # the client left after its last answer (SASL failure)
            self._close(self._closing, CloseCause.AUTHENTICATION_FAILED, logging.INFO)
        elif partial_bytes:
            self._close(
                f"client disconnected mid-request ({partial_bytes} bytes of an unfinished one)",
                CloseCause.CLIENT_CLOSED,
            )
        elif len(self._inflight) or self._held:
            # Normal for consumers: closing while a long-poll Fetch is outstanding.
            self._close(
                "client disconnected with requests unanswered",
                CloseCause.CLIENT_CLOSED,
                logging.INFO,
            )
        else:
            self._close(None, CloseCause.CLIENT_CLOSED)
        return out

    def broker_connected(self) -> list[Command]:
        """The broker connection is open (and authenticated): send what waited for it."""
        out = self._begin()
        if self.closed:
            return out
        self._broker_open = True
        if self._backlog:
            out.append(SendBroker(self._backlog))
            self._backlog = []
        self._resume(_PAUSE_CONNECTING)
        return out

    def broker_closed(self, error: str | None = None) -> list[Command]:
        """The broker side closed. An answer the proxy computes itself (a DeleteAcls or
        AlterUserScramCredentials applied to the store) that is next in the client's order
        is still written, then the connection closes (issue 35): the change was made, and a
        client told "transport error" would retry it and get RESOURCE_NOT_FOUND."""
        out = self._begin()
        detail = f": {error}" if error else ""
        reason = f"the broker closed the connection{detail}"
        if self.closed:
            return out
        if self._streaming or not self._inflight.owed_locally():
            self._close(reason, CloseCause.UPSTREAM)
            return out
        self._broker_gone = reason
        self._held.clear()  # never sent: the broker is gone
        self._pause(_PAUSE_CLOSING)
        self._write_ready()
        return out

    def broker_write_full(self, full: bool) -> list[Command]:
        """The broker side's write buffer crossed its high (True) or low (False) mark."""
        out = self._begin()
        if full:
            self._pause(_PAUSE_UPSTREAM_FULL)
        else:
            self._resume(_PAUSE_UPSTREAM_FULL)
        return out

    def receive_broker(self, data: bytes) -> list[Command]:
        out = self._begin()
        if self.closed:
            return out
        self._read_at = self._monotonic()
        self.stats.bytes_from_broker += len(data)
        rest: bytes | memoryview = data  # compiled, a name declared bytes holds only bytes
        if self._passthrough:
            n = self._passthrough
            if len(data) <= n:
                self._passthrough -= len(data)
                self._stream(data, self._passthrough == 0)
                return out
            view = memoryview(data)
            self._passthrough = 0
            if not self._stream(view[:n], True):
                return out
            rest = view[n:]
        try:
            frames = self._broker_frames.feed(rest)
        except ProtocolError as exc:
            self._close(f"bad response from the broker: {exc}", CloseCause.UPSTREAM)
            return out
        if frames:
            self._on_responses(frames)
        buffer = self._broker_frames
        if buffer.partial_frame_size >= CUT_THROUGH_MIN and self._may_stream(
            buffer.partial_head(8)
        ):
            chunks, self._passthrough = buffer.take_partial()
            slot = self._inflight.claim_for_stream()
            if isinstance(slot.transform, NodeEndpointsTail):  # walked as it streams
                try:
                    self._tail = tail = slot.transform.stream(
                        sum(map(len, chunks)) + self._passthrough
                    )
                    chunks = [part for chunk in chunks for part in tail.feed(chunk, False)]
                except ProtocolError as exc:
                    self._close(f"cannot relay the broker's response: {exc}", CloseCause.UPSTREAM)
                    return out
            self._count_response(self.stats.responses_from_broker, slot)
            stats = self.stats  # latencies to the first streamed byte: the proxy adds nothing
            waited = self._waited(slot)
            stats.observe(stats.upstream_latency, slot.api_key, waited)
            stats.observe_answer(slot.api_key, waited, waited)
            self._streaming = True
            self.liveness.active = True
            stats.bytes_to_client += sum(map(len, chunks))
            out.append(SendClient(chunks))
        return out

    def answered(self, slot: Slot, verdict: Respond) -> list[Command]:
        """An :class:`Await`'s answer is ready."""
        out = self._begin()
        if self.closed:
            return out
        slot.response = codec.encode_response(verdict.response, slot.correlation_id)
        self._count_response(self.stats.responses_from_proxy, slot)
        if slot is self._sasl_step:
            self._sasl_step = None
        if verdict.close_after is not None:
            self._close_after_responses(verdict.close_after)
        self._flush()
        return out

    def _await_decisions(
        self, pending: DecisionPendingError, retry: Callable[[], bool] | None
    ) -> None:
        self._deciding = True
        self._retry = retry
        self._out.append(AwaitDecisions(pending.ready))

    def _resumed(
        self, pending: DecisionPendingError, header: RequestHeaderInfo, frame: Frame
    ) -> bool:
        """A held handler's step, asked again; returns False when the connection was closed."""
        resume = pending.resume
        assert resume is not None
        outgoing: list[Frame] = []
        try:
            verdict = resume()
        except ProtocolError as exc:
            self._close(f"bad request: {exc}", CloseCause.BAD_REQUEST)
            return False
        except DecisionPendingError as again:  # a later step: from there; else this one again
            again.resume = again.resume or resume
            self._await_decisions(again, partial(self._resumed, again, header, frame))
            return True
        except Exception as exc:  # noqa: BLE001 - a bug: traceback, this connection only
            verdict = self._fault(header, exc)
        if not self._apply(verdict, header, frame, outgoing):
            return False
        self._send(outgoing)
        return True

    def decisions_ready(self) -> list[Command]:
        """An :class:`AwaitDecisions` is done: ask again what waited for it."""
        out = self._begin()
        retry, self._retry = self._retry, None
        self._deciding = False
        if self.closed or (retry is not None and not retry()):
            return out
        self._write_ready()
        self._process()
        return out

    def answer_failed(self, slot: Slot, exc: BaseException) -> list[Command]:
        """An :class:`Await` raised: a bug; traceback (rate-limited), this connection closes."""
        out = self._begin()
        if self.closed:
            return out
        self._rate_log.log(
            (self.context.listener_name, CloseCause.INTERNAL_ERROR, slot.api_key),
            logging.ERROR,
            "%s: answering correlation id %d failed\n%s",
            self.context.peer,
            slot.correlation_id,
            _Traceback(exc),
            extra=self.context.log_fields,
        )
        self._close("internal error while answering the request", CloseCause.INTERNAL_ERROR)
        return out

    def clock(self, now: float) -> list[Command]:
        """The listener's periodic sweep: close when idle for ``connections_max_idle_ms``
        (nothing read or written, nothing in flight) or not authenticated within
        ``authentication_timeout_ms`` (Kafka's ``Selector``)."""
        out = self._begin()
        if self.closed:
            return out
        limits = self._limits
        cause = self.liveness.check(
            now,
            busy=self.busy,
            authenticated=self.authenticated,
            idle_s=limits.connections_max_idle_ms / 1000,
            auth_s=limits.authentication_timeout_ms / 1000,
        )
        if cause is CloseCause.IDLE:
            self._close(
                f"idle for {limits.connections_max_idle_ms} ms (connections_max_idle_ms)",
                cause,
                logging.INFO,
            )
        elif cause is CloseCause.AUTHENTICATION_TIMEOUT:
            self._close(
                "authentication not completed within "
                f"{limits.authentication_timeout_ms} ms (authentication_timeout_ms)",
                cause,
            )
        return out

    def drain(self) -> tuple[int, int, list[Command]]:
        """Shutdown: read nothing more and start nothing new; close once every request in
        flight is answered and its response written. Returns (requests in flight, requests
        received but not started, which are dropped, commands)."""
        out = self._begin()
        if self.closed:
            return 0, 0, out
        self._draining = True
        self._pause(_PAUSE_DRAINING)
        dropped = len(self._held)
        self._held.clear()
        waiting = len(self._inflight)
        if not self.busy and self._closing is None:
            self._close(None, CloseCause.SHUTDOWN)
        return waiting, dropped, out

    def close(self) -> None:
        """The shell closed the connection itself (shutdown, a failed upstream connect):
        every later event is ignored."""
        self.closed = True

    # -- requests ----------------------------------------------------------------------------
    @property
    def _waiting(self) -> bool:
        """Later requests must wait: for the broker's answer to a question (AskFirst), or for a
        SASL token's evaluation, whose outcome decides whether they may pass the gate at all
        (``SaslServerAuthenticator`` reads the next request only once a token is handled, so a
        request pipelined right after the last SaslAuthenticate is the first authenticated
        one)."""
        return self._asking or self._sasl_step is not None or self._deciding

    def _process(self) -> None:
        """Handle held requests while the in-flight queue has room. Requests beyond the cap
        stay held (reading is paused) until responses free slots: the cap is exact even when
        one read carries thousands of small requests."""
        held = self._held
        while held and not self.closed:
            outgoing: list[Frame] = []
            try:
                while held and not self._inflight.full and not self._waiting:
                    if not self._on_request(held.pop(), outgoing):
                        return
            except ProtocolError as exc:
                self._close(f"bad request: {exc}", CloseCause.BAD_REQUEST)
                return
            self._send(outgoing)
            if self._local or self._closing is not None:
                self._write_ready()
            if self._inflight.full or self._waiting:
                break
        if self.closed:
            return
        # A SASL step alone leaves reading on: a client leaving meanwhile is seen at once.
        if held or self._inflight.full or self._asking:
            self._pause(_PAUSE_INFLIGHT)
        else:
            self._resume(_PAUSE_INFLIGHT)

    def _open_broker(self) -> None:
        self._broker_opening = True
        self._pause(_PAUSE_CONNECTING)
        self._out.append(_OPEN)

    def _send(self, outgoing: list[Frame]) -> None:
        if outgoing:
            self.stats.bytes_to_broker += sum(map(len, outgoing))
            if self._broker_open:
                self._out.append(SendBroker(outgoing))
            else:
                self._backlog += outgoing
                if not self._broker_opening:  # SASL: the first request after authentication
                    self._open_broker()

    def _on_request(self, frame: Frame, outgoing: list[Frame]) -> bool:
        """Route one request; returns False when the connection was closed."""
        again, self._held_header = self._held_header, None
        header = again[1] if again is not None and again[0] is frame else peek_request_header(frame)
        if self._closing is not None or self._broker_gone is not None:  # answering, then closing
            self._held.clear()
            return True
        ctx = self.context
        sasl = ctx.sasl
        if sasl is not None:  # the SASL gate: fail closed before authentication
            refused = sasl.check(header.api_key, len(frame), self._monotonic())
            if refused is not None:
                self._close(
                    f"{refused} (correlation id {header.correlation_id})",
                    CloseCause.AUTHENTICATION_FAILED,
                )
                return False
        requests = self.stats.requests
        key = header.api_key if header.api_key in REGISTRY else -1
        requests[key] = requests.get(key, 0) + 1
        verdict: Verdict
        try:
            verdict, supported = handle_request(header, frame, ctx)
        except ProtocolError:
            raise
        except DecisionPendingError as pending:  # asked again once the decisions are in
            if pending.resume is not None:  # a two-phase handler goes on from its step
                self._await_decisions(pending, partial(self._resumed, pending, header, frame))
                return True
            requests[key] -= 1
            self._held.append(frame)  # next again
            self._held_header = (frame, header)  # the same request context when asked again
            self._await_decisions(pending, None)
            return True
        except Exception as exc:  # noqa: BLE001 - a bug: traceback, at most 1 line/s per API
            verdict, supported = self._fault(header, exc), True
        if not supported:
            self._rate_log.log(
                (ctx.listener_name, "unsupported_version"),
                logging.INFO,
                "%s: %s v%d is not supported (correlation id %d)",
                ctx.peer,
                codec.API_NAMES.get(header.api_key, header.api_key),
                header.api_version,
                header.correlation_id,
                extra=self.context.log_fields,
            )
        return self._apply(verdict, header, frame, outgoing)

    def _fault(self, header: RequestHeaderInfo, exc: Exception) -> Verdict:
        """A fault in a handler closes this connection (fail closed), never the process and
        never by forwarding: traceback at most once a second per API."""
        api = codec.API_NAMES.get(header.api_key, header.api_key)
        self._rate_log.log(
            (self.context.listener_name, CloseCause.INTERNAL_ERROR, api),
            logging.ERROR,
            "%s: handler for %s failed (correlation id %d)\n%s",
            self.context.peer,
            api,
            header.correlation_id,
            _Traceback(exc),
            extra=self.context.log_fields,
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
            verdict = ask.then(answer)
        except ProtocolError as exc:
            self._close(f"bad request: {exc}", CloseCause.BAD_REQUEST)
            return False
        except DecisionPendingError as pending:
            retry = (
                partial(self._answered, ask, header, frame, answer_frame)
                if pending.resume is None
                else partial(self._resumed, pending, header, frame)
            )
            self._await_decisions(pending, retry)
            return True
        except Exception as exc:  # noqa: BLE001 - a bug: traceback, this connection only
            verdict = self._fault(header, exc)
        if not self._apply(verdict, header, frame, outgoing):
            return False
        self._send(outgoing)
        return True

    def _apply(
        self, verdict: Verdict, header: RequestHeaderInfo, frame: Frame, outgoing: list[Frame]
    ) -> bool:
        """Carry out a handler's verdict; returns False when the connection was closed."""
        if isinstance(verdict, Forward):
            if verdict.request is not None:
                frame = codec.encode_request(
                    verdict.request, header.correlation_id, header.client_id
                )
            if verdict.expects_response:
                transform = verdict.transform
                if transform is None and verdict.rewrite is not None:
                    transform = response_transform(verdict.rewrite, header, verdict.decode_if)
                self._inflight.forward(
                    header.correlation_id,
                    header.api_key,
                    header.api_version,
                    transform,
                    self._read_at,
                )
            outgoing.append(frame)
            return True
        if isinstance(verdict, Respond):
            self._inflight.respond(
                header.correlation_id,
                header.api_key,
                header.api_version,
                codec.encode_response(verdict.response, header.correlation_id),
                self._read_at,
            )
            self._local = True
            responses = self.stats.responses_from_proxy
            responses[header.api_key] = responses.get(header.api_key, 0) + 1
            if verdict.close_after is not None:
                self._close_after_responses(verdict.close_after)
            return True
        if isinstance(verdict, RespondLater):
            slot = self._inflight.reserve(
                header.correlation_id, header.api_key, header.api_version, self._read_at
            )
            is_sasl = header.api_key == SASL_AUTHENTICATE
            if is_sasl:
                self._sasl_step = slot
            self._out.append(Await(slot, verdict.response, cancel_on_close=is_sasl))
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
        cause = CloseCause.INTERNAL_ERROR if verdict is _INTERNAL_ERROR else CloseCause.BAD_REQUEST
        self._close(verdict.reason, cause)
        return False

    # -- responses ---------------------------------------------------------------------------
    def _on_responses(self, frames: list[Frame]) -> None:
        try:
            for frame in frames:
                slot = self._inflight.claim(peek_correlation_id(frame))
                if slot.answer is not None:
                    if not slot.answer(frame):
                        return
                else:
                    slot.response = frame if slot.transform is None else slot.transform(frame)
                    self._count_response(self.stats.responses_from_broker, slot)
                    slot.upstream_s = self._waited(slot)
                    self.stats.observe(self.stats.upstream_latency, slot.api_key, slot.upstream_s)
        except ProtocolError as exc:  # the broker's answer is malformed or out of order
            self._close(f"cannot relay the broker's response: {exc}", CloseCause.UPSTREAM)
            return
        except Exception as exc:  # noqa: BLE001 - a bug in a rewrite: traceback, this pair only
            self._rate_log.log(
                (self.context.listener_name, CloseCause.INTERNAL_ERROR, "response"),
                logging.ERROR,
                "%s: rewriting a broker response failed\n%s",
                self.context.peer,
                _Traceback(exc),
                extra=self.context.log_fields,
            )
            self._close("internal error while relaying a response", CloseCause.INTERNAL_ERROR)
            return
        self._flush()

    def _may_stream(self, response_head: bytes | memoryview) -> bool:
        """Cut-through: may an incomplete broker response go to the client as it arrives?
        Only when it is next in line and its request asked for no rewrite."""
        return (
            not self._streaming
            and not self.closed
            and len(response_head) >= 8
            and self._inflight.can_stream(peek_correlation_id(response_head))
        )

    def _stream(self, data: bytes | memoryview, done: bool) -> bool:
        """Send what may go of a streamed response; False when it closed the connection."""
        self.liveness.active = True
        tail = self._tail
        if tail is None:
            self.stats.bytes_to_client += len(data)
            self._out.append(SendClient([data]))
        else:  # the walk holds back the tail, and rewrites it once the last byte is in
            try:
                parts = tail.feed(data, done)
            except ProtocolError as exc:
                self._close(f"cannot relay the broker's response: {exc}", CloseCause.UPSTREAM)
                return False
            if parts:
                self.stats.bytes_to_client += sum(map(len, parts))
                self._out.append(SendClient(parts))
        if done:
            self._tail = None
            self._streaming = False
            self._flush()
        return not self.closed

    def _flush(self) -> None:
        """Send the responses now due; a freed slot lets held requests proceed."""
        self._write_ready()
        if _PAUSE_INFLIGHT in self._paused and not self._inflight.full and not self._waiting:
            self._process()

    def _write_ready(self) -> None:
        if self._streaming or self.closed:  # a response is being streamed: nothing interleaves
            return
        self._local = False
        ready = self._inflight.take_ready()
        if ready:
            self.liveness.active = True
            stats = self.stats
            now = self._monotonic()
            frames: list[bytes | memoryview] = []
            for slot in ready:
                response = slot.response
                assert response is not None
                frames.append(response)
                stats.observe_answer(slot.api_key, now - slot.received_at, slot.upstream_s)
            stats.bytes_to_client += sum(map(len, frames))
            self._out.append(SendClient(frames))
        if self._broker_gone is not None and not self._inflight.owed_locally():
            self._close(self._broker_gone, CloseCause.UPSTREAM)
        elif self._closing is not None and not len(self._inflight):
            self._close(
                self._closing, CloseCause.AUTHENTICATION_FAILED, logging.INFO, CLOSE_GRACE_S
            )
        elif self._draining and not self.busy:  # shutdown: every response written
            self._close(None, CloseCause.SHUTDOWN)

    def _waited(self, slot: Slot) -> float:
        """Seconds from the slot's request to the current read."""
        return self._read_at - slot.received_at

    @staticmethod
    def _count_response(table: dict[int, int], slot: Slot) -> None:
        table[slot.api_key] = table.get(slot.api_key, 0) + 1

    # -- flow control and closing ------------------------------------------------------------
    def _pause(self, reason: str) -> None:
        paused = self._paused
        if not paused:
            self._out.append(_PAUSE)
        if reason not in paused:
            self._paused = (*paused, reason)

    def _resume(self, reason: str) -> None:
        if reason in self._paused:
            self._paused = tuple(other for other in self._paused if other != reason)
            if not self._paused and not self.closed:
                self._out.append(_RESUME)

    def _close_after_responses(self, reason: str) -> None:
        """Read nothing more; close once every pending response has been written (a failed
        SASL authentication is answered, then the connection closed, as Kafka does)."""
        if self._closing is None:
            self._closing = reason
            self._pause(_PAUSE_CLOSING)

    def _close(
        self,
        reason: str | None,
        cause: CloseCause,
        level: int = logging.WARNING,
        after_s: float = 0.0,
    ) -> None:
        if not self.closed:
            self.closed = True
            self._out.append(CloseConnection(reason, cause, level, after_s))
