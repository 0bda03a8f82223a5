"""The proxy's configuration: one immutable object, validated once at start.

Every value is read through :class:`~kafkaguard.config_tree.ConfigSection`, so a bad or unknown
key is reported with its file, line and dotted path. ``config.example.yaml`` documents every
key; keep the two in step.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Final

from kafkaguard.audit.config import (
    ENFORCE,
    ENFORCEMENT_MODES,
    AuditConfig,
    parse_audit_config,
)
from kafkaguard.certs.tls import (
    TlsConfig,
    UpstreamTlsConfig,
    dns_names,
    name_matches,
    parse_tls_config,
    parse_upstream_tls_config,
)
from kafkaguard.config_tree import (
    MAX_PORT,
    REQUIRED,
    ConfigError,
    ConfigSection,
    attempt,
    collecting,
    report,
)
from kafkaguard.policy.config import PolicyConfig, parse_policy_config
from kafkaguard.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from kafkaguard.proxy.edge.sni import NODE_ID_PLACEHOLDER, SniRouting, dns_name
from kafkaguard.proxy.sasl.client import UpstreamSaslConfig, parse_upstream_sasl_config
from kafkaguard.proxy.sasl.config import SaslListenerConfig, parse_sasl_config
from kafkaguard.proxy.sasl.executor import AUTHENTICATION_QUEUE_SIZE, AUTHENTICATION_THREADS

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_SECURITY_PROTOCOLS: Final = ("SSL", "SASL_SSL")
"""Listeners of these protocols need an ``ssl:`` section (kafkaguard/certs/tls.py)."""
SASL_SECURITY_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
"""Listeners of these protocols need a ``sasl:`` section (kafkaguard/proxy/sasl/config.py)."""
ROUTING_MODES: Final = ("ports", "sni")
"""A listener's ``routing``: a proxy port per broker, or every broker on one TLS port."""
PROXY_PROTOCOL_MODES: Final = ("off", "v1", "v2", "any")
"""A listener's ``proxy_protocol``: the PROXY protocol header versions it requires."""
_PROXY_PROTOCOL_VERSIONS: Final = {
    "v1": frozenset({1}),
    "v2": frozenset({2}),
    "any": frozenset({1, 2}),
}
BASE_RANGE_NODES: Final = 100
"""``check-config`` looks for collisions of a ``broker_ports.base`` range for node ids
0..99 (``base`` .. ``base + 99``): the node ids a cluster will have are not in the file."""

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_host_port(text: str, section: ConfigSection, key: str) -> HostPort:
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        raise section.error(key, f"must be host:port (port 1 to {MAX_PORT}), got {text!r}")
    return HostPort(host, int(port))


@dataclass(frozen=True, slots=True)
class BrokerPorts:
    """How upstream node ids map to proxy ports on one listener.

    Either ``base + node_id`` or an explicit map. A node id outside an explicit map has no
    proxy address: responses naming it cannot be rewritten and the connection is closed
    (fail closed) rather than leak the broker's address.
    """

    base: int | None
    explicit: Mapping[int, int]

    def port_for(self, node_id: int) -> int | None:
        if self.explicit:
            return self.explicit.get(node_id)
        assert self.base is not None
        port = self.base + node_id
        return port if 0 < port < 65536 else None


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    name: str
    security_protocol: str
    bind_host: str
    port: int
    advertised_host: str
    broker_ports: BrokerPorts
    ssl: TlsConfig | None = None
    """The ``ssl:`` section: set for SSL and SASL_SSL listeners, None otherwise."""
    sasl: SaslListenerConfig | None = None
    """The ``sasl:`` section: set for SASL_PLAINTEXT and SASL_SSL listeners, None otherwise."""
    enforcement: str | None = None
    """``enforce`` | ``log_only`` for this listener; None: the top-level ``enforcement``."""
    limits: LimitsConfig | None = None
    """The listener's ``limits:`` merged over the top-level ones; None: the top-level ones."""
    proxy_protocol: str = "off"
    """``off`` | ``v1`` | ``v2`` | ``any``: every connection must start with a PROXY protocol
    header of that version (``any``: either), whose client address then stands for the
    connection everywhere (kafkaguard/proxy/edge/proxy_protocol.py)."""
    proxy_protocol_trusted_cidrs: tuple[IPNetwork, ...] = ()
    """Who may send that header (the load balancers); connections from elsewhere are closed
    at accept. Required unless ``proxy_protocol`` is ``off``."""
    sni: SniRouting | None = None
    """``routing: sni`` (kafkaguard/proxy/edge/sni.py): every broker on :attr:`port`, picked by the
    TLS server name; None: ``routing: ports``, one port per broker (:attr:`broker_ports`)."""

    @property
    def proxy_protocol_versions(self) -> frozenset[int] | None:
        """The header versions accepted, None when the listener takes no header."""
        return _PROXY_PROTOCOL_VERSIONS.get(self.proxy_protocol)

    def proxy_protocol_trusts(self, host: str) -> bool:
        """Whether ``host`` (the TCP peer, an IP address) may send a PROXY protocol header."""
        try:
            address = ipaddress.ip_address(canonical_ip(host))
        except ValueError:
            return False
        return any(address in network for network in self.proxy_protocol_trusted_cidrs)

    def fixed_ports(self) -> dict[int, str]:
        """The ports this listener binds whatever the cluster: bootstrap and explicit map
        (port → what it is, for messages)."""
        ports = {port: f"node {node}'s port" for node, port in self.broker_ports.explicit.items()}
        ports[self.port] = "bootstrap port"
        return ports


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    bootstrap_servers: tuple[HostPort, ...]
    """Empty only with :attr:`embedded`."""
    connect_timeout_s: float = 10.0
    ssl: UpstreamTlsConfig | None = None
    """``upstream.ssl:`` (TLS from the proxy to the brokers), None for plaintext."""
    sasl: UpstreamSaslConfig | None = None
    """``upstream.sasl:`` (the proxy authenticates to the brokers), None for none."""
    embedded: bool = False
    """``upstream.embedded: true``: ``kafkaguard run`` starts the in-memory Tansu broker of
    ``kafkaguard demo`` (every write is lost at exit). Opt-in only: a file without an upstream
    is an error, never a proxy that silently loses writes."""


