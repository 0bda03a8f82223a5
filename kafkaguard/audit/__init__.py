"""The audit trail: decisions in, counters and JSON-lines files out.

:class:`AuditTrail` is the ``StandardAuthorizer`` decision listener the proxy installs when
``audit.enabled`` is true or a listener runs in ``log_only``. On the event loop it only
filters (Kafka's ``logIfAllowed``/``logIfDenied``, unless ``include_unlogged``; then
``audit.exclude`` and ``audit.include``), counts per listener (what it leaves out too) and
hands the event to the :class:`~kafkaguard.audit.writer.AuditWriter` thread,
which writes files, produces to the audit topic (``audit.sink``:
:mod:`kafkaguard.audit.kafka_sink`), or both.
Counters (decisions, denied, would-deny, dropped) are logged on ``kafkaguard.audit`` every
``report_interval_s`` when they changed, and once more at shutdown.

A configuration reload may switch listeners between ``enforce`` and ``log_only`` and add
listeners (:meth:`AuditTrail.set_modes`); the ``audit:`` settings themselves (the writer, its
files) stay as started until a restart (kafkaguard/proxy/app/reload.py).

The record format is :mod:`kafkaguard.audit.events`; the settings :mod:`kafkaguard.audit.config`;
the Spark jobs that read the files live in ``kafkaguard.audit.spark``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafkaguard.audit.config import (
    ENFORCE,
    ENFORCED_IN_LOG_ONLY,
    LOG_ONLY,
    OFF,
    AuditConfig,
    effective_mode,
)
from kafkaguard.audit.writer import AuditWriter
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import AuthorizationResult

log = logging.getLogger("kafkaguard.audit")

REPORT_INTERVAL_S: Final = 60.0
DROP_LOG_INTERVAL_S: Final = 10.0
"""A full queue is reported at most this often (and in every periodic report)."""
CLOSE_TIMEOUT_S: Final = 10.0

_ALLOWED = AuthorizationResult.ALLOWED


@dataclass(slots=True)
class ListenerCounters:
    """Totals since start for one listener (audited decisions only, as the files hold)."""

    mode: str
    decisions: int = 0
    denied: int = 0
    would_deny: int = 0
    """Denied decisions of a ``log_only`` listener: forwarded anyway."""
    dropped: int = 0
    """Events not handed to the writer because its queue was full."""
    unlogged: int = 0
    """Decisions Kafka does not log (``logIfAllowed``/``logIfDenied`` false: KIP-430
    authorized-operations, all-topics Metadata filtering, cluster-level shortcuts with a
    finer fallback), left out because ``include_unlogged`` is false."""
    excluded: int = 0
    """Decisions left out by ``audit.exclude`` or ``audit.include``."""

    def snapshot(self) -> tuple[int, int, int, int, int, int]:
        return (
            self.decisions,
            self.denied,
            self.would_deny,
            self.dropped,
            self.unlogged,
            self.excluded,
        )


class AuditTrail:
    """Decision listener + per-listener counters + the writer's lifecycle."""

    def __init__(
        self,
        config: AuditConfig,
        modes: Mapping[str, str],
        *,
        report_interval_s: float = REPORT_INTERVAL_S,
        writer: AuditWriter | None = None,
        connection: Mapping[str, Any] | None = None,
    ) -> None:
        """``modes``: each listener's enforcement mode (``enforce`` | ``log_only``);
        ``writer``: one to use instead of building it from ``config`` (a test's slow disk);
        ``connection``: librdkafka settings reaching the protected cluster (the proxy's
        upstream), needed when ``config.sink`` includes the audit topic."""
        self.config = config
        self.modes = dict(modes)
        self.counters: dict[str, ListenerCounters] = {
            name: ListenerCounters(mode) for name, mode in self.modes.items()
        }
        if writer is None and config.enabled:
            topic = None
            if config.writes_topic:
                if connection is None:
                    raise ValueError(f"audit.sink {config.sink} needs the upstream connection")
                # confluent-kafka (kafkaguard[kafka]), checked present when the config loaded
                from kafkaguard.audit.kafka_sink import AuditTopicSink

                topic = AuditTopicSink(config.kafka, connection, record_format=config.topic_format)
            writer = AuditWriter(config, topic=topic)
        self.writer = writer
        self._log_unlogged = config.include_unlogged
        self._filtered = bool(config.exclude or config.include)
        self._write_allowed = self.writer is not None and config.allowed != OFF
        self._write_denied = self.writer is not None and config.denied != OFF
        self._report_interval = report_interval_s
        self._reported: dict[str, tuple[int, int, int, int, int, int]] = {}
        self._last_drop_log = -math.inf
        self._task: asyncio.Task[None] | None = None
        self._started = False

    @property
    def active(self) -> bool:
        """Whether decisions need to be seen at all (else no listener is installed)."""
        return self.writer is not None or LOG_ONLY in self.modes.values()

    def set_modes(self, modes: Mapping[str, str]) -> None:
        """A reload: each listener's enforcement mode from now on. Decisions already counted
        keep the mode they were made in; a listener no longer configured keeps its totals.
        Becoming :attr:`active` (a first ``log_only`` listener) starts the periodic report."""
        counters = dict(self.counters)  # a new dict: /metrics may be iterating the old one
        for name, mode in modes.items():
            if name not in counters:
                counters[name] = ListenerCounters(mode)
            else:
                counters[name].mode = mode  # read by on_decision for each decision from now on
        self.counters = counters
        self.modes = dict(modes)
        if self._started:
            self._start_reports()

    # -- the hot path (event loop) ---------------------------------------------------------
    def on_decision(self, event: DecisionEvent) -> None:
        """The ``decision_listener``: filter, count, hand over. Never blocks, never raises
        for a full queue."""
        context = event.context
        counters = self.counters.get(context.listener_name)
        if counters is None:  # a context from outside the configured listeners
            counters = self.counters[context.listener_name] = ListenerCounters(ENFORCE)
        allowed = event.result is _ALLOWED
        action = event.action
        if not ((action.log_if_allowed if allowed else action.log_if_denied) or self._log_unlogged):
            counters.unlogged += 1
            return
        if self._filtered and not self.config.written(event):
            counters.excluded += 1
            return
        counters.decisions += 1
        if allowed:
            if not self._write_allowed:
                return
        else:
            counters.denied += 1
            if (
                counters.mode == LOG_ONLY
                and action.log_if_denied  # a probe or silent filter refuses nothing
                and context.api_key not in ENFORCED_IN_LOG_ONLY
            ):
                counters.would_deny += 1
            if not self._write_denied:
                return
        mode = counters.mode
        if mode == LOG_ONLY:
            mode = effective_mode(mode, context.api_key)
        writer = self.writer
        if writer is not None and not writer.offer(time.time(), event, mode):
            counters.dropped += 1
            self._note_drop()

    def _note_drop(self) -> None:
        now = time.monotonic()
        if now - self._last_drop_log >= DROP_LOG_INTERVAL_S:
            self._last_drop_log = now
            log.warning(
                "audit trail: the writer queue is full (%d events); dropping events "
                "(drops so far: %s)",
                self.config.queue_size,
                ", ".join(f"{name} {c.dropped}" for name, c in self.counters.items()),
            )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the writer thread and the periodic counter report (inside the event loop)."""
        writer = self.writer
        if writer is not None:
            if writer.sink is not None:
                # Fail the start, not every later write, when the directory is unusable.
                self.config.dir.mkdir(parents=True, exist_ok=True)
                if not os.access(self.config.dir, os.W_OK | os.X_OK):
                    raise PermissionError(f"audit.dir {self.config.dir} is not writable")
            writer.start()
            if writer.sink is not None:
                log.info("audit trail: writing to %s", self.config.dir)
            if writer.topic is not None:
                log.info(
                    "audit trail: producing to topic %s on %s",
                    writer.topic.topic,
                    writer.topic.bootstrap,
                )
        self._started = True
        self._start_reports()

    def _start_reports(self) -> None:
        if self._task is None and self.active:
            self._task = asyncio.get_running_loop().create_task(
                self._report_periodically(), name="audit-report"
            )

    async def _report_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._report_interval)
            self.report()

    def report(self, *, final: bool = False) -> None:
        """Log each listener's counters (only those that changed, unless ``final``)."""
        for name, counters in self.counters.items():
            current = counters.snapshot()
            if current == self._reported.get(name, (0,) * 6) and not (final and any(current)):
                continue
            self._reported[name] = current
            log.info(
                "audit: listener %s (%s): %d decisions, %d denied, %d would-deny, %d dropped, "
                "%d unlogged, %d excluded%s",
                name,
                counters.mode,
                *current,
                " (totals at shutdown)" if final else "",
            )
        if self.writer is not None and self.writer.lost:
            log.warning(
                "audit: %d events could not be written (see errors above)", self.writer.lost
            )
        topic = self.writer.topic if self.writer is not None else None
        if topic is not None and (topic.dropped or topic.lost):
            log.warning(
                "audit topic %s: %d records acknowledged; %d decisions dropped (producer queue "
                "full), %d lost (not acknowledged)",
                topic.topic,
                topic.written,
                topic.dropped,
                topic.lost,
            )

    async def close(self) -> None:
        """Stop reporting, write everything queued (bounded time), log the totals."""
        self._started = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.writer is not None:
            writer = self.writer
            done = await asyncio.to_thread(writer.close, CLOSE_TIMEOUT_S)
            if not done:
                log.error(
                    "audit trail: the writer did not finish within %.0f s; %d events not written",
                    CLOSE_TIMEOUT_S,
                    writer.pending,
                )
        if self.active:
            self.report(final=True)


__all__ = ["AuditConfig", "AuditTrail", "ListenerCounters"]
