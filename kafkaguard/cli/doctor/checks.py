"""``kafkaguard doctor``'s verdicts: functions over :class:`~kafkaguard.cli.doctor.facts.Facts`,
no I/O.

A finding is ``pass``, ``fail`` (something the proxy needs does not work, or a check could
not run) or ``warn`` (it works, but a setting is unsafe). Warnings are findings, not
footnotes: they make ``doctor`` exit 1 unless ``--allow-warnings`` is given.

The warnings follow Kafka's own security model: on a PLAINTEXT listener every client is
``User:ANONYMOUS`` (Kafka's ``PlaintextAuthenticator``), so a super user there either never
matches or, when it is ``User:ANONYMOUS``, makes every client one;
``allow.everyone.if.no.acl.found`` (``StandardAuthorizer``) lets anyone do anything to a
resource no ACL names; a listener without TLS sends records, and SASL/PLAIN passwords, in the
clear.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from kafkaguard.cli.doctor.facts import Broker, Facts, TopicFacts
from kafkaguard.policy.config import PolicyInForce
from kafkaguard.proxy.config import (
    TLS_SECURITY_PROTOCOLS,
    HostPort,
    ListenerConfig,
    ProxyConfig,
    canonical_ip,
    is_loopback,
)

ANONYMOUS = "User:ANONYMOUS"


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"


class Section(StrEnum):
    """Where a finding is printed (and its ``section`` in ``--json``)."""

    CONFIGURATION = "configuration"
    UPSTREAM = "upstream"
    BROKERS = "brokers"
    LISTENERS = "listeners"
    ACL_STORE = "acl_store"
    AUTHORIZER = "authorizer"


@dataclass(frozen=True, slots=True)
class Finding:
    section: Section
    check: str
    """A stable identifier (docs/doctor.md lists them), e.g. ``upstream.bootstrap``."""
    status: Status
    subject: str | None
    """What it is about: a server, a listener, a node; None for the whole configuration."""
    message: str


@dataclass(frozen=True, slots=True)
class Advertised:
    """What a listener tells clients: its bootstrap address and, per known node, the
    address it gives that broker (None: the node has no port there)."""

    bootstrap: HostPort
    nodes: tuple[tuple[int, HostPort | None], ...]
    rule: str
    """How per-broker addresses are formed (``broker_ports: base 9300``, an SNI pattern)."""


def advertised(listener: ListenerConfig, brokers: tuple[Broker, ...]) -> Advertised:
    """The addresses the proxy's responses give clients on ``listener`` (Metadata,
    FindCoordinator, DescribeCluster rewrites), for the brokers the cluster listed."""
    sni = listener.sni
    if sni is not None:
        nodes = tuple(
            (b.node_id, HostPort(sni.host_for(b.node_id), listener.port)) for b in brokers
        )
        rule = f"routing: sni, {sni.advertised_host_pattern} on port {listener.port}"
        return Advertised(HostPort(sni.bootstrap_host, listener.port), nodes, rule)
    ports = listener.broker_ports
    rule = (
        f"broker_ports: base {ports.base} (node id + {ports.base})"
        if ports.base is not None
        else "broker_ports: map "
        + ", ".join(f"{node}: {port}" for node, port in sorted(ports.explicit.items()))
    )
    host = listener.advertised_host
    mapped: list[tuple[int, HostPort | None]] = []
    for broker in brokers:
        port = ports.port_for(broker.node_id)
        mapped.append((broker.node_id, None if port is None else HostPort(host, port)))
    return Advertised(HostPort(host, listener.port), tuple(mapped), rule)


def _same_address(a: HostPort, b: HostPort) -> bool:
    if a.port != b.port:
        return False
    try:
        return canonical_ip(a.host) == canonical_ip(b.host)
    except ValueError:
        return a.host.lower().removesuffix(".") == b.host.lower().removesuffix(".")


def evaluate(facts: Facts) -> list[Finding]:
    """Every finding, in the order the report prints them."""
    findings = list(_configuration(facts))
    config = facts.config
    if config is None:
        return findings
    findings += _upstream(facts)
    findings += _brokers(facts)
    for listener in config.listeners:
        findings += _listener(config, listener, facts.brokers())
    findings += _authorizer(config)
    findings += _store(facts)
    findings += _opa(facts)
    return findings


def _configuration(facts: Facts) -> Iterator[Finding]:
    conf = Section.CONFIGURATION
    if facts.config is None:
        message = f"does not load: {facts.config_error}; no other check could run"
        yield Finding(conf, "config", Status.FAIL, None, message)
        return
    yield Finding(conf, "config", Status.PASS, None, "loads")
    if facts.files_error is not None:
        yield Finding(conf, "config.files", Status.FAIL, None, facts.files_error)
    else:
        yield Finding(conf, "config.files", Status.PASS, None, "every file it names opens")
    for warning in facts.config_warnings:
        yield Finding(conf, "config.warning", Status.WARN, None, warning)


def _upstream(facts: Facts) -> Iterator[Finding]:
    up = Section.UPSTREAM
    if facts.upstream_error is not None:
        yield Finding(up, "upstream", Status.FAIL, None, facts.upstream_error)
        return
    for probe in facts.bootstrap:
        server = str(probe.address)
        if probe.error is not None:
            yield Finding(up, "upstream.bootstrap", Status.FAIL, server, probe.error)
            continue
        yield Finding(up, "upstream.bootstrap", Status.PASS, server, "answers the proxy")
        if probe.brokers is None:
            message = f"did not list the cluster's brokers: {probe.metadata_error}"
            yield Finding(up, "upstream.metadata", Status.FAIL, server, message)
        else:
            count = len(probe.brokers)
            message = f"lists {count} broker{'' if count == 1 else 's'}"
            status = Status.PASS if probe.brokers else Status.FAIL
            yield Finding(up, "upstream.metadata", status, server, message)
    config = facts.config
    assert config is not None
    for address in config.upstream.bootstrap_servers:
        for listener in config.listeners:
            own = _listener_address(listener, address)
            if own is not None:
                message = f"is listener {listener.name}'s {own}: the proxy would connect to itself"
                yield Finding(up, "upstream.loop", Status.WARN, str(address), message)


def _brokers(facts: Facts) -> Iterator[Finding]:
    brokers = Section.BROKERS
    if facts.upstream_error is None and not facts.brokers():
        message = "no bootstrap server listed the cluster's brokers: none could be checked"
        yield Finding(brokers, "upstream.brokers", Status.FAIL, None, message)
    for probe in facts.broker_probes:
        subject = f"node {probe.broker.node_id} at {probe.broker.address}"
        if probe.error is None:
            yield Finding(brokers, "upstream.broker", Status.PASS, subject, "answers the proxy")
        else:
            yield Finding(brokers, "upstream.broker", Status.FAIL, subject, probe.error)
    config = facts.config
    assert config is not None
    for broker in facts.brokers():
        for listener in config.listeners:
            own = _listener_address(listener, broker.address, facts.brokers())
            if own is not None:
                message = (
                    f"advertises listener {listener.name}'s {own}: clients and the proxy "
                    "cannot tell the broker from the proxy (check the broker's "
                    "advertised.listeners)"
                )
                subject = f"node {broker.node_id} at {broker.address}"
                yield Finding(brokers, "upstream.advertises_proxy", Status.WARN, subject, message)


def _listener_address(
    listener: ListenerConfig, address: HostPort, brokers: tuple[Broker, ...] = ()
) -> str | None:
    """Which of ``listener``'s own addresses ``address`` is (bound or advertised), if any."""
    view = advertised(listener, brokers)
    candidates = [(view.bootstrap, "advertised bootstrap address")]
    candidates += [(a, f"address for node {n}") for n, a in view.nodes if a is not None]
    try:
        wildcard = ipaddress.ip_address(listener.bind_host).is_unspecified
    except ValueError:
        wildcard = False
    if not wildcard:
        candidates.append((HostPort(listener.bind_host, listener.port), "bound address"))
    return next((what for own, what in candidates if _same_address(own, address)), None)


