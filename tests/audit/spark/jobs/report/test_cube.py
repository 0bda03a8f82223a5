"""``report``: every table asserted exactly on a small trail, and the HTML page's structure."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.spark.jobs.report.cube import Report, build_report, report_data
from kafkaguard.audit.spark.render.html import DATA_ELEMENT_ID, render
from kafkaguard.audit.spark.trail.source import TimeRange, parse_time, read_audit
from tests.support import chromium
from tests.support.analyze_data import rec, write_audit

pytestmark = pytest.mark.spark

WINDOW = TimeRange(parse_time("2026-11-22T10:00:00Z"), parse_time("2026-11-22T14:00:00Z"))
SASL = {"listener": "SASL", "security_protocol": "SASL_PLAINTEXT"}


def ts(iso: str) -> datetime:
    """A timestamp as PySpark collects it: naive, in the driver's local zone."""
    return parse_time(iso).astimezone().replace(tzinfo=None)


def h(hour: int) -> datetime:
    return ts(f"2026-11-22T{hour:02d}:00:00Z")


TRAIL = [
    rec("2026-11-22T09:59:59.999Z", "User:erin", "READ", "TOPIC", "x"),  # before the window
    rec("2026-11-22T10:05:00.000Z", "User:alice", "WRITE", "TOPIC", "orders", count=10),
    rec("2026-11-22T10:20:00.000Z", "User:alice", "DESCRIBE", "TOPIC", "orders"),
    rec("2026-11-22T10:40:00.000Z", "User:bob", "READ", "TOPIC", "orders", "DENIED"),
    rec("2026-11-22T11:10:00.000Z", "User:bob", "READ", "TOPIC", "orders", "DENIED"),
    rec("2026-11-22T11:30:00.000Z", "User:bob", "READ", "GROUP", "g1", count=3),
    rec(
        "2026-11-22T12:30:00.000Z", "User:carol", "READ", "TOPIC", "payments", "DENIED",
        mode="log_only", **SASL,
    ),
    rec(
        "2026-11-22T13:00:00.000Z", "User:carol", "WRITE", "TOPIC", "payments",
        count=4, mode="log_only", **SASL,
    ),
    rec("2026-11-22T13:59:59.999Z", "User:dave", "DESCRIBE", "CLUSTER", "kafka-cluster", "DENIED"),
    rec("2026-11-22T14:00:00.000Z", "User:erin", "READ", "TOPIC", "x"),  # at the (open) end
]  # fmt: skip


@pytest.fixture(scope="module")
def report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Report:
    directory = write_audit(tmp_path_factory.mktemp("trail"), TRAIL)
    return build_report(read_audit(spark, str(directory), WINDOW), WINDOW, top_n=2)


def _check(df: DataFrame, rows: list[Row]) -> None:
    assertDataFrameEqual(df, rows, checkRowOrder=True)


def test_decisions_over_time(report: Report) -> None:
    _check(
        report.tables["decisions_over_time"],
        [
            Row(hour_start=h(10), hours=1, allowed=11, denied=1, would_deny=0),
            Row(hour_start=h(11), hours=1, allowed=3, denied=1, would_deny=0),
            Row(hour_start=h(12), hours=1, allowed=0, denied=1, would_deny=1),
            Row(hour_start=h(13), hours=1, allowed=4, denied=1, would_deny=0),
        ],
    )


LAST = "2026-11-22T13:59:59.999Z"


def test_by_principal(report: Report) -> None:
    _check(
        report.tables["by_principal"],
        [
            Row("User:alice", 11, 0, 0, 11, ts("2026-11-22T10:05:00Z"), ts("2026-11-22T10:20:00Z")),
            Row("User:bob", 3, 2, 0, 5, ts("2026-11-22T10:40:00Z"), ts("2026-11-22T11:30:00Z")),
            Row("User:carol", 4, 1, 1, 5, ts("2026-11-22T12:30:00Z"), ts("2026-11-22T13:00:00Z")),
            Row("User:dave", 0, 1, 0, 1, ts(LAST), ts(LAST)),
        ],
    )  # fmt: skip
    assert report.tables["by_principal"].columns == [
        "principal", "allowed", "denied", "would_deny", "total", "first_seen", "last_seen",
    ]  # fmt: skip


