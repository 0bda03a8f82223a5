"""Malformed UTF-8 replaced as Java replaces it (``new String(bytes, UTF_8)``); the cases were
read by Kafka 4.3.1's ``RequestHeader.parse`` (tests/differential checks random ones)."""

from __future__ import annotations

import pytest

from kafkaguard.protocol.strings import read_string

R = "\ufffd"


@pytest.mark.parametrize(
    ("raw", "java"),
    [
        ("49ed b24e", f"I{R}N"),  # a surrogate's first two bytes: one U+FFFD (Python: two)
        ("eda080", R),  # a whole surrogate: one
        ("e080 41", f"{R}{R}A"),  # overlong E0: the lead alone, then the byte alone
        ("e1 80", R),  # the input ends inside a character: one for what is left
        ("f0 90 80", R),
        ("f0 90 80 41", f"{R}A"),
        ("f4 90 80 80", R * 4),  # past U+10FFFF: every byte alone
        ("f5 80", R * 2),
        ("c0 80", R * 2),
        ("c3 a9", "é"),
        ("f0 9f 98 80", "\U0001f600"),
        ("80 ff", R * 2),
    ],
)
def test_malformed_utf8_reads_as_java_reads_it(raw: str, java: str) -> None:
    assert read_string(bytes.fromhex(raw)) == java


def test_python_replaces_differently() -> None:
    """Why the module exists: Python's replacement differs on the first case above."""
    assert bytes.fromhex("49edb24e").decode("utf-8", "replace") == f"I{R}{R}N"
