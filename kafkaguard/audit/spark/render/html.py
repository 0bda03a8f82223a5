"""The self-contained HTML report: inline SVG charts, tables, and the chart data as JSON.

Owns presentation only: it takes the plain data
:func:`kafkaguard.audit.spark.jobs.report.cube.report_data` collected (small: hourly totals, top-N
lists, a bounded heatmap) and never touches Spark. No CDN, no script that runs: the page renders
from static SVG, so it can be mailed, archived or opened offline. The same data is embedded as
``<script type="application/json" id="kafkaguard-report-data">``
so a test (or another tool) can check what the charts show.

Since no script runs, every chart's layout is computed here: chart text is monospaced, so a
label's width is known (:func:`text_width`) and each chart leaves room for its longest label.
A name too long for its place is shortened in the middle, its full name the tooltip
(:func:`shorten`); table cells wrap long names. The heatmap's colour is one quantity, the
share denied, on a perceptually ordered ramp (:data:`VIRIDIS`), with the number in the cell
and the counts in its tooltip. ``tests/audit/spark/render/test_html.py`` lays the page out in
headless Chromium and checks that no label leaves its chart.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

DATA_ELEMENT_ID = "kafkaguard-report-data"
HEATMAP_CAPTION = "busiest principals and topics are shown; the principal_topic table has all"
COLOURS = {"allowed": "#2e7d32", "denied": "#c62828", "would_deny": "#ef6c00"}
FONT_PX = 11
"""Chart text size. Chart text is monospaced so that its width is known here, where the
layout is computed (the page runs no script): :func:`text_width`."""
_CHAR_EM = 0.62
"""A monospaced glyph's advance in em, slightly over DejaVu Sans Mono's and Liberation Mono's
0.60, so a margin computed from it is never short."""
ROW_LABEL_CHARS = 40
COLUMN_LABEL_CHARS = 28
BAR_LABEL_CHARS = 48
"""Longest label shown in full; a longer one is shortened in the middle (both ends tell
resources apart: a shared prefix, a version suffix) and its full name is the tooltip."""
CELL_PX = 30
"""A heatmap cell: room for its share denied as text ("100")."""
VIRIDIS = (
    "#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
    "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725",
)  # fmt: skip
"""matplotlib's viridis at 0, 0.1, ... 1: perceptually uniform, ordered by lightness and
readable with every common colour-vision deficiency. The heatmap runs it backwards: all
allowed is the light end, all denied the dark end."""
NO_TRAFFIC = "#e4e4e4"
"""A cell without decisions: a grey that no point of the ramp comes near."""
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1240px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee}
th{text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
td{overflow-wrap:anywhere}.chart{overflow-x:auto}
.legend span{display:inline-block;margin-right:1.2em}.legend i{display:inline-block;width:.9em;
height:.9em;margin-right:.3em;vertical-align:-.1em}.legend i.ramp{width:8em}
svg text{font-size:11px;font-family:"DejaVu Sans Mono","Liberation Mono",Menlo,Consolas,
monospace;fill:#333}svg text.share{font-size:10px;pointer-events:none;fill:#000}
svg text.on-dark{fill:#fff}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _fmt(value: float) -> str:
    return f"{value:,.0f}"


def _units(char: str) -> int:
    """Advances of one character: East Asian wide and full-width characters take two."""
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def text_width(text: str, px: float = FONT_PX) -> float:
    """An upper bound of ``text``'s width in chart text (monospaced), in pixels."""
    return sum(_units(c) for c in text) * px * _CHAR_EM


def shorten(text: str, chars: int) -> str:
    """``text`` if it fits in ``chars`` advances, else its start and end around an ellipsis.

    >>> shorten("payments.eu-west-1.orders.v2", 16)
    'payments…ders.v2'
    """
    if sum(_units(c) for c in text) <= chars:
        return text
    room = chars - 1
    head, tail, used = 0, 0, 0
    while True:
        take_head = head <= tail
        index = head if take_head else len(text) - 1 - tail
        if used + _units(text[index]) > room:
            break
        used += _units(text[index])
        head, tail = (head + 1, tail) if take_head else (head, tail + 1)
    return text[:head] + "…" + text[len(text) - tail :]


def _label(text: str, chars: int, attributes: str) -> str:
    """A ``<text>`` of at most ``chars`` advances; shortened, it carries the full name as its
    tooltip (an SVG ``<title>`` on the group)."""
    shown = shorten(text, chars)
    element = f"<text {attributes}>{_e(shown)}</text>"
    if shown == text:
        return element
    return f'<g class="label"><title>{_e(text)}</title>{element}</g>'


