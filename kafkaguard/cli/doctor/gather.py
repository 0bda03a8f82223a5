"""``kafkaguard doctor``'s I/O: the configuration loaded, the upstream asked and the ACL store
read exactly as ``kafkaguard run`` does it (``load_config``, ``check_files``, the
``UpstreamCluster`` probe and Metadata request, ``build_authorizer`` over ``build_store``),
so what doctor finds is what the proxy would meet. Nothing is bound and no ACL written; a
Kafka-topic store's topic is described, not created (its store's start would create it), and
its configs judged by the rule the store's start applies (``unsafe_settings``). With the OPA
authorizer, its server is asked ``GET /health`` and one probe decision (``check_server``). A
ZooKeeper store's start creates its empty ``/kafka-acl`` paths when missing, as Kafka's
``AclAuthorizer`` does (``zkClient.createAclPaths``), and that is the only write.

Every step is bounded: connections by ``upstream.connect_timeout_s`` (as the proxy's own),
the ACL store's first load by :data:`STORE_LOAD_TIMEOUT_S`. A step that fails or times out
is recorded with its reason in :class:`~kafkaguard.cli.doctor.facts.Facts`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import ssl
from pathlib import Path
from typing import Any, Final

from kafkaguard.certs.tls import TlsError
from kafkaguard.cli.doctor.facts import (
    TOPIC_SETTINGS,
    BootstrapProbe,
    Broker,
    BrokerProbe,
    Facts,
    OpaFacts,
    StoreFacts,
    TopicFacts,
    listed_brokers,
)
from kafkaguard.config_tree import ConfigError
from kafkaguard.policy.authorizer import Action, RequestContext, SecurityProtocol
from kafkaguard.policy.config import (
    OPA_AUTHORIZER_CLASS,
    build_authorizer,
    build_store,
    kafka_topic_settings,
)
from kafkaguard.policy.model import AclOperation, KafkaPrincipal, ResourcePattern, ResourceType
from kafkaguard.policy.opa import OpaOptions, check_server
from kafkaguard.policy.stores.base import AclStore, AclStoreError
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.proxy.app.config_files import check_files
from kafkaguard.proxy.app.server import audit_connection
from kafkaguard.proxy.config import HostPort, ProxyConfig, config_warnings, load_config
from kafkaguard.proxy.net.cluster import UpstreamCluster, fetch_api_versions, fetch_brokers
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError
from kafkaguard.topic_table import TopicTableError, topic_configs, unsafe_settings

STORE_LOAD_TIMEOUT_S: Final = 30.0
"""The ACL store's first full load (a ZooKeeper session, a Kafka topic read) within this."""
PROBE_PRINCIPAL: Final = KafkaPrincipal("User", "kafkaguard-doctor")
PROBE_ACTION: Final = Action(
    AclOperation.DESCRIBE, ResourcePattern(ResourceType.TOPIC, "kafkaguard-doctor-probe")
)
"""The decision doctor asks OPA: any boolean answer shows the URL names a rule that decides."""

_CONNECTION_ERRORS: Final = (OSError, TimeoutError, ProtocolError, UpstreamAuthenticationError)
_STORE_ERRORS: Final = (
    AclStoreError,
    ConfigError,
    TopicTableError,
    OSError,
    TimeoutError,
    ValueError,
    ImportError,
)


