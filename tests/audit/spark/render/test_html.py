"""The HTML report in a real browser, and what the page says about its baseline and its run.

``kafkaguard analyze report --html`` renders a week of synthetic traffic
(:func:`tests.support.analyze_data.report_trail`: 30 × 30 principals and topics, names up to
Kafka's 249 characters, East Asian wide names, counts in the millions). Headless Chromium
(Debian's ``chromium``, :mod:`tests.support.chromium`) lays it out and takes a screenshot:
every chart has its colours on screen, and no label reaches outside the chart that draws it.
The same measurement run on a page with a deliberately clipped label must find that label,
so a clipped chart cannot pass unnoticed.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.render.html import (
    COLOURS,
    DATA_ELEMENT_ID,
    NO_TRAFFIC,
    VIRIDIS,
    render,
    share_colour,
    shorten,
    text_width,
)
from tests.support import chromium
from tests.support.analyze_data import (
    LONG_PRINCIPAL,
    LONG_TOPIC,
    WIDE_PRINCIPAL,
    report_trail,
    write_audit,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]  # Spark, then Chromium: CI is slow

WIDTH, HEIGHT = 1400, 4200
"""The browser window: wide enough for the widest chart, tall enough for the whole page."""
CHARTS = (
    "decisions over time",
    "top denied principals",
    "top denied resources",
    "principal by topic heatmap",
)
CONTROL = (
    '<svg id="clip-control" xmlns="http://www.w3.org/2000/svg" width="120" height="30">'
    '<text x="60" y="20">a deliberately clipped label</text></svg>'
)
"""Appended to every probed page: the probe must report this label as clipped."""
SVG = "{http://www.w3.org/2000/svg}"


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _luminance(css: str) -> float:
    """WCAG 2 relative luminance of a CSS ``rgb(r, g, b)``."""
    channels = [int(v) / 255 for v in re.findall(r"\d+", css)[:3]]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(ink: str, background: str) -> float:
    a, b = sorted((_luminance(ink), _luminance(background)))
    return (b + 0.05) / (a + 0.05)


def _data(page: str) -> dict[str, Any]:
    text = page.split(f'id="{DATA_ELEMENT_ID}">', 1)[1].split("</script>", 1)[0]
    data: dict[str, Any] = json.loads(text)
    return data


@pytest.fixture(scope="module")
def report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The page as ``kafkaguard analyze report`` writes it, and the lines it printed."""
    root = tmp_path_factory.mktemp("report")
    trail = write_audit(root / "audit", report_trail())
    page = root / "report.html"
    argv = ["analyze", "report", "--input", str(trail), "--html", str(page)]
    argv += ["--since", "2026-11-16", "--until", "2026-11-23", "--baseline-days", "3"]
    argv += ["--output", str(root / "tables")]
    lines: list[str] = []
    assert analyze_main.run(cli.build_parser().parse_args(argv), spark, lines.append) == 0
    return page, lines


def _probe(page: str, directory: Path) -> tuple[chromium.Rendered, dict[str, Any]]:
    probed = directory / "probed.html"
    probed.write_text(
        page.replace("</body>", CONTROL + chromium.LAYOUT_PROBE + "</body>"), encoding="utf-8"
    )
    rendered = chromium.render(probed, directory, width=WIDTH, height=HEIGHT)
    return rendered, chromium.probe_result(rendered.dom)