def _svg(width: float, height: float, body: Sequence[str], label: str) -> str:
    w, h = math.ceil(width), math.ceil(height)
    return (
        f'<div class="chart"><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="{_e(label)}">'
        + "".join(body)
        + "</svg></div>"
    )


def _time_label(hour_start: Any) -> str:
    return str(hour_start)[5:16].replace("T", " ")


def over_time_chart(rows: Sequence[Mapping[str, Any]]) -> str:
    """Stacked bars per hour: allowed, really denied, would-deny (log_only)."""
    if not rows:
        return "<p>No decisions in the window.</p>"
    peak = max(int(r["allowed"]) + int(r["denied"]) for r in rows) or 1
    half_time = text_width(_time_label(rows[0]["hour_start"])) / 2
    # The axis label left of the plot, a time label centred under the first and last bar.
    left = math.ceil(max(text_width(_fmt(peak)) + 10, half_time + 4))
    right = math.ceil(half_time + 4)
    width, height, bottom, top = 900, 260, 40, 10
    plot_w, plot_h = width - left - right, height - bottom - top
    step = plot_w / len(rows)
    body = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#999"/>',
        f'<text x="{left - 6}" y="{top + 8}" text-anchor="end">{_fmt(peak)}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>',
    ]
    label_every = max(1, math.ceil(len(rows) / 8))
    for i, row in enumerate(rows):
        allowed, denied, would = int(row["allowed"]), int(row["denied"]), int(row["would_deny"])
        x = left + i * step
        y: float = top + plot_h
        tip = (
            f"{row['hour_start']}: {allowed} allowed, {denied} denied "
            f"({would} would-deny in log_only)"
        )
        for kind, value in (
            ("allowed", allowed),
            ("denied", denied - would),
            ("would_deny", would),
        ):
            h = plot_h * value / peak
            if h <= 0:
                continue
            y -= h
            body.append(
                f'<rect class="bar {kind}" x="{x + step * 0.1:.1f}" y="{y:.1f}" '
                f'width="{max(step * 0.8, 1):.1f}" height="{h:.1f}" fill="{COLOURS[kind]}">'
                f"<title>{_e(tip)}</title></rect>"
            )
        if i % label_every == 0:
            body.append(
                f'<text x="{x + step / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                f"{_e(_time_label(row['hour_start']))}</text>"
            )
    legend = "".join(
        f'<span><i style="background:{COLOURS[k]}"></i>{label}</span>'
        for k, label in (("allowed", "allowed"), ("denied", "denied"), ("would_deny", "would-deny"))
    )
    return _svg(width, height, body, "decisions over time") + f'<p class="legend">{legend}</p>'


def bar_chart(rows: Sequence[Mapping[str, Any]], label_key: str, title: str) -> str:
    """Horizontal bars of ``denied`` per label, the would-deny part in orange."""
    if not rows:
        return "<p>No denied decisions.</p>"
    labels = [str(row[label_key]) for row in rows]
    width, row_h = 900, 22
    left = math.ceil(max(text_width(shorten(t, BAR_LABEL_CHARS)) for t in labels) + 14)
    right = math.ceil(max(text_width(_fmt(int(r["denied"]))) for r in rows) + 12)
    span = width - left - right
    height = row_h * len(rows) + 10
    peak = max(int(r["denied"]) for r in rows) or 1
    body = []
    for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
        y = 5 + i * row_h
        denied, would = int(row["denied"]), int(row["would_deny"])
        full = span * denied / peak
        part = span * would / peak
        body += [
            _label(label, BAR_LABEL_CHARS, f'x="{left - 8}" y="{y + 14}" text-anchor="end"'),
            f'<rect class="bar denied" x="{left}" y="{y + 3}" width="{full:.1f}" height="15" '
            f'fill="{COLOURS["denied"]}"><title>{_e(label)}: {denied} denied</title></rect>',
        ]
        if part > 0:
            body.append(
                f'<rect class="bar would_deny" x="{left + full - part:.1f}" y="{y + 3}" '
                f'width="{part:.1f}" height="15" fill="{COLOURS["would_deny"]}">'
                f"<title>{_e(label)}: {would} would-deny</title></rect>"
            )
        body.append(f'<text x="{left + full + 6:.1f}" y="{y + 14}">{_fmt(denied)}</text>')
    return _svg(width, height, body, title)


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def share_colour(share: float) -> str:
    """The heatmap colour of a share denied in [0, 1]: :data:`VIRIDIS` backwards, linearly
    between its stops (no red, no green, nothing blended between them)."""
    t = (1.0 - min(1.0, max(0.0, share))) * (len(VIRIDIS) - 1)
    low = min(int(t), len(VIRIDIS) - 2)
    frac = t - low
    a, b = _rgb(VIRIDIS[low]), _rgb(VIRIDIS[low + 1])
    r, g, bl = (round(x + (y - x) * frac) for x, y in zip(a, b, strict=True))
    return f"#{r:02x}{g:02x}{bl:02x}"


