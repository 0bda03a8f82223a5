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


@pytest.mark.spark  # needs a java (the archive's name is a digest of it)
def test_a_class_archive_is_renamed_into_place_only_once_its_jvm_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:meth:`ClassArchive.finish` closes the JVM's stdin (PySpark's gateway exits on end of
    input), waits, and only then renames the part, and only after a clean exit; another
    installation's archive is removed once unused for 30 days, kept before; a stale part of
    an earlier run is deleted; ``off`` turns the archive off. A shell stands in for the JVM:
    it writes the part after end of input, as HotSpot dumps at its exit."""
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    unused, recent = tmp_path / "spark-old.jsa", tmp_path / "spark-other.jsa"
    unused.write_bytes(b"x")
    recent.write_bytes(b"x")
    os.utime(unused, (1.0, 1.0))
    stale = tmp_path / "spark-old.jsa.tmp-host-1"
    stale.write_bytes(b"x")
    os.utime(stale, (1.0, 1.0))
    archive = class_archive()
    assert archive is not None and archive.writing and not stale.exists()

    def stand_in(status: int) -> subprocess.Popen[bytes]:
        script = f"cat >/dev/null; printf dumped > '{archive.part}'; exit {status}"
        return subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)

    archive.finish(stand_in(1))  # killed while dumping: nothing renamed, the part removed
    assert not archive.path.exists() and not archive.part.exists()
    archive.finish(stand_in(0))
    assert archive.path.read_bytes() == b"dumped" and not archive.part.exists()
    assert not unused.exists() and recent.exists()
    again = class_archive()
    assert again == ClassArchive(archive.path, writing=False)
    assert again.option == f"-XX:SharedArchiveFile={archive.path}"
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path / "a b"))  # Spark splits options at blanks
    assert class_archive() is None
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    assert class_archive() is None