INT_MAX: Final = 2**31 - 1
"""Kafka's "no limit" default for connection quotas (``Int.MaxValue``)."""


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """``limits:``, each key overridable per listener (a listener's own ``limits:``).
    Names and defaults are Kafka's broker settings (docs/security.md lists them)."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    """``socket.request.max.bytes``."""
    max_inflight_requests: int = 100
    max_connections: int = 10_000
    """``max.connections`` (per listener here)."""
    connections_max_idle_ms: int = 600_000
    """``connections.max.idle.ms``: a client connection with nothing read or written and
    nothing in flight for this long is closed."""
    max_connections_per_ip: int = INT_MAX
    """``max.connections.per.ip``."""
    max_connections_per_ip_overrides: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """``max.connections.per.ip.overrides``: ``"host:count,..."``, host an IP address."""
    max_connection_creation_rate: int = INT_MAX
    """``max.connection.creation.rate``: new connections per second on the listener."""
    connection_creation_rate: int = INT_MAX
    """KIP-612's IP quota ``connection_creation_rate`` (``kafka-configs --entity-type ips
    --entity-default``): new connections per second from one address; one over it is
    held unread and closed after a delay (kafkaguard/proxy/core/limits.py)."""
    connection_creation_rate_overrides: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """The same quota for one address (``kafka-configs --entity-type ips --entity-name IP``):
    ``"ip:rate,..."``."""
    authentication_timeout_ms: int = 10_000
    """A connection that has not completed TLS and SASL by then is closed."""
    authentication_threads: int = AUTHENTICATION_THREADS
    """Worker threads checking PLAIN passwords (PBKDF2) off the event loop, for all
    listeners: a storm of attempts never takes more than this many cores. SCRAM's proof and
    OAUTHBEARER's signature cost microseconds and are checked inline."""
    authentication_queue_size: int = AUTHENTICATION_QUEUE_SIZE
    """Attempts waiting for an authentication thread; beyond it new attempts are refused at
    once (SASL_AUTHENTICATION_FAILED)."""

    def max_connections_for(self, host: str) -> int:
        """``max.connections.per.ip`` for ``host``, its override if one is set."""
        return self.max_connections_per_ip_overrides.get(host, self.max_connections_per_ip)

    def connection_creation_rate_for(self, host: str) -> int:
        """KIP-612's ``connection_creation_rate`` for ``host``: its own quota if one is set,
        else the default one (Kafka's ``ConnectionQuotas.connectionRateForIp``)."""
        return self.connection_creation_rate_overrides.get(host, self.connection_creation_rate)


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """``admin:``: the operator's HTTP listener (``/metrics``, ``/healthz``, ``/readyz``)."""

    bind_host: str = "127.0.0.1"
    port: int = 9404
    allow_remote: bool = False
    """Without it, binding anything but a loopback address logs a warning: the endpoint has
    no authentication and tells whoever reaches it about the proxy's traffic."""
    max_connections: int = 64
    """Open admin connections at most: idle or slow clients cannot exhaust the process. One
    more closes the connection waiting longest for a request, or is answered 503 when every
    connection is being answered (counted; kafkaguard/proxy/app/admin.py, ``ConnectionSlots``)."""
    request_timeout_ms: int = 5_000
    """A request's line and headers must arrive within this (from the connection's accept, or
    from a kept-alive request's first byte), and its answer be taken within it again; else the
    connection is closed (counted): a slowloris client holds a connection this long at most."""
    idle_timeout_ms: int = 30_000
    """A kept-alive connection waiting for its next request is closed after this."""
    max_request_bytes: int = 8_192
    """Request line plus headers at most; larger is answered 431 and closed (counted)."""
    readiness_probe_interval_ms: int = 5_000
    """How often readiness checks the upstream: when no broker answered the proxy's traffic
    since the last check, one ApiVersions probe (bootstrap servers, then known brokers).
    ``/readyz`` and ``/metrics`` read the result; a scrape opens no connection."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``metrics:``: what ``/metrics`` exposes (kafkaguard/proxy/app/metrics.py)."""

    per_principal: bool = False
    """Add a ``principal`` label to authorization decisions (bounded by ``max_principals``)."""
    max_principals: int = 100
    """Distinct principals labelled at most; later ones are counted as ``other``."""


