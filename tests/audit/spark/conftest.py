"""One local SparkSession for every Spark test (starting a JVM costs seconds; CI has 2 cores).

Loopback only, no UI, two shuffle partitions, UTC; stopped at the end of the session.
Test modules import their audit records from ``tests.support.analyze_data``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from kafkaguard.audit.spark.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.sql.adaptive.enabled": "false",
            # Tiny inputs: compiling whole-stage code and C2-optimising the JVM cost more
            # than they save (measured: the report fixture 16 s -> 7 s on a loaded 2-core VM).
            "spark.sql.codegen.wholeStage": "false",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        },
        app_name="kafkaguard-tests",
    )
    try:
        yield session
    finally:
        session.stop()