@pytest.fixture(scope="module")
def browser(
    report: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[chromium.Rendered, dict[str, Any]]:
    chromium.require()
    return _probe(report[0].read_text(encoding="utf-8"), tmp_path_factory.mktemp("chromium"))


def _charts(probe: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in probe["charts"]}


def test_every_chart_is_drawn_in_the_screenshot(
    browser: tuple[chromium.Rendered, dict[str, Any]],
) -> None:
    rendered, probe = browser
    charts = _charts(probe)
    assert set(CHARTS) <= set(charts)
    assert probe["pageHeight"] <= HEIGHT  # the screenshot holds the whole page
    shot = rendered.screenshot
    expected = {
        "decisions over time": [COLOURS["allowed"], COLOURS["denied"], COLOURS["would_deny"]],
        "top denied principals": [COLOURS["denied"], COLOURS["would_deny"]],
        "top denied resources": [COLOURS["denied"], COLOURS["would_deny"]],
        "principal by topic heatmap": [NO_TRAFFIC, share_colour(0), share_colour(1)]
        + [share_colour(s) for s in (0.2, 0.5, 0.9)],  # the trail's 1/5, 1/2 and 9/10
    }
    for name in CHARTS:
        box = charts[name]["box"]
        assert box["width"] > 300 and box["height"] > 50, (name, box)
        colours = shot.colours(
            round(box["left"]), round(box["top"]), round(box["right"]), round(box["bottom"])
        )
        assert len(colours) > 10, (name, colours.most_common(5))  # not a blank region
        for colour in expected[name]:
            # Bars and cells are drawn in their exact colours (scale factor 1, no blending
            # inside a shape): dozens of pixels of each.
            assert colours[_rgb(colour)] >= 40, (name, colour, colours.most_common(8))


def test_no_label_is_clipped(browser: tuple[chromium.Rendered, dict[str, Any]]) -> None:
    _, probe = browser
    charts = _charts(probe)
    # The probe finds the control's label, and nothing else.
    assert [(c["chart"], c["text"]) for c in probe["clipped"]] == [
        ("clip-control", "a deliberately clipped label")
    ]
    assert probe["overlapping"] == []
    assert probe["overflowing"] == []  # HTML text (table cells: long names wrap) fits its box
    assert probe["pageWidth"] <= probe["viewportWidth"] == WIDTH
    for name in CHARTS:
        assert charts[name]["box"]["right"] <= WIDTH, name
        assert charts[name]["texts"] > 5, name
    # Each heatmap cell's share denied fits inside the cell, legibly (WCAG 2 level AA).
    assert len(probe["cells"]) > 300
    assert all(c["inside"] for c in probe["cells"])
    assert min(_contrast(c["ink"], c["background"]) for c in probe["cells"]) >= 4.5


def test_long_names_are_shortened_with_their_full_name_as_tooltip(
    browser: tuple[chromium.Rendered, dict[str, Any]],
) -> None:
    _, probe = browser
    shortened = {s["full"]: s["shown"] for s in probe["shortened"]}
    assert LONG_TOPIC in shortened and LONG_PRINCIPAL in shortened
    assert f"TOPIC:{LONG_TOPIC}" in shortened  # the top denied resources
    for full, shown in shortened.items():
        assert "…" in shown and len(shown) < len(full)
        head, tail = shown.split("…")
        assert full.startswith(head) and full.endswith(tail)
    assert WIDE_PRINCIPAL not in shortened  # short enough: shown whole, and not clipped


def test_the_probe_finds_a_clipped_chart_label(
    report: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """The heatmap made 40 px narrower than its layout needs: the probe reports the labels
    of its last columns as clipped (so the test above can fail)."""
    chromium.require()
    page = report[0].read_text(encoding="utf-8")
    svg = re.search(r'<svg [^>]*aria-label="principal by topic heatmap"', page)
    assert svg is not None
    width = int(re.search(r'width="(\d+)"', svg.group(0)).group(1))  # type: ignore[union-attr]
    narrowed = svg.group(0).replace(f'width="{width}"', f'width="{width - 40}"')
    narrowed = narrowed.replace(f'viewBox="0 0 {width} ', f'viewBox="0 0 {width - 40} ')
    _, probe = _probe(page.replace(svg.group(0), narrowed), tmp_path)
    clipped = [c for c in probe["clipped"] if c["chart"] == "principal by topic heatmap"]
    assert clipped, probe["clipped"]
    assert shorten(LONG_TOPIC, 28) in [c["text"] for c in clipped]


def test_the_heatmap_palette_is_ordered_and_every_cell_has_its_share_as_tooltip(
    report: tuple[Path, list[str]],
) -> None:
    assert (share_colour(0), share_colour(1)) == (VIRIDIS[-1], VIRIDIS[0])

    def luminance(colour: str) -> float:
        r, g, b = _rgb(colour)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    ramp = [luminance(share_colour(i / 20)) for i in range(21)]
    assert ramp == sorted(ramp, reverse=True) and len(set(ramp)) == 21  # lighter = fewer denied
    assert all(luminance(NO_TRAFFIC) > luminance(share_colour(0)) for _ in (0,))
    page = report[0].read_text(encoding="utf-8")
    svg = re.search(r'<svg [^>]*aria-label="principal by topic heatmap".*?</svg>', page, re.S)
    assert svg is not None
    root = ET.fromstring(svg.group(0))
    cells = [r for r in root.iter(f"{SVG}rect") if r.get("class", "").startswith("cell")]
    heat = _data(page)["heatmap"]
    assert len(cells) == len(heat["principals"]) * len(heat["topics"]) == 25 * 25
    assert all(float(r.get("width", 0)) >= 24 for r in cells)  # big enough to read
    counts = {(c["principal"], c["topic"]): c for c in heat["cells"]}
    for rect in cells:
        title = rect.findtext(f"{SVG}title") or ""
        principal, rest = title.split(" × ", 1)
        topic = rest.rsplit(": ", 1)[0]
        c = counts.get((principal, topic))
        if c is None:
            assert rect.get("class") == "cell empty" and title.endswith(": no decisions")
            assert rect.get("fill") == NO_TRAFFIC
            continue
        total = c["allowed"] + c["denied"]
        assert re.search(rf"% denied \({c['denied']} of {total} decisions; ", title), title
        assert rect.get("fill") == share_colour(c["denied"] / total)


def test_the_baseline_is_stated_and_set_by_baseline_days(report: tuple[Path, list[str]]) -> None:
    page_path, lines = report
    page = page_path.read_text(encoding="utf-8")
    data = _data(page)
    # The window is the trail's week; its first three days are the baseline.
    assert data["window"]["baseline"] == {
        "start": "2026-11-16T00:00:00.000Z",
        "cutoff": "2026-11-19T00:00:00.000Z",
        "end": "2026-11-23T00:00:00.000Z",
        "basis": "--baseline-days 3",
    }
    assert (
        "Baseline: 2026-11-16T00:00:00.000Z … 2026-11-19T00:00:00.000Z (UTC; --baseline-days 3)"
        in page
    )
    # report_trail: principal i first appears on day 16 + i % 7.
    new = sorted(r["principal"] for r in data["new_principals"])
    assert new == sorted(f"User:service-{i:02d}" for i in range(28) if i % 7 >= 3)
    assert any(line.startswith(f"{len(new)} new principals since 2026-11-19T00") for line in lines)


def test_the_run_is_shown(report: tuple[Path, list[str]]) -> None:
    page_path, lines = report
    page = page_path.read_text(encoding="utf-8")
    run = _data(page)["run"]
    assert run["records"] == len(report_trail())
    assert run["decisions"] == sum(r.count for r in report_trail())
    steps = [name for name, _ in run["steps"]]
    assert steps == [
        "read the trail (the window's cube, the hourly totals)",
        "roll up the tables",
        "write the tables (--output)",
        "render the page's tables",
    ]
    assert all(seconds > 0 for _, seconds in run["steps"])
    assert run["seconds"] >= sum(seconds for _, seconds in run["steps"]) - 0.01
    assert f"Read {run['records']:,} events (audit records; {run['decisions']:,} decisions)" in page
    assert f"The report job read {run['records']:,} events in {run['seconds']:.2f} s." in page
    assert any(line.startswith(f"read {run['records']} events in ") for line in lines)


def _page(baseline: dict[str, Any] | None, new: list[dict[str, Any]]) -> str:
    return render(
        {
            "generated_at": "2026-11-23T00:00:00.000Z",
            "window": {"baseline": baseline} if baseline else {},
            "totals": {"allowed": 1, "denied": 0, "would_deny": 0, "principals": 1},
            "decisions_over_time": [],
            "top_denied_principals": [],
            "top_denied_resources": [],
            "heatmap": {"principals": [], "topics": [], "cells": []},
            "new_principals": new,
            "by_operation": [],
            "by_listener": [],
        }
    )


def _section(page: str, title: str) -> str:
    return page.split(f"<h2>{title}</h2>", 1)[1].split("<h2>", 1)[0]


def test_no_new_principal_is_said_with_the_baseline() -> None:
    base = {"start": "2026-11-16T00:00:00.000Z", "end": "2026-11-23T00:00:00.000Z"}
    middle = {**base, "cutoff": "2026-11-19T12:00:00.000Z", "basis": "default: the middle"}
    text = _section(_page(middle, []), "New principals")
    assert "None." not in text
    assert (
        "No principal is new: every principal with a decision from 2026-11-19T12:00:00.000Z to"
        " 2026-11-23T00:00:00.000Z already had one in the baseline (2026-11-16T00:00:00.000Z …"
        " 2026-11-19T12:00:00.000Z)." in text
    )
    covering = {**base, "cutoff": "2026-12-01T00:00:00.000Z", "basis": "--baseline-days 15"}
    text = _section(_page(covering, []), "New principals")
    assert "the baseline covers the whole window (up to 2026-11-23T00:00:00.000Z)" in text
    assert "no baseline" in _section(_page(None, []), "New principals")
    assert "<p>Not recorded.</p>" in _section(_page(None, []), "Run")


def test_label_widths_are_upper_bounds() -> None:
    """The layout's text widths (monospaced) count East Asian wide characters twice."""
    assert text_width("ab") == pytest.approx(2 * 11 * 0.62)
    assert text_width("データ") == text_width("abcdef")
    assert shorten(WIDE_PRINCIPAL, 12) == "User…ービス"  # 11 advances: サ would make 13
    assert shorten(LONG_TOPIC, 28) == "payments.settl…iation.xxx.v2"


def test_baseline_options_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["analyze", "report", "--input", "x", "--baseline-days", "3"]
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([*argv, "--baseline-until", "2026-11-20"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
