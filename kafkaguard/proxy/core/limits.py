"""Connection limits of one listener, without I/O: Kafka's ``ConnectionQuotas`` and the
``Selector``'s idle expiry, as small state machines the listener drives with a clock.

* :class:`ConnectionQuotas` — checked once per accepted TCP connection, before anything else
  is done for it (no TLS handshake, no upstream connection): ``max.connections``,
  ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``) and
  ``max.connection.creation.rate``. A refused connection is closed at once; Kafka instead
  delays ``accept`` for the creation rate (``ConnectionQuotas.inc`` → throttle) and blocks
  accepting at ``max.connections``, which here would let one address hold the queue.
* :class:`Liveness` — per connection: the ``connections.max.idle.ms`` expiry (Kafka's
  ``Selector.maybeCloseOldestConnection``: idle means no bytes read or written) and the
  authentication deadline (``authentication_timeout_ms``). The listener checks every
  connection from one periodic sweep; reads and writes only set a flag.

Scope: every count is per listener (all its ports: bootstrap and per-broker), because limits
are configured per listener. Kafka's ``max.connections.per.ip`` counts across the whole broker;
with several listeners an address may hold that many on each.

Why a connection was refused or closed is a
:class:`~kafkaguard.proxy.core.commands.CloseCause`.
"""

from __future__ import annotations

from kafkaguard.proxy.config import INT_MAX, LimitsConfig
from kafkaguard.proxy.core.commands import CloseCause

REFUSALS = frozenset(
    {CloseCause.MAX_CONNECTIONS, CloseCause.MAX_CONNECTIONS_PER_IP, CloseCause.CONNECTION_RATE}
)
"""Causes decided at accept, before a connection object exists."""


class ConnectionQuotas:
    """Counts of one listener's open connections, total and per client address, and its
    connection-creation token bucket.

    The creation rate is a token bucket holding at most ``max_connection_creation_rate``
    tokens, refilled at that many per second: a burst of up to the rate is admitted at once,
    then the rate on average. A refused connection takes no token (Kafka records every
    attempt, but there refusal is a delay, not a close), so a flood that is refused for
    another reason does not also use up the rate of well-behaved clients.
    """

    __slots__ = ("_limits", "_per_ip", "_refilled_at", "_tokens", "total")

    def __init__(self, limits: LimitsConfig) -> None:
        self._limits = limits
        self.total = 0
        """Connections admitted and not yet released (TLS handshakes included)."""
        self._per_ip: dict[str, int] = {}
        self._tokens = float(limits.max_connection_creation_rate)
        self._refilled_at: float | None = None

    def reconfigure(self, limits: LimitsConfig) -> None:
        """New limits (a reload): the counts of open connections stay, checked against the
        new limits at the next accept; the token bucket is capped at the new rate."""
        self._limits = limits
        self._tokens = min(self._tokens, float(limits.max_connection_creation_rate))

    def count(self, host: str) -> int:
        return self._per_ip.get(host, 0)

    def admit(self, host: str, now: float) -> CloseCause | None:
        """Count a new connection from ``host`` and return None, or return why it is refused
        (and count nothing). ``now`` is a monotonic clock in seconds."""
        limits = self._limits
        if self.total >= limits.max_connections:
            return CloseCause.MAX_CONNECTIONS
        held = self._per_ip.get(host, 0)
        if held >= limits.max_connections_for(host):
            return CloseCause.MAX_CONNECTIONS_PER_IP
        if not self._take_token(now):
            return CloseCause.CONNECTION_RATE
        self.total += 1
        self._per_ip[host] = held + 1
        return None

    def release(self, host: str) -> None:
        """A connection :meth:`admit` counted has closed."""
        self.total -= 1
        held = self._per_ip.get(host, 0) - 1
        if held > 0:
            self._per_ip[host] = held
        else:
            self._per_ip.pop(host, None)

    def _take_token(self, now: float) -> bool:
        rate = self._limits.max_connection_creation_rate
        if rate >= INT_MAX:  # Kafka's default: no rate limit
            return True
        if self._refilled_at is not None:
            self._tokens = min(float(rate), self._tokens + (now - self._refilled_at) * rate)
        self._refilled_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


def sweep_interval(limits: LimitsConfig) -> float:
    """Seconds between two sweeps of a listener's connections: a quarter of the shorter of the
    idle time and the authentication timeout, at most 1 s, at least 10 ms. A connection is
    closed at most about two intervals after its deadline."""
    shortest = min(limits.connections_max_idle_ms, limits.authentication_timeout_ms) / 1000
    return max(0.01, min(1.0, shortest / 4))


class Liveness:
    """Idle and authentication deadlines of one connection.

    The connection sets :attr:`active` on every read and write (a flag, not a clock read);
    :meth:`check`, called by the listener's sweep, turns the flag into "active until about
    now". Idle therefore means: no bytes read or written since the sweep before
    ``idle_s`` ago, and nothing in flight (a long-poll Fetch waiting at the broker is not
    idle).
    """

    __slots__ = ("accepted_at", "active", "authenticated", "quiet_since")

    def __init__(self, now: float) -> None:
        self.accepted_at = now
        """When the TCP connection was accepted (before any TLS handshake)."""
        self.active = True
        self.quiet_since = now
        self.authenticated = False
        """Set once TLS and SASL completed; the authentication deadline no longer applies."""

    def check(
        self, now: float, *, busy: bool, authenticated: bool, idle_s: float, auth_s: float
    ) -> CloseCause | None:
        """Whether the connection must be closed now, and why."""
        if not self.authenticated:
            if authenticated:
                self.authenticated = True
            elif now - self.accepted_at >= auth_s:
                return CloseCause.AUTHENTICATION_TIMEOUT
        if self.active or busy:
            self.active = False
            self.quiet_since = now
            return None
        if now - self.quiet_since >= idle_s:
            return CloseCause.IDLE
        return None
