"""InflightQueue: responses leave in request order, whoever fills them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.inflight import InflightQueue, OutOfSync


def ready(q: InflightQueue) -> list[Frame | None]:
    """The responses :meth:`InflightQueue.take_ready` releases, in order."""
    return [slot.response for slot in q.take_ready()]


def test_worked_example_from_the_docstring() -> None:
    q = InflightQueue(limit=10)
    q.forward(1, 3, 12)  # A: to the broker
    q.respond(2, 3, 99, b"B")  # B: answered by the proxy at once
    q.forward(3, 18, 3)  # C: to the broker
    assert len(q) == 3
    assert q.awaiting_upstream == 2
    assert ready(q) == []  # B may not overtake A
    slot = q.claim(1)
    slot.response = b"A"
    assert ready(q) == [b"A", b"B"]
    assert ready(q) == []
    q.claim(3).response = b"C"
    assert ready(q) == [b"C"]
    assert len(q) == 0 and q.awaiting_upstream == 0


def test_wrong_correlation_id_is_out_of_sync_and_claims_nothing() -> None:
    q = InflightQueue(limit=10)
    q.forward(5, 3, 1)
    q.forward(6, 3, 1)
    with pytest.raises(OutOfSync, match="6.*expected 5"):
        q.claim(6)  # the broker must answer the oldest first
    assert q.awaiting_upstream == 2
    q.claim(5)


def test_response_with_nothing_outstanding_is_out_of_sync() -> None:
    q = InflightQueue(limit=10)
    q.respond(1, 3, 1, b"local")  # local slots are never claimed by the broker
    with pytest.raises(OutOfSync, match="unexpected"):
        q.claim(1)


def test_full_at_the_limit_counts_local_and_upstream_slots() -> None:
    q = InflightQueue(limit=2)
    assert not q.full
    q.forward(1, 3, 1)
    assert not q.full
    q.respond(2, 3, 1, b"x")
    assert q.full
    q.claim(1).response = b"y"
    assert ready(q) == [b"y", b"x"]
    assert not q.full


def test_claim_returns_the_slot_with_its_transform() -> None:
    def transform(f: Frame) -> Frame:
        return bytes(f) + b"!"

    q = InflightQueue(limit=4)
    q.forward(7, 10, 4, transform)
    slot = q.claim(7)
    assert (slot.api_key, slot.api_version, slot.transform) == (10, 4, transform)
    assert "corr=7" in repr(slot) and "waiting" in repr(slot)


@given(st.lists(st.booleans(), max_size=40))
def test_any_mix_leaves_in_request_order(local: list[bool]) -> None:
    q = InflightQueue(limit=100)
    for corr, is_local in enumerate(local):
        if is_local:
            q.respond(corr, 0, 0, corr.to_bytes(4, "big"))
        else:
            q.forward(corr, 0, 0)
    out = ready(q)
    for corr in [c for c, is_local in enumerate(local) if not is_local]:
        q.claim(corr).response = corr.to_bytes(4, "big")
        out += ready(q)
    assert [int.from_bytes(f or b"", "big") for f in out] == list(range(len(local)))
    assert len(q) == 0
