"""Spark's Kafka source for ``kafkaguard analyze --input kafka://`` and ``analyze watch``:
resolved by Maven, ahead of time, into the cache directory that ``analyze`` reads
(:func:`kafkaguard.audit.spark.runtime.session.kafka_jars_dir`).

pyspark ships no Kafka source. ``spark-sql-kafka-0-10_2.13`` and its runtime dependencies
(``spark-token-provider-kafka-0-10``, ``kafka-clients``, ``commons-pool2``, ...) come from Maven
Central through the machine's Maven, as the Kafka broker's jars do for the tests
(tests/support/kafka_broker.py): a throw-away pom, ``dependency:copy-dependencies``, and the
jars pyspark already ships (same artifact, any version) left out, so that ``spark.jars`` adds
only what is missing and never a second copy of a class on the driver's classpath. The
directory appears in one rename, so a half resolution is never read; a present one is kept
(idempotent: ``./dev test`` runs ``python -m tests.support.spark_kafka`` before pytest).

The source matching the installed pyspark is tried first. When Maven Central does not serve it
(pyspark 4.3.0 reached PyPI, its ``spark-sql-kafka`` did not reach Maven Central), the newest
served 4.x release, :data:`FALLBACK_VERSION`, is used: the Kafka source is built against
Spark's public DataSource V2 API, and the tests run it on the installed pyspark.
``KAFKAGUARD_SPARK_KAFKA_VERSION`` picks another version.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark
import pytest

from kafkaguard.audit.spark.runtime.session import (
    KAFKA_SOURCE_ARTIFACT,
    KafkaJarsMissing,
    kafka_jars,
    kafka_jars_dir,
)

FALLBACK_VERSION = "4.2.0"
"""The newest ``spark-sql-kafka-0-10_2.13`` that Maven Central served when pyspark 4.3.0 was
current (and its own was not there)."""
VERSION_ENV = "KAFKAGUARD_SPARK_KAFKA_VERSION"
MAVEN_TIMEOUT_S = 600

POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkaguard.analyze</groupId>
  <artifactId>spark-kafka-jars</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z][\w.]*)?)\.jar$")


def artifact_of(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``.

    >>> artifact_of("spark-sql-kafka-0-10_2.13-4.2.0.jar"), artifact_of("jsr305-3.0.0.jar")
    ('spark-sql-kafka-0-10_2.13', 'jsr305')
    """
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


def pyspark_artifacts() -> set[str]:
    """The artifacts whose jars pyspark ships (``pyspark/jars``)."""
    jars = Path(pyspark.__file__).parent / "jars"
    return {artifact_of(jar.name) for jar in jars.glob("*.jar")}


def candidate_versions() -> list[str]:
    wanted = os.environ.get(VERSION_ENV, "").strip()
    if wanted:
        return [wanted]
    versions = [pyspark.__version__]
    if FALLBACK_VERSION.split(".")[0] == pyspark.__version__.split(".")[0]:
        versions.append(FALLBACK_VERSION)
    return list(dict.fromkeys(versions))


def _copy_dependencies(version: str, into: Path) -> str | None:
    """Maven's copy of the source ``version`` and its runtime dependencies; None if it
    worked, else the tail of Maven's output."""
    pom = into / "pom.xml"
    pom.write_text(POM.format(artifact=KAFKA_SOURCE_ARTIFACT, version=version), encoding="utf-8")
    command = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={into / 'jars'}",
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        return "no `mvn` on PATH (`./dev test` installs Debian's maven)"
    except subprocess.TimeoutExpired:
        return f"Maven did not finish within {MAVEN_TIMEOUT_S} s"
    if result.returncode == 0:
        return None
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "ERROR" in line]
    return "\n".join(errors[:3]) or f"mvn exited with {result.returncode}"


def resolve(target: Path | None = None) -> Path:
    """The directory of the Kafka source's jars for the installed pyspark, resolving it when
    absent; :class:`KafkaJarsMissing` (with Maven's reasons) when no version resolves."""
    target = target or kafka_jars_dir()
    if any(target.glob(f"{KAFKA_SOURCE_ARTIFACT}-*.jar")):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    shipped = pyspark_artifacts()
    failures = []
    for version in candidate_versions():
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".resolving-") as work:
            problem = _copy_dependencies(version, Path(work))
            if problem is not None:
                failures.append(f"{KAFKA_SOURCE_ARTIFACT}:{version}: {problem}")
                continue
            jars = Path(work) / "jars"
            for jar in list(jars.glob("*.jar")):
                if artifact_of(jar.name) in shipped:
                    jar.unlink()
            try:
                jars.rename(target)  # atomic: readers see no directory or a whole one
            except OSError:
                if not any(target.glob(f"{KAFKA_SOURCE_ARTIFACT}-*.jar")):
                    raise
            return target  # or a concurrent resolution's
    raise KafkaJarsMissing("Maven could not resolve Spark's Kafka source:\n" + "\n".join(failures))


def require_spark_kafka() -> list[str]:
    """The jars (as ``analyze`` finds them), or skip the calling test (fail it in CI)."""
    try:
        return kafka_jars()
    except KafkaJarsMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Spark's Kafka source unavailable in CI: {exc}", pytrace=False)
        pytest.skip(f"Spark's Kafka source unavailable: {exc}")


def main() -> int:
    try:
        directory = resolve()
    except KafkaJarsMissing as exc:
        print(f"analyze --input kafka:// unavailable: {exc}", file=sys.stderr)
        return 1
    names = sorted(jar.name for jar in directory.glob("*.jar"))
    print(f"Spark's Kafka source for pyspark {pyspark.__version__}: {', '.join(names)}")
    source = [n for n in names if n.startswith(KAFKA_SOURCE_ARTIFACT)]
    if source and not source[0].endswith(f"-{pyspark.__version__}.jar"):
        print(f"note: {source[0]} (pyspark {pyspark.__version__}'s own is not on Maven Central)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
