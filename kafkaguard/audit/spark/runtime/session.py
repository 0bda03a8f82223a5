"""The SparkSession every job runs in: UTC, loopback in local mode, quiet.

Owns the defaults only; jobs never configure Spark themselves. Under ``spark-submit`` the
master and deployment settings come from ``spark-submit`` and are not overridden unless
``--master`` is given explicitly.

Local mode is sized from the machine (cluster deployments keep their own settings): Spark's
defaults are made for clusters — 200 shuffle partitions, i.e. 200 tasks per aggregation even
for a few thousand rows on two cores; the driver's heap is bounded (:data:`DRIVER_MEMORY_MAX_MB`).

Reading the audit topic (``--input kafka://...``) needs Spark's Kafka source, which pyspark
does not ship: its jars are resolved by Maven ahead of time into a cache directory
(:func:`kafka_jars_dir`; ``./dev test`` does it) and put on ``spark.jars`` only for such runs,
never fetched at run time (docs/audit.md, "Reading the audit topic").

A JVM the session starts writes its own output (log4j's start-up lines, the JVM's warnings,
Spark's log) to a log file (:func:`default_jvm_log`) unless ``--verbose``: on a terminal they
look like failures and say nothing a user acts on (issue 36). Errors reach the job as
exceptions either way.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pyspark
from pyspark.sql import SparkSession

from kafkaguard.audit.spark.runtime.class_archive import ClassArchive

DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"
DRIVER_MEMORY_SHARE: Final = 4
"""A local run's JVM heap is at most a quarter of the machine's memory: the proxy
(``compact`` runs on its host), the page cache that serves the trail and the Python workers
share the rest."""
DRIVER_MEMORY_MIN_MB: Final = 512
DRIVER_MEMORY_MAX_MB: Final = 1024
"""Bounds of that share. 1 GB keeps a job's whole process within 1.5 GiB of resident memory
at 10 million records (the JVM commits heap up to its maximum and never gives it back: with
a quarter of 24 GB the same jobs peaked at 2.5 GiB for no gain in time, bench/RESULTS.md
"Issue 16: analytics at scale"); ``propose`` and ``report`` read hourly facts, and Spark
spills what does not fit. A bigger window or a job beyond one box gets
``--conf spark.driver.memory=4g``, a cluster (``--master``) or Spark Connect (``--remote``)."""
QUICK_JIT_OPTIONS: Final = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)
"""The driver JVM's options for a job that reads compacted hours (``propose``, ``report``,
``unused``, ``whatif``): C2, the optimizing compiler, only for very hot code (HotSpot's Tier4
thresholds ×10). A fresh process's C2 threads compile Spark's start-up and each query's
generated code; on 1M records that costs more than it saves (``propose`` 47 CPU seconds with
the default, 36 with C1 only, 37 with these), on 10M it pays (``propose`` 44 s wall with the
default, 68 s with C1 only, 49 s with these; bench/RESULTS.md, issue 29). ``compact`` and
``watch`` keep the default (JSON parsing is one long hot loop; a stream runs for days).
``--conf spark.driver.extraJavaOptions=-XX:+TieredCompilation`` restores the default for one
job."""
DRIVER_JVM_OPTIONS: Final = "-Xlog:disable -Xlog:all=warning:stderr"
"""Every local driver JVM's options: its own warnings (unified logging, stdout by default) go
to stderr, which is the JVM's log file (:func:`_jvm_output`), since a job's stdout may be its
result (``propose`` without ``--acl-file``)."""
BATCH_GC_OPTION: Final = "-XX:+UseParallelGC"
"""The collector of every local driver JVM: a job is a batch, and on two cores G1's
concurrent threads and write barriers took ~10% of ``compact``'s task CPU (10M records:
168.5 to 105 s with the Parquet change of issue 36; ``propose`` 17.8 to 17.1 s), within the
same 1 GB heap. Left out when the environment already chooses one (:func:`_collector_chosen`):
HotSpot refuses to start with two."""
_JVM_ENVIRONMENT: Final = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
_COLLECTOR: Final = re.compile(r"-XX:\+Use\w*GC\b")


def _collector_chosen(conf: Mapping[str, str]) -> bool:
    """Whether the JVM's environment or ``spark.driver.defaultJavaOptions`` picks a
    collector (``-XX:+UseG1GC`` and the like)."""
    texts = [os.environ.get(name, "") for name in _JVM_ENVIRONMENT]
    texts.append(conf.get("spark.driver.defaultJavaOptions", ""))
    return any(_COLLECTOR.search(text) for text in texts)


_CGROUP_LIMITS: Final = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)
_LOCAL_MASTER = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


def under_spark_submit() -> bool:
    """``spark-submit`` starts the Python driver with the JVM gateway already running."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_master() -> str:
    """``spark-submit --master``: in the JVM's properties before the context exists."""
    if not under_spark_submit():
        return ""
    from pyspark import SparkConf, SparkContext

    # Connect to spark-submit's JVM first: only then does SparkConf see its properties.
    SparkContext._ensure_initialized()
    return str(SparkConf().get("spark.master", ""))


