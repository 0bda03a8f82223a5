"""A listener: its bootstrap port plus one proxy port per upstream broker.

Port-per-broker mapping: a client that learns node N from a Metadata (or FindCoordinator, …)
response is given ``advertised_host:port_for(N)``; connecting there reaches node N's real
address. A node's port is bound the first time the node appears. The socket is bound and
listening *before* the rewritten response leaves the proxy, so a client that connects at once
lands in the backlog instead of being refused.

Accepting: each port has its own accept loop (``sock_accept``) so that Kafka's
``ConnectionQuotas`` checks (:mod:`kafkaguard.proxy.core.limits`) run on the bare socket, before
any TLS handshake, upstream connection or protocol object exists; a refused connection costs
one ``accept`` and one ``close``. The TLS handshake is bounded by ``authentication_timeout_ms``
(Kafka: ``SocketServer`` plus the ``Selector``'s authentication deadline), and one periodic
sweep per listener closes idle and unauthenticated connections (``connections.max.idle.ms``).
Refusals and closes are counted per cause in :attr:`ListenerRuntime.counters`; their log lines
are rate-limited per cause (:class:`~kafkaguard.proxy.log_limit.RateLimitedLog`).

PROXY protocol (``proxy_protocol: v1 | v2 | any``, kafkaguard/proxy/edge/proxy_protocol.py): the
TCP peer is a load balancer, and the client is the one its header names. At accept, only a peer
in ``proxy_protocol_trusted_cidrs`` is kept (anyone else could claim any address). The header is
then read in a task of the connection's own, peeking so that exactly the header is taken off the
socket (:func:`~kafkaguard.proxy.net.peek.read_proxy_header`): the TLS handshake on SSL/SASL_SSL
listeners starts on the byte after it. ConnectionQuotas run once the header names the client,
and the client's address is the one of the connection's
:class:`~kafkaguard.proxy.session.Session`, quota and log lines. Header and handshake share the
``authentication_timeout_ms`` deadline.

Reload (kafkaguard/proxy/app/reload.py): :meth:`ListenerRuntime.reconfigure` swaps the limits
and the enforcement mode. Connections admitted from then on are checked against the new limits
and get them (frame size, requests in flight, idle and authentication deadlines); connections
already open keep the ones they were admitted with and count against the new
``max_connections``/``max_connections_per_ip``; lowering a limit closes no open connection, as
with Kafka's dynamically updated ``max.connections`` (KIP-402). An added listener is first
opened (:meth:`ListenerRuntime.open`), then accepts (:meth:`ListenerRuntime.accept`); a removed
one is drained and closed as at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import traceback
from collections.abc import Coroutine, Mapping
from typing import Any

from kafkaguard.certs.tls import ServerTls
from kafkaguard.policy.authorizer import Authorizer, SecurityProtocol
from kafkaguard.proxy.config import HostPort, LimitsConfig, ListenerConfig, canonical_ip
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.core.limits import ConnectionQuotas, sweep_interval
from kafkaguard.proxy.core.stats import ListenerStats
from kafkaguard.proxy.edge.proxy_protocol import (
    Endpoint,
    ProxyHeader,
    ProxyProtocolError,
    client_endpoint,
)
from kafkaguard.proxy.edge.sni import (
    MAX_RECORD_BYTES,
    UNRECOGNIZED_NAME_ALERT,
    ClientHelloError,
    UnroutableName,
)
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.net.cluster import UpstreamCluster
from kafkaguard.proxy.net.connection import ClientConnection
from kafkaguard.proxy.net.peek import read_client_hello_server_name, read_proxy_header
from kafkaguard.proxy.sasl.authenticator import SaslServer
from kafkaguard.proxy.sasl.executor import AuthExecutor
from kafkaguard.proxy.sasl.stores import build_credential_store

log = logging.getLogger("kafkaguard.proxy")

_ACCEPT_RETRY_S = 0.1
"""After a failed ``accept`` (out of file descriptors): wait before the next, not spin."""
_ACCEPT_BACKLOG_BATCH = 100
"""Connections taken from the backlog after one wake-up, at most (asyncio's own accept loop
takes as many), so other work of the loop still runs between bursts."""
_REFUSAL_DETAIL = {
    CloseCause.MAX_CONNECTIONS: "the listener holds its max_connections ({limits.max_connections})",
    CloseCause.MAX_CONNECTIONS_PER_IP: "{host} holds its max_connections_per_ip ({per_ip})",
    CloseCause.CONNECTION_RATE: (
        "more than max_connection_creation_rate ({limits.max_connection_creation_rate}) "
        "new connections per second"
    ),
    CloseCause.IP_CONNECTION_RATE: (
        "{host} is over its connection_creation_rate ({ip_rate}/s): held unread, closed "
        "after {throttle_ms} ms"
    ),
}


class BindError(OSError):
    """A port a listener needs cannot be bound: the message names the listener, the address
    and the port, which the kernel's ``[Errno 98] Address already in use`` does not."""

    def __str__(self) -> str:
        return str(self.strerror)