def _reason(exc: BaseException, timeout_s: float) -> str:
    """An exception as the one line a finding shows (a timeout says how long it waited)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no answer within {timeout_s:g} s"
    return str(exc) or type(exc).__name__


def collect(config_path: Path) -> Facts:
    """Everything doctor checks, gathered (runs its own event loop)."""
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        return Facts(config_path, None, config_error=str(exc))
    return asyncio.run(gather(config_path, config))


async def gather(config_path: Path, config: ProxyConfig) -> Facts:
    """The facts of a loaded configuration: its files, the upstream, the ACL store."""
    files_error: str | None = None
    try:
        check_files(config)
    except ConfigError as exc:
        files_error = str(exc)
    upstream_error, bootstrap, broker_probes = await _upstream(config)
    return Facts(
        config_path,
        config,
        files_error=files_error,
        config_warnings=tuple(config_warnings(config)),
        upstream_error=upstream_error,
        bootstrap=bootstrap,
        broker_probes=broker_probes,
        store=await _store(config),
        opa=await _opa(config),
    )


async def _upstream(
    config: ProxyConfig,
) -> tuple[str | None, tuple[BootstrapProbe, ...], tuple[BrokerProbe, ...]]:
    """Each bootstrap server probed and asked for the brokers, then each broker listed
    connected to, concurrently (each connection bounded by ``connect_timeout_s``)."""
    upstream = config.upstream
    if upstream.embedded:
        return (
            "upstream.embedded: the in-memory demo broker exists only inside kafkaguard run; "
            "there is no cluster to check",
            (),
            (),
        )
    try:
        cluster = UpstreamCluster(
            upstream.bootstrap_servers,
            upstream.connect_timeout_s,
            tls=upstream.ssl,
            sasl=upstream.sasl,
        )
    except (TlsError, ssl.SSLError, OSError) as exc:
        return f"upstream.ssl: {exc}", (), ()
    bootstrap = tuple(
        await asyncio.gather(*(_bootstrap(cluster, s) for s in upstream.bootstrap_servers))
    )
    listed = listed_brokers(bootstrap)
    brokers = tuple(await asyncio.gather(*(_broker(cluster, b) for b in listed)))
    return None, bootstrap, brokers


async def _bootstrap(cluster: UpstreamCluster, server: HostPort) -> BootstrapProbe:
    timeout = cluster.connect_timeout_s
    try:
        response = await asyncio.wait_for(
            fetch_api_versions(server, ssl_context=cluster.ssl_context, sasl=cluster.sasl),
            timeout,
        )
    except _CONNECTION_ERRORS as exc:
        return BootstrapProbe(server, error=_reason(exc, timeout))
    cluster.record_broker_api_versions(response)  # bounds the Metadata version asked
    try:
        listed = await asyncio.wait_for(fetch_brokers(server, cluster), timeout)
    except _CONNECTION_ERRORS as exc:
        return BootstrapProbe(server, metadata_error=_reason(exc, timeout))
    brokers = tuple(Broker(node, HostPort(host, port)) for node, host, port in listed)
    return BootstrapProbe(server, brokers=brokers)


async def _broker(cluster: UpstreamCluster, broker: Broker) -> BrokerProbe:
    """The connection a client of the broker's proxy port makes the proxy open: TLS, then
    SASL when configured (kafkaguard/proxy/net/connection.py)."""
    timeout = cluster.connect_timeout_s
    try:
        await asyncio.wait_for(
            fetch_api_versions(broker.address, ssl_context=cluster.ssl_context, sasl=cluster.sasl),
            timeout,
        )
    except _CONNECTION_ERRORS as exc:
        return BrokerProbe(broker, _reason(exc, timeout))
    return BrokerProbe(broker)


async def _store(config: ProxyConfig) -> StoreFacts:
    """The store built and loaded through the configured authorizer class, as the proxy's
    start loads it (``Authorizer.start`` for every listener), then closed. A Kafka-topic
    store's topic is only described first: its start would create a missing one, and
    refuse one whose configs could lose records (then it is not loaded)."""
    cfg = config.policy.acl_store
    try:
        connection = audit_connection(config.upstream) if cfg.type == "kafka" else None
        store = build_store(cfg, connection)
    except (*_STORE_ERRORS, UpstreamAuthenticationError) as exc:
        return StoreFacts(cfg.type, cfg.type, error=str(exc))
    source = store.description
    if cfg.type == "memory":
        source = "memory (no acl_store section: ACLs live in this process only)"
    topic: TopicFacts | None = None
    if connection is not None:
        unloaded, topic = await _topic_state(config, source, connection)
        if unloaded is not None:
            await store.close()
            return unloaded
    return dataclasses.replace(await _load(config, store, source), topic=topic)


async def _load(config: ProxyConfig, store: AclStore, source: str) -> StoreFacts:
    kind = config.policy.acl_store.type
    try:
        authorizer = build_authorizer(config.policy, store=store)
    except (*_STORE_ERRORS, AttributeError, TypeError) as exc:
        await store.close()
        return StoreFacts(kind, source, error=f"authorizer.class: {exc}")
    try:
        ready = authorizer.start([listener.name for listener in config.listeners])
        async with asyncio.timeout(STORE_LOAD_TIMEOUT_S):
            for future in ready.values():
                await future
        return StoreFacts(kind, source, count=len(store.snapshot()))
    except _STORE_ERRORS as exc:
        return StoreFacts(kind, source, error=_reason(exc, STORE_LOAD_TIMEOUT_S))
    finally:
        await authorizer.close()


async def _topic_state(
    config: ProxyConfig, source: str, connection: dict[str, Any]
) -> tuple[StoreFacts | None, TopicFacts | None]:
    """A Kafka-topic store's topic described (DescribeConfigs, creating nothing): (the
    store's facts when there is nothing to load: no topic, or one the store refuses; the
    topic's settings when it exists)."""
    cfg = config.policy.acl_store
    try:
        configs = await asyncio.to_thread(
            topic_configs, connection, cfg.topic, config.upstream.connect_timeout_s
        )
    except _STORE_ERRORS as exc:
        error = f"cannot describe topic {cfg.topic}: {exc}"
        return StoreFacts(cfg.type, source, error=error), None
    if configs is None:
        note = f"topic {cfg.topic} does not exist yet: the proxy creates it, compacted"
        return StoreFacts(cfg.type, source, count=0, note=note), None
    topic = TopicFacts(
        cfg.topic,
        tuple((key, configs.get(key)) for key in TOPIC_SETTINGS),
        unsafe_settings(kafka_topic_settings(cfg), configs),
    )
    if topic.unsafe is not None:
        error = f"the proxy refuses topic {cfg.topic} at start (acl_store.topic)"
        return StoreFacts(cfg.type, source, error=error, topic=topic), topic
    return None, topic