def local_cores(master: str) -> int:
    """The worker threads of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master.

    >>> local_cores("local[3]"), local_cores("local"), local_cores("local[2,4]")
    (3, 1, 2)
    """
    found = _LOCAL_MASTER.match(master)
    if found is None or found.group(1) is None:
        return 1
    if found.group(1) == "*":
        return os.cpu_count() or 1
    return max(1, int(found.group(1)))


def machine_memory_bytes() -> int:
    """Physical memory, or the container's limit when that is lower (0 if unknown)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 0
    for limit_file in _CGROUP_LIMITS:
        try:
            text = limit_file.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < (total or int(text) + 1):
            total = int(text)
    return total


def driver_memory_mb(memory_bytes: int) -> int:
    """A quarter of ``memory_bytes``, within [512 MB, 1 GB] (512 MB when it is unknown).

    >>> driver_memory_mb(24 << 30), driver_memory_mb(3 << 30), driver_memory_mb(1 << 30)
    (1024, 768, 512)
    """
    share = memory_bytes // DRIVER_MEMORY_SHARE // (1 << 20)
    return min(DRIVER_MEMORY_MAX_MB, max(DRIVER_MEMORY_MIN_MB, share))


def local_settings(
    master: str,
    *,
    jvm_running: bool = False,
    quick_jit: bool = False,
    archive: ClassArchive | None = None,
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark settings for a local master: loopback, no UI, shuffle partitions = 2 × cores
    (enough tasks to balance two stragglers per core, not 200 tiny ones), the driver's
    memory from the machine and its JVM options (:data:`DRIVER_JVM_OPTIONS`,
    :data:`BATCH_GC_OPTION` unless the environment or ``conf`` chose a collector, with
    ``quick_jit`` :data:`QUICK_JIT_OPTIONS`, the class ``archive``'s option) — unless its JVM
    already runs (``spark-submit``), when the driver's settings can no longer change
    anything."""
    settings = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(2 * local_cores(master)),
    }
    if not jvm_running:
        settings["spark.driver.memory"] = f"{driver_memory_mb(machine_memory_bytes())}m"
        gc = "" if _collector_chosen(conf or {}) else BATCH_GC_OPTION
        options = [DRIVER_JVM_OPTIONS, gc, QUICK_JIT_OPTIONS if quick_jit else ""]
        options.append(archive.option if archive is not None else "")
        settings["spark.driver.extraJavaOptions"] = " ".join(o for o in options if o)
    return settings


def wants_class_archive(master: str | None, conf: Mapping[str, str]) -> bool:
    """Whether a session built with ``master`` and ``conf`` starts a local driver JVM with
    kafkaguard's options (:func:`local_settings`), where a class archive applies: not under
    ``spark-submit``, not for another master, not when ``conf`` brings its own options."""
    return (
        not under_spark_submit()
        and (master is None or master.startswith("local"))
        and "spark.driver.extraJavaOptions" not in conf
    )


KAFKA_JARS_ENV: Final = "KAFKAGUARD_SPARK_KAFKA_JARS"
"""A directory of jars, or a comma-separated list of jar files, holding Spark's Kafka source
(``spark-sql-kafka-0-10``) and what it needs beyond pyspark's own jars; it overrides the cache
directory of :func:`kafka_jars_dir`."""
KAFKA_SOURCE_ARTIFACT: Final = "spark-sql-kafka-0-10_2.13"
"""Spark's Kafka source for Scala 2.13, the only Scala that Spark 4 is built for."""


class KafkaJarsMissing(RuntimeError):
    """Spark's Kafka source is not where ``analyze`` looks; the message says how to get it."""


