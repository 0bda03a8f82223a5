"""Progress of a job on a terminal: a line per finished Spark stage, with its tasks and
seconds (issue 36: a job printed nothing for 15-60 s).

Read from Spark's own ``StatusTracker`` by a daemon thread every :data:`POLL_S`; only when
the stream is a terminal (a pipe or a log file gets the job's summary alone) and only on a
classic session (Spark Connect has no ``SparkContext``, hence no tracker).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, TextIO

from pyspark.core.status import StatusTracker
from pyspark.sql import SparkSession

POLL_S: Final = 0.5


def _tracker(spark: SparkSession) -> StatusTracker | None:
    if not hasattr(spark, "_jsparkSession"):  # Spark Connect: no SparkContext
        return None
    return spark.sparkContext.statusTracker()


class _Stages:
    """Stages seen running, each with when it was first seen and its latest task count."""

    def __init__(self, tracker: StatusTracker, stream: TextIO) -> None:
        self.tracker, self.stream = tracker, stream
        self.running: dict[int, tuple[float, int, int]] = {}

    def poll(self) -> None:
        now = time.monotonic()
        active = set(self.tracker.getActiveStageIds())
        for stage in active:
            info = self.tracker.getStageInfo(stage)
            began = self.running.get(stage, (now, 0, 0))[0]
            if info is not None:
                self.running[stage] = (began, info.numTasks, info.numCompletedTasks)
        for stage in sorted(set(self.running) - active):
            self.done(stage, now)

    def done(self, stage: int, now: float) -> None:
        began, tasks, _ = self.running.pop(stage)
        self.stream.write(f"  stage {stage}: {tasks} tasks in {now - began:.1f} s\n")
        self.stream.flush()

    def finish(self) -> None:
        now = time.monotonic()
        for stage in sorted(self.running):
            self.done(stage, now)


@contextmanager
def stage_progress(spark: SparkSession, stream: TextIO) -> Iterator[None]:
    """Within: a line on ``stream`` per Spark stage seen running (the status tracker is
    polled every :data:`POLL_S`: a stage shorter than that may show no line, which is no
    progress worth showing), if ``stream`` is a terminal and the session has a status
    tracker; nothing otherwise."""
    tracker = _tracker(spark) if stream.isatty() else None
    if tracker is None:
        yield
        return
    stages, stop = _Stages(tracker, stream), threading.Event()

    def loop() -> None:
        while not stop.wait(POLL_S):
            stages.poll()

    thread = threading.Thread(target=loop, name="kafkaguard-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        stages.poll()
        stages.finish()