def test_by_operation_resource_and_listener(report: Report) -> None:
    _check(
        report.tables["by_operation"].select("operation", "allowed", "denied", "would_deny"),
        [Row("WRITE", 14, 0, 0), Row("READ", 3, 3, 1), Row("DESCRIBE", 1, 1, 0)],
    )
    _check(
        report.tables["by_resource"].select("resource_type", "resource_name", "total"),
        [
            Row("TOPIC", "orders", 13),
            Row("TOPIC", "payments", 5),
            Row("GROUP", "g1", 3),
            Row("CLUSTER", "kafka-cluster", 1),
        ],
    )
    _check(
        report.tables["by_listener"].select("listener", "security_protocol", *OUT),
        [Row("PLAINTEXT", "PLAINTEXT", 14, 3, 0), Row("SASL", "SASL_PLAINTEXT", 4, 1, 1)],
    )


OUT = ("allowed", "denied", "would_deny")


def test_top_denied(report: Report) -> None:
    # Ties (carol and dave, one denial each) are broken by name; --top 2 keeps two.
    _check(
        report.tables["top_denied_principals"],
        [Row(principal="User:bob", denied=2, would_deny=0), Row("User:carol", 1, 1)],
    )
    _check(
        report.tables["top_denied_resources"],
        [Row("TOPIC", "orders", 2, 0), Row("CLUSTER", "kafka-cluster", 1, 0)],
    )


def test_new_principals_after_the_middle_of_the_window(report: Report) -> None:
    assert report.cutoff == datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    _check(
        report.tables["new_principals"],
        [
            Row("User:carol", ts("2026-11-22T12:30:00Z"), 5, 1),
            Row("User:dave", ts("2026-11-22T13:59:59.999Z"), 1, 1),
        ],
    )


def test_principal_topic_matrix_and_hourly_cube(report: Report) -> None:
    _check(
        report.tables["principal_topic"],
        [
            Row("User:alice", "orders", 11, 0, 0),
            Row("User:bob", "orders", 0, 2, 0),
            Row("User:carol", "payments", 4, 1, 1),
        ],
    )
    cube = report.tables["hourly"]
    assert cube.count() == 8  # distinct (hour, principal, operation, resource, ...)
    total = cube.groupBy().sum("allowed", "denied").collect()[0]
    assert (total[0], total[1]) == (18, 4)  # every decision of the window, none outside


def test_baseline_until_defines_new_principals(spark: SparkSession, tmp_path: Path) -> None:
    directory = write_audit(tmp_path, TRAIL)
    built = build_report(
        read_audit(spark, str(directory), WINDOW),
        WINDOW,
        baseline_until=parse_time("2026-11-22T10:30:00Z"),
    )
    names = [r.principal for r in built.tables["new_principals"].collect()]
    assert names == ["User:bob", "User:carol", "User:dave"]