def _on_dark(background: str) -> bool:
    """Whether text on ``background`` is white rather than black: the one with the higher
    contrast (WCAG 2 relative luminance; they tie at 0.179, where both reach 4.58:1, above
    the 4.5:1 of WCAG 2's level AA for small text)."""

    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in _rgb(background))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.179


def share_text(allowed: int, denied: int) -> str:
    """The share denied in whole percent, never rounded to a misleading 0 or 100."""
    total = allowed + denied
    if total == 0 or denied == 0:
        return "0"
    share = 100 * denied / total
    if share < 1:
        return "<1"
    if share > 99 and allowed:
        return ">99"
    return f"{share:.0f}"


_COS45 = math.sqrt(0.5)


def heatmap(heat: Mapping[str, Any]) -> str:
    """Principal (rows) × topic (columns); the colour and the number are the share denied."""
    principals, topics = list(heat["principals"]), list(heat["topics"])
    if not principals or not topics:
        return "<p>No topic decisions.</p>"
    cell = CELL_PX
    # Row labels end left of the grid; column labels rise at 45° from above their column, so
    # they need room above the grid and, for the last columns, right of it.
    left = math.ceil(max(text_width(shorten(p, ROW_LABEL_CHARS)) for p in principals) + 14)
    widths = [text_width(shorten(t, COLUMN_LABEL_CHARS)) for t in topics]
    top = math.ceil(max(widths) * _COS45 + FONT_PX + 12)
    right = max(left + j * cell + cell / 2 + w * _COS45 + FONT_PX for j, w in enumerate(widths))
    width = max(left + cell * len(topics), right) + 6
    height = top + cell * len(principals) + 6
    cells = {(c["principal"], c["topic"]): c for c in heat["cells"]}
    body = []
    for j, topic in enumerate(topics):
        x = left + j * cell + cell / 2
        body.append(
            _label(
                topic,
                COLUMN_LABEL_CHARS,
                f'x="{x:.1f}" y="{top - 6}" transform="rotate(-45 {x:.1f} {top - 6})"',
            )
        )
    for i, principal in enumerate(principals):
        y = top + i * cell
        body.append(
            _label(
                principal,
                ROW_LABEL_CHARS,
                f'x="{left - 8}" y="{y + cell / 2 + 3:.1f}" text-anchor="end"',
            )
        )
        for j, topic in enumerate(topics):
            x = left + j * cell
            square = f'x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}"'
            c = cells.get((principal, topic))
            if c is None:
                body.append(
                    f'<rect class="cell empty" {square} fill="{NO_TRAFFIC}">'
                    f"<title>{_e(principal)} × {_e(topic)}: no decisions</title></rect>"
                )
                continue
            allowed, denied, would = int(c["allowed"]), int(c["denied"]), int(c["would_deny"])
            total = allowed + denied
            fill = share_colour(denied / total if total else 0.0)
            share = share_text(allowed, denied)
            body += [
                f'<rect class="cell" {square} fill="{fill}"><title>{_e(principal)} × '
                f"{_e(topic)}: {share}% denied ({denied} of {total} decisions; "
                f"{allowed} allowed, {would} would-deny)</title></rect>",
                f'<text class="share{" on-dark" if _on_dark(fill) else ""}" '
                f'x="{x + (cell - 2) / 2:.1f}" y="{y + cell / 2 + 2:.1f}" text-anchor="middle">'
                f"{_e(share)}</text>",
            ]
    return _svg(width, height, body, "principal by topic heatmap")


def heatmap_legend() -> str:
    """The ramp from all allowed to all denied, and the no-traffic grey."""
    stops = ",".join(share_colour(i / 10) for i in range(11))
    return (
        '<p class="legend"><span>0% denied <i class="ramp" style="background:'
        f'linear-gradient(to right,{stops})"></i> 100% denied</span>'
        f'<span><i style="background:{NO_TRAFFIC}"></i>no decisions</span></p>'
    )