def _listener(
    config: ProxyConfig, listener: ListenerConfig, brokers: tuple[Broker, ...]
) -> Iterator[Finding]:
    section, name = Section.LISTENERS, listener.name
    for node, address in advertised(listener, brokers).nodes:
        if address is None:
            message = (
                f"has no port for node {node} (broker_ports map): clients whose response "
                "names that broker are disconnected (fail closed)"
            )
            yield Finding(section, "listener.broker_port", Status.FAIL, name, message)
    tls = listener.security_protocol in TLS_SECURITY_PROTOCOLS
    if not tls and not is_loopback(listener.bind_host):
        message = (
            f"is {listener.security_protocol} (no TLS) on {listener.bind_host}, not a loopback "
            "address: records"
            + (" and SASL credentials" if listener.sasl is not None else "")
            + " cross the network in the clear"
        )
        yield Finding(section, "listener.no_tls", Status.WARN, name, message)
    policy = config.policy.authorizer.in_force(listener.name)
    if policy.allow_everyone_if_no_acl_found:
        message = (
            f"allow_everyone_if_no_acl_found is true ({policy.allow_everyone_key}): any "
            "client may do anything to a resource no ACL names"
        )
        yield Finding(section, "listener.allow_everyone", Status.WARN, name, message)
    yield from _super_users(listener, policy)


