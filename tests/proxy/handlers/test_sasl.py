"""SaslAuthenticate's answer (``handlers/sasl.py``)."""

from __future__ import annotations

from datetime import timedelta

from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.sasl import _response
from kafkaguard.proxy.sasl.authenticator import AuthenticateOutcome


def test_a_lifetime_past_the_timedelta_range_is_answered_with_its_bound() -> None:
    """A validly signed token may expire up to jose4j's long-milliseconds range (about
    2.9e8 years), past kio's timedelta: the answer carries timedelta's bound, never raises."""
    outcome = AuthenticateOutcome(ErrorCode.none, None, session_lifetime_ms=2**62)
    answer = _response(2, outcome)
    assert timedelta.max - answer.session_lifetime < timedelta(milliseconds=1)


def test_an_ordinary_lifetime_is_answered_as_it_is() -> None:
    outcome = AuthenticateOutcome(ErrorCode.none, None, session_lifetime_ms=3_600_000)
    assert _response(2, outcome).session_lifetime == timedelta(hours=1)
