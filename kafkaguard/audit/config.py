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
from typing import Final, TypeVar

from kafkaguard.config_tree import KAFKA_CLIENT_MODULE, KAFKA_EXTRA, ConfigSection
from kafkaguard.policy.audit_log import API_KEY_NAMES, DecisionEvent
from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation, PatternType, ResourceType

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

FORMAT_KAFKAGUARD: Final = "kafkaguard"
FORMAT_CLOUDEVENTS: Final = "cloudevents"
FORMATS: Final = (FORMAT_KAFKAGUARD, FORMAT_CLOUDEVENTS)
"""``audit.format`` / ``audit.kafka.format`` (kafkaguard/audit/events.py owns both layouts)."""

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
    format: str | None = None
    """The topic's record format; None: ``audit.format``."""


@dataclass(frozen=True, slots=True)
class AuditRule:
    """One ``audit.exclude`` or ``audit.include`` entry (Confluent's audit log
    ``excluded_principals`` and routes): a decision matches when it matches every key given;
    an absent key matches everything.

    Resource names match like an ACL's pattern (``AclBinding`` semantics): ``LITERAL`` is the
    exact name, ``*`` every name; ``PREFIXED`` a name starting with it.
    """

    principals: frozenset[str] | None = None
    operations: frozenset[AclOperation] | None = None
    resource_types: frozenset[ResourceType] | None = None
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.LITERAL
    apis: frozenset[int] | None = None
    """API keys (the rule names the APIs, e.g. ``Metadata``)."""
    allowed: bool = True
    """include routes: whether the route writes allowed decisions."""
    denied: bool = True
    """include routes: whether the route writes denied decisions."""

    def matches(self, event: DecisionEvent) -> bool:
        context, action = event.context, event.action
        pattern = action.resource_pattern
        if self.principals is not None and context.principal.text not in self.principals:
            return False
        if self.operations is not None and action.operation not in self.operations:
            return False
        if self.resource_types is not None and pattern.resource_type not in self.resource_types:
            return False
        if self.apis is not None and context.api_key not in self.apis:
            return False
        name = self.resource_name
        if name is None or (self.pattern_type is PatternType.LITERAL and name == "*"):
            return True
        if self.pattern_type is PatternType.PREFIXED:
            return pattern.name.startswith(name)
        return pattern.name == name


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
    format: str = FORMAT_KAFKAGUARD
    """The files' record format (and the topic's, unless ``audit.kafka.format``)."""
    exclude: tuple[AuditRule, ...] = ()
    """Decisions matching one of these are not written (counted as ``excluded``)."""
    include: tuple[AuditRule, ...] = ()
    """Routes: when any is given, only decisions matching one (the first, for its
    ``allowed``/``denied``) are written; the others are counted as ``excluded``."""
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

    @property
    def topic_format(self) -> str:
        """The audit topic's record format."""
        return self.kafka.format or self.format

    def written(self, event: DecisionEvent) -> bool:
        """Whether :attr:`exclude` and :attr:`include` let ``event`` be written (Confluent's
        order: an excluded principal is never logged, whatever the routes say)."""
        for rule in self.exclude:
            if rule.matches(event):
                return False
        if not self.include:
            return True
        allowed = event.result is ALLOWED
        for rule in self.include:
            if rule.matches(event):
                return rule.allowed if allowed else rule.denied
        return False


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
        raise section.error("max_file_seconds", f"must be > 0, got {max_seconds}")
    queue_size = section.get_int("queue_size", 65536, minimum=1)
    allowed = _volume(section, "allowed", AGGREGATE)
    denied = _volume(section, "denied", INDIVIDUAL)
    window = section.get_float("aggregate_window_seconds", 60.0)
    if window <= 0:
        raise section.error("aggregate_window_seconds", f"must be > 0, got {window}")
    include_unlogged = section.get_bool("include_unlogged", False)
    sink = section.choice("sink", SINKS, FILE)
    if sink != FILE:  # the audit topic's producer (kafkaguard/audit/kafka_sink.py)
        section.require_extra("sink", KAFKA_CLIENT_MODULE, KAFKA_EXTRA)
    record_format = section.choice("format", FORMATS, FORMAT_KAFKAGUARD)
    exclude = tuple(parse_audit_rule(rule, route=False) for rule in section.sections("exclude"))
    include = tuple(parse_audit_rule(rule, route=True) for rule in section.sections("include"))
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
        format=record_format,
        exclude=exclude,
        include=include,
        sink=sink,
        kafka=kafka,
    )


_API_KEYS: Final = {name: key for key, name in enumerate(API_KEY_NAMES)}


_E = TypeVar("_E", AclOperation, ResourceType)


def _enum_set(section: ConfigSection, key: str, kind: type[_E]) -> frozenset[_E] | None:
    names = section.str_list(key)
    if names is None:
        return None
    try:
        return frozenset(kind.parse(name) for name in names)
    except ValueError as exc:
        raise section.error(key, str(exc)) from None


def parse_audit_rule(section: ConfigSection, *, route: bool) -> AuditRule:
    """One ``audit.exclude`` entry, or with ``route`` one ``audit.include`` entry (which may
    also say whether it writes ``allowed`` and ``denied`` decisions)."""
    principals = section.str_list("principals")
    apis = section.str_list("apis")
    unknown = [name for name in apis or () if name not in _API_KEYS]
    if unknown:
        raise section.error("apis", f"unknown API {unknown[0]!r} (e.g. Metadata, Produce)")
    pattern = section.choice("pattern_type", ("LITERAL", "PREFIXED"), "LITERAL")
    resource_name = section.get_str("resource_name")
    allowed = section.get_bool("allowed", True) if route else True
    denied = section.get_bool("denied", True) if route else True
    rule = AuditRule(
        principals=None if principals is None else frozenset(principals),
        operations=_enum_set(section, "operations", AclOperation),
        resource_types=_enum_set(section, "resource_types", ResourceType),
        resource_name=resource_name,
        pattern_type=PatternType[pattern],
        apis=None if apis is None else frozenset(_API_KEYS[name] for name in apis),
        allowed=allowed,
        denied=denied,
    )
    section.reject_unknown()
    if rule == AuditRule(allowed=allowed, denied=denied):
        raise section.error("", "names nothing to match (principals, operations, ...)")
    return rule


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
        raise section.error(
            "replication_factor", f"must be -1 (the broker's default) or >= 1, got {replication}"
        )
    queue_max = section.get_int("queue_max_events", default.queue_max_events, minimum=1)
    if queue_max > 2_147_483_647:  # librdkafka's queue.buffering.max.messages bound
        raise section.error("queue_max_events", f"must be at most 2147483647, got {queue_max}")
    linger_ms = section.get_int("linger_ms", default.linger_ms, minimum=0)
    compression = section.choice("compression", COMPRESSION_TYPES, default.compression)
    acks = _acks(section)
    idempotence = section.get_bool("enable_idempotence", default.enable_idempotence)
    if idempotence and acks != "all":
        raise section.error("acks", "must be all with enable_idempotence: true (KIP-98)")
    timeout = section.get_int("delivery_timeout_ms", default.delivery_timeout_ms, minimum=1)
    record_format = section.choice("format", FORMATS, None)
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
        format=record_format,
    )