LOG_FORMATS: Final = ("text", "json")


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    listeners: tuple[ListenerConfig, ...]
    upstream: UpstreamConfig
    limits: LimitsConfig = LimitsConfig()
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Authorizer and ACL store. Without an ``authorizer`` section: Kafka's StandardAuthorizer
    with no ACLs and no super users, i.e. every request is denied (fail closed)."""
    log_level: str = "INFO"
    log_format: str = "text"
    """``logging.format``: ``text`` lines, or ``json``: one JSON object per line."""
    admin: AdminConfig | None = None
    """The admin HTTP listener; None (no ``admin:`` section): not served."""
    metrics: MetricsConfig = MetricsConfig()
    shutdown_timeout_ms: int = 30_000
    """On SIGTERM/SIGINT: how long in-flight requests may take to finish before the proxy
    closes every connection (a second signal closes at once)."""
    enforcement: str = ENFORCE
    """Top-level ``enforcement`` (issue 7): ``log_only`` authorizes and audits every request
    but handles it as if allowed; a listener may override it."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    """The ``audit:`` section (kafkaguard/audit/config.py)."""
    workers: int = 1
    """Proxy processes sharing each listening port (kafkaguard/proxy/app/workers.py)."""
    source: str = "<defaults>"
    base_dir: Path = field(default_factory=Path.cwd)
    section: ConfigSection | None = None
    """The parsed tree, for parsers of other parts (authorizer, stores) that own their keys."""

    def listener_limits(self, listener: ListenerConfig) -> LimitsConfig:
        """The listener's limits: its own ``limits:`` keys over the top-level ones."""
        return listener.limits or self.limits

    def listener_enforcement(self, listener: ListenerConfig) -> str:
        """The listener's enforcement mode: its own ``enforcement`` key, else the global one."""
        return listener.enforcement or self.enforcement


def canonical_ip(text: str) -> str:
    """One spelling per address, as ``ConnectionQuotas`` keys them by ``InetAddress``: an
    IPv4-mapped IPv6 address (a dual-stack listener's IPv4 client) is its IPv4 address.
    Raises ``ValueError`` when ``text`` is not an IP address."""
    address = ipaddress.ip_address(text)
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return str(mapped or address)


def is_loopback(host: str) -> bool:
    """Whether a bind address is loopback only: the admin listener's remote warning and
    doctor's PLAINTEXT-off-loopback warning. Names other than ``localhost`` are not resolved
    (what a name resolves to can change): they count as reachable from outside."""
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(canonical_ip(host)).is_loopback
    except ValueError:
        return False


def _ip_overrides(section: ConfigSection, key: str, text: str) -> Mapping[str, int]:
    """Kafka's ``max.connections.per.ip.overrides`` format: ``"host:count,host:count"``
    (also read for ``connection_creation_rate_overrides``: ``"host:rate,..."``)."""
    overrides: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        host = host.strip("[]")
        try:
            host = canonical_ip(host)
        except ValueError:
            host = ""
        if not sep or not host or not count.isdigit():
            raise section.error(key, f"must be 'ip:count,ip:count' (IP addresses), got {item!r}")
        overrides[host] = int(count)
    return MappingProxyType(overrides)