def test_a_long_window_is_charted_and_cubed_per_bucket(spark: SparkSession, tmp_path: Path) -> None:
    """Ten days are 241 hours, more than the chart's 200 bars: both the chart and the written
    cube are per 2 hours (aligned to UTC midnight), and the chart has no gap."""
    records = [
        rec("2026-11-10T00:10:00.000Z", "User:a", "READ", "TOPIC", "t"),
        rec("2026-11-10T01:50:00.000Z", "User:a", "READ", "TOPIC", "t", "DENIED"),
        rec("2026-11-10T02:00:00.000Z", "User:a", "READ", "TOPIC", "t", count=3),
        rec("2026-11-20T00:00:00.000Z", "User:b", "WRITE", "TOPIC", "t"),
    ]
    directory = write_audit(tmp_path, records, junk=False)
    built = build_report(read_audit(spark, str(directory)), TimeRange())
    assert built.hours == 2
    day = "2026-11-{}T{}:00:00Z"
    _check(
        built.tables["decisions_over_time"],
        [
            Row(hour_start=ts(day.format(10, "00")), hours=2, allowed=1, denied=1, would_deny=0),
            Row(hour_start=ts(day.format(10, "02")), hours=2, allowed=3, denied=0, would_deny=0),
            Row(hour_start=ts(day.format(20, "00")), hours=2, allowed=1, denied=0, would_deny=0),
        ],
    )
    assertDataFrameEqual(
        built.tables["hourly"].select("hour_start", "hours", "principal", *OUT, "first_seen"),
        [
            Row(ts(day.format(10, "00")), 2, "User:a", 1, 1, 0, ts("2026-11-10T00:10:00Z")),
            Row(ts(day.format(10, "02")), 2, "User:a", 3, 0, 0, ts("2026-11-10T02:00:00Z")),
            Row(ts(day.format(20, "00")), 2, "User:b", 1, 0, 0, ts("2026-11-20T00:00:00Z")),
        ],
    )
    data = report_data(built, TimeRange(), datetime(2026, 11, 21, tzinfo=UTC))
    bars = data["decisions_over_time"]
    assert (data["hours_per_bar"], len(bars)) == (2, 121)  # 10T00, 10T02, ... 20T00
    assert bars[60] == {
        "hour_start": "2026-11-15T00:00:00.000Z", "hours": 2, "allowed": 0, "denied": 0,
        "would_deny": 0,
    }  # fmt: skip
    assert "<h2>Decisions over time (per 2 hours)</h2>" in render(data)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.rects: list[dict[str, str | None]] = []
        self.external: list[str] = []
        self.script: list[str] = []
        self._in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag not in ("meta", "br"):
            self.stack.append(tag)
        if tag == "rect":
            self.rects.append(a)
        if tag in ("link", "img", "iframe") or (tag == "script" and "src" in a):
            self.external.append(tag)
        self._in_data = tag == "script" and a.get("id") == DATA_ELEMENT_ID

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (self.stack[-3:], tag)
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self._in_data:
            self.script.append(data)


def test_html_report_structure_and_embedded_data(report: Report) -> None:
    data = report_data(report, WINDOW, datetime(2026, 11, 23, 8, 0, tzinfo=UTC))
    page = render(data)
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert parser.stack == []  # every element closed, properly nested
    assert parser.external == []  # self-contained: no link, img, iframe or external script
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * 4
    embedded = json.loads("".join(parser.script))
    assert embedded == json.loads(json.dumps(data))
    assert embedded["hours_per_bar"] == 1
    assert embedded["decisions_over_time"] == [
        {"hour_start": f"2026-11-22T{hour}:00:00.000Z", "hours": 1, "allowed": allowed,
         "denied": denied, "would_deny": would_deny}
        for hour, allowed, denied, would_deny in (
            ("10", 11, 1, 0), ("11", 3, 1, 0), ("12", 0, 1, 1), ("13", 4, 1, 0)
        )
    ]  # fmt: skip
    assert embedded["totals"] == {"allowed": 18, "denied": 4, "would_deny": 1, "principals": 4}
    assert embedded["heatmap"]["principals"] == ["User:alice", "User:bob", "User:carol"]
    assert embedded["heatmap"]["topics"] == ["orders", "payments"]
    # Every chart is well-formed SVG: over time, two top-denied bar charts, the heatmap.
    svgs = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(svgs) == 4
    for svg in svgs:
        ET.fromstring(svg)
    classes = [r.get("class") for r in parser.rects]
    # Over time: hour 10 allowed+denied, 11 allowed+denied, 12 would-deny, 13 allowed+denied.
    over_time = ET.fromstring(svgs[0]).findall("{http://www.w3.org/2000/svg}rect")
    assert [r.get("class") for r in over_time] == [
        "bar allowed", "bar denied", "bar allowed", "bar denied",
        "bar would_deny", "bar allowed", "bar denied",
    ]  # fmt: skip
    assert classes.count("cell") == 3  # alice×orders, bob×orders, carol×payments
    assert classes.count("cell empty") == 3  # alice×payments, bob×payments, carol×orders
    titles = [t.text for t in ET.fromstring(svgs[3]).iter("{http://www.w3.org/2000/svg}title")]
    assert "User:bob × orders: 100% denied (2 of 2 decisions; 0 allowed, 0 would-deny)" in titles
    assert "User:carol × payments: 20% denied (1 of 5 decisions; 4 allowed, 1 would-deny)" in titles
    assert "User:alice × payments: no decisions" in titles


