"""One client connection: the thin asyncio shell.

Everything the proxy decides about a connection's bytes is decided by its
:class:`~kafkaguard.proxy.core.exchange.Exchange`, which does no I/O: this module feeds it what the
sockets report and carries out the commands it returns (docs/design.md#request-path). What
stays here is what needs the event loop: the client side's ``asyncio.Protocol`` (no stream
wrappers: fewer copies and tasks on the hot path), running awaited answers
(:class:`~kafkaguard.proxy.handlers.support.base.RespondLater`) as tasks, and closing. The
broker side (:class:`UpstreamConnection`, which also carries the proxy's own SASL handshake
towards the broker, ``upstream.sasl``) is here too, so that a request's bytes pass one module
of the shell each way; it is opened by the listener's broker connection factory
(kafkaguard/proxy/net/upstream.py), and the exchange comes from the listener
(:class:`ConnectionOwner`).

The broker connection is opened when the exchange says so: at once on PLAINTEXT/SSL listeners,
and on SASL listeners only after the client authenticated (before, the proxy answers
ApiVersions and SASL itself), so an anonymous client never makes the proxy connect to a broker.
Flow control that needs no decision stays here too: while the client's write buffer is full,
the broker side is not read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast

from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame, FrameBuffer
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
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError, UpstreamSaslExchange

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from kafkaguard.policy.authorizer import IPAddress
    from kafkaguard.proxy.config import HostPort
    from kafkaguard.proxy.core.exchange import Exchange

_SASL_MAX_FRAME = 1 << 20
"""Largest broker response accepted during the proxy's own SASL exchange (a challenge)."""


@dataclass(frozen=True, slots=True)
class ConnectFailed:
    """No broker connection: the client connection is closed with this reason."""

    reason: str
    level: int = logging.WARNING


class BrokerFactory(Protocol):
    """Opens a client connection's broker connection
    (:class:`~kafkaguard.proxy.net.upstream.BrokerConnector`)."""

    async def connect(
        self, client: ClientConnection, node_id: int | None
    ) -> UpstreamConnection | ConnectFailed | None:
        """Connected (and authenticated with ``upstream.sasl``); None: the client left."""
        ...


class ConnectionOwner(Protocol):
    """What a connection needs of the listener that accepted it
    (:class:`~kafkaguard.proxy.net.listener.ListenerRuntime`): its exchange once the transport
    is up, its broker connection, a place for its tasks, and the bookkeeping when it closes.
    The listener's settings, authorizer and node ports reach the connection only through the
    exchange the listener builds. Named here so that the connection does not import the
    listener that creates it."""

    @property
    def name(self) -> str:
        """The listener's name, for log lines."""
        ...

    @property
    def brokers(self) -> BrokerFactory:
        """Opens the connection's broker connection (kafkaguard/proxy/net/upstream.py)."""
        ...

    def start_exchange(
        self, connection: ClientConnection, transport: asyncio.BaseTransport
    ) -> Exchange | None:
        """The exchange of a connection whose transport is up (after any TLS handshake);
        None once the connection is closed (a client certificate no mapping rule matches)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a connection-scoped coroutine."""
        ...

    def connection_closed(
        self, connection: ClientConnection, cause: CloseCause, reason: str | None, level: int
    ) -> None:
        """Counters, quota and log line of a closing connection."""
        ...