_PROCESS_LIMITS: Final = ("authentication_threads", "authentication_queue_size")
"""Limits of the whole process, not of one listener."""


def parse_limits(section: ConfigSection, base: LimitsConfig | None = None) -> LimitsConfig:
    """The top-level ``limits:`` section, or with ``base`` (the top-level limits) a listener's
    own, whose keys override those of ``base``."""
    if base is None:
        base = LimitsConfig()
    else:
        for key in _PROCESS_LIMITS:
            if key in section:
                raise section.error(key, "is a top-level limit (one pool for every listener)")
    overrides = section.get_str("max_connections_per_ip_overrides", None)
    rate_overrides = section.get_str("connection_creation_rate_overrides", None)
    limits = LimitsConfig(
        max_frame_bytes=section.get_int("max_frame_bytes", base.max_frame_bytes, minimum=1024),
        max_inflight_requests=section.get_int(
            "max_inflight_requests", base.max_inflight_requests, minimum=1
        ),
        max_connections=section.get_int("max_connections", base.max_connections, minimum=1),
        connections_max_idle_ms=section.get_int(
            "connections_max_idle_ms", base.connections_max_idle_ms, minimum=1
        ),
        max_connections_per_ip=section.get_int(
            "max_connections_per_ip", base.max_connections_per_ip, minimum=0
        ),
        max_connections_per_ip_overrides=(
            base.max_connections_per_ip_overrides
            if overrides is None
            else _ip_overrides(section, "max_connections_per_ip_overrides", overrides)
        ),
        max_connection_creation_rate=section.get_int(
            "max_connection_creation_rate", base.max_connection_creation_rate, minimum=1
        ),
        connection_creation_rate=section.get_int(
            "connection_creation_rate", base.connection_creation_rate, minimum=0
        ),
        connection_creation_rate_overrides=(
            base.connection_creation_rate_overrides
            if rate_overrides is None
            else _ip_overrides(section, "connection_creation_rate_overrides", rate_overrides)
        ),
        authentication_timeout_ms=section.get_int(
            "authentication_timeout_ms", base.authentication_timeout_ms, minimum=1
        ),
        authentication_threads=section.get_int(
            "authentication_threads", base.authentication_threads, minimum=1
        ),
        authentication_queue_size=section.get_int(
            "authentication_queue_size", base.authentication_queue_size, minimum=0
        ),
    )
    section.reject_unknown()
    return limits


def _broker_ports(section: ConfigSection, listener_port: int) -> BrokerPorts:
    base = section.get_port("base", None)
    raw = section.raw("map", None)
    section.reject_unknown()
    if raw is None:
        return BrokerPorts(base if base is not None else listener_port + 1, MappingProxyType({}))
    if base is not None:
        raise section.error("map", "give either base or map, not both")
    if not isinstance(raw, dict) or not raw:
        raise section.error("map", "must map node ids (integers) to ports, e.g. {0: 9300}")
    explicit: dict[int, int] = {}
    for key, port in raw.items():
        node = _node_id(section, key)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise section.error("map", f"node {node}: {port!r} is not a TCP port (1 to {MAX_PORT})")
        if port == listener_port:
            raise section.error("map", f"node {node}: port {port} is the listener's own port")
        for other, taken in explicit.items():
            if taken == port:
                raise section.error("map", f"nodes {other} and {node} both map to port {port}")
        explicit[node] = port
    return BrokerPorts(None, MappingProxyType(explicit))


def _node_id(section: ConfigSection, key: object) -> int:
    """A ``map`` key: Kafka's ``node.id``, an integer of 0 or more. (The configuration reader
    keeps mapping keys as text: ``0`` is ``"0"``; ``-1`` and ``1.5`` are not node ids.)"""
    text = str(key)
    if not (text.isascii() and text.isdigit()) or int(text) > INT_MAX:
        raise section.error("map", f"node id {text!r} is not an integer (Kafka's node.id)")
    return int(text)