def kafka_jars_dir(spark_version: str = pyspark.__version__) -> Path:
    """Where the install step leaves the Kafka source's jars for this pyspark version:
    ``$XDG_CACHE_HOME/kafkaguard/spark-kafka-jars/<version>`` (``~/.cache`` by default), the
    cache directory the Kafka-backed tests' classpath uses too (tests/support/kafka_broker.py).
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkaguard" / "spark-kafka-jars" / spark_version


def _missing_kafka_jars(where: str) -> KafkaJarsMissing:
    return KafkaJarsMissing(
        f"Spark's Kafka source ({KAFKA_SOURCE_ARTIFACT}) is not in {where}. Resolve it once "
        "with Maven: `python -m tests.support.spark_kafka` from a kafkaguard checkout (`./dev "
        f"test` runs it), or copy its jars into {kafka_jars_dir()}, or set {KAFKA_JARS_ENV} to "
        "their directory, or give --conf spark.jars.packages=org.apache.spark:"
        f"{KAFKA_SOURCE_ARTIFACT}:<Spark version> to let Spark fetch them "
        '(docs/audit.md, "Reading the audit topic")'
    )


def kafka_jars() -> list[str]:
    """The jars to put on ``spark.jars`` for the Kafka source, from :data:`KAFKA_JARS_ENV` or
    :func:`kafka_jars_dir`; :class:`KafkaJarsMissing` when the source itself is not there."""
    given = os.environ.get(KAFKA_JARS_ENV, "").strip()
    if given and not Path(given).is_dir():
        jars = [j.strip() for j in given.split(",") if j.strip()]
        where = f"{KAFKA_JARS_ENV}={given}"
    else:
        directory = Path(given) if given else kafka_jars_dir()
        jars = sorted(str(j) for j in directory.glob("*.jar"))
        where = str(directory)
    names = [Path(j).name for j in jars if Path(j).is_file()]
    if len(names) != len(jars) or not any(n.startswith(KAFKA_SOURCE_ARTIFACT) for n in names):
        raise _missing_kafka_jars(where)
    return jars


def kafka_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """``spark.jars`` with the Kafka source added to what ``conf`` already lists, unless
    ``conf`` brings the source itself (``spark.jars.packages`` or ``spark.jars`` naming it).

    Under ``spark-submit`` the JVM already runs and ``spark.jars`` cannot change it: there the
    source comes from ``spark-submit --jars``/``--packages``, and nothing is added.
    """
    brought = conf.get("spark.jars.packages", "") + "," + conf.get("spark.jars", "")
    if KAFKA_SOURCE_ARTIFACT in brought or under_spark_submit():
        return {}
    jars = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    return {"spark.jars": ",".join([*jars, *kafka_jars()])}


CONNECT_SCHEME: Final = "sc://"


def build_remote_session(url: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark Connect client session (``--remote sc://host:port``, PySpark 4's client).

    The server (a ``start-connect-server.sh`` kept running, or a cluster's) is already warm:
    the job pays no JVM start, no JIT warm-up and no session start, only the round trips of
    its plans. Only session settings apply (UTC, as in :func:`build_session`, and ``--conf``);
    the server's own settings (memory, master, jars such as Spark's Kafka source) are its
    operator's. Paths are read by the server: it must see the audit directory.
    """
    if not url.startswith(CONNECT_SCHEME):
        raise ValueError(f"--remote must be a Spark Connect URL, {CONNECT_SCHEME}host:port")
    builder = SparkSession.builder.remote(url)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
    } | dict(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def default_jvm_log() -> Path:
    """Where a job's JVM writes its output unless ``--verbose``: one file per user in the
    temporary directory, replaced by each job."""
    return Path(tempfile.gettempdir()) / f"kafkaguard-analyze-{os.getuid()}.log"


@contextmanager
def _jvm_output(log: Path | None) -> Iterator[None]:
    """While the session starts, file descriptor 2 is ``log``: the JVM that PySpark launches
    then inherits it as its stderr for its whole life, and Python's own stderr is restored
    as soon as it has started (nothing when ``log`` is None, or no JVM is started here)."""
    if log is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with log.open("wb") as target:
        os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def build_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "kafkaguard analyze",
    *,
    kafka: bool = False,
    quick_jit: bool = False,
    jvm_log: Path | None = None,
    archive: ClassArchive | None = None,
) -> SparkSession:
    """Create (or join) the session.

    Args:
        master: Spark master URL; ``None`` means ``local[*]`` when run directly and whatever
            ``spark-submit --master`` said when run under it.
        conf: extra ``spark.*`` settings (``--conf key=value``); they win over the defaults.
        app_name: shown in the Spark UI and history server.
        kafka: the job reads the audit topic: Spark's Kafka source goes on ``spark.jars``
            (:func:`kafka_settings`; raises :class:`KafkaJarsMissing` before any JVM starts).
        quick_jit: a short job: a local driver JVM runs :data:`QUICK_JIT_OPTIONS`.
        jvm_log: a JVM started here writes its output to this file instead of the terminal
            (:func:`_jvm_output`; a JVM already running, e.g. under ``spark-submit``, keeps
            its own).
        archive: a local driver JVM maps (or writes) this class archive
            (:mod:`.class_archive`; the caller finishes it once the session stopped).
    """
    extra = kafka_settings(conf or {}) if kafka else {}
    if master is None and not under_spark_submit():
        master = DEFAULT_MASTER
    effective = master or _submitted_master()
    local = effective.startswith("local")
    builder = SparkSession.builder.appName(app_name)
    # Audit times are UTC and partition hours are UTC hours: keep Spark's clock on UTC so
    # date_trunc, hour() and timestamp literals agree with the directory layout.
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
    }
    if master is not None:
        builder = builder.master(master)
    if local:
        # A local run listens on loopback only and opens no UI port; Python workers run
        # the driver's interpreter (the one with kafkaguard installed).
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings |= local_settings(
            effective,
            jvm_running=under_spark_submit(),
            quick_jit=quick_jit,
            archive=archive,
            conf=conf or {},
        )
    settings |= dict(conf or {}) | extra
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _jvm_output(None if under_spark_submit() else jvm_log):
        spark = builder.getOrCreate()
    # Spark's WARN output is mostly noise for a command-line job (and a missing path is
    # logged with a whole Java stack trace); errors still show. Raise it for debugging.
    spark.sparkContext.setLogLevel(os.environ.get("KAFKAGUARD_SPARK_LOG_LEVEL", "ERROR"))
    return spark
