"""``kafkaguard analyze --remote sc://...``: the jobs on a Spark Connect server kept running,
against a local server the test starts (``tests/support/spark_connect.py``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.jobs.compact.parquet import compact
from tests.audit.spark.jobs.compact.test_parquet import GRACE, NOW, _embedded, _trail
from tests.support.spark_connect import spark_connect_server

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with spark_connect_server(tmp_path_factory.mktemp("connect") / "server.log") as url:
        yield url


def analyze(spark: SparkSession | None, *argv: str) -> tuple[int, list[str]]:
    """A job in this process's session, or with ``spark`` None a fresh ``kafkaguard analyze``
    process, as users run it (a Spark Connect client cannot share a process with the
    classic session the other tests use)."""
    if spark is not None:
        lines: list[str] = []
        args = cli.build_parser().parse_args(["analyze", *argv])
        return analyze_main.run(args, spark, lines.append), lines
    done = subprocess.run(
        [sys.executable, "-m", "kafkaguard", "analyze", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout.splitlines() or done.stderr.splitlines()


def _jobs(spark: SparkSession | None, trail: Path, out: Path, *where: str) -> dict[str, object]:
    out.mkdir()
    common = ("--input", str(trail), "--since", "2026-11-22T10:30Z", *where)
    code, lines = analyze(spark, "report", *common, "--html", str(out / "report.html"))
    assert code == 0, lines
    code, proposed = analyze(spark, "propose", *common, "--acl-file", str(out / "acls.yaml"))
    assert code == 0, proposed
    return {
        "report": lines[-1],  # the totals; the lines before carry timings
        "html": _embedded(out / "report.html"),
        "acls": (out / "acls.yaml").read_text(encoding="utf-8"),
    }


@pytest.mark.timeout(600)
def test_propose_and_report_on_spark_connect_match_a_local_session(
    spark: SparkSession, remote: str, tmp_path: Path
) -> None:
    trail = _trail(tmp_path / "audit")
    assert compact(lambda: spark, trail, trail / "_compacted", grace=GRACE, now=NOW)
    local = _jobs(spark, trail, tmp_path / "local")
    assert "User:app" in str(local["acls"])
    assert _jobs(None, trail, tmp_path / "remote", "--remote", remote) == local


def test_jobs_that_need_the_classic_api_refuse_remote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acls = tmp_path / "acls.yaml"
    acls.write_text("acls: []\n", encoding="utf-8")
    args = ["whatif", "--input", str(tmp_path), "--acls", str(acls), "--remote", "sc://h:1"]
    code = analyze_main.run(cli.build_parser().parse_args(["analyze", *args]))
    assert code == 2
    assert "whatif needs --master (Spark Connect has no RDD API)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(
            ["analyze", "report", "--input", "x", "--master", "local", "--remote", "sc://h:1"]
        )
