"""What ``kafkaguard doctor`` gathered, as plain values: the checks
(:mod:`kafkaguard.cli.doctor.checks`) are functions over these, so every verdict can be tested
without a network, and the gathering layer (:mod:`kafkaguard.cli.doctor.gather`) only fills
them in.

An ``error`` of None means the step ran and succeeded; a step that did not run has an error
saying why (never a silent default), so a check that could not run is reported as failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kafkaguard.proxy.config import HostPort, ProxyConfig


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker as the cluster advertises it in a Metadata response (``brokers`` array)."""

    node_id: int
    address: HostPort


@dataclass(frozen=True, slots=True)
class BootstrapProbe:
    """One ``upstream.bootstrap_servers`` entry, asked as the proxy's start-up probe asks it:
    ApiVersions over the upstream TLS, then the upstream SASL exchange, then a Metadata
    request for no topics (the brokers it lists)."""

    address: HostPort
    error: str | None = None
    """Why the ApiVersions probe (or the SASL exchange after it) failed; None: it answered."""
    brokers: tuple[Broker, ...] | None = None
    """The brokers its Metadata listed; None when that request was not answered."""
    metadata_error: str | None = None
    """Why Metadata was not answered (None when it was, or when the probe failed first)."""


@dataclass(frozen=True, slots=True)
class BrokerProbe:
    """An advertised broker, connected to as the proxy connects for a client of its port."""

    broker: Broker
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """A Kafka-topic ACL store's topic as DescribeConfigs gave it (issue 35)."""

    name: str
    settings: tuple[tuple[str, str | None], ...]
    """:data:`TOPIC_SETTINGS` and their values (None: the broker gave none)."""
    unsafe: str | None
    """Why the store refuses the topic at start (``topic_table.unsafe_settings``, naming the
    setting and the fix); None: it loses no record a proxy has not read."""


TOPIC_SETTINGS = ("cleanup.policy", "delete.retention.ms", "retention.ms")
"""The topic configs that decide whether records a proxy has not read can be removed."""


@dataclass(frozen=True, slots=True)
class OpaFacts:
    """The OPA server of ``authorizer.class: kafkaguard.policy.opa:OpaAuthorizer``, asked as
    the authorizer asks it (``check_server``)."""

    url: str
    """``authorizer.options.url``: the decision (``mode: wasm``: the bundle and entrypoint)."""
    health_url: str | None
    """None with ``mode: wasm``: no server to ask."""
    health_error: str | None
    """Why ``GET /health`` failed; None: it answered 200."""
    probe: str
    """The probe decision asked, as one line (principal, operation, resource)."""
    decision: bool | None
    decision_error: str | None
    """Why the decision URL gave no boolean; None: it did (``decision``)."""
    allow_on_error: bool


@dataclass(frozen=True, slots=True)
class StoreFacts:
    """The ACL store the configuration names, loaded through the configured authorizer."""

    kind: str
    """``acl_store.type``: ``file``, ``zookeeper``, ``kafka`` or ``memory`` (no section)."""
    source: str
    """Where it is: the store's own description (``file /etc/kafkaguard/acls.yaml``)."""
    count: int | None = None
    """ACLs loaded; None when the store did not load."""
    error: str | None = None
    note: str | None = None
    """Something true about a loaded store that an operator should know (a Kafka-topic store
    whose topic the proxy will create at its start)."""
    topic: TopicFacts | None = None
    """A Kafka-topic store's existing topic; None for other stores and a missing topic."""


@dataclass(frozen=True, slots=True)
class Facts:
    config_path: Path
    config: ProxyConfig | None
    """None when the file did not load (:attr:`config_error` says why)."""
    config_error: str | None = None
    files_error: str | None = None
    """The first file the configuration names that ``run`` would refuse (``check-config``)."""
    config_warnings: tuple[str, ...] = ()
    """``check-config``'s warnings for a valid file (port ranges, trust-all CIDRs, SNI)."""
    upstream_error: str | None = None
    """Why no upstream connection was attempted at all (e.g. the embedded demo broker)."""
    bootstrap: tuple[BootstrapProbe, ...] = ()
    broker_probes: tuple[BrokerProbe, ...] = ()
    store: StoreFacts | None = None
    opa: OpaFacts | None = None
    """None unless the authorizer is OPA."""

    def brokers(self) -> tuple[Broker, ...]:
        """Every broker any bootstrap server listed (:func:`listed_brokers`)."""
        return listed_brokers(self.bootstrap)


def listed_brokers(bootstrap: tuple[BootstrapProbe, ...]) -> tuple[Broker, ...]:
    """Every broker any bootstrap server listed, by node id (the first listing of a node
    wins; two servers of one cluster list the same brokers)."""
    seen: dict[int, Broker] = {}
    for probe in bootstrap:
        for broker in probe.brokers or ():
            seen.setdefault(broker.node_id, broker)
    return tuple(seen[node] for node in sorted(seen))