def _super_users(listener: ListenerConfig, policy: PolicyInForce) -> Iterator[Finding]:
    """Super users where clients are ``User:ANONYMOUS``: every client of a PLAINTEXT
    listener, and on an SSL listener each client without a certificate unless
    ``client_auth`` is ``required`` (Kafka's ``SslPrincipalMapper`` has no DN to map)."""
    section, name, users = Section.LISTENERS, listener.name, policy.super_users
    listed = f"{', '.join(sorted(users))}, {policy.super_users_key}"
    if listener.security_protocol == "PLAINTEXT" and users:
        if ANONYMOUS in users:
            why = f"every client of a PLAINTEXT listener is {ANONYMOUS}: all are super users"
        else:
            why = (
                f"no client proves an identity on a PLAINTEXT listener (all are {ANONYMOUS}): "
                "give super users a TLS or SASL listener (an empty "
                f"authorizer.extensions.listeners.{name}.super_users removes them here)"
            )
        message = f"has super users ({listed}): {why}"
        yield Finding(section, "listener.plaintext_super_users", Status.WARN, name, message)
    elif (
        listener.security_protocol == "SSL"
        and listener.ssl is not None
        and listener.ssl.client_auth != "required"
        and ANONYMOUS in users
    ):
        message = (
            f"has super user {ANONYMOUS} ({listed}) and client_auth {listener.ssl.client_auth}: "
            "every client without a certificate is a super user"
        )
        yield Finding(section, "listener.anonymous_super_user", Status.WARN, name, message)


def _authorizer(config: ProxyConfig) -> Iterator[Finding]:
    """``allow_everyone_if_no_acl_found: true`` at the top, where every listener overrides
    it: still a finding (a listener added later inherits it)."""
    authorizer = config.policy.authorizer
    if not authorizer.allow_everyone_if_no_acl_found:
        return
    inherit = [
        ls.name
        for ls in config.listeners
        if config.policy.authorizer.in_force(ls.name).allow_everyone_key
        == "authorizer.allow_everyone_if_no_acl_found"
    ]
    if not inherit:
        message = (
            "authorizer.allow_everyone_if_no_acl_found is true: every listener overrides it "
            "now, but a listener added later inherits it"
        )
        yield Finding(Section.LISTENERS, "authorizer.allow_everyone", Status.WARN, None, message)


def _store(facts: Facts) -> Iterator[Finding]:
    store = facts.store
    section = Section.ACL_STORE
    if store is None:
        yield Finding(section, "acl_store", Status.FAIL, None, "was not loaded")
        return
    if store.topic is not None:
        yield _topic(store.topic)
    if store.error is not None or store.count is None:
        message = f"does not load: {store.error or 'no reason given'}"
        yield Finding(section, "acl_store", Status.FAIL, store.source, message)
        return
    message = f"{store.count} ACL{'' if store.count == 1 else 's'} loaded"
    if store.note:
        message += f" ({store.note})"
    yield Finding(section, "acl_store", Status.PASS, store.source, message)


def _topic(topic: TopicFacts) -> Finding:
    """A Kafka-topic store's topic, judged by the rule its start applies (``unsafe_settings``:
    a cleanup policy deleting by age, less delete retention than configured)."""
    subject = f"topic {topic.name}"
    values = dict(topic.settings)
    described = ", ".join(
        f"{key}={'(not given)' if value is None else value}" for key, value in topic.settings
    )
    if topic.unsafe is None:
        message = (
            f"{described}: no record is removed before a proxy has read it "
            "(retention.ms deletes nothing under cleanup.policy=compact)"
        )
        return Finding(Section.ACL_STORE, "acl_store.topic", Status.PASS, subject, message)
    message = topic.unsafe
    if "delete" in (values.get("cleanup.policy") or "delete"):
        message += f"; retention.ms={values.get('retention.ms') or '(not given)'} applies"
    return Finding(Section.ACL_STORE, "acl_store.topic", Status.FAIL, subject, message)


def _opa(facts: Facts) -> Iterator[Finding]:
    """The OPA authorizer's server: what ``/readyz`` and every uncached decision depend on."""
    opa = facts.opa
    if opa is None:
        return
    section = Section.AUTHORIZER
    if opa.health_url is not None and opa.health_error is None:
        yield Finding(section, "opa.health", Status.PASS, opa.health_url, "answers 200")
    elif opa.health_url is not None:  # None: mode wasm, in process, no server to ask
        message = f"{opa.health_error}: /readyz would report OPA down"
        yield Finding(section, "opa.health", Status.FAIL, opa.health_url, message)
    outcome = "allowed (allow_on_error)" if opa.allow_on_error else "denied"
    if opa.decision_error is None:
        answer = "true" if opa.decision else "false"
        message = f"answers {answer} for a probe ({opa.probe}): a boolean, as a decision must be"
        yield Finding(section, "opa.decision", Status.PASS, opa.url, message)
    else:
        message = (
            f"gives no boolean for a probe ({opa.probe}): {opa.decision_error}; every "
            f"decision not in the cache would be {outcome}"
        )
        yield Finding(section, "opa.decision", Status.FAIL, opa.url, message)
    if opa.allow_on_error:
        message = (
            "authorizer.options.allow_on_error is true: while OPA cannot be asked, or answers "
            "no boolean, every request is allowed (fail open)"
        )
        yield Finding(section, "opa.allow_on_error", Status.WARN, None, message)


def exit_code(findings: list[Finding], *, allow_warnings: bool) -> int:
    """0: nothing wrong; 1: a check failed, or a warning applies without ``--allow-warnings``."""
    statuses = {finding.status for finding in findings}
    if Status.FAIL in statuses:
        return 1
    if Status.WARN in statuses and not allow_warnings:
        return 1
    return 0
