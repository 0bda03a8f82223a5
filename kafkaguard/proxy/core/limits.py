"""Connection limits of one listener, without I/O: Kafka's ``ConnectionQuotas`` and the
``Selector``'s idle expiry, as small state machines the listener drives with a clock.

* :class:`ConnectionQuotas` — checked once per accepted TCP connection, before anything else
  is done for it (no TLS handshake, no upstream connection): ``max.connections``, KIP-612's
  IP quota ``connection_creation_rate`` (with per-address overrides),
  ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``) and
  ``max.connection.creation.rate``, in the order of Kafka's ``ConnectionQuotas.inc``. A
  refused connection is closed at once; Kafka instead delays ``accept`` for the creation
  rate (``ConnectionQuotas.inc`` → throttle) and blocks accepting at ``max.connections``,
  which here would let one address hold the queue. A connection over its address's
  ``connection_creation_rate`` is treated as Kafka's ``Acceptor`` treats it
  (``ConnectionThrottledException``): never read, closed after the throttle time.
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

import math
from typing import Final

from kafkaguard.proxy.config import INT_MAX, LimitsConfig
from kafkaguard.proxy.core.commands import CloseCause

REFUSALS = frozenset(
    {
        CloseCause.MAX_CONNECTIONS,
        CloseCause.MAX_CONNECTIONS_PER_IP,
        CloseCause.CONNECTION_RATE,
        CloseCause.IP_CONNECTION_RATE,
    }
)
"""Causes decided at accept, before a connection object exists."""

QUOTA_WINDOW_MS: Final = 1000
"""Kafka's ``quota.window.size.seconds`` default (1 s): one sample of an IP's rate, and the
longest throttle time (``ConnectionQuotas.maxThrottleTimeMs``)."""
QUOTA_WINDOW_NUM: Final = 11
"""Kafka's ``quota.window.num`` default: samples kept (10 whole windows and the current)."""


class ConnectionQuotas:
    """Counts of one listener's open connections, total and per client address, and its
    connection-creation token bucket.

    The creation rate is a token bucket holding at most ``max_connection_creation_rate``
    tokens, refilled at that many per second: a burst of up to the rate is admitted at once,
    then the rate on average. A refused connection takes no token (Kafka records every
    attempt, but there refusal is a delay, not a close), so a flood that is refused for
    another reason does not also use up the rate of well-behaved clients.
    """

    __slots__ = (
        "_ip_rates",
        "_limits",
        "_per_ip",
        "_refilled_at",
        "_tokens",
        "throttle_s",
        "total",
    )

    def __init__(self, limits: LimitsConfig) -> None:
        self._limits = limits
        self.total = 0
        """Connections admitted and not yet released (TLS handshakes included)."""
        self.throttle_s = 0.0
        """After :meth:`admit` returned IP_CONNECTION_RATE: how long to hold the connection
        before closing it."""
        self._per_ip: dict[str, int] = {}
        self._ip_rates: dict[str, IpConnectionRate] = {}
        """The recent connection creation of each address whose ``connection_creation_rate``
        is not unlimited (dropped once all of it is older than the window: :meth:`expire`)."""
        self._tokens = float(limits.max_connection_creation_rate)
        self._refilled_at: float | None = None

    def reconfigure(self, limits: LimitsConfig) -> None:
        """New limits (a reload): the counts of open connections stay, checked against the
        new limits at the next accept; the token bucket is capped at the new rate; each
        address's recent connections stay, measured against its new ``connection_creation_rate``
        (Kafka's ``updateIpConnectionRateQuota`` keeps the sensor's samples)."""
        self._limits = limits
        self._tokens = min(self._tokens, float(limits.max_connection_creation_rate))

    def count(self, host: str) -> int:
        return self._per_ip.get(host, 0)

    def admit(self, host: str, now: float) -> CloseCause | None:
        """Count a new connection from ``host`` and return None, or return why it is refused
        (and count nothing but the address's connection creation, as Kafka records it before
        ``max.connections.per.ip`` is checked). ``now`` is a monotonic clock in seconds.
        IP_CONNECTION_RATE: hold the connection :attr:`throttle_s`, then close it."""
        limits = self._limits
        if self.total >= limits.max_connections:
            return CloseCause.MAX_CONNECTIONS
        rate = limits.connection_creation_rate_for(host)
        if rate != INT_MAX:  # Kafka's quotaEnabled: the default is no quota at all
            throttle_ms = self._record_ip_connection(host, rate, math.floor(now * 1000))
            if throttle_ms > 0:
                self.throttle_s = throttle_ms / 1000
                return CloseCause.IP_CONNECTION_RATE
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

    def expire(self, now: float) -> None:
        """Forget the addresses that made no connection within the quota window (their rate
        is then 0, as for an address never seen): the listener's sweep calls this, so the
        state kept is bounded by the connections of the last ``QUOTA_WINDOW_NUM`` seconds."""
        now_ms = math.floor(now * 1000)
        stale = [host for host, rate in self._ip_rates.items() if rate.obsolete(now_ms)]
        for host in stale:
            del self._ip_rates[host]

    def _record_ip_connection(self, host: str, quota: int, now_ms: int) -> int:
        """Kafka's ``recordIpConnectionMaybeThrottle``: record the connection in the address's
        rate; over ``quota``, un-record it and return the throttle time in ms (else 0)."""
        rate = self._ip_rates.get(host)
        if rate is None:
            rate = self._ip_rates[host] = IpConnectionRate(now_ms)
        rate.record(1.0, now_ms)
        value, window_ms = rate.measure(now_ms)
        if value <= quota:
            return 0
        # QuotaUtils.throttleTime, bounded by the window (boundedThrottleTime): X = (O - T)/T * W
        # (Java's Math.round; a quota of 0 gives an infinite time, i.e. the bound).
        throttle_ms = (
            QUOTA_WINDOW_MS
            if quota == 0
            else min(math.floor((value - quota) / quota * window_ms + 0.5), QUOTA_WINDOW_MS)
        )
        if throttle_ms > 0:
            rate.record(-1.0, now_ms)  # "unrecord the connection since we won't accept it"
        return throttle_ms

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


