"""The compiled protocol modules against their pure-Python source, in the suite: a seeded,
bounded run of :mod:`tests.fuzz.atheris_implementations` (``./dev fuzz --implementations``
runs it coverage-guided for as long as asked). Runs in ``./dev test``'s compiled pass; the
pure pass has nothing to compare against."""

from __future__ import annotations

import pytest

from kafkaguard import protocol
from tests.fuzz import atheris_implementations as implementations

pytestmark = pytest.mark.skipif(not protocol.COMPILED, reason="needs the compiled protocol modules")


def test_the_seeds_are_read_whole_by_both() -> None:
    """Each seed of an entry point that reads one kind of frame reaches its work, not its
    first refusal (the walks of selector 3, the tail encodings of 7 and the in-flight
    operations of 9 each refuse some by design); the Metadata seeds of 8 are each walked or
    skimmed whole."""
    compiled, pure = implementations.implementations()
    for seed in implementations.seeds():
        selector, param, cut, frame = seed[0], seed[1], seed[2], seed[3:]
        got = implementations.run_one(compiled, selector, param, cut, frame)
        assert got == implementations.run_one(pure, selector, param, cut, frame)
        if selector not in (3, 7, 9):
            assert "raised" not in repr(got), (selector, got)
        if selector == 8:  # a response walked, or a request skimmed
            assert got[:2] != [("returned", None)] * 2, got


def test_mutated_inputs_agree() -> None:
    compiled, pure = implementations.implementations()
    implementations.run_plain(implementations.target(compiled, pure), implementations.seeds(), 4000)