def test_html_escapes_hostile_names() -> None:
    hostile = '</script><img src=x onerror="alert(1)">'
    data = {
        "generated_at": "now",
        "window": {},
        "totals": {"allowed": 0, "denied": 1, "would_deny": 0, "principals": 1},
        "decisions_over_time": [],
        "top_denied_principals": [{"principal": hostile, "denied": 1, "would_deny": 0}],
        "top_denied_resources": [],
        "heatmap": {"principals": [hostile], "topics": [hostile], "cells": []},
        "new_principals": [{"principal": hostile, "first_seen": "t", "total": 1, "denied": 1}],
        "by_operation": [],
        "by_listener": [],
    }
    page = render(data)
    assert "<img" not in page and "</script><" not in page
    parser = _Page()
    parser.feed(page)
    assert parser.external == []
    assert json.loads("".join(parser.script))["top_denied_principals"][0]["principal"] == hostile


_PROBE = """<script>
const svgs = [...document.querySelectorAll("svg")].map((s) => {
  const r = s.getBoundingClientRect();
  return [Math.round(r.width), Math.round(r.height)];
});
const drawn = [...document.querySelectorAll("rect")].filter((r) => {
  const b = r.getBoundingClientRect();
  return b.width > 0 && b.height > 0;
}).map((r) => r.getAttribute("class"));
const data = JSON.parse(document.getElementById("DATA_ID").textContent);
document.body.setAttribute("data-probe", JSON.stringify({svgs, drawn, totals: data.totals}));
</script>""".replace("DATA_ID", DATA_ELEMENT_ID)


@pytest.mark.timeout(120)
def test_html_report_renders_in_headless_chromium(report: Report, tmp_path: Path) -> None:
    """Chromium (Debian's package; ``./dev test`` installs it) lays the page out: four charts
    of real size, every bar and heatmap cell drawn, the embedded data parseable in-browser.
    The probe script is added to a copy only: the report itself runs no script. (Labels and
    pixels: ``test_html_report.py``.)"""
    page = render(report_data(report, WINDOW, datetime(2026, 11, 23, tzinfo=UTC)))
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = chromium.render(probe, tmp_path, width=1400, height=900).dom
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found is not None, dom[-2000:]
    result = json.loads(html.unescape(found.group(1)))
    assert len(result["svgs"]) == 4 and all(w > 100 and h > 50 for w, h in result["svgs"])
    assert sorted(result["drawn"]) == sorted(
        ["bar allowed"] * 3 + ["bar denied"] * 3 + ["bar would_deny"]  # over time
        + ["bar denied"] * 2  # top denied principals: bob, carol (+ her would-deny part)
        + ["bar would_deny"]
        + ["bar denied"] * 2  # top denied resources: orders, kafka-cluster
        + ["cell"] * 3 + ["cell empty"] * 3
    )  # fmt: skip
    assert result["totals"] == {"allowed": 18, "denied": 4, "would_deny": 1, "principals": 4}
