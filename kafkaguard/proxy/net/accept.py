"""Accepting on a listener's ports (Kafka's ``Acceptor``), the PROXY protocol header included.

Each port has its own accept loop (``sock_accept``) so that the listener's limits
(:class:`~kafkaguard.proxy.net.admission.Admission`) run on the bare socket, before any TLS
handshake (:class:`~kafkaguard.proxy.net.handshake.Handshake`), upstream connection or protocol
object exists.

PROXY protocol (``proxy_protocol: v1 | v2 | any``, kafkaguard/proxy/edge/proxy_protocol.py): the
TCP peer is a load balancer, and the client is the one its header names. At accept, only a peer
in ``proxy_protocol_trusted_cidrs`` is kept (anyone else could claim any address). The header is
then read in a task of the connection's own, peeking so that exactly the header is taken off the
socket (:func:`~kafkaguard.proxy.net.peek.read_proxy_header`): the TLS handshake on SSL/SASL_SSL
listeners starts on the byte after it. ConnectionQuotas run once the header names the client,
and the client's address is the one of the connection's
:class:`~kafkaguard.proxy.session.Session`, quota and log lines. Header and handshake share the
``authentication_timeout_ms`` deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import traceback
from collections.abc import Coroutine
from typing import Any

from kafkaguard.proxy.config import HostPort, ListenerConfig, canonical_ip
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.edge.proxy_protocol import (
    Endpoint,
    ProxyHeader,
    ProxyProtocolError,
    client_endpoint,
)
from kafkaguard.proxy.net.admission import Admission
from kafkaguard.proxy.net.connection import ClientConnection
from kafkaguard.proxy.net.handshake import Handshake
from kafkaguard.proxy.net.peek import read_proxy_header

log = logging.getLogger("kafkaguard.proxy")

_ACCEPT_RETRY_S = 0.1
"""After a failed ``accept`` (out of file descriptors): wait before the next, not spin."""
_ACCEPT_BACKLOG_BATCH = 100
"""Connections taken from the backlog after one wake-up, at most (asyncio's own accept loop
takes as many), so other work of the loop still runs between bursts."""


class BindError(OSError):
    """A port a listener needs cannot be bound: the message names the listener, the address
    and the port, which the kernel's ``[Errno 98] Address already in use`` does not."""

    def __str__(self) -> str:
        return str(self.strerror)


