"""Headless Chromium (Debian's ``chromium`` package) for tests of the HTML report.

:func:`render` loads a local page once and returns what Chromium laid out: the DOM after the
page's scripts ran (``--dump-dom``) and a PNG screenshot of the window
(``--screenshot``), decoded by :func:`read_png` (the stdlib only: zlib and the PNG filters).
:data:`LAYOUT_PROBE` is a script a test appends to a copy of the page: it measures every SVG
text against the chart that draws it and writes the result into the DOM, where
:func:`probe_result` reads it. :func:`require` finds the binary or skips the calling test
(fails it in CI). Chromium runs in its own process group, killed by that id on a timeout.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import struct
import subprocess
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import debian

PROBE_ATTRIBUTE = "data-layout-probe"

LAYOUT_PROBE = (
    """<script>
(() => {
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return {left: r.left + scrollX, top: r.top + scrollY, right: r.right + scrollX,
            bottom: r.bottom + scrollY, width: r.width, height: r.height};
  };
  const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5
    && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
  const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5
    && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const charts = [], clipped = [], overlapping = [], cells = [], shortened = [];
  for (const svg of document.querySelectorAll("svg")) {
    const frame = box(svg);
    const name = svg.getAttribute("aria-label") || svg.id || "svg";
    const texts = [...svg.querySelectorAll("text")];
    charts.push({name, box: frame, texts: texts.length});
    for (const text of texts) {
      const b = box(text);
      if (!inside(b, frame)) clipped.push({chart: name, text: text.textContent, box: b});
      const cell = text.classList.contains("share") ? text.previousElementSibling : null;
      if (cell) {
        cells.push({text: text.textContent, inside: inside(b, box(cell)),
                    ink: getComputedStyle(text).fill, background: getComputedStyle(cell).fill});
      }
      const group = text.parentElement;
      if (group.matches("g.label")) {
        shortened.push({shown: text.textContent, full: group.querySelector("title").textContent});
      }
    }
    const flat = texts.filter((t) => !t.hasAttribute("transform"));
    for (let i = 0; i < flat.length; i++) {
      for (let j = i + 1; j < flat.length; j++) {
        if (overlap(box(flat[i]), box(flat[j]))) {
          overlapping.push({chart: name, texts: [flat[i].textContent, flat[j].textContent]});
        }
      }
    }
  }
  const overflowing = [...document.querySelectorAll("td, th, p, h1, h2")]
    .filter((e) => e.scrollWidth > e.clientWidth + 1)
    .map((e) => e.textContent.slice(0, 80));
  const page = document.documentElement;
  document.body.setAttribute("PROBE", JSON.stringify({
    charts, clipped, overlapping, cells, shortened, overflowing,
    pageWidth: page.scrollWidth, pageHeight: page.scrollHeight, viewportWidth: innerWidth,
  }));
})();
</script>"""
).replace("PROBE", PROBE_ATTRIBUTE)
"""Per chart (``<svg>``, named by its ``aria-label``): its box; ``clipped``: each text whose
box is not inside its chart's (the SVG viewport clips it); ``overlapping``: pairs of unrotated
texts of one chart that overlap; ``cells``: whether each ``text.share`` lies inside the cell
drawn before it, and the colours (CSS ``rgb(...)``) it is drawn in and on; ``shortened``:
labels shown shortened, with their tooltip; ``overflowing``: HTML text wider than its box.
Boxes are in page pixels (CSS pixels at scale factor 1)."""


def require() -> str:
    """The path of ``chromium``; skip (fail in CI) without it."""
    return debian.require("chromium", "chromium")


class ChromiumError(AssertionError):
    """Chromium did not render the page."""


@dataclass(frozen=True, slots=True)
class Rendered:
    dom: str
    """The serialized DOM after the page's scripts ran."""
    screenshot: Image
    """The window, from the top of the page."""


