"""The off-loop audit writer: a bounded hand-off, one daemon thread, rotated JSON-lines files.

Theory of operation
-------------------
The event loop calls :meth:`AuditWriter.offer` for every audited decision. That is one
``len()`` and one ``deque.append`` of ``(time, DecisionEvent, mode)`` — both atomic in CPython,
so no lock and no wake-up of the writer thread: a slow disk can never stall traffic. When the
deque holds ``queue_size`` items the event is refused (the caller counts the drop).

The writer thread wakes every ``poll_interval_s`` (or at once on :meth:`close`), takes
everything queued, and for each event either formats its ``decision`` line at once or counts
it in its aggregation window (windows are aligned to multiples of
``aggregate_window_seconds`` since the epoch; the key is every field but time, correlation id
and count). Then it writes the aggregates of windows that have ended, lets
:class:`AuditFiles` rotate, and flushes the files once per wake-up.

Files: a record goes to the ``date=YYYY-MM-DD/hour=HH`` directory of its own ``time`` (so
Spark's partition pruning is exact), in a file named ``audit-<UTC open time>-<pid>-<seq>``
with the suffix ``.jsonl.inprogress`` until it is closed and renamed to ``.jsonl``. A file is
closed at ``max_file_bytes``, after ``max_file_seconds``, and a few seconds after its hour has
ended (the grace lets events queued just before the hour boundary, and the aggregates of the
window ending on it, still land in it; a later straggler gets a small file of its own).

Each record is encoded in its sink's ``audit.format`` (kafkaguard's JSON or CloudEvents,
:meth:`~kafkaguard.audit.events.AuditEvent.encode`), once per format.

The audit topic (``audit.sink: kafka | both``): each formatted record, the same bytes as
its file line without the newline when both use one format, is also handed to
:class:`~kafkaguard.audit.kafka_sink.AuditTopicSink` (or only to it, with no files). That
hand-off never waits either: the producer's own bounded queue refuses a record when full
(counted), and its delivery reports are served at each wake-up. The thread creates the
topic, if missing, before its first record.

Failures never reach the proxy: a write error is logged (at most every ``_LOG_EVERY_S``), the
events it concerned are counted in :attr:`AuditWriter.lost`, the failed file is set aside as
``.jsonl.failed`` (its last line may be cut, so readers must not see it) and the next record
opens a fresh file. :meth:`close` drains the queue within a bounded time.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final, Protocol

from kafkaguard.audit.config import AGGREGATE, INDIVIDUAL, AuditConfig
from kafkaguard.audit.events import (
    AuditEvent,
    DecisionKey,
    aggregate_record,
    decision_key,
    decision_record,
    partition,
)
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import AuthorizationResult

if TYPE_CHECKING:  # confluent-kafka is the optional extra kafkaguard[kafka]
    from kafkaguard.audit.kafka_sink import AuditTopicSink

log = logging.getLogger("kafkaguard.audit")

HOUR_GRACE_S: Final = 5.0
"""How long after its hour ends a file stays open for late records."""
_LOG_EVERY_S: Final = 60.0
_BATCH: Final = 10_000
"""Events handled between two rotation/aggregation checks while catching up."""
_FILE_BUFFER: Final = 256 * 1024
CLOSE_FLUSH_MAX_S: Final = 30.0
"""The longest the audit topic's shutdown flush waits (a close without a bound)."""
_YIELD_MASK: Final = 63
"""The writer releases the GIL after every 64 events: CPython would otherwise let it keep
the GIL for a whole switch interval (5 ms) while the event loop waits, a latency spike for
every client; 64 events are well under a millisecond of work."""

QueuedDecision = tuple[float, DecisionEvent, str]
"""What the event loop hands over: (epoch seconds, the decision, the listener's mode)."""


class RecordSink(Protocol):
    """Where formatted lines go (:class:`AuditFiles`; tests substitute a slow disk)."""

    def write(self, at: float, line: bytes) -> None: ...

    def tick(self, now: float) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _OpenFile:
    path: Path
    """The ``.jsonl.inprogress`` path."""
    handle: BinaryIO
    opened: float
    hour_end: float
    size: int = 0