def _proxy_protocol(section: ConfigSection) -> tuple[str, tuple[IPNetwork, ...]]:
    """``proxy_protocol`` and ``proxy_protocol_trusted_cidrs`` of a listener."""
    raw = section.raw("proxy_protocol", "off")
    mode = "off" if raw is False else raw  # YAML 1.1 reads a bare ``off`` as false
    if mode not in PROXY_PROTOCOL_MODES:
        raise section.error(
            "proxy_protocol", f"must be one of {', '.join(PROXY_PROTOCOL_MODES)}, got {raw!r}"
        )
    key = "proxy_protocol_trusted_cidrs"
    cidrs = section.str_list(key, None)
    if mode == "off":
        if cidrs is not None:
            raise section.error(key, "is only for listeners with proxy_protocol v1, v2 or any")
        return mode, ()
    if not cidrs:
        raise section.error(
            key, f"is required with proxy_protocol {mode}: the load balancers' addresses"
        )
    networks: list[IPNetwork] = []
    for text in cidrs:
        try:
            networks.append(ipaddress.ip_network(text.strip()))
        except ValueError as exc:
            raise section.error(key, f"{text!r} is not an address block: {exc}") from None
    return mode, tuple(networks)


def _listener(
    section: ConfigSection, limits: LimitsConfig, base_dir: Path | None = None
) -> ListenerConfig:
    name = section.get_str("name", REQUIRED)
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise section.error("name", f"must be a listener name like EXTERNAL, got {name!r}")
    protocol = section.choice("security_protocol", SECURITY_PROTOCOLS, "PLAINTEXT")
    bind_host = section.get_str("bind_host", "127.0.0.1")
    port = section.get_port("port", REQUIRED)
    sni = _sni_routing(section, protocol)
    advertised = _advertised_host(section, bind_host, sni)
    ports = (
        _broker_ports(section.section("broker_ports"), port)
        if sni is None
        else BrokerPorts(None, MappingProxyType({}))
    )
    proxy_protocol, trusted = _proxy_protocol(section)
    # --- TLS (kafkaguard/certs) ---
    tls: TlsConfig | None = None
    if protocol in TLS_SECURITY_PROTOCOLS:
        tls = parse_tls_config(section.section("ssl", required=True), base_dir or Path.cwd())
    elif "ssl" in section:
        raise section.error("ssl", f"is only for SSL and SASL_SSL listeners, not {protocol}")
    # --- end TLS ---
    # --- SASL (kafkaguard/proxy/sasl) ---
    sasl: SaslListenerConfig | None = None
    if protocol in SASL_SECURITY_PROTOCOLS:
        sasl = parse_sasl_config(section.section("sasl", required=True))
    elif "sasl" in section:
        raise section.error("sasl", f"is only for SASL_PLAINTEXT and SASL_SSL, not {protocol}")
    # --- end SASL ---
    enforcement = section.choice("enforcement", ENFORCEMENT_MODES, None)
    own_limits = parse_limits(section.section("limits"), limits) if "limits" in section else None
    section.reject_unknown()
    return ListenerConfig(
        name,
        protocol,
        bind_host,
        port,
        advertised,
        ports,
        tls,
        sasl=sasl,
        enforcement=enforcement,
        limits=own_limits,
        proxy_protocol=proxy_protocol,
        proxy_protocol_trusted_cidrs=trusted,
        sni=sni,
    )


def _advertised_host(section: ConfigSection, bind_host: str, sni: SniRouting | None) -> str:
    """``advertised_host``: required when binding a wildcard address; not for ``routing: sni``,
    whose names come from its pattern."""
    advertised = section.get_str("advertised_host", None)
    if sni is not None:
        if advertised is not None:
            raise section.error(
                "advertised_host",
                "is not for routing: sni (bootstrap_host and advertised_host_pattern name it)",
            )
        if "broker_ports" in section:
            raise section.error("broker_ports", "is not for routing: sni (one port serves all)")
        return sni.bootstrap_host
    if advertised is not None:
        return str(advertised)
    try:
        unspecified = ipaddress.ip_address(bind_host).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:  # reported, not raised: the listener's other keys are checked too
        report(section.error("advertised_host", f"is required when binding to {bind_host}"))
    return bind_host


def _sni_routing(section: ConfigSection, protocol: str) -> SniRouting | None:
    """``routing`` (``ports`` | ``sni``), and with ``sni`` its ``bootstrap_host`` and
    ``advertised_host_pattern``."""
    routing = section.choice("routing", ROUTING_MODES, "ports")
    bootstrap = section.get_str("bootstrap_host", None)
    pattern = section.get_str("advertised_host_pattern", None)
    if routing == "ports":
        for key, value in (("bootstrap_host", bootstrap), ("advertised_host_pattern", pattern)):
            if value is not None:
                raise section.error(key, "is only for listeners with routing: sni")
        return None
    if protocol not in TLS_SECURITY_PROTOCOLS:
        raise section.error(
            "routing", f"sni needs a TLS listener (SSL or SASL_SSL), not {protocol}"
        )
    if bootstrap is None:
        raise section.error("bootstrap_host", "is required with routing: sni")
    if pattern is None:
        raise section.error(
            "advertised_host_pattern",
            f"is required with routing: sni, e.g. broker-{NODE_ID_PLACEHOLDER}.kafka.example.com",
        )
    try:
        dns_name(bootstrap)
    except ValueError as exc:
        raise section.error("bootstrap_host", str(exc)) from None
    try:
        return SniRouting.parse(bootstrap, pattern)
    except ValueError as exc:
        raise section.error("advertised_host_pattern", str(exc)) from None


