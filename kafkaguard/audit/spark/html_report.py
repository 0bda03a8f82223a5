"""The self-contained HTML report: inline SVG charts, tables, and the chart data as JSON.

Owns presentation only: it takes the plain data :func:`.report.report_data` collected (small:
hourly totals, top-N lists, a bounded heatmap) and never touches Spark. No CDN, no script
that runs: the page renders from static SVG, so it can be mailed, archived or opened offline.
The same data is embedded as ``<script type="application/json" id="kafkaguard-report-data">``
so a test (or another tool) can check what the charts show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

DATA_ELEMENT_ID = "kafkaguard-report-data"
HEATMAP_CAPTION = "busiest principals and topics are shown; the principal_topic table has all"
COLOURS = {"allowed": "#2e7d32", "denied": "#c62828", "would_deny": "#ef6c00"}
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee}
th{text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;margin-right:1.2em}.legend i{display:inline-block;width:.9em;
height:.9em;margin-right:.3em;vertical-align:-.1em}svg text{font-size:11px;fill:#333}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _fmt(value: float) -> str:
    return f"{value:,.0f}"


def _svg(width: int, height: int, body: Sequence[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}">'
        + "".join(body)
        + "</svg>"
    )


def over_time_chart(rows: Sequence[Mapping[str, Any]]) -> str:
    """Stacked bars per hour: allowed, really denied, would-deny (log_only)."""
    width, height, left, bottom, top = 900, 260, 60, 40, 10
    if not rows:
        return "<p>No decisions in the window.</p>"
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max(int(r["allowed"]) + int(r["denied"]) for r in rows) or 1
    step = plot_w / len(rows)
    body = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" '
        'stroke="#999"/>',
        f'<text x="{left - 6}" y="{top + 4}" text-anchor="end">{_fmt(peak)}</text>',
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
                f"{_e(str(row['hour_start'])[5:16].replace('T', ' '))}</text>"
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
    width, row_h, left = 900, 22, 330
    height = row_h * len(rows) + 10
    peak = max(int(r["denied"]) for r in rows) or 1
    body = []
    for i, row in enumerate(rows):
        y = 5 + i * row_h
        denied, would = int(row["denied"]), int(row["would_deny"])
        full = (width - left - 90) * denied / peak
        part = (width - left - 90) * would / peak
        label = str(row[label_key])
        body += [
            f'<text x="{left - 8}" y="{y + 14}" text-anchor="end">{_e(label[:48])}</text>',
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


def _cell_colour(total: int, denied: int, peak: int) -> str:
    """Green (all allowed) to red (all denied), paler for fewer decisions (log scale)."""
    share = denied / total if total else 0.0
    strength = math.log1p(total) / math.log1p(peak) if peak else 0.0
    red, green = 46 + (198 - 46) * share, 125 + (40 - 125) * share
    blue = 50

    def mix(channel: float) -> int:
        return round(255 - (255 - channel) * (0.15 + 0.85 * strength))

    return f"#{mix(red):02x}{mix(green):02x}{mix(blue):02x}"


def heatmap(heat: Mapping[str, Any]) -> str:
    """Principal (rows) × topic (columns); the colour says volume and denied share."""
    principals, topics = list(heat["principals"]), list(heat["topics"])
    if not principals or not topics:
        return "<p>No topic decisions.</p>"
    # Column labels are rotated 55°: the longest (cut at 28 characters) sets the top margin.
    cell, left = 22, 240
    top = 16 + 5 * min(28, max(len(t) for t in topics))
    width, height = left + cell * len(topics) + 10, top + cell * len(principals) + 10
    cells = {(c["principal"], c["topic"]): c for c in heat["cells"]}
    peak = max((int(c["allowed"]) + int(c["denied"]) for c in heat["cells"]), default=0)
    body = []
    for j, topic in enumerate(topics):
        x = left + j * cell + cell / 2
        body.append(
            f'<text x="{x:.1f}" y="{top - 6}" transform="rotate(-55 {x:.1f} {top - 6})">'
            f"{_e(topic[:28])}</text>"
        )
    for i, principal in enumerate(principals):
        y = top + i * cell
        body.append(
            f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{_e(principal[:36])}</text>'
        )
        for j, topic in enumerate(topics):
            c = cells.get((principal, topic))
            if c is None:
                continue
            allowed, denied = int(c["allowed"]), int(c["denied"])
            body.append(
                f'<rect class="cell" x="{left + j * cell}" y="{y}" width="{cell - 2}" '
                f'height="{cell - 2}" fill="{_cell_colour(allowed + denied, denied, peak)}">'
                f"<title>{_e(principal)} × {_e(topic)}: {allowed} allowed, {denied} denied"
                "</title></rect>"
            )
    return _svg(width, height, body, "principal by topic heatmap")


def _per(hours: int) -> str:
    """The chart's bucket, in words (:func:`.report.bucket_hours`)."""
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


def render(data: Mapping[str, Any]) -> str:
    """The whole page for :func:`.report.report_data`'s output."""
    window, totals = data["window"], data["totals"]
    span = f"{window.get('since') or window.get('first_event') or '–'} … " + str(
        window.get("until") or window.get("last_event") or "–"
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
        f"Generated {_e(data['generated_at'])}.</p>",
        "<h2>Summary</h2>" + summary,
        f"<h2>Decisions over time ({_per(int(data.get('hours_per_bar', 1)))})</h2>"
        + over_time_chart(data["decisions_over_time"]),
        "<h2>Top denied principals</h2>"
        + bar_chart(data["top_denied_principals"], "principal", "top denied principals"),
        "<h2>Top denied resources</h2>"
        + bar_chart(data["top_denied_resources"], "resource", "top denied resources"),
        "<h2>Principal × topic</h2><p>Green: allowed, red: denied (the mix in between); paler:"
        f" fewer decisions. The {HEATMAP_CAPTION}.</p>" + heatmap(data["heatmap"]),
        f"<h2>New principals</h2><p>First decision at or after "
        f"{_e(window.get('new_principal_cutoff') or '–')}.</p>"
        + _table(data["new_principals"], ["principal", "first_seen", "total", "denied"]),
        "<h2>By operation</h2>"
        + _table(data["by_operation"], ["operation", "allowed", "denied", "would_deny"]),
        "<h2>By listener</h2>"
        + _table(
            data["by_listener"],
            ["listener", "security_protocol", "allowed", "denied", "would_deny"],
        ),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>kafkaguard audit report</title>"
        f"<style>{_CSS}</style></head><body>\n"
        + "\n".join(sections)
        + f'\n<script type="application/json" id="{DATA_ELEMENT_ID}">{embedded_json(data)}'
        "</script>\n</body></html>\n"
    )
