"""bench/analyze_bench.py's generator (issue 36, item 9): the ``repeating`` shape is a fixed
population doing the same things every hour, so an hour's distinct decisions are a small share
of its records and ``analyze compact``'s hourly facts shrink it; the jobs run on it as users
run them; the same seed writes the same files; the ``varied`` shape stays what it was (nearly
every record a decision of its own).

120,000 records over one day: 5,000 an hour, about what the bench's 1M over seven days has
(5,952), so the share is the one the 1M runs see.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.trail.facts import (
    DAILY_DIR,
    FACTS_DIR,
    FACTS_SCHEMA,
    current_days,
    current_facts,
    rows_per_hour,
)

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
EVENTS, DAYS, SEED = 120_000, 1, 1


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "analyze_bench", REPO / "bench" / "analyze_bench.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


@pytest.fixture(scope="module")
def repeating(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("bench") / "repeating"
    bench.generate(spark, EVENTS, DAYS, data, "repeating", SEED)
    return data


def _lines(data: Path) -> list[dict[str, Any]]:
    """Every record of the trail, read as the JSON lines they are (not through Spark)."""
    return [
        json.loads(line)
        for path in sorted(data.glob("date=*/hour=*/*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def _decision(record: dict[str, Any]) -> tuple[Any, ...]:
    """What the hourly facts group a record by (``FACT_KEYS``), from the record itself."""
    return tuple(
        record[k]
        for k in (
            "principal", "listener", "security_protocol", "operation", "resource_type",
            "resource_name", "result", "would_deny", "reason",
        )
    )  # fmt: skip


def _use_decision(use: tuple[Any, ...]) -> tuple[Any, ...]:
    """The decision a use of :func:`bench.population` makes, from the population alone."""
    _, principal, _, _, operation, resource_type, name, log_only, denied, _ = use
    return (
        principal, "STAGING" if log_only else "EXTERNAL", "SASL_SSL", operation, resource_type,
        name, "DENIED" if denied else "ALLOWED", log_only and denied,
        "DefaultDeny" if denied else "AllowAcl",
    )  # fmt: skip


def test_every_hour_makes_the_populations_decisions_and_nothing_else(repeating: Path) -> None:
    records = _lines(repeating)
    assert len(records) == EVENTS
    by_hour: defaultdict[str, set[tuple[Any, ...]]] = defaultdict(set)
    per_hour: Counter[str] = Counter()
    for record in records:
        by_hour[record["time"][:13]].add(_decision(record))
        per_hour[record["time"][:13]] += 1
    expected = {_use_decision(u) for u in bench.population(SEED)}
    assert len(by_hour) == 24 * DAYS
    assert all(decisions == expected for decisions in by_hour.values())
    assert min(per_hour.values()) >= EVENTS // (24 * DAYS) - 1
    assert len(expected) / min(per_hour.values()) < 0.2  # facts keep at most 0.5
    # allowed: aggregates at the use's rate (±50%); denied: single decisions
    rates: defaultdict[tuple[Any, ...], list[int]] = defaultdict(list)
    for u in bench.population(SEED):
        rates[u[1:8]].append(u[9])
    for record in records:
        use = (
            record["principal"], record["client_host"], record["client_id"],
            record["operation"], record["resource_type"], record["resource_name"],
            record["mode"] == "log_only",
        )  # fmt: skip
        if record["result"] == "DENIED":
            assert (record["kind"], record["count"]) == ("decision", 1)
        else:
            assert record["kind"] == "aggregate"
            assert any(r // 2 <= record["count"] <= max(1, r * 3 // 2) for r in rates[use])


def test_the_bench_reports_the_shapes_decisions_per_hour(
    spark: SparkSession, repeating: Path, tmp_path: Path
) -> None:
    """``hourly_shape`` (what the bench prints) on the repeating shape is the population's
    decisions; on the varied shape of the same size nearly every record is a decision."""
    records, decisions = bench.hourly_shape(spark, repeating)
    assert (records, decisions) == (
        EVENTS / 24,
        len({_use_decision(u) for u in bench.population(SEED)}),
    )
    varied = tmp_path / "varied"
    bench.generate(spark, EVENTS, DAYS, varied, "varied")
    records, decisions = bench.hourly_shape(spark, varied)
    assert records == EVENTS / 24 and decisions / records > 0.8


def test_the_same_seed_writes_the_same_files(
    spark: SparkSession, repeating: Path, tmp_path: Path
) -> None:
    again = tmp_path / "again"
    bench.generate(spark, EVENTS, DAYS, again, "repeating", SEED)
    files = sorted(p.relative_to(repeating) for p in repeating.rglob("*.jsonl"))
    assert files == sorted(p.relative_to(again) for p in again.rglob("*.jsonl"))
    assert all((repeating / f).read_bytes() == (again / f).read_bytes() for f in files)
    assert bench.population(SEED + 1) != bench.population(SEED)


def analyze(spark: SparkSession, *argv: str) -> list[str]:
    """``kafkaguard analyze ...`` through the real parser, on the shared session."""
    lines: list[str] = []
    args = cli.build_parser().parse_args(["analyze", *argv])
    assert analyze_main.run(args, spark, lines.append) == 0, lines
    return lines


def test_the_jobs_run_on_it_and_the_hourly_facts_shrink_it(
    spark: SparkSession, repeating: Path, tmp_path: Path
) -> None:
    """``compact`` keeps facts for every hour (a fact per decision), ``propose`` proposes
    the same ACL file from the facts as from the records, and ``report`` counts every
    decision of the trail."""
    compacted = tmp_path / "compacted"
    common = ("--input", str(repeating), "--compacted", str(compacted))
    analyze(spark, "compact", "--input", str(repeating), "--output", str(compacted), "--grace", "0")
    stored = current_facts(compacted)
    assert len(stored) == 24 * DAYS and all(stored.values())
    facts = rows_per_hour(spark, compacted / FACTS_DIR, FACTS_SCHEMA)
    decisions = len({_use_decision(u) for u in bench.population(SEED)})
    assert facts == dict.fromkeys(stored, decisions)

    with_facts, from_records = tmp_path / "facts.yaml", tmp_path / "records.yaml"
    analyze(spark, "propose", *common, "--acl-file", str(with_facts))
    report = analyze(spark, "report", *common, "--html", str(tmp_path / "report.html"))
    assert current_days(compacted) == dict.fromkeys(sorted({h.date for h in stored}), True)
    for tree in (FACTS_DIR, DAILY_DIR):  # the compacted records are read
        shutil.rmtree(compacted / tree)
    analyze(spark, "propose", *common, "--acl-file", str(from_records))
    assert with_facts.read_text(encoding="utf-8") == from_records.read_text(encoding="utf-8")
    assert "User:svc-0001" in with_facts.read_text(encoding="utf-8")

    records = _lines(repeating)
    total = sum(r["count"] for r in records)
    allowed = sum(r["count"] for r in records if r["result"] == "ALLOWED")
    principals = len({r["principal"] for r in records})
    assert report[-1].startswith(
        f"{total} decisions: {allowed} allowed, {total - allowed} denied"
    ), report
    assert report[-1].endswith(f", {principals} principals"), report


def test_the_readme_command_prints_the_shape(repeating: Path, tmp_path: Path) -> None:
    """bench/README.md's ``--generate-only`` line, run as written (another ``--data``)."""
    text = (REPO / "bench" / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines() if "--generate-only" in ln and "--shape" in ln]
    argv = line.split("#")[0].split()
    assert argv[:2] == [".venv/bin/python", "bench/analyze_bench.py"]
    argv[argv.index("--data") + 1] = str(tmp_path / "trail")
    done = subprocess.run(
        [sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records, decisions = EVENTS / 24, len({_use_decision(u) for u in bench.population(SEED)})
    assert (
        f"per hour: {records:,.0f} records, {decisions:,.0f} distinct decisions "
        f"(decisions/records {decisions / records:.3f})"
    ) in done.stdout