def _admin(section: ConfigSection) -> AdminConfig:
    admin = AdminConfig(
        bind_host=section.get_str("bind_host", "127.0.0.1"),
        port=section.get_port("port", 9404, any_port=True),
        allow_remote=section.get_bool("allow_remote", False),
        max_connections=section.get_int("max_connections", 64, minimum=1),
        request_timeout_ms=section.get_int("request_timeout_ms", 5_000, minimum=1),
        idle_timeout_ms=section.get_int("idle_timeout_ms", 30_000, minimum=1),
        max_request_bytes=section.get_int("max_request_bytes", 8_192, minimum=256),
        readiness_probe_interval_ms=section.get_int(
            "readiness_probe_interval_ms", 5_000, minimum=100
        ),
    )
    section.reject_unknown()
    return admin


def hosts_overlap(a: str, b: str) -> bool:
    """Whether listeners bound to ``a`` and ``b`` can want the same port: the same address,
    or a wildcard covering the other (``::`` covers IPv4 too: Linux binds it dual-stack).
    Host names count only when spelled the same (they are not resolved here)."""
    if a == b:
        return True
    try:
        x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return False
    if x == y:
        return True
    return any(
        wildcard.is_unspecified and (wildcard.version == 6 or other.version == 4)
        for wildcard, other in ((x, y), (y, x))
    )


def _check_fixed_ports(
    root: ConfigSection,
    sections: list[ConfigSection],
    listeners: tuple[ListenerConfig, ...],
    admin: AdminConfig | None,
) -> None:
    """Two listeners (or a listener and the admin listener) that would bind the same port
    on overlapping addresses: the second bind fails at start, or a node's port can never be
    bound (its clients fail closed). Bootstrap and ``map`` ports are fixed, so this is an
    error; ``base`` ranges depend on node ids and are warnings (:func:`config_warnings`)."""
    for index, listener in enumerate(listeners):
        ports = listener.fixed_ports()
        for other in listeners[:index]:
            if not hosts_overlap(listener.bind_host, other.bind_host):
                continue
            theirs = other.fixed_ports()
            for port in sorted(ports.keys() & theirs.keys()):
                key = "port" if port == listener.port else "broker_ports"
                raise sections[index].error(
                    key,
                    f"port {port} ({ports[port]}) is also listener {other.name}'s {theirs[port]}",
                )
        if (
            admin is not None
            and admin.port in ports
            and hosts_overlap(listener.bind_host, admin.bind_host)
        ):
            raise root.section("admin").error(
                "port", f"port {admin.port} is also listener {listener.name}'s {ports[admin.port]}"
            )


def config_warnings(config: ProxyConfig) -> list[str]:
    """What ``check-config`` reports without refusing the file: ports that a
    ``broker_ports.base`` range would give a node id 0..99 (:data:`BASE_RANGE_NODES`) although
    another port of the file has them, and a ``proxy_protocol_trusted_cidrs`` that trusts
    every address. Larger node ids are not checked: keep base ranges clear of them."""
    fixed = [
        (listener.bind_host, port, f"listener {listener.name}'s {what}")
        for listener in config.listeners
        for port, what in listener.fixed_ports().items()
    ]
    if config.admin is not None and config.admin.port:
        fixed.append((config.admin.bind_host, config.admin.port, "the admin listener's port"))
    warnings: list[str] = []
    for index, listener in enumerate(config.listeners):
        base = listener.broker_ports.base
        if base is not None:
            warnings += [
                f"listener {listener.name}: broker_ports base {base} would serve node "
                f"{port - base} on port {port}, {what}"
                for host, port, what in fixed
                if 0 <= port - base < BASE_RANGE_NODES and hosts_overlap(listener.bind_host, host)
            ]
            warnings += _base_overlaps(listener, config.listeners[:index])
        warnings += _sni_certificate_warnings(listener)
        if any(network.prefixlen == 0 for network in listener.proxy_protocol_trusted_cidrs):
            warnings.append(
                f"listener {listener.name}: proxy_protocol_trusted_cidrs trusts every address, "
                "so any client can claim to be any address (list the load balancers only)"
            )
    return warnings