async def _opa(config: ProxyConfig) -> OpaFacts | None:
    """With the OPA authorizer: its server's health and a probe decision, asked off the loop
    as the authorizer asks them (each bounded by ``timeout_ms``)."""
    authorizer = config.policy.authorizer
    if authorizer.class_path != OPA_AUTHORIZER_CLASS:
        return None
    options = OpaOptions.parse(authorizer.options, authorizer.super_users)  # load_config checked
    listener = config.listeners[0]
    context = RequestContext(
        listener_name=listener.name,
        security_protocol=SecurityProtocol(listener.security_protocol),
        principal=PROBE_PRINCIPAL,
        client_address=ipaddress.ip_address("127.0.0.1"),
        api_key=3,  # Metadata: the request a DESCRIBE on a topic comes from
        api_version=12,
        client_id="kafkaguard-doctor",
    )
    check = await asyncio.to_thread(check_server, options, context, PROBE_ACTION)
    pattern = PROBE_ACTION.resource_pattern
    probe = (
        f"{PROBE_ACTION.operation.name} on {pattern.resource_type.name.title()}:"
        f"{pattern.pattern_type.name}:{pattern.name} by {PROBE_PRINCIPAL} on {listener.name}"
    )
    where = options.url
    if options.mode == "wasm":
        rule = options.entrypoint or "its only one"
        where = f"bundle {options.bundle} (mode wasm, entrypoint {rule})"
    return OpaFacts(
        url=where,
        health_url=check.health_url,
        health_error=check.health_error,
        probe=probe,
        decision=check.decision,
        decision_error=check.decision_error,
        allow_on_error=options.allow_on_error,
    )
