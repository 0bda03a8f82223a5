"""The ``audit:`` section and the ``enforcement`` modes (issue 7).

This module owns the audit trail's settings and the rules of ``log_only``: which requests a
``log_only`` listener still enforces, and what its handlers are told. It does no I/O. Keys
and defaults are the audit contract's (``config.example.yaml`` documents them); a bad value
names its file and line.
"""

from __future__ import annotations

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
    )
