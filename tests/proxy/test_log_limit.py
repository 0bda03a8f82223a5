"""RateLimitedLog: one line per key and interval; structured fields only for lines written."""

from __future__ import annotations

import logging

import pytest

from kafkaguard.proxy.log_limit import RateLimitedLog


def test_suppressed_lines_build_no_fields_and_the_next_line_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    built: list[int] = []

    def fields() -> dict[str, object]:
        built.append(1)
        return {"listener": "L", "client_address": "10.0.0.1:5"}

    limited = RateLimitedLog(logging.getLogger("kafkaguard.test"), 1.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="kafkaguard.test"):
        assert limited.log("k", logging.WARNING, "bad %d", 1, extra=fields)
        for _ in range(5):
            assert not limited.log("k", logging.WARNING, "bad %d", 2, extra=fields)
        now[0] = 1.5
        assert limited.log("k", logging.WARNING, "bad %d", 3, extra=fields)
    assert len(built) == 2  # only for the two lines written
    assert [r.getMessage() for r in caplog.records] == [
        "bad 1",
        "bad 3 (5 similar lines suppressed)",
    ]
    assert caplog.records[1].listener == "L"  # type: ignore[attr-defined]