SNI_SAMPLE_NODE_ID: Final = 2**31 - 1
"""A node id standing for all of them: a certificate covering its name covers the pattern."""


def _sni_certificate_warnings(listener: ListenerConfig) -> list[str]:
    """``routing: sni``: names of the listener its certificate does not cover (clients that
    check host names, Kafka's default, would refuse them). Explicit SANs for some nodes only
    are named: the others, and nodes added later, are not covered."""
    if listener.sni is None or listener.ssl is None:
        return []
    try:
        sans = dns_names(listener.ssl.cert_file)
    except (OSError, ValueError):
        return []  # an unreadable certificate is an error at start, reported there
    sni, where = listener.sni, f"listener {listener.name}: the certificate {listener.ssl.cert_file}"
    warnings = []
    if not any(name_matches(san, sni.bootstrap_host) for san in sans):
        warnings.append(f"{where} does not cover bootstrap_host {sni.bootstrap_host}")
    if not any(name_matches(san, sni.host_for(SNI_SAMPLE_NODE_ID)) for san in sans):
        nodes = sorted(n for n in map(sni.node_of, sans) if n is not None)
        covered = (
            f"only covers nodes {', '.join(map(str, nodes))} of" if nodes else "does not cover"
        )
        warnings.append(
            f"{where} {covered} advertised_host_pattern {sni.advertised_host_pattern} (give it "
            f"a wildcard SAN such as *.{sni.host_for(0).partition('.')[2]})"
        )
    return warnings


def _base_overlaps(listener: ListenerConfig, others: tuple[ListenerConfig, ...]) -> list[str]:
    """Two base ranges sharing a port within node ids 0..99 of each."""
    base = listener.broker_ports.base
    assert base is not None
    warnings = []
    for other in others:
        theirs = other.broker_ports.base
        if theirs is None or not hosts_overlap(listener.bind_host, other.bind_host):
            continue
        if abs(base - theirs) < BASE_RANGE_NODES:
            port = max(base, theirs)
            warnings.append(
                f"listeners {other.name} and {listener.name}: broker_ports bases {theirs} and "
                f"{base} both serve port {port} (node {port - theirs} of {other.name}, node "
                f"{port - base} of {listener.name})"
            )
    return warnings


MAX_WORKERS: Final = 256


def _workers(root: ConfigSection, *, embedded: bool) -> int:
    """``workers``: a count from 1 to :data:`MAX_WORKERS`, or ``auto`` (the usable cores)."""
    raw = root.raw("workers", 1)
    if raw == "auto":
        count = worker_count("auto")
    elif isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_WORKERS:
        raise root.error("workers", f"must be auto or 1 to {MAX_WORKERS}, got {raw!r}")
    else:
        count = raw
    if count > 1 and embedded:
        raise root.error(
            "workers", "more than one needs upstream.bootstrap_servers (not the embedded broker)"
        )
    return count


def _embedded(root: ConfigSection, up: ConfigSection, servers: tuple[HostPort, ...]) -> bool:
    """``upstream.embedded``: the in-memory demo broker, only when asked for by name (fail
    safe: a production file missing its upstream must not start a proxy that loses writes)."""
    embedded: bool = up.get_bool("embedded", False)
    if embedded and servers:
        raise up.error("embedded", "excludes bootstrap_servers (pick one upstream)")
    if embedded and ("ssl" in up or "sasl" in up):
        raise up.error("embedded", "takes no ssl or sasl (the demo broker is plaintext)")
    if not embedded and not servers:
        fix = (
            "give the brokers to proxy, e.g. bootstrap_servers: ['kafka-1:9092'], or "
            "embedded: true for the in-memory demo broker (every write lost at exit)"
        )
        if "upstream" not in root:
            raise root.error("upstream", f"is required: {fix}")
        raise up.error("bootstrap_servers", f"is required: {fix}")
    return embedded


def _upstream(root: ConfigSection, base_dir: Path | None) -> UpstreamConfig:
    up = root.section("upstream")
    servers = tuple(
        parse_host_port(s, up, "bootstrap_servers") for s in up.str_list("bootstrap_servers", [])
    )
    embedded = _embedded(root, up, servers)
    # --- upstream TLS and SASL (kafkaguard/certs/tls.py, kafkaguard/proxy/sasl/client.py) ---
    up_tls: UpstreamTlsConfig | None = None
    if "ssl" in up:
        up_tls = parse_upstream_tls_config(up.section("ssl"), base_dir or Path.cwd())
    up_sasl: UpstreamSaslConfig | None = None
    if "sasl" in up:
        up_sasl = parse_upstream_sasl_config(up.section("sasl"), base_dir or Path.cwd())
    # --- end upstream TLS and SASL ---
    upstream = UpstreamConfig(
        servers,
        up.get_float("connect_timeout_s", 10.0),
        ssl=up_tls,
        sasl=up_sasl,
        embedded=embedded,
    )
    up.reject_unknown()
    return upstream


