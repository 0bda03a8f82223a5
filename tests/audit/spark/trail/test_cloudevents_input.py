"""Every job reads ``audit.format: cloudevents`` trails, and trails mixing both formats, to
the same records (hence the same results) as kafkaguard's own format."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.config import FORMAT_CLOUDEVENTS, FORMAT_KAFKAGUARD
from kafkaguard.audit.events import AuditEvent
from kafkaguard.audit.spark.jobs.compact.parquet import compact
from kafkaguard.audit.spark.jobs.propose.grants import propose
from kafkaguard.audit.spark.solver.proposal import render_acl_file
from kafkaguard.audit.spark.trail.schema import RECORD_COLUMNS
from kafkaguard.audit.spark.trail.source import parse_audit_values, read_audit
from kafkaguard.policy.explain import acl_json
from kafkaguard.policy.model import AclOperation, PatternType, ResourceType, acl_binding
from tests.audit.spark.jobs.propose.test_grants import TRAIL
from tests.support.analyze_data import epoch, rec, set_mtimes, write_audit

pytestmark = pytest.mark.spark

_ACL = acl_json(
    acl_binding(
        ResourceType.TRANSACTIONAL_ID, "tx-", "User:*", AclOperation.WRITE,
        pattern_type=PatternType.PREFIXED,
    )
)  # fmt: skip
RECORDS: list[AuditEvent] = [
    *TRAIL,
    AuditEvent(**{  # type: ignore[arg-type]
        **rec("2026-11-22T11:00:00.001Z", "User:ü", "WRITE", "TRANSACTIONAL_ID", "tx-1").to_dict(),
        "acl": _ACL, "listener": "odd/listener+%", "client_id": None, "api_key": 22,
        "api_name": "InitProducerId", "correlation_id": 2_000_000_000,
    }),
    # A group member (assignedPrincipals in CloudEvents), decided by its group's ACL.
    AuditEvent(**{  # type: ignore[arg-type]
        **rec("2026-11-22T11:00:00.002Z", "User:gina", "READ", "TOPIC", "orders",
              groups=("Group:eng", "Group:ops")).to_dict(),
        "acl": acl_json(acl_binding(ResourceType.TOPIC, "orders", "Group:eng", AclOperation.READ)),
    }),
]  # fmt: skip
FORMATS = {
    "kafkaguard": (FORMAT_KAFKAGUARD,),
    "cloudevents": (FORMAT_CLOUDEVENTS,),
    "mixed": (FORMAT_CLOUDEVENTS, FORMAT_KAFKAGUARD),
}


@pytest.fixture(scope="module")
def trails(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {
        name: str(write_audit(tmp_path_factory.mktemp(name), RECORDS, formats=formats))
        for name, formats in FORMATS.items()
    }


def _rows(df: DataFrame) -> DataFrame:
    return df.select(*RECORD_COLUMNS)


def test_both_formats_read_to_the_same_records(spark: SparkSession, trails: dict[str, str]) -> None:
    expected = read_audit(spark, trails["kafkaguard"])
    assert expected.count() == len(RECORDS)
    assert expected.where("principal = 'User:gina'").first()["groups"] == ["Group:eng", "Group:ops"]
    for name in ("cloudevents", "mixed"):
        assertDataFrameEqual(_rows(read_audit(spark, trails[name])), _rows(expected))


def test_propose_is_the_same_from_either_format(
    spark: SparkSession, trails: dict[str, str]
) -> None:
    files = {
        name: render_acl_file(propose(read_audit(spark, path)).acls)
        for name, path in trails.items()
    }
    assert "User:alice" in files["kafkaguard"]
    assert files["cloudevents"] == files["mixed"] == files["kafkaguard"]


def test_topic_values_of_either_format_parse_alike(spark: SparkSession) -> None:
    def values(record_format: str) -> DataFrame:
        rows = [(r.encode(record_format),) for r in RECORDS]
        return parse_audit_values(spark.createDataFrame(rows, "value binary"))

    assertDataFrameEqual(values(FORMAT_CLOUDEVENTS), values(FORMAT_KAFKAGUARD))


def test_compaction_of_a_cloudevents_trail(spark: SparkSession, tmp_path: Path) -> None:
    ours = write_audit(tmp_path / "ours", RECORDS, junk=False)
    theirs = write_audit(tmp_path / "theirs", RECORDS, junk=False, formats=(FORMAT_CLOUDEVENTS,))
    later = epoch("2026-11-23T00:00:00+00:00")
    for trail in (ours, theirs):
        set_mtimes(trail, later - 3600)
        compact(lambda: spark, trail, trail / "_compacted", now=later)
    assertDataFrameEqual(_rows(read_audit(spark, str(theirs))), _rows(read_audit(spark, str(ours))))
    assert any((theirs / "_compacted").rglob("*.parquet"))
