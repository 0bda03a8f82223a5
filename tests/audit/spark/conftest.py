"""One local SparkSession for every Spark test (starting a JVM costs seconds; CI has 2 cores).

Loopback only, no UI, two shuffle partitions, UTC; stopped at the end of the session.
Test modules import their audit records from ``tests.support.analyze_data``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from kafkaguard.audit.spark.runtime.session import build_session
from tests.support.analyze_data import write_audit
from tests.support.replay_data import TRAIL


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
            # C1 alone gets a 48 MB code cache (240 MB with C2); this JVM serves every Spark
            # test of its process, and once the cache was full ("CodeCache is full. Compiler
            # has been disabled") it ran interpreted and a test hit the 300 s timeout.
            "spark.driver.extraJavaOptions": (
                "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
            ),
        },
        app_name="kafkaguard-tests",
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def replay_trail(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The trail of :mod:`tests.support.replay_data`, written once per module that asks."""
    return str(write_audit(tmp_path_factory.mktemp("trail"), TRAIL))
