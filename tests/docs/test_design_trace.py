"""docs/design.md's "The path as it runs" is a trace, not a description: the modules an allowed
Produce, an allowed Fetch and a partly denied Produce pass through, recorded at run time over
the in-memory exchange (``tests/support/request_trace.py``), must be the lists the page shows.

The trace runs in a process of its own with ``KAFKAGUARD_PURE_PYTHON=1``: it hooks
:func:`sys.setprofile`, which sees every Python call, and compiled protocol modules would hide
the calls they make to each other (the trace module refuses to run on them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.support import docs
from tests.support.request_trace import DESIGN, documented

REGENERATE = "KAFKAGUARD_PURE_PYTHON=1 .venv/bin/python -m tests.support.request_trace --write"


def _traced() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "KAFKAGUARD_REQUIRE_COMPILED"}
    env["KAFKAGUARD_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.request_trace"],
        cwd=docs.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    traced: dict[str, Any] = json.loads(done.stdout)
    return traced


def test_design_md_shows_the_modules_a_request_passes_through() -> None:
    traced = _traced()
    assert documented(DESIGN.read_text("utf-8")) == traced["block"], (
        f"docs/design.md's trace is not what runs; regenerate it: {REGENERATE}"
    )
    # A reader follows an allowed request from the exchange through dispatch to the forward
    # without being sent back into a module still on the stack (issue 39).
    assert traced["callbacks"]["produce-allowed"] == []
    assert traced["callbacks"]["fetch-allowed"] == []