class NodePortUnavailable(RuntimeError):
    """A node has no proxy port (outside an explicit map, or the port cannot be bound)."""


class ListenerRuntime:
    """The servers, connections and node ports of one configured listener."""

    def __init__(
        self,
        config: ListenerConfig,
        cluster: UpstreamCluster,
        limits: LimitsConfig,
        authorizer: Authorizer,
        *,
        log_only: bool = False,
        auth_executor: AuthExecutor | None = None,
        reuse_port: bool = False,
        store_connection: Mapping[str, Any] | None = None,
    ) -> None:
        """``store_connection``: librdkafka settings reaching the protected cluster, for a
        ``scram_credentials: kafka`` store (docs/acl-store.md)."""
        self.config = config
        self.reuse_port = reuse_port
        """``workers`` > 1: every port is bound with ``SO_REUSEPORT``, shared with the other
        workers (kafkaguard/proxy/app/workers.py); the kernel spreads connections over them."""
        self.authorizer = authorizer
        self.log_only = log_only
        """``enforcement: log_only``: decisions are made and audited, requests handled as if
        allowed (kafkaguard/audit; ACL administration excepted, see ENFORCED_IN_LOG_ONLY)."""
        self.security_protocol = SecurityProtocol(config.security_protocol)
        self.cluster = cluster
        self.limits = limits
        self.connections: set[ClientConnection] = set()
        """Connections past their TLS handshake and not yet closed."""
        self.quotas = ConnectionQuotas(limits)
        """Open connections by address, creation rate (handshakes in progress included)."""
        self.counters: dict[str, int] = dict.fromkeys(map(str, CloseCause), 0)
        """Connections refused or closed since start, by :class:`CloseCause` value (plain
        ints: exported by whoever reads them)."""
        self.stats = ListenerStats()
        """Requests, responses, bytes and latencies of the data path (read by /metrics)."""
        self.rate_log = RateLimitedLog(log)
        """Per-connection log lines, at most one a second per (listener, cause)."""
        self._sockets: list[socket.socket] = []
        self._unserved: socket.socket | None = None
        """The bootstrap socket between :meth:`open` and :meth:`accept`."""
        self._acceptors: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        """Connections being set up off the accept loop: TLS handshakes, PROXY headers."""
        self._awaiting_header = 0
        """Connections accepted whose PROXY protocol header has not been read yet."""
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}
        """Connections over their address's ``connection_creation_rate``, held unread until
        their throttle time ends (Kafka's ``Acceptor.throttledSockets``)."""
        self._sweeper: asyncio.TimerHandle | None = None
        self.draining = False
        """Shutdown: accepting stopped, connections close once their requests are answered."""
        self._drained: asyncio.Event | None = None
        self._node_ports: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.bootstrap_port: int = config.port
        self.tls: ServerTls | None = (
            ServerTls(config.ssl, config.name) if config.ssl is not None else None
        )
        """SSL/SASL_SSL listeners: the TLS context every port of the listener serves with
        (files reloaded for new connections when they change)."""
        self.sasl: SaslServer | None = (
            SaslServer(
                config.sasl,
                store=build_credential_store(config.sasl, store_connection),
                executor=auth_executor,
            )
            if config.sasl is not None
            else None
        )
        """SASL_PLAINTEXT/SASL_SSL listeners: mechanisms, credentials and failure delays
        shared by the listener's connections (kafkaguard/proxy/sasl)."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a connection-scoped coroutine, keeping a reference so it is not collected."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def start(self) -> None:
        """:meth:`open`, then :meth:`accept`."""
        await self.open()
        self.accept()

    async def open(self) -> None:
        """Load what the listener needs and bind its bootstrap port, without accepting yet: a
        reload opens every added listener before it applies anything (a port already in use
        rejects the whole reload), and accepts on them only once the new settings are in
        force. :meth:`close` releases what this took."""
        # SASL credentials kept in ZooKeeper, a JWKS endpoint: first load before the port opens.
        if self.sasl is not None:
            await self.sasl.start()
        sock = self._bind(self.config.port)
        self._sockets.append(sock)  # closed by stop_accepting even if never served
        self._unserved = sock
        self.bootstrap_port = sock.getsockname()[1]

    def accept(self) -> None:
        """Start accepting on the port :meth:`open` bound, and the idle sweep."""
        sock, self._unserved = self._unserved, None
        if sock is None:
            raise RuntimeError(f"listener {self.config.name} is not open")
        self._accept_on(sock, None)
        self._schedule_sweep()
        log.info(
            "listener %s (%s) ready on %s:%d, advertised as %s",
            self.config.name,
            self.config.security_protocol,
            self.config.bind_host,
            self.bootstrap_port,
            self.config.advertised_host,
        )

    def _bind(self, port: int, what: str = "bootstrap port") -> socket.socket:
        """A listening socket on ``port`` (``what``: the port's part, for the error)."""
        family = socket.AF_INET6 if ":" in self.config.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.config.bind_host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            where = HostPort(self.config.bind_host, port)
            raise BindError(
                exc.errno, f"listener {self.config.name} cannot bind {where} ({what}): {exc}"
            ) from exc
        return sock

    def _serve(self, sock: socket.socket, node_id: int | None) -> None:
        self._sockets.append(sock)
        self._accept_on(sock, node_id)

    def _accept_on(self, sock: socket.socket, node_id: int | None) -> None:
        task = asyncio.get_running_loop().create_task(self._accept_loop(sock, node_id))
        self._acceptors.append(task)

    # -- reload ----------------------------------------------------------------------------------
    def reconfigure(self, limits: LimitsConfig, *, log_only: bool) -> None:
        """A reload: the listener's limits and enforcement mode from now on (see the module
        docstring for which connections see what)."""
        if log_only != self.log_only:
            self.log_only = log_only  # ConnectionContext reads it for every decision
            if log_only:
                log.warning(
                    "listener %s is now in log_only mode: requests are authorized and audited "
                    "but forwarded even when denied",
                    self.config.name,
                )
            else:
                log.info("listener %s now enforces its authorization decisions", self.config.name)
        if limits == self.limits:
            return
        self.limits = limits  # read by _admit, _open and each new connection's Exchange
        self.quotas.reconfigure(limits)
        if self._sweeper is not None:  # the next sweep at the new interval
            self._sweeper.cancel()
            self._schedule_sweep()

    def _set_up_failed(self, conn: socket.socket) -> None:
        """A bug while setting up an accepted connection: close it, log the traceback
        (rate-limited); the port keeps accepting."""
        conn.close()
        self.rate_log.log(
            (self.config.name, CloseCause.INTERNAL_ERROR, "accept"),
            logging.ERROR,
            "listener %s failed to set up an accepted connection\n%s",
            self.config.name,
            traceback.format_exc().rstrip(),
        )

    # -- accepting (Kafka's Acceptor + ConnectionQuotas) -------------------------------------
    async def _accept_loop(self, sock: socket.socket, node_id: int | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    conn, address = await loop.sock_accept(sock)
                except OSError as exc:  # e.g. EMFILE: keep the port, retry shortly
                    self.rate_log.log(
                        (self.config.name, "accept"),
                        logging.ERROR,
                        "listener %s cannot accept a connection: %s",
                        self.config.name,
                        exc,
                    )
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                    continue
                await self._set_up(conn, address, node_id)
                # The backlog, without going back to the loop for each connection (uvloop's
                # sock_accept registers and removes a reader, and waits one loop iteration,
                # per call): a burst of connections costs one wake-up.
                for _ in range(_ACCEPT_BACKLOG_BATCH):
                    try:
                        conn, address = sock.accept()
                    except OSError:  # empty (or EMFILE: reported by the next sock_accept)
                        break
                    await self._set_up(conn, address, node_id)
        finally:  # here, once the loop no longer watches the socket (its fd may be reused)
            sock.close()

    async def _set_up(self, conn: socket.socket, address: Any, node_id: int | None) -> None:
        """One accepted socket: ConnectionQuotas and its set-up, or its PROXY protocol header
        first; a bug closes this connection only."""
        loop = asyncio.get_running_loop()
        try:
            if self.config.proxy_protocol_versions is None:
                await self._accept_direct(conn, address, node_id, loop.time())
            else:
                self._accept_proxied(conn, address, node_id, loop.time())
        except Exception:  # noqa: BLE001 - a bug must not end accepting on the port
            self._set_up_failed(conn)

    async def _accept_direct(
        self, conn: socket.socket, address: Any, node_id: int | None, now: float
    ) -> None:
        """The TCP peer is the client: ConnectionQuotas at once, then the TLS handshake."""
        host, port = _peer(address)
        connection = self._admit(conn, host, port, node_id, now, now)
        if connection is None:
            return
        deadline = now + self.limits.authentication_timeout_ms / 1000
        if self.tls is None:  # no handshake: completes within this loop iteration
            await self._open(conn, connection, deadline)
        else:  # a handshake must not hold up the next accept
            self._track(self._open(conn, connection, deadline))

    def _accept_proxied(
        self, conn: socket.socket, address: Any, node_id: int | None, now: float
    ) -> None:
        """A ``proxy_protocol`` listener: the TCP peer must be a trusted load balancer,
        checked here on the bare socket before anything else is done for it. Its header
        names the client, so ConnectionQuotas (per client address) and the TLS handshake wait
        for the header, in a task of the connection's own (:meth:`_proxied`). Connections
        still sending their header count against ``max_connections`` with those admitted."""
        host, port = _peer(address)
        if not self.config.proxy_protocol_trusts(host):
            conn.close()
            self.counters[CloseCause.PROXY_PROTOCOL] += 1
            self.rate_log.log(
                (self.config.name, CloseCause.PROXY_PROTOCOL, "untrusted"),
                logging.WARNING,
                "refused connection from %s:%s on listener %s: not in "
                "proxy_protocol_trusted_cidrs (only the load balancers may connect)",
                host,
                port,
                self.config.name,
            )
            return
        if self.quotas.total + self._awaiting_header >= self.limits.max_connections:
            self._refuse(conn, host, port, CloseCause.MAX_CONNECTIONS)
            return
        conn.setblocking(False)  # peeked at without blocking the loop
        self._awaiting_header += 1
        self._track(self._proxied(conn, host, port, node_id, now))

    async def _proxied(
        self, conn: socket.socket, balancer: str, port: object, node_id: int | None, now: float
    ) -> None:
        """:meth:`_set_up_proxied`, guarded as the accept loop is: a bug closes this
        connection (with a rate-limited traceback), never the listener's others."""
        try:
            await self._set_up_proxied(conn, balancer, port, node_id, now)
        except Exception:  # noqa: BLE001 - logged with its traceback, like the accept loop's
            self._set_up_failed(conn)

    async def _set_up_proxied(
        self, conn: socket.socket, balancer: str, port: object, node_id: int | None, now: float
    ) -> None:
        """The balancer's PROXY protocol header, then the connection as the client it names:
        ConnectionQuotas for the client's address, then the TLS handshake (the balancer sends
        the header before the client's first byte, ClientHello included). Header and
        handshake together are bounded by ``authentication_timeout_ms`` from accept."""
        deadline = now + self.limits.authentication_timeout_ms / 1000
        try:
            received = await self._receive_header(conn, f"{balancer}:{port}", deadline)
        finally:
            self._awaiting_header -= 1
        if received is None:
            return
        header, client = received
        host, client_port = balancer, port  # LOCAL: the balancer's own connection
        if client is not None:
            host, client_port = canonical_ip(str(client.address)), client.port
        loop = asyncio.get_running_loop()
        connection = self._admit(conn, host, client_port, node_id, now, loop.time())
        if connection is None:
            return
        connection.client_address = None if client is None else client.address
        connection.authority = header.authority
        log.debug(
            "%s: PROXY protocol v%d %s header from %s:%s",
            connection.peer,
            header.version,
            header.command.name,
            balancer,
            port,
        )
        await self._open(conn, connection, deadline)

    async def _receive_header(
        self, conn: socket.socket, balancer: str, deadline: float
    ) -> tuple[ProxyHeader, Endpoint | None] | None:
        """The header and the client it names, or None once the connection is closed (and
        counted): :class:`CloseCause` PROXY_PROTOCOL for no header, a malformed or incomplete
        one, or one naming no client IP address; CLIENT_CLOSED, unlogged, when the balancer
        closed without sending a byte (a plain TCP health check)."""
        versions = self.config.proxy_protocol_versions
        assert versions is not None
        cause = CloseCause.PROXY_PROTOCOL
        try:
            async with asyncio.timeout_at(deadline):
                header = await read_proxy_header(conn, versions)
            return header, client_endpoint(header)
        except TimeoutError:
            reason: str | None = (
                "no complete PROXY protocol header within "
                f"{self.limits.authentication_timeout_ms} ms (authentication_timeout_ms)"
            )
        except ProxyProtocolError as exc:
            reason = str(exc)
        except (EOFError, OSError):  # left (or reset) before its first byte
            cause, reason = CloseCause.CLIENT_CLOSED, None
        except asyncio.CancelledError:
            conn.close()
            raise
        conn.close()
        self.counters[cause] += 1
        if reason is not None:
            self.rate_log.log(
                (self.config.name, cause, "header"),
                logging.WARNING,
                "closing connection from %s on listener %s: %s",
                balancer,
                self.config.name,
                reason,
            )
        return None

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a connection's set-up (header, handshake) off the accept loop; shutdown
        cancels what is still running (:meth:`stop_accepting`)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def _admit(
        self,
        conn: socket.socket,
        host: str,
        port: object,
        node_id: int | None,
        accepted_at: float,
        now: float,
    ) -> ClientConnection | None:
        """ConnectionQuotas for the client at ``host``: count the connection, or close it at
        once. ``accepted_at`` starts its authentication deadline; ``now`` is the quotas'
        clock (later than ``accepted_at`` when a PROXY protocol header was read first)."""
        cause = self.quotas.admit(host, now)
        if cause is CloseCause.IP_CONNECTION_RATE:
            self._throttle(conn, host, port, self.quotas.throttle_s)
            return None
        if cause is not None:
            self._refuse(conn, host, port, cause)
            return None
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # the client already left: the transport will report it
        self.stats.accepted += 1
        connection = ClientConnection(self, node_id, accepted_at)
        connection.quota_host = host
        connection.peer = host if port is None else f"{host}:{port}"
        local = conn.getsockname()
        local_text = f"{local[0]}:{local[1]}" if isinstance(local, tuple) else str(local)
        connection.connection_id = f"{local_text}-{connection.peer}-{self.stats.accepted}"
        return connection

    def _throttle(self, conn: socket.socket, host: str, port: object, delay_s: float) -> None:
        """A connection over its address's ``connection_creation_rate``: as Kafka's
        ``Acceptor`` (``ConnectionThrottledException`` → ``DelayedCloseSocket``), nothing is
        read from it and it is closed once ``delay_s`` has passed, so a client that
        reconnects at once is slowed down rather than answered. At most ``max_connections``
        are held so (file descriptors are bounded); beyond, one is closed at once."""
        if len(self._throttled) >= self.limits.max_connections:
            delay_s = 0.0
        if delay_s > 0:
            loop = asyncio.get_running_loop()
            self._throttled[conn] = loop.call_later(delay_s, self._end_throttle, conn)
        else:
            conn.close()
        self._count_refusal(host, port, CloseCause.IP_CONNECTION_RATE, round(delay_s * 1000))

    def _end_throttle(self, conn: socket.socket) -> None:
        del self._throttled[conn]
        conn.close()

    def _refuse(self, conn: socket.socket, host: str, port: object, cause: CloseCause) -> None:
        conn.close()
        self._count_refusal(host, port, cause)

    def _count_refusal(
        self, host: str, port: object, cause: CloseCause, throttle_ms: int = 0
    ) -> None:
        self.counters[cause] += 1
        limits = self.limits
        detail = _REFUSAL_DETAIL[cause].format(
            limits=limits,
            host=host,
            per_ip=limits.max_connections_for(host),
            ip_rate=limits.connection_creation_rate_for(host),
            throttle_ms=throttle_ms,
        )
        self.rate_log.log(
            (self.config.name, cause),
            logging.WARNING,
            "refused connection from %s:%s on listener %s: %s",
            host,
            "?" if port is None else port,
            self.config.name,
            detail,
        )

    async def _open(
        self, conn: socket.socket, connection: ClientConnection, deadline: float
    ) -> None:
        """Hand the accepted socket to its connection, through the TLS handshake if any,
        which must be done by ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        tls = self.tls
        # Only a TLS handshake (or the ClientHello peek) can take long: no timer otherwise.
        bounded = tls is not None or self.config.sni is not None
        try:
            async with asyncio.timeout_at(deadline) if bounded else contextlib.nullcontext():
                if self.config.sni is not None and not await self._route(conn, connection):
                    return
                await loop.connect_accepted_socket(
                    lambda: connection,
                    conn,
                    # The newest context: it decides which session tickets resume (OpenSSL
                    # decrypts them with the keys of the context a handshake starts with), so
                    # a reload of the TLS files ends the tickets issued before it.
                    ssl=tls.current() if tls is not None else None,
                    # the deadline above decides
                    ssl_handshake_timeout=(
                        max(deadline - loop.time(), 0.0) + 1.0 if tls is not None else None
                    ),
                )
        except TimeoutError:
            conn.close()
            connection.close(
                "TLS handshake not completed within "
                f"{self.limits.authentication_timeout_ms} ms (authentication_timeout_ms)",
                cause=CloseCause.AUTHENTICATION_TIMEOUT,
            )
        except OSError as exc:  # ssl.SSLError is an OSError
            conn.close()
            if tls is None:
                connection.close(f"connection failed: {exc}", cause=CloseCause.CLIENT_CLOSED)
            else:
                connection.close(
                    f"TLS handshake failed: {exc}", cause=CloseCause.AUTHENTICATION_FAILED
                )
        except asyncio.CancelledError:
            conn.close()
            connection.close(cause=CloseCause.SHUTDOWN)
            raise

    async def _route(self, conn: socket.socket, connection: ClientConnection) -> bool:
        """``routing: sni``: the upstream node named by the ClientHello's server name, peeked
        at so the TLS handshake still reads it; False once a refused connection is closed
        (with a fatal ``unrecognized_name`` alert) and counted (kafkaguard/proxy/edge/sni.py)."""
        sni = self.config.sni
        assert sni is not None
        try:
            connection.node_id = sni.route(await read_client_hello_server_name(conn))
        except (ClientHelloError, UnroutableName) as exc:
            with contextlib.suppress(OSError):
                conn.send(UNRECOGNIZED_NAME_ALERT)
                conn.recv(MAX_RECORD_BYTES)  # read what was peeked: the close is then a FIN,
                # not a reset that could discard the alert before the client reads it
            conn.close()
            connection.close(str(exc), cause=CloseCause.SNI)
            return False
        except EOFError:
            conn.close()
            connection.close(cause=CloseCause.CLIENT_CLOSED)
            return False
        return True

    def connection_closed(
        self, connection: ClientConnection, cause: CloseCause, reason: str | None, level: int
    ) -> None:
        """Bookkeeping of a closing connection: counters, quota, one rate-limited line (per
        cause and level: a stream of benign lines must not hide a warning)."""
        self.counters[cause] += 1
        self.connections.discard(connection)
        host = connection.quota_host
        if host is not None:
            connection.quota_host = None
            self.quotas.release(host)
        if reason is not None:
            self.rate_log.log(
                (self.config.name, cause, level),
                level,
                "closing connection from %s on listener %s: %s (%d requests unanswered)",
                connection.peer,
                self.config.name,
                reason,
                connection.unanswered,
                extra=connection.log_fields,
            )
        if self._drained is not None and not self.connections:
            self._drained.set()

    # -- idle and authentication deadlines (Kafka's Selector) --------------------------------
    def _schedule_sweep(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(sweep_interval(self.limits), self._sweep)

    def _sweep(self) -> None:
        """Close connections idle for ``connections_max_idle_ms`` (nothing read or written,
        nothing in flight) or not authenticated within ``authentication_timeout_ms``."""
        now = asyncio.get_running_loop().time()
        try:
            self.quotas.expire(now)
            for connection in list(self.connections):
                connection.clock(now)
        finally:  # one faulty connection must not end the sweeps of the listener
            self._schedule_sweep()

    # -- node ports ----------------------------------------------------------------------------
    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Learn node ``node_id`` at ``host:port``; return the proxy address that stands for it:
        its name on the listener's port (``routing: sni``), else the advertised host and the
        node's own port (bound the first time)."""
        self.cluster.learn_node(node_id, host, port)
        sni = self.config.sni
        if sni is not None:
            return sni.host_for(node_id), self.bootstrap_port
        proxy_port = self._node_ports.get(node_id)
        if proxy_port is None:
            proxy_port = self._open_node_port(node_id)
        return self.config.advertised_host, proxy_port

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        """The proxy address already standing for node ``node_id``, None before any."""
        sni = self.config.sni
        if sni is not None:
            known = self.cluster.node_address(node_id) is not None
            return (sni.host_for(node_id), self.bootstrap_port) if known else None
        port = self._node_ports.get(node_id)
        return None if port is None else (self.config.advertised_host, port)

    def _open_node_port(self, node_id: int) -> int:
        port = self.config.broker_ports.port_for(node_id)
        if port is None:
            raise NodePortUnavailable(
                f"listener {self.config.name} has no proxy port for upstream node {node_id}"
            )
        try:
            sock = self._bind(port, f"node {node_id}'s port")
        except BindError as exc:
            raise NodePortUnavailable(str(exc)) from exc
        self._node_ports[node_id] = port
        log.info(
            "listener %s serves upstream node %d on %s:%d",
            self.config.name,
            node_id,
            self.config.bind_host,
            port,
        )
        if self.draining:  # shutting down: the port is reserved, never served
            sock.close()
        else:
            self._serve(sock, node_id)
        return port

    # -- shutdown ------------------------------------------------------------------------------
    def stop_accepting(self) -> None:
        """Close every listening socket; abandon TLS handshakes in progress; close the
        connections held for their address's ``connection_creation_rate``."""
        for task in self._acceptors:
            task.cancel()  # schedules the removal of its socket's reader first
        self._acceptors.clear()
        loop = asyncio.get_running_loop()
        for sock in self._sockets:  # then the close (an acceptor never started closes nothing)
            loop.call_soon(sock.close)
        self._sockets.clear()
        for task in list(self._handshakes):
            task.cancel()
        for conn, timer in self._throttled.items():  # Kafka's Acceptor.closeAll
            timer.cancel()
            conn.close()
        self._throttled.clear()

    def drain(self) -> tuple[int, int, int]:
        """Shutdown, first step: stop accepting and reading; each connection closes once its
        requests in flight are answered. Returns (connections, requests in flight, requests
        received but not started: dropped)."""
        self.draining = True
        self.stop_accepting()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._drained = asyncio.Event()
        connections = len(self.connections)
        in_flight = dropped = 0
        for connection in list(self.connections):
            waiting, not_started = connection.drain()
            in_flight += waiting
            dropped += not_started
        if not self.connections:
            self._drained.set()
        return connections, in_flight, dropped

    async def drained(self) -> None:
        """Wait until every connection :meth:`drain` left open has closed."""
        if self._drained is not None:
            await self._drained.wait()

    def cut(self) -> tuple[int, int]:
        """Shutdown, last step: close what is still open. Returns (connections, requests left
        unanswered)."""
        connections = len(self.connections)
        unanswered = 0
        for connection in list(self.connections):
            unanswered += connection.unanswered
            connection.close(cause=CloseCause.SHUTDOWN)
        return connections, unanswered

    async def close(self) -> None:
        self.stop_accepting()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for connection in list(self.connections):
            connection.close(cause=CloseCause.SHUTDOWN)
        for task in list(self._tasks):
            task.cancel()
        if self.sasl is not None:
            await self.sasl.close()


def _peer(address: Any) -> tuple[str, object]:
    """(host, port) of an accepted socket's peer, the host as ConnectionQuotas keys it (one
    spelling per IP address; a UNIX socket's address is not an IP and stays as it is)."""
    if not isinstance(address, tuple):
        return str(address), None
    host = str(address[0])
    with contextlib.suppress(ValueError):
        host = canonical_ip(host)
    return host, address[1]
