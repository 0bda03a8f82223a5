"""A job's progress on a terminal (issue 36): a line per finished Spark stage, read from
Spark's own status tracker; nothing when the stream is no terminal."""

from __future__ import annotations

import io
import re

import pytest
from pyspark.sql import SparkSession

from kafkaguard.audit.spark.runtime import progress
from kafkaguard.audit.spark.runtime.progress import stage_progress

pytestmark = pytest.mark.spark


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _job(spark: SparkSession) -> None:
    df = spark.range(0, 200_000, numPartitions=2)
    assert df.groupBy((df.id % 7).alias("k")).count().count() == 7


def test_a_terminal_gets_a_line_per_stage(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stages are sampled every POLL_S; on a warm session this job's stages end within 0.5 s
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    terminal = _Terminal()
    with stage_progress(spark, terminal):
        _job(spark)
    lines = terminal.getvalue().splitlines()
    assert lines, "no stage was reported"
    assert all(re.fullmatch(r"  stage \d+: \d+ tasks in \d+\.\d s", line) for line in lines)


def test_a_pipe_gets_nothing(spark: SparkSession) -> None:
    pipe = io.StringIO()
    with stage_progress(spark, pipe):
        _job(spark)
    assert pipe.getvalue() == ""
