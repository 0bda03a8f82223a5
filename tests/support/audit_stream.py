"""The Spark side of the audit topic in tests: fill a topic with audit lines, run
``kafkaguard analyze`` (a job or ``watch``) as a real subprocess and read what it prints.

Records are produced with confluent-kafka's Producer, each value one audit line exactly as the
file trail holds it (``AuditEvent.to_json()``, or any bad line a test wants the reader to
drop), as ``audit.sink: kafka`` produces them.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

QUIET = {"log_level": 3}
REPO = Path(__file__).resolve().parents[2]
SPARK_TEST_CONF = (
    "spark.sql.shuffle.partitions=2",
    "spark.default.parallelism=2",
    "spark.sql.adaptive.enabled=false",
    # Small inputs: C1 only and no whole-stage codegen start a job faster (tests/audit/spark).
    "spark.sql.codegen.wholeStage=false",
    "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
    "spark.driver.memory=1g",
)
"""``--conf`` settings of every ``analyze`` subprocess of the tests."""


def create_topic(client: Mapping[str, str], topic: str, partitions: int = 3) -> None:
    """``client``: confluent-kafka settings (``KafkaBroker.admin_config()``)."""
    admin = AdminClient({**client, **QUIET})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def produce_lines(client: Mapping[str, str], topic: str, lines: Iterable[str | bytes]) -> int:
    """Produce each line as one record (no key: spread over the partitions); returns how many
    were acknowledged, after a flush."""
    producer = Producer(
        {
            **client,
            "linger.ms": 5,
            "enable.idempotence": True,
            "partitioner": "random",
            **QUIET,
        }
    )
    acked, failed = [0], []

    def done(error: object, _message: object) -> None:
        if error is None:
            acked[0] += 1
        else:
            failed.append(error)

    for line in lines:
        producer.produce(topic, line.encode() if isinstance(line, str) else line, on_delivery=done)
        producer.poll(0)
    left = producer.flush(30)
    assert left == 0 and not failed, f"{left} records unflushed, errors: {failed[:3]}"
    return acked[0]


def analyze_command(*argv: str) -> list[str]:
    """``python -m kafkaguard analyze ...`` with the tests' Spark settings."""
    conf = [arg for setting in SPARK_TEST_CONF for arg in ("--conf", setting)]
    return [sys.executable, "-m", "kafkaguard", "analyze", *argv, "--master", "local[2]", *conf]


def run_analyze(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        analyze_command(*argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )


class WatchProcess:
    """``kafkaguard analyze watch ...`` in a subprocess; its stdout lines are collected by a
    thread, its stderr goes to ``log`` (Spark's logging would fill a pipe)."""

    def __init__(self, argv: Sequence[str], log: Path):
        self.log = log
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        with open(log, "ab") as stderr:
            self.proc = subprocess.Popen(
                analyze_command("watch", *argv),
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                cwd=REPO,
                env=os.environ | {"PYTHONUNBUFFERED": "1"},
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, matches: Callable[[str], bool], timeout: float) -> str:
        """The first line (printed from now on, or already collected and not yet returned
        by an earlier wait) that ``matches``; AssertionError with the output after
        ``timeout`` seconds or when the process ends."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(self._failure(f"no matching line within {timeout:.0f} s"))
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(self._failure(f"watch exited ({self.proc.poll()})"))
            self.lines.append(line)
            if matches(line):
                return line

    def drain(self, seconds: float) -> list[str]:
        """Every line printed within the next ``seconds``."""
        deadline, got = time.monotonic() + seconds, []
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            got.append(line)
        return got

    def _failure(self, what: str) -> str:
        tail = self.log.read_text(errors="replace").splitlines()[-25:]
        return f"{what}; stdout so far: {self.lines}\nstderr tail:\n" + "\n".join(tail)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the watch stops its query and exits 0), SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        return self.proc.returncode
