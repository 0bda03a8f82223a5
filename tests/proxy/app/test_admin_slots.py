"""The admin listener's connection slots: which connection gives its slot up at the cap.

Sans-I/O: :class:`ConnectionSlots` over plain names; the listener itself is in test_admin.py.
"""

from __future__ import annotations

import pytest

from kafkaguard.proxy.app.admin import AllAnswering, ConnectionSlots


def full(*names: str) -> ConnectionSlots[str]:
    slots: ConnectionSlots[str] = ConnectionSlots(len(names))
    for name in names:
        assert slots.admit(name) is None
    return slots


def test_below_the_cap_nothing_is_evicted() -> None:
    slots = full("a", "b", "c")
    assert len(slots) == 3


def test_at_the_cap_the_longest_waiting_gives_up_its_slot() -> None:
    slots = full("a", "b", "c")
    assert slots.admit("d") == "a"
    assert slots.admit("e") == "b"
    assert len(slots) == 3


def test_a_connection_being_answered_is_never_evicted() -> None:
    slots = full("a", "b", "c")
    assert slots.answering("a")
    assert slots.admit("d") == "b"
    assert slots.admit("e") == "c"
    assert slots.admit("f") == "d"
    assert slots.answering("e") and slots.answering("f")
    with pytest.raises(AllAnswering):  # every slot being answered: refused
        slots.admit("g")
    assert len(slots) == 3


def test_answered_it_waits_again_the_latest_to() -> None:
    slots = full("a", "b", "c")
    assert slots.answering("a")
    slots.answered("a")  # kept alive (or lingering): behind b and c
    assert slots.admit("d") == "b"
    assert slots.admit("e") == "c"
    assert slots.admit("f") == "a"


def test_an_evicted_connection_is_not_answered() -> None:
    slots = full("a", "b")
    assert slots.admit("c") == "a"
    assert not slots.answering("a")  # its head arrived as it gave up its slot
    slots.release("a")  # its own close: no effect on the others
    assert len(slots) == 2
    assert slots.admit("d") == "b"


def test_a_released_slot_is_free_again() -> None:
    slots = full("a", "b")
    assert slots.answering("b")
    slots.release("a")
    slots.release("b")
    assert len(slots) == 0
    assert slots.admit("c") is None and slots.admit("d") is None
    assert slots.admit("e") == "c"