class IpConnectionRate:
    """One address's connection creation rate, as Kafka's ``Rate`` over a ``WindowedSum``
    measures it (``SampledStat``): ``QUOTA_WINDOW_NUM`` + 1 samples of ``QUOTA_WINDOW_MS``
    each, the rate being their sum over the time they span, counted as at least
    ``QUOTA_WINDOW_NUM`` - 1 whole windows. So an address may open up to about ten times its
    quota in its first second (the sum is divided by 10 s), then its quota on average.
    Times are milliseconds, as Kafka's."""

    __slots__ = ("_current", "_samples")

    def __init__(self, now_ms: int) -> None:
        self._samples: list[list[float]] = [[0.0, now_ms, now_ms]]
        """[value, start, last event] of each sample, as Kafka's ``Sample``."""
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """``SampledStat.record``: into the current sample, or the next one once the current
        one spans a whole window."""
        sample = self._samples[self._current]
        if now_ms - sample[1] >= QUOTA_WINDOW_MS:
            self._current = (self._current + 1) % (QUOTA_WINDOW_NUM + 1)
            if self._current >= len(self._samples):
                sample = [0.0, now_ms, now_ms]
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample[:] = (0.0, now_ms, now_ms)
        sample[0] += value
        sample[2] = now_ms

    def measure(self, now_ms: int) -> tuple[float, int]:
        """``Rate.measure`` and ``Rate.windowSize``: (connections per second, window in ms)."""
        self._purge(now_ms)
        total = sum(sample[0] for sample in self._samples)
        elapsed = now_ms - min(sample[1] for sample in self._samples)
        whole = elapsed // QUOTA_WINDOW_MS
        if whole < QUOTA_WINDOW_NUM - 1:
            elapsed += (QUOTA_WINDOW_NUM - 1 - whole) * QUOTA_WINDOW_MS
        window_ms = max(int(elapsed), 1)
        return total / (window_ms / 1000), window_ms

    def obsolete(self, now_ms: int) -> bool:
        """Every sample is older than the window: the rate is that of an address never seen."""
        expire_ms = QUOTA_WINDOW_NUM * QUOTA_WINDOW_MS
        return all(now_ms - sample[2] >= expire_ms for sample in self._samples)

    def _purge(self, now_ms: int) -> None:
        """``SampledStat.purgeObsoleteSamples``: samples with no event within the window are
        reset to start now."""
        expire_ms = QUOTA_WINDOW_NUM * QUOTA_WINDOW_MS
        for sample in self._samples:
            if now_ms - sample[2] >= expire_ms:
                sample[:] = (0.0, now_ms, now_ms)


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
