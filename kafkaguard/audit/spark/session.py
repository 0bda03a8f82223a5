"""The SparkSession every job runs in: UTC, loopback in local mode, quiet.

Owns the defaults only; jobs never configure Spark themselves. Under ``spark-submit`` the
master and deployment settings come from ``spark-submit`` and are not overridden unless
``--master`` is given explicitly.

Local mode is sized from the machine (cluster deployments keep their own settings): Spark's
defaults are made for clusters — 200 shuffle partitions, i.e. 200 tasks per aggregation even
for a few thousand rows on two cores, and a 1 GB driver that caches little of a week's trail.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"
DRIVER_MEMORY_SHARE: Final = 4
"""A local run's JVM heap is a quarter of the machine's memory: the proxy (``compact`` runs
on its host), the page cache that serves the trail and the Python workers share the rest."""
DRIVER_MEMORY_MIN_MB: Final = 1024
DRIVER_MEMORY_MAX_MB: Final = 8192
"""Bounds of that share: below 1 GB the cached cube of a busy day spills to disk; above 8 GB
a single box gains little (its cores, not its heap, limit a scan) and a bigger job belongs
on a cluster or gets ``--conf spark.driver.memory``."""
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
    """A quarter of ``memory_bytes``, within [1 GB, 8 GB] (1 GB when it is unknown).

    >>> driver_memory_mb(24 << 30), driver_memory_mb(2 << 30), driver_memory_mb(256 << 30)
    (6144, 1024, 8192)
    """
    share = memory_bytes // DRIVER_MEMORY_SHARE // (1 << 20)
    return min(DRIVER_MEMORY_MAX_MB, max(DRIVER_MEMORY_MIN_MB, share))


def local_settings(master: str, *, jvm_running: bool = False) -> dict[str, str]:
    """Spark settings for a local master: loopback, no UI, shuffle partitions = 2 × cores
    (enough tasks to balance two stragglers per core, not 200 tiny ones) and the driver's
    memory from the machine — unless its JVM already runs (``spark-submit``), when
    ``spark.driver.memory`` can no longer change anything."""
    settings = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(2 * local_cores(master)),
    }
    if not jvm_running:
        settings["spark.driver.memory"] = f"{driver_memory_mb(machine_memory_bytes())}m"
    return settings


def build_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "kafkaguard analyze",
) -> SparkSession:
    """Create (or join) the session.

    Args:
        master: Spark master URL; ``None`` means ``local[*]`` when run directly and whatever
            ``spark-submit --master`` said when run under it.
        conf: extra ``spark.*`` settings (``--conf key=value``); they win over the defaults.
        app_name: shown in the Spark UI and history server.
    """
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
        settings |= local_settings(effective, jvm_running=under_spark_submit())
    settings |= dict(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Spark's WARN output is mostly noise for a command-line job (and a missing path is
    # logged with a whole Java stack trace); errors still show. Raise it for debugging.
    spark.sparkContext.setLogLevel(os.environ.get("KAFKAGUARD_SPARK_LOG_LEVEL", "ERROR"))
    return spark
