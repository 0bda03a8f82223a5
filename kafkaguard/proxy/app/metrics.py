"""Prometheus metrics of the proxy process, built when scraped.

Nothing here runs on the data path. The data path counts into plain integers
(:class:`~kafkaguard.proxy.core.stats.ListenerStats`, the listeners' close counters, the SASL
servers' outcomes, the audit trail's counters); :class:`ProxyCollector` reads them when
Prometheus scrapes ``/metrics`` (prometheus-client's custom-collector interface) and turns them
into metric families. The one hook on a hot path is :class:`DecisionCounter`, the authorizer's
decision listener: one dictionary increment per authorization decision.

Labels have bounded values: listener, API name, operation, resource type, result, reason,
mechanism. Principals are a label only with ``metrics.per_principal: true``, and then at most
``metrics.max_principals`` distinct ones; later principals are counted as ``other``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kafkaguard import version
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import AuthorizationResult
from kafkaguard.policy.opa import DecisionCache, OpaCounters
from kafkaguard.protocol import IMPLEMENTATION, codec
from kafkaguard.proxy.config import MetricsConfig
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.core.limits import REFUSALS
from kafkaguard.proxy.core.stats import LATENCY_BUCKETS_S, Histogram

if TYPE_CHECKING:
    from kafkaguard.audit import AuditTrail
    from kafkaguard.policy.authorizer import Authorizer
    from kafkaguard.proxy.net.cluster import UpstreamCluster
    from kafkaguard.proxy.net.listener import ListenerRuntime


class ServerView(Protocol):
    """What ``/metrics`` and the admin listener read of the running proxy
    (:class:`~kafkaguard.proxy.app.server.ProxyServer`), named here so that neither imports
    the server that owns them."""

    @property
    def listeners(self) -> list[ListenerRuntime]: ...
    @property
    def cluster(self) -> UpstreamCluster: ...
    @property
    def audit(self) -> AuditTrail: ...
    @property
    def authorizer(self) -> Authorizer: ...
    @property
    def reloads(self) -> dict[str, int]: ...
    def not_ready(self) -> Iterator[str]:
        """Each readiness condition that fails, named."""
        ...


UPSTREAM_UNREACHABLE = "upstream: no bootstrap server or broker answered since the last check"
"""The readiness condition that the upstream is down (``/readyz`` and its gauge)."""

ADMIN_REFUSALS: Final = ("max_connections",)
"""Why the admin listener refuses a connection at accept (``admin.max_connections``, every
connection being answered)."""
ADMIN_CLOSES: Final = (
    "request_timeout",
    "idle_timeout",
    "request_too_large",
    "bad_request",
    "evicted",
)
"""Why the admin listener closes a connection it accepted, other than the client closing or
asking to: the line and headers (or the answer's reading) outlasted
``admin.request_timeout_ms``, a kept-alive connection ``admin.idle_timeout_ms``, the line and
headers exceeded ``admin.max_request_bytes``, they were not HTTP/1, or a new connection at
``admin.max_connections`` took the slot of this one, the one waiting longest for a request."""

OTHER = "other"
"""The principal label of every principal past ``metrics.max_principals``."""


class AdminCounters:
    """The admin listener's connections: plain integers its thread writes, read when scraped."""

    __slots__ = ("closed", "open", "refused")

    def __init__(self) -> None:
        self.open = 0
        self.refused = dict.fromkeys(ADMIN_REFUSALS, 0)
        self.closed = dict.fromkeys(ADMIN_CLOSES, 0)

    def families(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "kafkaguard_admin_connections", "Open admin connections.", self.open
        )
        refused = CounterMetricFamily(
            "kafkaguard_admin_connections_refused",
            "Admin connections answered 503 and closed at accept (admin.max_connections, "
            "every connection being answered).",
            labels=["reason"],
        )
        closed = CounterMetricFamily(
            "kafkaguard_admin_connections_closed",
            "Admin connections closed by the proxy, by reason (request_timeout, idle_timeout, "
            "request_too_large, bad_request, evicted: a new connection at admin.max_connections "
            "took its slot).",
            labels=["reason"],
        )
        for family, table in ((refused, self.refused), (closed, self.closed)):
            for reason, count in table.items():
                family.add_metric([reason], count)
        yield from (refused, closed)


class DecisionCounter:
    """The authorizer's decision listener: counts every decision, then hands it on (audit)."""

    def __init__(
        self,
        config: MetricsConfig,
        then: Callable[[DecisionEvent], None] | None = None,
    ) -> None:
        self._per_principal = config.per_principal
        self._max_principals = config.max_principals
        self._principals: set[str] = set()
        self._then = then
        self.decisions: dict[tuple[str, str, str, str, str], int] = {}
        """(listener, operation, resource type, result, principal or "") → decisions."""

    def __call__(self, event: DecisionEvent) -> None:
        action = event.action
        principal = ""
        if self._per_principal:
            principal = str(event.context.principal)
            if principal not in self._principals:
                if len(self._principals) >= self._max_principals:
                    principal = OTHER
                else:
                    self._principals.add(principal)
        key = (
            event.context.listener_name,
            action.operation.name,
            action.resource_pattern.resource_type.name,
            "allowed" if event.result is AuthorizationResult.ALLOWED else "denied",
            principal,
        )
        self.decisions[key] = self.decisions.get(key, 0) + 1
        if self._then is not None:
            self._then(event)


def _api(api_key: int) -> str:
    """Kafka's name of the API (``ApiKeys.name``'s message name: Produce, ApiVersions...),
    as the broker's request metrics label it."""
    name = _API_LABELS.get(api_key)
    if name is None:
        snake = codec.API_NAMES.get(api_key, "unknown") if api_key >= 0 else "unknown"
        name = _API_LABELS[api_key] = "".join(part.capitalize() for part in snake.split("_"))
    return name


_API_LABELS: dict[int, str] = {}


def _histogram(
    name: str, doc: str, tables: Iterable[tuple[str, dict[int, Histogram]]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["listener", "api"])
    bounds = [*map(str, LATENCY_BUCKETS_S), "+Inf"]
    for listener, table in tables:
        for api_key, histogram in sorted(table.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, histogram.counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([listener, _api(api_key)], buckets, histogram.total)
    return family


class ProxyCollector(Collector):
    """Everything ``/metrics`` shows, read from the running proxy."""

    def __init__(
        self,
        server: ServerView,
        decisions: DecisionCounter | None,
        not_ready: Callable[[], list[str]] | None = None,
        admin: AdminCounters | None = None,
    ) -> None:
        self._server = server
        self._decisions = decisions
        self._not_ready = not_ready
        self._admin = admin

    def collect(self) -> Iterator[Metric]:
        server = self._server
        listeners = list(server.listeners)
        yield InfoMetricFamily(
            "kafkaguard_build",
            "kafkaguard version, Python runtime, and whether the protocol modules run compiled.",
            value={
                "version": version(),
                "python": sys.version.split()[0],
                "implementation": IMPLEMENTATION,
            },
        )
        if self._not_ready is not None:
            failing = self._not_ready()
            yield GaugeMetricFamily(
                "kafkaguard_ready", "1 when /readyz answers 200.", value=int(not failing)
            )
            yield GaugeMetricFamily(
                "kafkaguard_upstream_reachable",
                "1 when a broker answered the proxy's traffic or its readiness probe at the "
                "last check (admin.readiness_probe_interval_ms).",
                value=int(UPSTREAM_UNREACHABLE not in failing),
            )
        if self._admin is not None:
            yield from self._admin.families()
        yield from self._connections(listeners)
        yield from self._requests(listeners)
        yield from self._authorization(listeners)
        yield from self._authentication(listeners)
        yield from self._audit_and_store(server)
        yield from self._certificate_metrics(listeners)
        reloads = CounterMetricFamily(
            "kafkaguard_config_reloads", "Configuration reloads, by result.", labels=["result"]
        )
        for result, count in sorted(server.reloads.items()):
            reloads.add_metric([result], count)
        yield reloads

    def _connections(self, listeners: list[ListenerRuntime]) -> Iterator[Metric]:
        open_ = GaugeMetricFamily(
            "kafkaguard_connections", "Open client connections.", labels=["listener"]
        )
        accepted = CounterMetricFamily(
            "kafkaguard_connections_accepted",
            "Client connections admitted by the connection quotas.",
            labels=["listener"],
        )
        refused = CounterMetricFamily(
            "kafkaguard_connections_refused",
            "Client connections refused at accept (max_connections, max_connections_per_ip, "
            "max_connection_creation_rate, connection_creation_rate: per address, KIP-612).",
            labels=["listener", "reason"],
        )
        closed = CounterMetricFamily(
            "kafkaguard_connections_closed",
            "Client connections closed, by reason.",
            labels=["listener", "reason"],
        )
        inflight = GaugeMetricFamily(
            "kafkaguard_inflight_requests",
            "Requests received and not yet answered.",
            labels=["listener"],
        )
        for listener in listeners:
            name = listener.config.name
            connections = list(listener.connections)
            open_.add_metric([name], len(connections))
            inflight.add_metric([name], sum(c.unanswered for c in connections))
            accepted.add_metric([name], listener.stats.accepted)
            for cause in CloseCause:
                family = refused if cause in REFUSALS else closed
                family.add_metric([name, cause.value], listener.counters[cause])
        yield from (open_, accepted, refused, closed, inflight)

    def _requests(self, listeners: list[ListenerRuntime]) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kafkaguard_requests", "Requests received, by API.", labels=["listener", "api"]
        )
        responses = CounterMetricFamily(
            "kafkaguard_responses",
            "Responses sent, by API and by who answered (broker or proxy).",
            labels=["listener", "api", "source"],
        )
        traffic = CounterMetricFamily(
            "kafkaguard_bytes",
            "Bytes read and written, by peer (client or broker) and direction.",
            labels=["listener", "peer", "direction"],
        )
        connect_errors = CounterMetricFamily(
            "kafkaguard_upstream_connect_errors",
            "Failed attempts to connect to (or authenticate with) a broker.",
            labels=["listener"],
        )
        for listener in listeners:
            name, stats = listener.config.name, listener.stats
            for api_key, count in sorted(stats.requests.items()):
                requests.add_metric([name, _api(api_key)], count)
            for source, table in (
                ("broker", stats.responses_from_broker),
                ("proxy", stats.responses_from_proxy),
            ):
                for api_key, count in sorted(table.items()):
                    responses.add_metric([name, _api(api_key), source], count)
            traffic.add_metric([name, "client", "in"], stats.bytes_from_client)
            traffic.add_metric([name, "client", "out"], stats.bytes_to_client)
            traffic.add_metric([name, "broker", "in"], stats.bytes_from_broker)
            traffic.add_metric([name, "broker", "out"], stats.bytes_to_broker)
            connect_errors.add_metric([name], stats.upstream_connect_errors)
        yield from (requests, responses, traffic, connect_errors)
        yield _histogram(
            "kafkaguard_request_latency_seconds",
            "From the read completing a request to its response being written to the client.",
            ((ls.config.name, ls.stats.request_latency) for ls in listeners),
        )
        yield _histogram(
            "kafkaguard_proxy_latency_seconds",
            "Request latency minus upstream latency: the time the proxy added.",
            ((ls.config.name, ls.stats.proxy_latency) for ls in listeners),
        )
        yield _histogram(
            "kafkaguard_upstream_latency_seconds",
            "From a request leaving for the broker to the broker's response.",
            ((ls.config.name, ls.stats.upstream_latency) for ls in listeners),
        )

    def _authorization(self, listeners: list[ListenerRuntime]) -> Iterator[Metric]:
        labels = ["listener", "operation", "resource_type", "result"]
        per_principal = self._decisions is not None and self._decisions._per_principal
        decisions = CounterMetricFamily(
            "kafkaguard_authorization_decisions",
            "Authorizer decisions (every check, as Kafka's authorizer metrics count them).",
            labels=[*labels, "principal"] if per_principal else labels,
        )
        if self._decisions is not None:
            for key, count in sorted(self._decisions.decisions.items()):
                decisions.add_metric(list(key) if per_principal else list(key[:4]), count)
        yield decisions
        would_deny = CounterMetricFamily(
            "kafkaguard_authorization_would_deny",
            "log_only listeners: logged denials that were let through (enforce would refuse).",
            labels=["listener"],
        )
        counters = self._server.audit.counters
        for listener in listeners:
            listener_counters = counters.get(listener.config.name)
            if listener_counters is not None and listener.log_only:
                would_deny.add_metric([listener.config.name], listener_counters.would_deny)
        yield would_deny

    def _authentication(self, listeners: list[ListenerRuntime]) -> Iterator[Metric]:
        attempts = CounterMetricFamily(
            "kafkaguard_sasl_authentications",
            "SASL authentication attempts, by mechanism and outcome "
            "(success, failure, throttled, busy).",
            labels=["listener", "mechanism", "outcome"],
        )
        for listener in listeners:
            if listener.sasl is not None:
                for (mechanism, outcome), count in sorted(listener.sasl.outcomes.items()):
                    attempts.add_metric([listener.config.name, mechanism, outcome], count)
        yield attempts

    def _audit_and_store(self, server: ServerView) -> Iterator[Metric]:
        audit = server.audit
        writer = audit.writer
        events = CounterMetricFamily(
            "kafkaguard_audit_events",
            "Audit trail, per sink (file, kafka): records written (kafka: acknowledged), "
            "decisions dropped (a queue full), decisions lost (write errors; kafka: not "
            "acknowledged). Per sink, decisions audited = in the sink + dropped + failed.",
            labels=["sink", "outcome"],
        )
        queue_dropped = sum(c.dropped for c in audit.counters.values())
        if writer is None or writer.sink is not None:  # the files (zeros when audit is off)
            events.add_metric(["file", "written"], writer.records if writer is not None else 0)
            events.add_metric(["file", "dropped"], queue_dropped)
            events.add_metric(["file", "failed"], writer.lost if writer is not None else 0)
        topic = writer.topic if writer is not None else None
        if topic is not None:  # the writer's queue is in front of both sinks
            events.add_metric(["kafka", "written"], topic.written)
            events.add_metric(["kafka", "dropped"], queue_dropped + topic.dropped)
            events.add_metric(["kafka", "failed"], topic.lost)
        yield events
        decisions = CounterMetricFamily(
            "kafkaguard_audit_decisions",
            "Authorization decisions the audit trail saw, per listener, by outcome: audited "
            "(past the filters; written unless audit.allowed/denied is off), unlogged (Kafka "
            "does not log them: logIfAllowed/logIfDenied false, audit.include_unlogged off), "
            "excluded (audit.exclude, or no audit.include route).",
            labels=["listener", "outcome"],
        )
        for name, counters in sorted(audit.counters.items()):
            decisions.add_metric([name, "audited"], counters.decisions)
            decisions.add_metric([name, "unlogged"], counters.unlogged)
            decisions.add_metric([name, "excluded"], counters.excluded)
        yield decisions
        authorizer: Any = server.authorizer
        index = getattr(authorizer, "acl_index", None)
        if index is not None:
            yield GaugeMetricFamily("kafkaguard_acls", "ACL bindings in force.", value=len(index))
        loaded_at = getattr(authorizer, "loaded_at", None)
        if loaded_at is not None:
            yield GaugeMetricFamily(
                "kafkaguard_acls_last_update_age_seconds",
                "Seconds since the ACL snapshot in force was loaded.",
                value=max(0.0, time.time() - loaded_at),
            )
        connected = getattr(getattr(authorizer, "store", None), "connected", None)
        if isinstance(connected, bool):
            yield GaugeMetricFamily(
                "kafkaguard_zookeeper_connected",
                "1 while the ACL store's ZooKeeper session is connected.",
                value=int(connected),
            )
        yield from _store_lag(server, authorizer)
        opa = getattr(authorizer, "counters", None)
        if isinstance(opa, OpaCounters):
            yield from _opa_families(opa, authorizer.cache)

    def _certificate_metrics(self, listeners: list[ListenerRuntime]) -> Iterator[Metric]:
        expiry = GaugeMetricFamily(
            "kafkaguard_certificate_expiry_seconds",
            "Seconds until the certificate a TLS listener serves expires.",
            labels=["listener"],
        )
        reloads = CounterMetricFamily(
            "kafkaguard_certificate_reloads",
            "Times a TLS listener loaded changed certificate files.",
            labels=["listener"],
        )
        now = time.time()
        for listener in listeners:
            tls = listener.tls
            if tls is None:
                continue
            reloads.add_metric([listener.config.name], tls.reloads)
            if tls.not_after is not None:
                expiry.add_metric([listener.config.name], tls.not_after - now)
        yield from (expiry, reloads)


def _opa_families(counters: OpaCounters, cache: DecisionCache) -> Iterator[Metric]:
    """The OPA authorizer's lookups, errors, cache and health (docs/opa.md)."""
    lookups = CounterMetricFamily(
        "kafkaguard_opa_lookups",
        "Decisions asked of OPA (cache misses), by outcome: allowed, denied, error.",
        labels=["outcome"],
    )
    for outcome, count in counters.lookups.items():
        lookups.add_metric([outcome], count)
    errors = CounterMetricFamily(
        "kafkaguard_opa_errors",
        "OPA lookups that failed, by reason (unreachable, timeout, http_status, not_boolean, "
        "bad_response, wasm_trap): each denied, or allowed under allow_on_error.",
        labels=["reason"],
    )
    for reason, count in counters.errors.items():
        errors.add_metric([reason], count)
    yield from (lookups, errors)
    yield CounterMetricFamily(
        "kafkaguard_opa_lookup_seconds",
        "Seconds spent waiting for OPA's answers (queue and HTTP call), summed.",
        value=counters.lookup_seconds,
    )
    cache_lookups = CounterMetricFamily(
        "kafkaguard_opa_cache_lookups",
        "Decision cache lookups, by result: hit, miss.",
        labels=["result"],
    )
    cache_lookups.add_metric(["hit"], cache.hits)
    cache_lookups.add_metric(["miss"], cache.misses)
    yield cache_lookups
    yield GaugeMetricFamily(
        "kafkaguard_opa_cache_entries", "Decisions in the OPA decision cache.", value=len(cache)
    )
    yield GaugeMetricFamily(
        "kafkaguard_opa_up",
        "1 when OPA's GET /health last answered 200 (0 before the first check).",
        value=int(bool(counters.healthy)),
    )


def _store_lag(server: ServerView, authorizer: Any) -> Iterator[Metric]:
    """``kafkaguard_store_lag_seconds`` of the Kafka-topic stores (ACLs, SCRAM users): how
    long since each last confirmed it had read its topic to the end (docs/acl-store.md)."""
    stores = [getattr(authorizer, "store", None)]
    stores += [ls.sasl.store for ls in server.listeners if ls.sasl is not None]
    lag = GaugeMetricFamily(
        "kafkaguard_store_lag_seconds",
        "Seconds since a Kafka-topic store (ACLs, SCRAM users) last read its topic to the end; "
        "past max_lag_s the proxy is not ready.",
        labels=["topic"],
    )
    seen: set[str] = set()
    for store in stores:
        table: Any = getattr(store, "table", None)
        if not callable(getattr(table, "lag_s", None)):
            continue
        topic = str(table.settings.name)
        value = table.lag_s()
        if value is not None and topic not in seen:
            seen.add(topic)
            lag.add_metric([topic], value)
    if seen:
        yield lag