class ClientConnection(asyncio.Protocol):
    """The client side: feeds its :class:`Exchange`, carries out its commands.

    Slotted, with no per-connection table or empty set: an idle connection's memory is these
    objects (bench/connection_flood_bench.py --idle, bench/RESULTS.md)."""

    __slots__ = (
        "_abandon",
        "_accepted_at",
        "_closed",
        "_closing",
        "_listener",
        "_transport",
        "_upstream",
        "authority",
        "client_address",
        "connection_id",
        "exchange",
        "node_id",
        "peer",
        "quota_host",
    )

    def __init__(self, listener: ConnectionOwner, node_id: int | None, accepted_at: float) -> None:
        self._listener = listener
        self.node_id = node_id
        """The upstream node this connection reaches; None: a bootstrap server. Set by the
        listener before the transport exists (``routing: sni`` learns it from the
        ClientHello)."""
        self._accepted_at = accepted_at
        self._transport: asyncio.Transport | None = None
        self._upstream: UpstreamConnection | None = None
        self.exchange: Exchange | None = None
        """Created once the transport is set up (after any TLS handshake)."""
        self._closed = False
        self._closing: tuple[CloseConnection, asyncio.TimerHandle] | None = None
        """A close the exchange asked to delay (the client reads its last answer first)."""
        self._abandon: set[asyncio.Task[None]] | None = None
        """Pending answers abandoned with the connection (SASL steps: a password hash still
        waiting for the executor never runs for a client that left); created by the first."""
        self.peer = "?"
        """``host:port`` of the client (set by the listener), for log lines."""
        self.connection_id = "?"
        """Kafka's ``Selector`` connection id (set by the listener), for log lines."""
        self.quota_host: str | None = None
        """The address the listener's ConnectionQuotas counted; cleared when released."""
        self.client_address: IPAddress | None = None
        """The client named by a PROXY protocol header (set by the listener); None: the
        socket's peer is the client."""
        self.authority: str | None = None
        """The PROXY protocol v2 AUTHORITY (the client's SNI at the balancer), if any."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def accepted_at(self) -> float:
        """Loop time of the accept: the start of the authentication deadline."""
        return self._accepted_at

    # -- what the listener reads -------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.exchange is not None and self.exchange.busy

    @property
    def unanswered(self) -> int:
        return 0 if self.exchange is None else self.exchange.unanswered

    def log_fields(self) -> dict[str, object]:
        """The structured fields of this connection's log lines (``logging.format: json``)."""
        if self.exchange is not None:
            return self.exchange.context.log_fields()
        return {
            "listener": self._listener.name,
            "connection_id": self.connection_id,
            "client_address": self.peer,
        }

    # -- client side -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._closed:  # closed while its transport was being set up (shutdown)
            transport.close()
            return
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        self.exchange = self._listener.start_exchange(self, transport)
        if self.exchange is not None:
            self._run(self.exchange.client_connected())

    def data_received(self, data: bytes) -> None:
        if self.exchange is not None:
            self._run(self.exchange.receive_client(data))

    def pause_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.pause_reading()

    def resume_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closed:
            return
        if self._closing is not None:  # left during the grace period: close now
            command, _ = self._closing
            self.close(command.reason, cause=command.cause, level=command.level)
        elif self.exchange is not None:
            self._run(self.exchange.client_closed())
        else:
            self.close(cause=CloseCause.CLIENT_CLOSED)

    # -- carrying out the exchange's commands ------------------------------------------------
    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if self._closed:
                return
            _CARRY_OUT[type(command)](self, command)

    def _send_broker(self, command: SendBroker) -> None:
        if self._upstream is not None:
            self._upstream.send(command.frames)

    def _send_client(self, command: SendClient) -> None:
        if self._transport is not None:
            self._transport.writelines(command.data)

    def _pause_client(self, command: PauseClient) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def _resume_client(self, command: ResumeClient) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def _open_broker(self, command: OpenBroker) -> None:
        self._listener.spawn(self._connect_upstream())

    def _await(self, command: Await) -> None:
        task = self._listener.spawn(self._answer(command))
        if command.cancel_on_close:
            if self._abandon is None:
                self._abandon = set()
            self._abandon.add(task)
            task.add_done_callback(self._abandon.discard)

    def _await_decisions(self, command: AwaitDecisions) -> None:
        self._listener.spawn(self._decided(command))

    async def _decided(self, command: AwaitDecisions) -> None:
        """The authorizer turns a failed lookup into a decision (fail closed): ``ready``
        reports nothing but the lookups being over."""
        await command.ready
        if self.exchange is not None and not self._closed:
            self._run(self.exchange.decisions_ready())

    async def _answer(self, command: Await) -> None:
        exchange = self.exchange
        assert exchange is not None
        try:
            verdict = await command.answer()
        except Exception as exc:  # noqa: BLE001 - the exchange logs it and closes
            self._run(exchange.answer_failed(command.slot, exc))
            return
        self._run(exchange.answered(command.slot, verdict))

    def _close_as(self, command: CloseConnection) -> None:
        if command.after_s <= 0:
            self.close(command.reason, cause=command.cause, level=command.level)
            return
        # Let the client read the answer before the FIN reaches it.
        timer = asyncio.get_running_loop().call_later(
            command.after_s,
            partial(self.close, command.reason, cause=command.cause, level=command.level),
        )
        self._closing = (command, timer)

    def upstream_lost(self, exc: Exception | None) -> None:
        if self.exchange is not None:
            self._run(self.exchange.broker_closed(str(exc) if exc else None))

    # -- limits and shutdown (driven by ListenerRuntime) -------------------------------------
    def clock(self, now: float) -> None:
        """The listener's sweep: idle and authentication deadlines."""
        if self.exchange is not None:
            self._run(self.exchange.clock(now))

    def drain(self) -> tuple[int, int]:
        """Shutdown: read nothing more and start nothing new; close once every request in
        flight is answered. Returns (requests in flight, requests dropped unstarted)."""
        if self._closed or self.exchange is None:
            return 0, 0
        waiting, dropped, commands = self.exchange.drain()
        self._run(commands)
        return waiting, dropped

    def close(
        self, reason: str | None = None, *, cause: CloseCause, level: int = logging.WARNING
    ) -> None:
        """Close both sides. Counted under ``cause``; ``reason`` is logged (rate-limited per
        listener and cause), None logs nothing."""
        if self._closed:
            return
        self._closed = True
        if self.exchange is not None:
            self.exchange.close()
        if self._closing is not None:
            self._closing[1].cancel()
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()
        for task in self._abandon or ():
            task.cancel()
        self._listener.connection_closed(self, cause, reason, level)

    # -- the broker side (kafkaguard/proxy/net/upstream.py) ----------------------------------
    async def _connect_upstream(self) -> None:
        outcome = await self._listener.brokers.connect(self, self.node_id)
        if isinstance(outcome, ConnectFailed):
            self.close(outcome.reason, cause=CloseCause.UPSTREAM, level=outcome.level)
        elif outcome is not None:
            self._upstream = outcome
            assert self.exchange is not None
            self._run(self.exchange.broker_connected())

    def broker_data(self, data: bytes) -> None:
        if self.exchange is not None:
            self._run(self.exchange.receive_broker(data))

    def broker_write_full(self, full: bool) -> None:
        if self.exchange is not None:
            self._run(self.exchange.broker_write_full(full))


