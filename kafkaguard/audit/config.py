"""The ``audit:`` section and the ``enforcement`` modes (issue 7).

This module owns the audit trail's settings and the rules of ``log_only``: which requests a
``log_only`` listener still enforces, and what its handlers are told. It does no I/O. Keys
and defaults are the audit contract's (``config.example.yaml`` documents them); a bad value
names its file and line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kafkaguard.config_tree import ConfigSection
from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import ResourceType

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED

ENFORCE: Final = "enforce"
LOG_ONLY: Final = "log_only"
ENFORCEMENT_MODES: Final = (ENFORCE, LOG_ONLY)

INDIVIDUAL: Final = "individual"
AGGREGATE: Final = "aggregate"
OFF: Final = "off"
VOLUME_MODES: Final = (INDIVIDUAL, AGGREGATE, OFF)

ENFORCED_IN_LOG_ONLY: Final = frozenset({29, 30, 31, 50, 51})
"""DescribeAcls, CreateAcls, DeleteAcls, DescribeUserScramCredentials and
AlterUserScramCredentials stay enforced on a ``log_only`` listener.

The ACL APIs are answered from (and change) the proxy's own ACLs; SCRAM credentials written by
the broker (ZooKeeper ``/config/users``) are ones the proxy's SASL listeners may accept. A dry
run of the broker's security must not let anyone read or rewrite the rules being dry-run, nor
mint a login to an enforcing listener. Their decisions are audited with mode ``enforce`` (a
denial there is not a would-deny)."""


def dry_run_results(
    actions: Sequence[Action], results: Sequence[AuthorizationResult]
) -> list[AuthorizationResult]:
    """What a ``log_only`` listener tells the handler: ALLOWED for every check, except a
    denied CLUSTER check that Kafka does not log (``logIfDenied=false``).

    Kafka marks a check unlogged when its denial is not the decision: on CLUSTER that is
    always a shortcut with a finer fallback (CREATE CLUSTER, else CREATE per topic;
    DESCRIBE CLUSTER, else DESCRIBE per group; IDEMPOTENT_WRITE CLUSTER, else WRITE on some
    topic, ...). Passing the real denial on makes the handler take the same path as in
    enforce mode, so the fallback's checks — the ones enforcement would deny — are made and
    audited; they are then answered ALLOWED, so the request is still handled as allowed.
    """
    return [
        DENIED
        if result is DENIED
        and not action.log_if_denied
        and action.resource_pattern.resource_type is ResourceType.CLUSTER
        else ALLOWED
        for action, result in zip(actions, results, strict=True)
    ]


def effective_mode(listener_mode: str, api_key: int) -> str:
    """The mode a request is handled in: the listener's, except for ACL administration."""
    if listener_mode == LOG_ONLY and api_key in ENFORCED_IN_LOG_ONLY:
        return ENFORCE
    return listener_mode


FILE: Final = "file"
KAFKA: Final = "kafka"
BOTH: Final = "both"
SINKS: Final = (FILE, KAFKA, BOTH)
"""``audit.sink``: the hour-partitioned files, the audit topic, or both."""

DEFAULT_AUDIT_TOPIC: Final = "_kafkaguard-audit"
COMPRESSION_TYPES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
"""The producer's ``compression.type`` values (Kafka's ``CompressionType``)."""
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
"""Kafka's legal topic names (``org.apache.kafka.common.internals.Topic.validate``)."""