class AuditFiles:
    """Hour-partitioned, rotated ``.jsonl`` files under ``directory`` (one writer thread)."""

    def __init__(
        self,
        directory: Path,
        max_file_bytes: int,
        max_file_seconds: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        self.max_file_seconds = max_file_seconds
        self._clock = clock
        self._pid = os.getpid()
        self._seq = 0
        self._open: dict[tuple[str, int], _OpenFile] = {}
        self.completed: list[Path] = []
        """Every file closed so far, in order (``.jsonl``)."""

    def write(self, at: float, line: bytes) -> None:
        key = partition(at)
        current = self._open.get(key)
        if current is None:
            current = self._open[key] = self._create(key, at)
        try:
            current.handle.write(line)
        except OSError:
            self._abandon(key)
            raise
        current.size += len(line)
        if current.size >= self.max_file_bytes:
            self._close(key)

    def tick(self, now: float) -> None:
        """Close files that are too old or whose hour (plus the grace) has passed."""
        for key, current in list(self._open.items()):
            if now - current.opened >= self.max_file_seconds or now >= current.hour_end + (
                HOUR_GRACE_S
            ):
                self._close(key)

    def flush(self) -> None:
        failed: OSError | None = None
        for key, current in list(self._open.items()):
            try:
                current.handle.flush()
            except OSError as exc:
                self._abandon(key)
                failed = exc
        if failed is not None:
            raise failed

    def close(self) -> None:
        errors: list[OSError] = []
        for key in list(self._open):
            try:
                self._close(key)
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _create(self, key: tuple[str, int], at: float) -> _OpenFile:
        date, hour = key
        folder = self.directory / f"date={date}" / f"hour={hour:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        now = self._clock()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
        while True:  # never append to a file of another process (a shared dir, a reused pid)
            self._seq += 1
            path = folder / f"audit-{stamp}-{self._pid}-{self._seq}.jsonl.inprogress"
            if path.with_name(path.name.removesuffix(".inprogress")).exists():
                continue
            try:
                handle = open(path, "xb", buffering=_FILE_BUFFER)  # noqa: SIM115 - see _close
            except FileExistsError:
                continue
            hour_end = (math.floor(at / 3600) + 1) * 3600.0
            return _OpenFile(path, handle, now, hour_end)

    def _close(self, key: tuple[str, int]) -> None:
        """Close and publish (rename to ``.jsonl``, the only files readers take)."""
        current = self._open.pop(key)
        try:
            current.handle.close()
        except OSError:
            self._set_aside(current)
            raise
        final = current.path.with_name(current.path.name.removesuffix(".inprogress"))
        os.replace(current.path, final)
        self.completed.append(final)

    def _abandon(self, key: tuple[str, int]) -> None:
        """A file that failed is never written to again, nor published: its last line may be
        cut. It is kept as ``.jsonl.failed`` for forensics; the next record opens a new file."""
        current = self._open.pop(key)
        with contextlib.suppress(OSError):
            current.handle.close()
        self._set_aside(current)

    @staticmethod
    def _set_aside(current: _OpenFile) -> None:
        failed = current.path.with_name(current.path.name.replace(".inprogress", ".failed"))
        with contextlib.suppress(OSError):
            os.replace(current.path, failed)


@dataclass(slots=True)
class _Tally:
    key: DecisionKey
    count: int = 1


class AuditWriter:
    """The queue, the writer thread and the aggregation windows (see the module docstring)."""

    def __init__(
        self,
        config: AuditConfig,
        *,
        sink: RecordSink | None = None,
        topic: AuditTopicSink | None = None,
        clock: Callable[[], float] = time.time,
        poll_interval_s: float = 0.2,
    ) -> None:
        """``sink``: the files (default: :class:`AuditFiles` under ``config.dir`` when
        ``config.sink`` writes files, else none); ``topic``: the audit topic, when
        ``config.sink`` is ``kafka`` or ``both`` (kafkaguard/audit/kafka_sink.py)."""
        self.config = config
        self.capacity = config.queue_size
        if sink is None and config.writes_files:
            sink = AuditFiles(
                config.dir, config.max_file_bytes, config.max_file_seconds, clock=clock
            )
        self.sink: RecordSink | None = sink
        self.topic = topic
        self._close_deadline = math.inf
        self._clock = clock
        self._poll = poll_interval_s
        self._window = config.aggregate_window_seconds
        self._file_format = config.format
        self._topic_format = config.topic_format
        # (aggregate?, individual?) for allowed and for denied decisions
        self._allowed = (config.allowed == AGGREGATE, config.allowed == INDIVIDUAL)
        self._denied = (config.denied == AGGREGATE, config.denied == INDIVIDUAL)
        self._queue: deque[QueuedDecision] = deque()
        self._windows: dict[float, dict[tuple[object, ...], _Tally]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error_log = -math.inf
        self.records = 0
        """Lines written to the files (decisions and aggregates)."""
        self.lost = 0
        """Events taken from the queue but not written to the files (write errors, failed
        formatting). The topic counts its own (:class:`AuditTopicSink`)."""

    # -- the event loop's side -------------------------------------------------------------
    def offer(self, at: float, event: DecisionEvent, mode: str) -> bool:
        """Hand one decision over; False (and nothing queued) when the queue is full."""
        queue = self._queue
        if len(queue) >= self.capacity:
            return False
        queue.append((at, event, mode))
        return True

    @property
    def pending(self) -> int:
        return len(self._queue)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            if self.topic is not None:
                self.topic.open()  # a bad producer setting fails the start
            self._thread = threading.Thread(
                target=self._serve, name="kafkaguard-audit", daemon=True
            )
            self._thread.start()

    def close(self, timeout: float = 10.0) -> bool:
        """Write what is queued, the open aggregation windows, and close the files.

        Blocks up to ``timeout`` seconds (call it off the event loop); False if the thread
        did not finish in time (it is a daemon: it never holds the process).
        """
        self._close_deadline = time.monotonic() + timeout
        self._stop.set()
        if self._thread is None:
            self._run()
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the writer thread -----------------------------------------------------------------
    def _serve(self) -> None:
        if self.topic is not None:  # before the first record: create the topic if missing
            self._guarded(self.topic.ensure_topic)
        self._run()

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(self._poll)
            while self._queue:
                self._guarded(self._drain)
                self._guarded(self._housekeeping)
            self._guarded(self._housekeeping)
            if stopping or self._stop.is_set():
                self._guarded(self._finish)
                return

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - the writer must outlive any failure
            self._error(exc)

    def _error(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= _LOG_EVERY_S:
            self._last_error_log = now
            log.error(
                "audit trail: cannot write to %s: %s (%d events lost so far)",
                self.config.dir,
                exc,
                self.lost,
            )

    def _drain(self) -> None:
        queue, windows, window = self._queue, self._windows, self._window
        write = self._write
        for done in range(_BATCH):
            if not queue:
                return
            if done & _YIELD_MASK == _YIELD_MASK:
                time.sleep(0)  # let the event loop take the GIL (see _YIELD_MASK)
            at, event, mode = queue.popleft()
            aggregate, individual = (
                self._allowed if event.result is AuthorizationResult.ALLOWED else self._denied
            )
            if aggregate:
                start = math.floor(at / window) * window
                tallies = windows.get(start)
                if tallies is None:
                    tallies = windows[start] = {}
                # Hashing a DecisionKey hashes plain enums and the ACL dataclasses in Python
                # (~3 µs); this key of singletons' ids, ints and cached str hashes is ~10×
                # cheaper. The tally keeps the ACL alive, so its id is not reused meanwhile.
                context, action = event.context, event.action
                pattern = action.resource_pattern
                fast = (
                    mode, context.listener_name, id(context.security_protocol),
                    context.principal.text, context.groups, context.host, context.client_id,
                    context.api_key,
                    context.api_version, action.operation, pattern.resource_type,
                    pattern.pattern_type, pattern.name, id(event.result), id(event.reason),
                    event.implied, id(event.acl), action.log_if_denied,
                )  # fmt: skip
                tally = tallies.get(fast)
                if tally is None:
                    tallies[fast] = _Tally(decision_key(event, mode))
                else:
                    tally.count += 1
            elif individual:
                try:
                    record = decision_record(event, mode, at)
                except Exception as exc:  # noqa: BLE001 - counted and logged, never raised
                    self._unformatted(1, exc)
                    continue
                write(at, record, event.context.principal.text, 1)

    def _write(self, at: float, record: AuditEvent, principal: str, count: int) -> None:
        """One record to the files and the topic, each in its format (the same bytes when
        the formats are the same); a failure is counted per sink, in the decisions the
        record stands for."""
        try:
            line = record.encode(self._file_format)
            topic_line = (
                line
                if self._topic_format == self._file_format
                else record.encode(self._topic_format)
            )
        except Exception as exc:  # noqa: BLE001 - counted and logged, never raised
            self._unformatted(count, exc)
            return
        files = self.sink
        if files is not None:
            try:
                files.write(at, line + b"\n")
            except Exception as exc:  # noqa: BLE001 - counted and logged, never raised
                self.lost += count
                self._error(exc)
            else:
                self.records += 1
        if self.topic is not None:
            self.topic.send(topic_line, principal, count)

    def _unformatted(self, count: int, exc: BaseException) -> None:
        if self.sink is not None:
            self.lost += count
        if self.topic is not None:
            self.topic.lost_before_sending(count)
        self._error(exc)

    def _housekeeping(self) -> None:
        now = self._clock()
        self._write_windows(now, final=False)
        if self.topic is not None:
            self.topic.poll()
        if self.sink is not None:
            self.sink.tick(now)
            self.sink.flush()

    def _write_windows(self, now: float, *, final: bool) -> None:
        for start in sorted(self._windows):
            end = start + self._window
            if end > now and not final:
                break
            counts: dict[DecisionKey, int] = {}
            for tally in self._windows.pop(start).values():  # equal ACLs, distinct objects
                counts[tally.key] = counts.get(tally.key, 0) + tally.count
            end = min(end, max(now, start)) if final else end
            for key, count in counts.items():
                try:
                    record = aggregate_record(key, start, end, count)
                except Exception as exc:  # noqa: BLE001 - counted and logged, never raised
                    self._unformatted(count, exc)
                    continue
                self._write(start, record, key.principal, count)

    def _finish(self) -> None:
        try:
            self._write_windows(self._clock(), final=True)
        finally:
            try:
                if self.sink is not None:
                    self.sink.close()
            finally:
                if self.topic is not None:  # close()'s time left, less the purge's 1.5 s
                    left = self._close_deadline - time.monotonic() - 2.0
                    self.topic.close(min(left, CLOSE_FLUSH_MAX_S))