def render(
    page: Path, directory: Path, *, width: int, height: int, timeout_s: float = 90
) -> Rendered:
    """Load ``page`` in a headless Chromium whose window is ``width`` × ``height`` CSS pixels
    (scale factor 1, no scroll bars); ``directory`` holds its profile and the screenshot."""
    binary = require()
    shot = directory / "screenshot.png"
    argv = [
        binary,
        "--headless",
        "--no-sandbox",  # tests may run as root, where the sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={directory / 'profile'}",
        f"--window-size={width},{height}",
        f"--screenshot={shot}",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its zygote and renderers share the group killed below
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ChromiumError(f"chromium did not render {page} within {timeout_s} s") from None
    if proc.returncode != 0 or not shot.is_file():
        raise ChromiumError(f"chromium exited {proc.returncode}:\n{err[-3000:]}")
    return Rendered(out, read_png(shot.read_bytes()))


def probe_result(dom: str) -> dict[str, Any]:
    """What :data:`LAYOUT_PROBE` wrote into the DOM."""
    found = re.search(rf'{PROBE_ATTRIBUTE}="([^"]*)"', dom)
    if found is None:
        raise ChromiumError(f"the layout probe did not run:\n{dom[-2000:]}")
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


@dataclass(frozen=True, slots=True)
class Image:
    """An 8-bit RGB(A) image; ``rows[y]`` holds ``width * channels`` bytes."""

    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        i = x * self.channels
        r, g, b = self.rows[y][i : i + 3]
        return r, g, b

    def pixels(self, left: int, top: int, right: int, bottom: int) -> Iterator[tuple[int, ...]]:
        """The RGB of every pixel in the box (clamped to the image), row by row."""
        c = self.channels
        left, right = max(0, left), min(self.width, right)
        for y in range(max(0, top), min(self.height, bottom)):
            row = self.rows[y]
            for i in range(left * c, right * c, c):
                yield tuple(row[i : i + 3])

    def colours(self, left: int, top: int, right: int, bottom: int) -> Counter[tuple[int, ...]]:
        """How many pixels of each colour the box holds."""
        return Counter(self.pixels(left, top, right, bottom))


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(data: bytes) -> Image:
    """Decode a non-interlaced 8-bit RGB or RGBA PNG (what Chromium's screenshot is).

    The Up filter, most of a screenshot's rows, is undone on whole rows as integers (the bytes
    are added in parallel: the low seven bits, then the top bit by exclusive or); the other
    filters byte by byte (PNG specification, section 9).
    """
    if not data.startswith(_PNG_SIGNATURE):
        raise ValueError("not a PNG")
    pos, compressed, header = len(_PNG_SIGNATURE), [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            compressed.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour_type}")
    channels = 3 if colour_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(b"".join(compressed))
    low7 = int.from_bytes(b"\x7f" * stride, "big")
    high = int.from_bytes(b"\x80" * stride, "big")
    previous = bytes(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], raw[start + 1 : start + 1 + stride]
        if kind == 0:
            row = line
        elif kind == 2:
            a, b = int.from_bytes(line, "big"), int.from_bytes(previous, "big")
            row = (((a & low7) + (b & low7)) ^ ((a ^ b) & high)).to_bytes(stride, "big")
        else:
            row = _unfilter(kind, line, previous, channels)
        rows.append(row)
        previous = row
    return Image(width, height, channels, rows)


def _unfilter(kind: int, line: bytes, previous: bytes, bpp: int) -> bytes:
    out = bytearray(line)
    for i in range(len(out)):
        left = out[i - bpp] if i >= bpp else 0
        up = previous[i]
        if kind == 1:
            out[i] = (out[i] + left) & 0xFF
        elif kind == 3:
            out[i] = (out[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            corner = previous[i - bpp] if i >= bpp else 0
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            nearest = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            out[i] = (out[i] + nearest) & 0xFF
        else:
            raise ValueError(f"bad PNG filter type {kind}")
    return bytes(out)