def _per(hours: int) -> str:
    """The chart's bucket, in words
    (:func:`kafkaguard.audit.spark.jobs.report.cube.bucket_hours`)."""
    if hours == 1:
        return "per hour"
    if hours % 24 == 0:
        return "per day" if hours == 24 else f"per {hours // 24} days"
    return f"per {hours} hours"


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = []
    for row in rows:
        tds = []
        for c in columns:
            value = row.get(c)
            if isinstance(value, int | float) and not isinstance(value, bool):
                tds.append(f'<td class="n">{_fmt(value)}</td>')
            else:
                tds.append(f"<td>{_e('' if value is None else value)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def embedded_json(data: Mapping[str, Any]) -> str:
    """JSON safe inside ``<script>``: no ``<``, ``>`` or ``&`` can end the element early."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def new_principals_section(data: Mapping[str, Any]) -> str:
    """The new principals, always with the baseline they are new against, and a sentence
    (never a bare "None") when there are none."""
    window = data["window"]
    baseline = window.get("baseline") or {}
    cutoff = baseline.get("cutoff") or window.get("new_principal_cutoff")
    if cutoff is None:
        return "<p>No decisions in the window: there is no baseline, so no principal is new.</p>"
    start, end = baseline.get("start") or "–", baseline.get("end") or "–"
    basis = baseline.get("basis") or "--baseline-until"
    head = (
        f"<p>Baseline: {_e(start)} … {_e(cutoff)} (UTC; {_e(basis)}). A principal is new when"
        f" its first decision in the window is at or after {_e(cutoff)}.</p>"
    )
    rows = data["new_principals"]
    if rows:
        return head + _table(rows, ["principal", "first_seen", "total", "denied"])
    if baseline.get("end") and cutoff >= baseline["end"]:
        return head + (
            f"<p>No principal is new: the baseline covers the whole window (up to {_e(end)});"
            " an earlier --baseline-until or fewer --baseline-days leave time after it.</p>"
        )
    return head + (
        f"<p>No principal is new: every principal with a decision from {_e(cutoff)} to"
        f" {_e(end)} already had one in the baseline ({_e(start)} … {_e(cutoff)}).</p>"
    )


def run_section(data: Mapping[str, Any]) -> str:
    """How long the report job took, step by step, and how much of the trail it read."""
    run = data.get("run")
    if not run:
        return "<p>Not recorded.</p>"
    steps = [{"step": name, "seconds": f"{seconds:.2f}"} for name, seconds in run.get("steps", [])]
    steps.append({"step": "total", "seconds": f"{run['seconds']:.2f}"})
    return (
        f"<p>Read {_fmt(run['records'])} events (audit records; {_fmt(run['decisions'])}"
        f" decisions) in {run['seconds']:.2f} s.</p>" + _table(steps, ["step", "seconds"])
    )


def render(data: Mapping[str, Any]) -> str:
    """The whole page for :func:`kafkaguard.audit.spark.jobs.report.cube.report_data`'s output."""
    window, totals = data["window"], data["totals"]
    span = f"{window.get('since') or window.get('first_event') or '–'} … " + str(
        window.get("until") or window.get("last_event") or "–"
    )
    run = data.get("run")
    took = (
        f" The report job read {_fmt(run['records'])} events in {run['seconds']:.2f} s."
        if run
        else ""
    )
    summary = _table(
        [
            {"": "decisions", "value": totals["allowed"] + totals["denied"]},
            {"": "allowed", "value": totals["allowed"]},
            {"": "denied", "value": totals["denied"]},
            {"": "of which would-deny (log_only, forwarded)", "value": totals["would_deny"]},
            {"": "principals", "value": totals["principals"]},
        ],
        ["", "value"],
    )
    sections = [
        f"<h1>kafkaguard audit report</h1><p>Window: {_e(span)} (UTC). "
        f"Generated {_e(data['generated_at'])}.{took}</p>",
        "<h2>Summary</h2>" + summary,
        f"<h2>Decisions over time ({_per(int(data.get('hours_per_bar', 1)))})</h2>"
        + over_time_chart(data["decisions_over_time"]),
        "<h2>Top denied principals</h2>"
        + bar_chart(data["top_denied_principals"], "principal", "top denied principals"),
        "<h2>Top denied resources</h2>"
        + bar_chart(data["top_denied_resources"], "resource", "top denied resources"),
        "<h2>Principal × topic</h2><p>Each cell's colour and number: the share of its"
        " decisions that were denied, in percent (the tooltip has the counts). The"
        f" {HEATMAP_CAPTION}.</p>" + heatmap_legend() + heatmap(data["heatmap"]),
        "<h2>New principals</h2>" + new_principals_section(data),
        "<h2>By operation</h2>"
        + _table(data["by_operation"], ["operation", "allowed", "denied", "would_deny"]),
        "<h2>By listener</h2>"
        + _table(
            data["by_listener"],
            ["listener", "security_protocol", "allowed", "denied", "would_deny"],
        ),
        "<h2>Run</h2>" + run_section(data),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>kafkaguard audit report</title>"
        f"<style>{_CSS}</style></head><body>\n"
        + "\n".join(sections)
        + f'\n<script type="application/json" id="{DATA_ELEMENT_ID}">{embedded_json(data)}'
        "</script>\n</body></html>\n"
    )