@dataclass(frozen=True, slots=True)
class AuditKafkaConfig:
    """``audit.kafka:``, the audit topic and its internal producer (kafkaguard/audit/kafka_sink.py).

    The producer connects to the cluster the proxy protects with the proxy's own ``upstream``
    settings (bootstrap servers, TLS, SASL): like the broker's own writes, it is not subject
    to the ACLs the proxy enforces on clients. Producer keys keep Kafka's ``ProducerConfig``
    names and defaults, except ``compression`` (lz4: JSON lines compress ~10x for little CPU)
    and ``linger_ms`` (50, not 5: an audit record needs to arrive within seconds, not
    milliseconds, and batches 10x larger made the sink's proxy CPU cost vanish in
    bench/audit_bench.py's worst case, bench/RESULTS.md "Issue 16: audit topic sink").
    """

    topic: str = DEFAULT_AUDIT_TOPIC
    partitions: int = 6
    """Used only when the proxy creates the topic (it is missing at start)."""
    replication_factor: int = -1
    """Used only when the proxy creates the topic; -1: the broker's
    ``default.replication.factor`` (KIP-464)."""
    queue_max_events: int = 100_000
    """Records waiting in the producer (``queue.buffering.max.messages``); beyond it records
    are dropped and counted, never waited for."""
    linger_ms: int = 50
    compression: str = "lz4"
    acks: str = "all"
    """``all`` or ``1``: with ``1`` a record acknowledged by a leader that then fails is lost
    without being counted."""
    enable_idempotence: bool = True
    """KIP-98: a retry after a broker restart never writes a record twice (needs acks all)."""
    delivery_timeout_ms: int = 120_000
    """A record not acknowledged within this (a broker down longer) is counted as lost."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """Settings of the JSON-lines audit trail (schema: :mod:`kafkaguard.audit.events`)."""

    enabled: bool = False
    dir: Path = field(default_factory=lambda: Path("audit"))
    """Root of the ``date=YYYY-MM-DD/hour=HH`` partition directories."""
    max_file_bytes: int = 64 * 1024 * 1024
    max_file_seconds: float = 3600.0
    queue_size: int = 65536
    """Events waiting for the writer thread; beyond it events are dropped and counted."""
    allowed: str = AGGREGATE
    denied: str = INDIVIDUAL
    aggregate_window_seconds: float = 60.0
    include_unlogged: bool = False
    """Also audit decisions Kafka logs only at TRACE (KIP-430 probes, silent filtering)."""
    sink: str = FILE
    """Where records go: ``file`` (under :attr:`dir`), ``kafka`` (the audit topic), ``both``."""
    kafka: AuditKafkaConfig = field(default_factory=AuditKafkaConfig)

    @property
    def writes_files(self) -> bool:
        """Whether records are written to files under :attr:`dir`."""
        return self.sink != KAFKA

    @property
    def writes_topic(self) -> bool:
        """Whether records are produced to the audit topic."""
        return self.sink != FILE


def _volume(section: ConfigSection, key: str, default: str) -> str:
    if section.raw(key) is False:  # YAML 1.1 reads a bare ``off`` as false
        return OFF
    value: str = section.choice(key, VOLUME_MODES, default)
    return value


def parse_audit_config(section: ConfigSection, base_dir: Path | None = None) -> AuditConfig:
    """Parse ``audit:``; a relative ``dir`` is relative to the config file's directory."""
    enabled = section.get_bool("enabled", False)
    raw_dir = section.get_str("dir", "audit")
    if not raw_dir:
        raise section.error("dir", "must name a directory")
    max_bytes = section.get_int("max_file_bytes", 64 * 1024 * 1024, minimum=1)
    max_seconds = section.get_float("max_file_seconds", 3600.0)
    if max_seconds <= 0:
        raise section.error("max_file_seconds", "must be > 0")
    queue_size = section.get_int("queue_size", 65536, minimum=1)
    allowed = _volume(section, "allowed", AGGREGATE)
    denied = _volume(section, "denied", INDIVIDUAL)
    window = section.get_float("aggregate_window_seconds", 60.0)
    if window <= 0:
        raise section.error("aggregate_window_seconds", "must be > 0")
    include_unlogged = section.get_bool("include_unlogged", False)
    sink = section.choice("sink", SINKS, FILE)
    kafka = parse_audit_kafka_config(section.section("kafka"))
    section.reject_unknown()
    directory = Path(raw_dir)
    if not directory.is_absolute():
        directory = (base_dir or Path.cwd()) / directory
    return AuditConfig(
        enabled=enabled,
        dir=directory,
        max_file_bytes=max_bytes,
        max_file_seconds=max_seconds,
        queue_size=queue_size,
        allowed=allowed,
        denied=denied,
        aggregate_window_seconds=window,
        include_unlogged=include_unlogged,
        sink=sink,
        kafka=kafka,
    )


def _acks(section: ConfigSection) -> str:
    value = section.raw("acks", "all")
    text = str(value).strip().lower()
    if isinstance(value, bool) or text not in ("all", "-1", "1"):
        raise section.error("acks", f"must be all or 1, got {value!r}")
    return "all" if text in ("all", "-1") else "1"


def parse_audit_kafka_config(section: ConfigSection) -> AuditKafkaConfig:
    """Parse ``audit.kafka:`` (read even with ``sink: file``, so a typo fails at start)."""
    default = AuditKafkaConfig()
    topic = section.get_str("topic", default.topic)
    if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise section.error("topic", f"is not a legal Kafka topic name: {topic!r}")
    partitions = section.get_int("partitions", default.partitions, minimum=1)
    replication = section.get_int("replication_factor", default.replication_factor)
    if replication == 0 or replication < -1:
        raise section.error("replication_factor", "must be -1 (the broker's default) or >= 1")
    queue_max = section.get_int("queue_max_events", default.queue_max_events, minimum=1)
    if queue_max > 2_147_483_647:  # librdkafka's queue.buffering.max.messages bound
        raise section.error("queue_max_events", "must be at most 2147483647")
    linger_ms = section.get_int("linger_ms", default.linger_ms, minimum=0)
    compression = section.choice("compression", COMPRESSION_TYPES, default.compression)
    acks = _acks(section)
    idempotence = section.get_bool("enable_idempotence", default.enable_idempotence)
    if idempotence and acks != "all":
        raise section.error("acks", "must be all with enable_idempotence: true (KIP-98)")
    timeout = section.get_int("delivery_timeout_ms", default.delivery_timeout_ms, minimum=1)
    section.reject_unknown()
    return AuditKafkaConfig(
        topic=topic,
        partitions=partitions,
        replication_factor=replication,
        queue_max_events=queue_max,
        linger_ms=linger_ms,
        compression=compression,
        acks=acks,
        enable_idempotence=idempotence,
        delivery_timeout_ms=timeout,
    )
