"""A listener's limits on its connections: Kafka's ``ConnectionQuotas`` and ``Selector``.

At accept, on the bare socket and before any TLS handshake, upstream connection or protocol
object exists, :meth:`Admission.admit` counts the connection against the listener's limits
(:mod:`kafkaguard.proxy.core.limits`) or refuses it: a refused connection costs one ``accept``
and one ``close``. A connection over its address's ``connection_creation_rate`` is held unread
and closed after its throttle time (KIP-612). One periodic sweep per listener closes idle and
unauthenticated connections (``connections.max.idle.ms``). Refusals and closes are counted per
cause in :attr:`Admission.counters`; their log lines are rate-limited per cause
(:class:`~kafkaguard.proxy.log_limit.RateLimitedLog`).

Reload (:meth:`Admission.reconfigure`): connections admitted from then on are checked against
the new limits and get them; those already open keep the ones they were admitted with and
count against the new ``max_connections``/``max_connections_per_ip``; lowering a limit closes
no open connection, as with Kafka's dynamically updated ``max.connections`` (KIP-402).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Collection

from kafkaguard.proxy.config import LimitsConfig
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.core.limits import ConnectionQuotas, sweep_interval
from kafkaguard.proxy.core.stats import ListenerStats
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.net.connection import ClientConnection, ConnectionOwner

log = logging.getLogger("kafkaguard.proxy")

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


class Admission:
    """The limits, quotas, counters and idle sweep of one listener's connections."""

    def __init__(
        self,
        owner: ConnectionOwner,
        limits: LimitsConfig,
        connections: Collection[ClientConnection],
        stats: ListenerStats,
    ) -> None:
        """``owner``: the listener the admitted connections belong to; ``connections``: those
        past their TLS handshake (swept)."""
        self._owner = owner
        self.limits = limits
        """The limits in force (read by the accept path and each new connection's Exchange)."""
        self.quotas = ConnectionQuotas(limits)
        """Open connections by address, creation rate (handshakes in progress included)."""
        self.counters: dict[str, int] = dict.fromkeys(map(str, CloseCause), 0)
        """Connections refused or closed since start, by :class:`CloseCause` value (plain
        ints: exported by whoever reads them)."""
        self.rate_log = RateLimitedLog(log)
        """Per-connection log lines, at most one a second per (listener, cause)."""
        self._connections = connections
        self._stats = stats
        self.throttled: dict[socket.socket, asyncio.TimerHandle] = {}
        """Connections over their address's ``connection_creation_rate``, held unread until
        their throttle time ends (Kafka's ``Acceptor.throttledSockets``)."""
        self._sweeper: asyncio.TimerHandle | None = None

    def reconfigure(self, limits: LimitsConfig) -> None:
        """A reload's limits, from now on (see the module docstring)."""
        self.limits = limits
        self.quotas.reconfigure(limits)
        if self._sweeper is not None:  # the next sweep at the new interval
            self._sweeper.cancel()
            self.start_sweeping()

    def admit(
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
            self.refuse(conn, host, port, cause)
            return None
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # the client already left: the transport will report it
        self._stats.accepted += 1
        connection = ClientConnection(self._owner, node_id, accepted_at)
        connection.quota_host = host
        connection.peer = host if port is None else f"{host}:{port}"
        local = conn.getsockname()
        local_text = f"{local[0]}:{local[1]}" if isinstance(local, tuple) else str(local)
        connection.connection_id = f"{local_text}-{connection.peer}-{self._stats.accepted}"
        return connection

    def _throttle(self, conn: socket.socket, host: str, port: object, delay_s: float) -> None:
        """A connection over its address's ``connection_creation_rate``: as Kafka's
        ``Acceptor`` (``ConnectionThrottledException`` → ``DelayedCloseSocket``), nothing is
        read from it and it is closed once ``delay_s`` has passed, so a client that
        reconnects at once is slowed down rather than answered. At most ``max_connections``
        are held so (file descriptors are bounded); beyond, one is closed at once."""
        if len(self.throttled) >= self.limits.max_connections:
            delay_s = 0.0
        if delay_s > 0:
            loop = asyncio.get_running_loop()
            self.throttled[conn] = loop.call_later(delay_s, self._end_throttle, conn)
        else:
            conn.close()
        self._count_refusal(host, port, CloseCause.IP_CONNECTION_RATE, round(delay_s * 1000))

    def _end_throttle(self, conn: socket.socket) -> None:
        del self.throttled[conn]
        conn.close()

    def refuse(self, conn: socket.socket, host: str, port: object, cause: CloseCause) -> None:
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
            (self._owner.name, cause),
            logging.WARNING,
            "refused connection from %s:%s on listener %s: %s",
            host,
            "?" if port is None else port,
            self._owner.name,
            detail,
        )

    def release(self, connection: ClientConnection, cause: CloseCause) -> None:
        """A closing connection: counted under ``cause``, its quota released."""
        self.counters[cause] += 1
        host = connection.quota_host
        if host is not None:
            connection.quota_host = None
            self.quotas.release(host)

    def close_throttled(self) -> None:
        """Close the connections held for their address's ``connection_creation_rate``
        (Kafka's ``Acceptor.closeAll``)."""
        for conn, timer in self.throttled.items():
            timer.cancel()
            conn.close()
        self.throttled.clear()

    # -- idle and authentication deadlines (Kafka's Selector) --------------------------------
    def start_sweeping(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(sweep_interval(self.limits), self._sweep)

    def stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def _sweep(self) -> None:
        """Close connections idle for ``connections_max_idle_ms`` (nothing read or written,
        nothing in flight) or not authenticated within ``authentication_timeout_ms``."""
        now = asyncio.get_running_loop().time()
        try:
            self.quotas.expire(now)
            for connection in list(self._connections):
                connection.clock(now)
        finally:  # one faulty connection must not end the sweeps of the listener
            self.start_sweeping()
