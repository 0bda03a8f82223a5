"""The driver JVM's class-data sharing archive: Spark's classes mapped, not loaded, at start.

Theory of operation: a fresh ``kafkaguard analyze`` process spends seconds loading and
verifying the same few thousand classes of Spark before its first query. HotSpot can write the
classes a run loaded into an archive at its exit (``-XX:ArchiveClassesAtExit``, JDK 13+) and
map them at the next start (``-XX:SharedArchiveFile``); measured at 10M records, ``propose``
went from 17.0 to 13.8 s (bench/RESULTS.md, issue 36). An archive is valid only for the JDK and
the class path it was written with, so it lives under a name that is a digest of both
(:func:`archive_key`): a new JDK or pyspark is a new name, written again by its first run. A
JVM that cannot use an archive says so in its log and starts without it (``-Xshare:auto``,
HotSpot's default), so a wrong archive costs time, never a failure.

The first local job of a digest writes the archive (about 10 s more at its exit, said on
stderr) to a name of its own (``.tmp-<host>-<pid>``), which the job renames into place once
its JVM has exited cleanly (:meth:`ClassArchive.finish`): a job reading the archive never
sees a part of one, and two first runs at once each write their own. A part whose JVM did
not exit in time, or not cleanly, is deleted by a later run. Archives of other JDKs or
pyspark versions are deleted once unused for 30 days. A process whose JVM already runs (a
second session in one Python process) reads and writes no archive: its options are set.

Where: ``$KAFKAGUARD_SPARK_CLASS_ARCHIVE`` (a directory; ``off`` turns it off), else
``$XDG_CACHE_HOME/kafkaguard`` or ``~/.cache/kafkaguard``. Under ``spark-submit`` (its JVM
runs already), with ``--master`` other than local, or with a ``spark.driver.extraJavaOptions``
of the user's, no archive is read or written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyspark

ARCHIVE_ENV: Final = "KAFKAGUARD_SPARK_CLASS_ARCHIVE"
"""A directory for the archive, or ``off``."""
PREFIX: Final = "spark-"
SUFFIX: Final = ".jsa"
STALE_PART_S: Final = 600.0
"""A part (``.tmp-<host>-<pid>``) this old is a dump that never finished: deleted."""
UNUSED_S: Final = 30 * 86400.0
"""An archive of another JDK or pyspark not mapped for this long is deleted."""
EXIT_WAIT_S: Final = 120.0
"""How long :meth:`ClassArchive.finish` waits for the JVM to write the archive and exit."""


def _java() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return Path(home, "bin", "java")
    found = shutil.which("java")
    return None if found is None else Path(found)


def archive_key(java: Path, jars: Path) -> str:
    """A digest of what an archive is valid for: the JDK (the real path of ``java``, its
    size and modification time: an upgrade in place changes them) and the class path (the
    pyspark version, every jar under ``jars`` with its size)."""
    real = java.resolve()
    stat = real.stat()
    digest = hashlib.sha256(f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    digest.update(pyspark.__version__.encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"\0{jar.name}\0{jar.stat().st_size}".encode())
    return digest.hexdigest()[:20]


def _directory() -> Path | None:
    configured = os.environ.get(ARCHIVE_ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("off", "") else Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache:
        try:
            cache = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory (a service's user): no archive
            return None
    return Path(cache, "kafkaguard")


@dataclass(frozen=True, slots=True)
class ClassArchive:
    """The archive a driver JVM maps (``writing`` False) or writes at its exit (True)."""

    path: Path
    writing: bool

    @property
    def part(self) -> Path:
        """Where a writing JVM dumps: this host's and process's own name beside the archive."""
        host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())
        return self.path.with_name(f"{self.path.name}.tmp-{host}-{os.getpid()}")

    @property
    def option(self) -> str:
        """The JVM option: map the archive, or write one at exit."""
        if self.writing:
            return f"-XX:ArchiveClassesAtExit={self.part}"
        return f"-XX:SharedArchiveFile={self.path}"

    def finish(self, jvm: subprocess.Popen[bytes] | None) -> None:
        """After the session stopped: let a writing JVM exit (its stdin closed, as
        PySpark's gateway exits on end of input), wait for its dump and rename it into
        place, only when the JVM exited cleanly (a JVM killed while dumping leaves a part,
        deleted later). Nothing to do for a JVM that mapped the archive."""
        if not self.writing or jvm is None:
            return
        try:
            if jvm.stdin is not None:
                jvm.stdin.close()
            jvm.wait(timeout=EXIT_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            return  # the part is left; a later run deletes it
        try:
            if jvm.returncode == 0 and self.part.is_file() and self.part.stat().st_size > 0:
                os.replace(self.part, self.path)
                # Other JDKs' or pyspark versions' archives; another installation's in use stays.
                _remove_old(self.path.parent, f"{PREFIX}*{SUFFIX}", UNUSED_S, kept=self.path)
            else:
                self.part.unlink(missing_ok=True)
        except OSError:
            pass


def _remove_old(directory: Path, pattern: str, age_s: float, *, kept: Path | None = None) -> None:
    """Delete the files of ``directory`` matching ``pattern`` (but ``kept``) whose last access
    is more than ``age_s`` ago: a part's is its dump (HotSpot writes it once, at exit), an
    archive's its last mapping (HotSpot maps it at each start)."""
    now = time.time()
    for found in directory.glob(pattern):
        try:
            if found != kept and now - found.stat().st_atime > age_s:
                found.unlink()
        except OSError:
            pass


def class_archive() -> ClassArchive | None:
    """The archive for this JDK and pyspark (:func:`archive_key`): to map when written,
    else to write; None when turned off, when no ``java`` or directory can be found, when
    the directory cannot be written, or when its path has a blank or a quote (Spark splits
    ``spark.driver.extraJavaOptions`` at blanks): then jobs simply start without one."""
    directory = _directory()
    java = _java()
    if directory is None or java is None or any(c in str(directory) for c in " \t\n'\""):
        return None
    try:
        key = archive_key(java, Path(pyspark.__file__).parent / "jars")
        path = directory / f"{PREFIX}{key}{SUFFIX}"
        if directory.is_dir():
            _remove_old(directory, f"{PREFIX}*{SUFFIX}.tmp-*", STALE_PART_S)
        if path.is_file():
            return ClassArchive(path, writing=False)
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            return None
    except OSError:
        return None
    return ClassArchive(path, writing=True)


def announce(archive: ClassArchive) -> None:
    """Say on stderr that this run writes the archive (its end is about 10 s later)."""
    if archive.writing:
        sys.stderr.write(
            "kafkaguard analyze: this first run writes Spark's class archive for faster starts"
            f" (about 10 s at its end, once for this JDK and pyspark): {archive.path}\n"
        )
