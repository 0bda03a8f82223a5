"""The driver JVM's class archive (:mod:`kafkaguard.audit.spark.runtime.class_archive`):
written by a fresh job's first run, mapped by the next, renamed into place only when whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaguard.audit.spark.runtime.class_archive import ARCHIVE_ENV, ClassArchive, class_archive
from tests.support.analyze_data import rec, write_audit

T = "2026-11-22T{:02d}:00:00.000Z"


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_fresh_job_writes_the_class_archive_once_then_maps_it(
    tmp_path: Path,
) -> None:
    """The first fresh job of a JDK and pyspark writes the class archive at its end and says
    so; the next maps it, prints nothing about it, and its JVM logs no complaint about it
    (a JVM that cannot map an archive warns and starts without it)."""
    trail = str(
        write_audit(tmp_path / "trail", [rec(T.format(10), "User:app", "READ", "TOPIC", "t")])
    )
    archive_dir = tmp_path / "cds"
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "SPARK_LOCAL_IP": "127.0.0.1",
        ARCHIVE_ENV: str(archive_dir),
    }
    command = [
        sys.executable, "-m", "kafkaguard.audit.spark.main", "report", "--input", trail,
        "--master", "local[1]", "--conf", "spark.sql.codegen.wholeStage=false",
    ]  # fmt: skip
    log = tmp_path / f"kafkaguard-analyze-{os.getuid()}.log"
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "writes Spark's class archive" in first.stderr
    (archive,) = archive_dir.iterdir()  # in place, no part left
    assert archive.name.endswith(".jsa") and archive.stat().st_size > 1 << 20
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert second.returncode == 0, second.stderr[-2000:]
    assert [line.split(":")[0] for line in second.stderr.splitlines()] == ["input"]
    assert "[warning][cds" not in log.read_text(encoding="utf-8")
    assert list(archive_dir.iterdir()) == [archive]
    timeless = [re.sub(r"\d+\.\d s", "", run.stdout) for run in (first, second)]
    assert timeless[0] == timeless[1] and "read 1 events" in timeless[0]  # the same report


def test_a_class_archive_is_renamed_into_place_only_once_its_jvm_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:meth:`ClassArchive.finish` closes the JVM's stdin (PySpark's gateway exits on end of
    input), waits, and only then renames the part; another key's archive is removed, a
    stale part of an earlier run is deleted, and ``off`` turns the archive off. A ``cat``
    stands in for the JVM: it exits on end of input as the gateway does."""
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    old = tmp_path / "spark-old.jsa"
    old.write_bytes(b"x")
    stale = tmp_path / "spark-old.jsa.tmp-1"
    stale.write_bytes(b"x")
    os.utime(stale, (1.0, 1.0))
    archive = class_archive()
    assert archive is not None and archive.writing and not stale.exists()
    archive.part.write_bytes(b"dumped")
    jvm = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    archive.finish(jvm)
    assert jvm.returncode == 0
    assert archive.path.read_bytes() == b"dumped" and not archive.part.exists()
    assert not old.exists()
    again = class_archive()
    assert again == ClassArchive(archive.path, writing=False)
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    assert class_archive() is None
