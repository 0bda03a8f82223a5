"""The ``sasl:`` sub-section of a SASL_PLAINTEXT / SASL_SSL listener.

Independent of the transport: a SASL_SSL listener has both an ``ssl:`` section (TLS) and this
one; SASL only ever sees decrypted Kafka frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kafkaguard.config_tree import ConfigSection
from kafkaguard.policy.config import _kafka_options, _zookeeper_options
from kafkaguard.policy.principal_mapping import KerberosShortNamer
from kafkaguard.proxy.sasl import oauthbearer, plain, scram
from kafkaguard.topic_table import DEFAULT_DELETE_RETENTION_MS, TopicSettings

MECHANISMS: Final = (plain.MECHANISM, *scram.MECHANISMS, oauthbearer.MECHANISM)
SCRAM_SOURCES: Final = ("file", "zookeeper", "kafka")
DEFAULT_MAX_RECEIVE_SIZE: Final = 524288
"""Kafka's ``sasl.server.max.receive.size``: the largest request accepted before
authentication completes."""


@dataclass(frozen=True, slots=True)
class OAuthBearerConfig:
    """Kafka's ``sasl.oauthbearer.*`` broker settings (``BrokerJwtValidator``): keys from
    ``jwks_file`` or ``jwks_endpoint_url`` (``sasl.oauthbearer.jwks.endpoint.url``, a file or
    an HTTPS URL there) and/or PEM ``public_key_files``."""

    jwks_file: Path | None = None
    jwks_endpoint_url: str | None = None
    jwks_endpoint_ca_file: Path | None = None
    """CA certificates (PEM) the endpoint's certificate is checked against; the system's when
    unset (Kafka: the JAAS ``ssl.truststore.*`` options)."""
    jwks_endpoint_refresh_ms: int = 3_600_000
    jwks_endpoint_retry_backoff_ms: int = 100
    jwks_endpoint_retry_backoff_max_ms: int = 10_000
    public_key_files: tuple[Path, ...] = ()
    expected_issuer: str | None = None
    expected_audience: tuple[str, ...] = ()
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    algorithms: tuple[str, ...] = oauthbearer.ALGORITHMS


@dataclass(frozen=True, slots=True)
class SaslZooKeeperConfig:
    """Where ``scram_credentials: zookeeper`` reads ``/config/users`` (the keys and meaning of
    ``acl_store`` with ``type: zookeeper``)."""

    connect: str
    chroot: str = ""
    digest_auth_file: Path | None = None
    session_timeout_s: float = 18.0


@dataclass(frozen=True, slots=True)
class SaslKafkaConfig:
    """Where ``scram_credentials: kafka`` keeps the users: a compacted topic on the protected
    cluster (docs/acl-store.md#scram-users; the keys and meaning of ``acl_store`` with
    ``type: kafka``)."""

    topic: str = "_kafkaguard-users"
    replication_factor: int = -1
    min_insync_replicas: int = -1
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    write_timeout_ms: int = 10_000
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    max_lag_s: float = 60.0
    reread_interval_s: float = 0.0

    def settings(self) -> TopicSettings:
        return TopicSettings(
            self.topic,
            self.replication_factor,
            self.min_insync_replicas,
            dict(self.topic_configs),
            self.write_timeout_ms,
            delete_retention_ms=self.delete_retention_ms,
            max_lag_s=self.max_lag_s,
            reread_interval_s=self.reread_interval_s,
        )


@dataclass(frozen=True, slots=True)
class SaslListenerConfig:
    enabled_mechanisms: tuple[str, ...]
    credentials_file: Path | None = None
    oauthbearer: OAuthBearerConfig | None = None
    connections_max_reauth_ms: int = 0
    """KIP-368 ``connections.max.reauth.ms``: 0 disables re-authentication enforcement."""
    kerberos_principal_to_local_rules: str | None = None
    """``sasl.kerberos.principal.to.local.rules``, applied to every authorization id when set
    (Kafka applies them to GSSAPI only; the proxy has no GSSAPI)."""
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE
    failed_authentication_delay_ms: int = 100
    """Kafka's ``connection.failed.authentication.delay.ms``; doubles with each consecutive
    failure from the same address, up to ``max_failed_authentication_delay_ms``."""
    max_failed_authentication_delay_ms: int = 5000
    scram_credentials: str = "file"
    """Where SCRAM credentials come from: ``file`` (``credentials_file``) or ``zookeeper``
    (Kafka's ``/config/users/<name>``, live; PLAIN still comes from ``credentials_file``)."""
    zookeeper: SaslZooKeeperConfig | None = None
    kafka: SaslKafkaConfig | None = None


def _path(section: ConfigSection, key: str, value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute() and not section.file.startswith("<"):
        path = Path(section.file).resolve().parent / path
    return path


def _kafka_topic(section: ConfigSection) -> SaslKafkaConfig:
    """``sasl.kafka`` (optional): the keys of ``acl_store`` with ``type: kafka`` but ``type``
    (``topic``, ``replication_factor``, ``min_insync_replicas``, ``topic_configs``,
    ``write_timeout_ms``, ``delete_retention_ms``, ``max_lag_s``, ``reread_interval_s``)."""
    options = _kafka_options(section, "kafka")
    section.reject_unknown()
    return SaslKafkaConfig(
        topic=options["topic"] if "topic" in section else "_kafkaguard-users",
        replication_factor=options["replication_factor"],
        min_insync_replicas=options["min_insync_replicas"],
        topic_configs=options["topic_configs"],
        write_timeout_ms=options["write_timeout_ms"],
        delete_retention_ms=options["delete_retention_ms"],
        max_lag_s=options["max_lag_s"],
        reread_interval_s=options["reread_interval_s"],
    )


def parse_sasl_config(  # noqa: C901 - one check per documented sasl: key
    section: ConfigSection,
) -> SaslListenerConfig:
    mechanisms = tuple(
        section.str_list("enabled_mechanisms", ["SCRAM-SHA-512"], choices=MECHANISMS)
    )
    if not mechanisms:
        raise section.error("enabled_mechanisms", "must name at least one mechanism")
    if len(set(mechanisms)) != len(mechanisms):
        raise section.error("enabled_mechanisms", "lists a mechanism twice")
    credentials = section.get_str("credentials_file", None)
    scram_source = section.choice("scram_credentials", SCRAM_SOURCES, "file")
    zookeeper: SaslZooKeeperConfig | None = None
    if scram_source == "zookeeper":
        zk_section = section.section("zookeeper", required=True)
        zookeeper = SaslZooKeeperConfig(**_zookeeper_options(zk_section, "zookeeper"))
        zk_section.reject_unknown()
    elif "zookeeper" in section:
        raise section.error("zookeeper", "is only for scram_credentials: zookeeper")
    kafka: SaslKafkaConfig | None = None
    if scram_source == "kafka":
        kafka = _kafka_topic(section.section("kafka"))
    elif "kafka" in section:
        raise section.error("kafka", "is only for scram_credentials: kafka")
    needs_credentials = set(mechanisms) & {plain.MECHANISM, *scram.MECHANISMS}
    if scram_source in ("zookeeper", "kafka"):
        needs_credentials -= set(scram.MECHANISMS)
    if needs_credentials and credentials is None:
        raise section.error(
            "credentials_file", f"is required for {', '.join(sorted(needs_credentials))}"
        )
    oauth_section = section.section("oauthbearer")
    oauth: OAuthBearerConfig | None = None
    if oauthbearer.MECHANISM in mechanisms:
        oauth = _parse_oauth(oauth_section)
    elif "oauthbearer" in section:
        raise section.error("oauthbearer", "is set but OAUTHBEARER is not enabled")
    rules = section.get_str("kerberos_principal_to_local_rules", None)
    if rules is not None:
        try:
            KerberosShortNamer(rules)
        except ValueError as exc:
            raise section.error("kerberos_principal_to_local_rules", str(exc)) from None
    config = SaslListenerConfig(
        enabled_mechanisms=mechanisms,
        credentials_file=_path(section, "credentials_file", credentials) if credentials else None,
        oauthbearer=oauth,
        connections_max_reauth_ms=section.get_int("connections_max_reauth_ms", 0, minimum=0),
        kerberos_principal_to_local_rules=rules,
        max_receive_size=section.get_int(
            "max_receive_size", DEFAULT_MAX_RECEIVE_SIZE, minimum=1024
        ),
        failed_authentication_delay_ms=section.get_int(
            "failed_authentication_delay_ms", 100, minimum=0
        ),
        max_failed_authentication_delay_ms=section.get_int(
            "max_failed_authentication_delay_ms", 5000, minimum=0
        ),
        scram_credentials=scram_source,
        zookeeper=zookeeper,
        kafka=kafka,
    )
    section.reject_unknown()
    return config


def _parse_oauth(section: ConfigSection) -> OAuthBearerConfig:
    jwks = section.get_str("jwks_file", None)
    url = section.get_str("jwks_endpoint_url", None)
    pems = section.str_list("public_key_files", [])
    if jwks is None and url is None and not pems:
        raise section.error(
            "jwks_file", "OAUTHBEARER needs jwks_file, jwks_endpoint_url or public_key_files"
        )
    if jwks is not None and url is not None:
        raise section.error("jwks_endpoint_url", "is exclusive with jwks_file")
    if url is not None and not url.lower().startswith("https://"):
        raise section.error(
            "jwks_endpoint_url", f"must be an https:// URL (or use jwks_file), got {url!r}"
        )
    ca_file = section.get_str("jwks_endpoint_ca_file", None)
    if ca_file is not None and url is None:
        raise section.error("jwks_endpoint_ca_file", "is only for jwks_endpoint_url")
    backoff = section.get_int("jwks_endpoint_retry_backoff_ms", 100, minimum=0)
    backoff_max = section.get_int("jwks_endpoint_retry_backoff_max_ms", 10_000, minimum=0)
    if backoff_max < backoff:  # Kafka's Retry refuses it too
        raise section.error(
            "jwks_endpoint_retry_backoff_max_ms",
            "must not be less than jwks_endpoint_retry_backoff_ms",
        )
    algorithms = tuple(section.str_list("algorithms", list(oauthbearer.ALGORITHMS)))
    for alg in algorithms:
        if alg not in oauthbearer.ALGORITHMS:
            raise section.error(
                "algorithms", f"{alg!r} is not one of {', '.join(oauthbearer.ALGORITHMS)}"
            )
    audience = section.raw("expected_audience", None)
    if isinstance(audience, str):
        audience = [audience]
    if audience is not None and not (
        isinstance(audience, list) and all(isinstance(a, str) for a in audience)
    ):
        raise section.error(
            "expected_audience", f"must be a string or a list of strings, got {audience!r}"
        )
    config = OAuthBearerConfig(
        jwks_file=_path(section, "jwks_file", jwks) if jwks else None,
        jwks_endpoint_url=url,
        jwks_endpoint_ca_file=(
            _path(section, "jwks_endpoint_ca_file", ca_file) if ca_file else None
        ),
        jwks_endpoint_refresh_ms=section.get_int("jwks_endpoint_refresh_ms", 3_600_000, minimum=1),
        jwks_endpoint_retry_backoff_ms=backoff,
        jwks_endpoint_retry_backoff_max_ms=backoff_max,
        public_key_files=tuple(_path(section, "public_key_files", p) for p in pems),
        expected_issuer=section.get_str("expected_issuer", None),
        expected_audience=tuple(audience or ()),
        principal_claim=section.get_str("principal_claim", "sub"),
        scope_claim=section.get_str("scope_claim", "scope"),
        clock_skew_s=section.get_int("clock_skew_s", 30, minimum=0),
        algorithms=algorithms,
    )
    section.reject_unknown()
    return config
