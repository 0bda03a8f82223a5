"""The SparkSession every job runs in: UTC, loopback in local mode, quiet.

Owns the defaults only; jobs never configure Spark themselves. Under ``spark-submit`` the
master and deployment settings come from ``spark-submit`` and are not overridden unless
``--master`` is given explicitly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"


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
    local = (master or _submitted_master()).startswith("local")
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
        settings |= {
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
        }
    settings |= dict(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Spark's WARN output is mostly noise for a command-line job (and a missing path is
    # logged with a whole Java stack trace); errors still show. Raise it for debugging.
    spark.sparkContext.setLogLevel(os.environ.get("KAFKAGUARD_SPARK_LOG_LEVEL", "ERROR"))
    return spark