class Acceptor:
    """The listening sockets of one listener and what is done with each accepted socket."""

    def __init__(
        self,
        config: ListenerConfig,
        admission: Admission,
        handshake: Handshake,
        *,
        reuse_port: bool = False,
    ) -> None:
        self._config = config
        self._admission = admission
        self._handshake = handshake
        self._reuse_port = reuse_port
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        """Connections being set up off the accept loop: TLS handshakes, PROXY headers."""
        self.awaiting_header = 0
        """Connections accepted whose PROXY protocol header has not been read yet."""
        self.stopped = False
        """:meth:`stop` was called: a port bound from now on is reserved, never served."""

    def bind(self, port: int, what: str = "bootstrap port") -> socket.socket:
        """A listening socket on ``port`` (``what``: the port's part, for the error), closed
        by :meth:`stop` even if never served."""
        config = self._config
        family = socket.AF_INET6 if ":" in config.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self._reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((config.bind_host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            where = HostPort(config.bind_host, port)
            raise BindError(
                exc.errno, f"listener {config.name} cannot bind {where} ({what}): {exc}"
            ) from exc
        self._sockets.append(sock)
        return sock

    def serve(self, sock: socket.socket, node_id: int | None) -> None:
        """Accept on ``sock`` (bound by :meth:`bind`); ``node_id``: the upstream node its
        connections reach, None for the bootstrap port."""
        task = asyncio.get_running_loop().create_task(self._accept_loop(sock, node_id))
        self._acceptors.append(task)

    def stop(self) -> None:
        """Close every listening socket; abandon TLS handshakes and PROXY headers in
        progress."""
        self.stopped = True
        for task in self._acceptors:
            task.cancel()  # schedules the removal of its socket's reader first
        self._acceptors.clear()
        loop = asyncio.get_running_loop()
        for sock in self._sockets:  # then the close (an acceptor never started closes nothing)
            loop.call_soon(sock.close)
        self._sockets.clear()
        for task in list(self._handshakes):
            task.cancel()

    async def _accept_loop(self, sock: socket.socket, node_id: int | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    conn, address = await loop.sock_accept(sock)
                except OSError as exc:  # e.g. EMFILE: keep the port, retry shortly
                    self._admission.rate_log.log(
                        (self._config.name, "accept"),
                        logging.ERROR,
                        "listener %s cannot accept a connection: %s",
                        self._config.name,
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
            if self._config.proxy_protocol_versions is None:
                await self._accept_direct(conn, address, node_id, loop.time())
            else:
                self._accept_proxied(conn, address, node_id, loop.time())
        except Exception:  # noqa: BLE001 - a bug must not end accepting on the port
            self._set_up_failed(conn)

    def _set_up_failed(self, conn: socket.socket) -> None:
        """A bug while setting up an accepted connection: close it, log the traceback
        (rate-limited); the port keeps accepting."""
        conn.close()
        self._admission.rate_log.log(
            (self._config.name, CloseCause.INTERNAL_ERROR, "accept"),
            logging.ERROR,
            "listener %s failed to set up an accepted connection\n%s",
            self._config.name,
            traceback.format_exc().rstrip(),
        )

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a connection's set-up (header, handshake) off the accept loop; shutdown
        cancels what is still running (:meth:`stop`)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def _open(
        self, conn: socket.socket, connection: ClientConnection, deadline: float
    ) -> Coroutine[Any, Any, None]:
        """The connection's TLS handshake (if any), to be done by ``deadline``."""
        timeout_ms = self._admission.limits.authentication_timeout_ms
        return self._handshake.open(conn, connection, deadline, timeout_ms)

    async def _accept_direct(
        self, conn: socket.socket, address: Any, node_id: int | None, now: float
    ) -> None:
        """The TCP peer is the client: ConnectionQuotas at once, then the TLS handshake."""
        host, port = _peer(address)
        connection = self._admission.admit(conn, host, port, node_id, now, now)
        if connection is None:
            return
        deadline = now + self._admission.limits.authentication_timeout_ms / 1000
        if self._handshake.tls is None:  # no handshake: completes within this loop iteration
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
        admission = self._admission
        if not self._config.proxy_protocol_trusts(host):
            conn.close()
            admission.counters[CloseCause.PROXY_PROTOCOL] += 1
            admission.rate_log.log(
                (self._config.name, CloseCause.PROXY_PROTOCOL, "untrusted"),
                logging.WARNING,
                "refused connection from %s:%s on listener %s: not in "
                "proxy_protocol_trusted_cidrs (only the load balancers may connect)",
                host,
                port,
                self._config.name,
            )
            return
        if admission.quotas.total + self.awaiting_header >= admission.limits.max_connections:
            admission.refuse(conn, host, port, CloseCause.MAX_CONNECTIONS)
            return
        conn.setblocking(False)  # peeked at without blocking the loop
        self.awaiting_header += 1
        self._track(self._proxied(conn, host, port, node_id, now))

    async def _proxied(
        self, conn: socket.socket, balancer: str, port: object, node_id: int | None, now: float
    ) -> None:
        """The balancer's PROXY protocol header, then the connection as the client it names:
        ConnectionQuotas for the client's address, then the TLS handshake (the balancer sends
        the header before the client's first byte, ClientHello included). Header and
        handshake together are bounded by ``authentication_timeout_ms`` from accept. Guarded
        as the accept loop is: a bug closes this connection (with a rate-limited traceback),
        never the listener's others."""
        try:
            deadline = now + self._admission.limits.authentication_timeout_ms / 1000
            try:
                received = await self._receive_header(conn, f"{balancer}:{port}", deadline)
            finally:
                self.awaiting_header -= 1
            if received is None:
                return
            header, client = received
            host, client_port = balancer, port  # LOCAL: the balancer's own connection
            if client is not None:
                host, client_port = canonical_ip(str(client.address)), client.port
            loop = asyncio.get_running_loop()
            connection = self._admission.admit(conn, host, client_port, node_id, now, loop.time())
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
        except Exception:  # noqa: BLE001 - logged with its traceback, like the accept loop's
            self._set_up_failed(conn)

    async def _receive_header(
        self, conn: socket.socket, balancer: str, deadline: float
    ) -> tuple[ProxyHeader, Endpoint | None] | None:
        """The header and the client it names, or None once the connection is closed (and
        counted): :class:`CloseCause` PROXY_PROTOCOL for no header, a malformed or incomplete
        one, or one naming no client IP address; CLIENT_CLOSED, unlogged, when the balancer
        closed without sending a byte (a plain TCP health check)."""
        versions = self._config.proxy_protocol_versions
        assert versions is not None
        cause = CloseCause.PROXY_PROTOCOL
        try:
            async with asyncio.timeout_at(deadline):
                header = await read_proxy_header(conn, versions)
            return header, client_endpoint(header)
        except TimeoutError:
            reason: str | None = (
                "no complete PROXY protocol header within "
                f"{self._admission.limits.authentication_timeout_ms} ms "
                "(authentication_timeout_ms)"
            )
        except ProxyProtocolError as exc:
            reason = str(exc)
        except (EOFError, OSError):  # left (or reset) before its first byte
            cause, reason = CloseCause.CLIENT_CLOSED, None
        except asyncio.CancelledError:
            conn.close()
            raise
        conn.close()
        self._admission.counters[cause] += 1
        if reason is not None:
            self._admission.rate_log.log(
                (self._config.name, cause, "header"),
                logging.WARNING,
                "closing connection from %s on listener %s: %s",
                balancer,
                self._config.name,
                reason,
            )
        return None


def _peer(address: Any) -> tuple[str, object]:
    """(host, port) of an accepted socket's peer, the host as ConnectionQuotas keys it (one
    spelling per IP address; a UNIX socket's address is not an IP and stays as it is)."""
    if not isinstance(address, tuple):
        return str(address), None
    host = str(address[0])
    with contextlib.suppress(ValueError):
        host = canonical_ip(host)
    return host, address[1]