def _logging(root: ConfigSection) -> tuple[str, str]:
    """``logging.level`` and ``logging.format``."""
    logging_section = root.section("logging")
    log_level = logging_section.choice("level", ("DEBUG", "INFO", "WARNING", "ERROR"), "INFO")
    log_format = logging_section.choice("format", LOG_FORMATS, "text")
    logging_section.reject_unknown()
    return log_level, log_format


def _metrics(root: ConfigSection) -> MetricsConfig:
    metrics_section = root.section("metrics")
    metrics = MetricsConfig(
        per_principal=metrics_section.get_bool("per_principal", False),
        max_principals=metrics_section.get_int("max_principals", 100, minimum=1),
    )
    metrics_section.reject_unknown()
    return metrics


def _listeners(
    root: ConfigSection, limits: LimitsConfig, base_dir: Path | None
) -> tuple[list[ConfigSection], tuple[ListenerConfig, ...]]:
    """The listeners that parse, and their sections (when collecting errors, a listener
    refused is left out and the others are still checked)."""
    parsed = [
        (s, attempt(partial(_listener, s, limits, base_dir), None))
        for s in root.sections("listeners")
    ]
    if not parsed:
        raise root.error("listeners", "at least one listener is required")
    names = [listener.name for _, listener in parsed if listener is not None]
    if len(set(names)) != len(names):
        duplicated = sorted({name for name in names if names.count(name) > 1})
        raise root.error(
            "listeners", f"listener names must be unique, got {', '.join(duplicated)} twice"
        )
    good = [(s, listener) for s, listener in parsed if listener is not None]
    return [s for s, _ in good], tuple(listener for _, listener in good)


def parse_config(root: ConfigSection, base_dir: Path | None = None) -> ProxyConfig:
    """The configuration in ``root``. Raises the first error, or under
    :func:`~kafkaguard.config_tree.collecting` (:func:`load_config`) goes on after each
    section refused, so that every error of the file is reported at once."""
    limits = attempt(partial(parse_limits, root.section("limits")), LimitsConfig())
    sections, listeners = _listeners(root, limits, base_dir)
    upstream = attempt(partial(_upstream, root, base_dir), UpstreamConfig(()))
    log_level, log_format = attempt(partial(_logging, root), ("INFO", "text"))
    admin = attempt(partial(_admin, root.section("admin")), None) if "admin" in root else None
    attempt(partial(_check_fixed_ports, root, sections, listeners, admin), None)
    metrics = attempt(partial(_metrics, root), MetricsConfig())
    shutdown_timeout_ms = root.get_int("shutdown_timeout_ms", 30_000, minimum=0)
    workers = attempt(partial(_workers, root, embedded=upstream.embedded), 1)
    policy = parse_policy_config(root)
    # --- enforcement mode and audit trail (kafkaguard/audit) ---
    enforcement = root.choice("enforcement", ENFORCEMENT_MODES, ENFORCE)
    audit = attempt(partial(parse_audit_config, root.section("audit"), base_dir), AuditConfig())
    # --- end enforcement and audit ---
    root.reject_unknown()
    return ProxyConfig(
        listeners=listeners,
        upstream=upstream,
        limits=limits,
        policy=policy,
        log_level=log_level,
        log_format=log_format,
        admin=admin,
        metrics=metrics,
        shutdown_timeout_ms=shutdown_timeout_ms,
        enforcement=enforcement,
        audit=audit,
        workers=workers,
        source=root.file,
        base_dir=base_dir or Path.cwd(),
        section=root,
    )


def load_config(path: str | Path) -> ProxyConfig:
    """The file's configuration; every error in it, each with its ``file:line`` and key, in
    one :class:`~kafkaguard.config_tree.ConfigErrors` when there are several."""
    path = Path(path)
    with collecting():
        return parse_config(ConfigSection.from_file(path), path.resolve().parent)
    raise AssertionError("collecting() raises when it recorded an error")  # pragma: no cover


def worker_count(setting: int | str) -> int:
    """``workers``: a count, or ``auto``: the cores this process may run on."""
    if setting == "auto":
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    return int(setting)


__all__ = ["ConfigError", "ProxyConfig", "load_config", "parse_config"]