class UpstreamConnection(asyncio.Protocol):
    """The broker side of one client connection."""

    __slots__ = (
        "_auth",
        "_auth_done",
        "_auth_frames",
        "_auth_ok",
        "_client",
        "_reading_paused",
        "_target",
        "_transport",
    )

    def __init__(self, client: ClientConnection, target: HostPort) -> None:
        self._client = client
        self._target = target
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._auth: UpstreamSaslExchange | None = None
        """The proxy's own SASL exchange with the broker, while it runs (upstream.sasl)."""
        self._auth_frames: FrameBuffer | None = None
        self._auth_done: asyncio.Future[None] | None = None
        self._auth_ok = False
        """Authenticated: only then is this connection the client's (and its loss theirs)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, frames: list[Frame]) -> None:
        if self._transport is not None:
            self._transport.writelines(frames)

    # -- upstream SASL (kafkaguard/proxy/sasl/client.py) -------------------------------------
    def authenticate(self, exchange: UpstreamSaslExchange) -> asyncio.Future[None]:
        """Run ``exchange`` on this connection before anything else is sent on it; the
        future completes when the broker accepted the proxy's credentials, or fails with
        :class:`UpstreamAuthenticationError` (refused) / ``OSError`` (connection lost)."""
        self._auth = exchange
        self._auth_frames = FrameBuffer(_SASL_MAX_FRAME)
        self._auth_done = asyncio.get_running_loop().create_future()
        self.send([exchange.start()])
        return self._auth_done

    def _auth_failed(self, exc: BaseException) -> None:
        self._auth = None
        if self._auth_done is not None and not self._auth_done.done():
            self._auth_done.set_exception(exc)

    def _auth_received(self, data: bytes) -> None:
        exchange = self._auth
        frames = self._auth_frames
        assert exchange is not None and frames is not None
        try:
            for frame in frames.feed(data):
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
        if exchange.done and not frames.pending_bytes:
            self._auth = None
            self._auth_frames = None
            self._auth_ok = True
            if self._auth_done is not None and not self._auth_done.done():
                self._auth_done.set_result(None)

    # -- relaying ----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._auth is not None:
            self._auth_received(data)
        else:
            self._client.broker_data(data)

    def pause_writing(self) -> None:
        self._client.broker_write_full(True)

    def resume_writing(self) -> None:
        self._client.broker_write_full(False)

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


_CARRY_OUT: dict[type[Command], Callable[[ClientConnection, Any], None]] = {
    SendBroker: ClientConnection._send_broker,
    SendClient: ClientConnection._send_client,
    PauseClient: ClientConnection._pause_client,
    ResumeClient: ClientConnection._resume_client,
    Await: ClientConnection._await,
    AwaitDecisions: ClientConnection._await_decisions,
    OpenBroker: ClientConnection._open_broker,
    CloseConnection: ClientConnection._close_as,
}
"""How each command of the exchange is carried out (one table for every connection: a
table of bound methods per connection cost ~800 B of each idle one)."""
