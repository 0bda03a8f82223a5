"""An authorizer that must look decisions up first (``DecisionPendingError``, the OPA
authorizer): the exchange holds the request and those after it, asks the shell to await the
lookups (:class:`AwaitDecisions`) and, once told they are in, asks again and goes on in
order. Driven in memory, as tests/proxy/core/test_exchange.py drives the exchange."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    DecisionPendingError,
    RequestContext,
)
from kafkaguard.proxy.core.commands import AwaitDecisions, PauseClient, ResumeClient
from tests.proxy.core.test_exchange import ALICE_WRITES_ORDERS, produce, produce_response
from tests.support.exchange_driver import Driver, split_frames, to_broker, to_client


class Lookups:
    """The authorizer's ``authorize``, pending until :attr:`done`."""

    def __init__(self, driver: Driver) -> None:
        self.real = driver.authorizer.authorize
        self.done = False
        self.ready: Any = object()
        self.asked = 0
        driver.authorizer.authorize = self  # type: ignore[method-assign]

    def __call__(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        self.asked += 1
        if not self.done:
            raise DecisionPendingError(self.ready)
        return self.real(context, actions)


def test_a_pending_decision_holds_the_request_and_those_after_it() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    lookups = Lookups(d)
    first, second = produce("orders", 1), produce("orders", 2)
    out = d.client(first, second)
    assert to_broker(out) == []
    waits = [c for c in out if isinstance(c, AwaitDecisions)]
    assert [w.ready for w in waits] == [lookups.ready]
    assert any(isinstance(c, PauseClient) for c in out)
    assert d.exchange.unanswered == 2 and lookups.asked == 1  # one resumes, one is held
    lookups.done = True
    out = d.exchange.decisions_ready()
    assert to_broker(out) == [first, second]  # in order, the held one first
    assert any(isinstance(c, ResumeClient) for c in out)
    assert d.exchange.stats.requests[0] == 2  # each request counted once
    answered = d.broker(produce_response("orders", 1), produce_response("orders", 2))
    assert len(split_frames(to_client(answered))) == 2


def test_a_denial_decided_after_the_lookup_is_answered_by_the_proxy() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    lookups = Lookups(d)
    assert to_broker(d.client(produce("secret", 1))) == []
    lookups.done = True
    out = d.exchange.decisions_ready()
    assert to_broker(out) == []
    (frame,) = split_frames(to_client(out))
    assert frame  # TOPIC_AUTHORIZATION_FAILED from the proxy (tests/proxy/core/test_exchange.py)


def test_nothing_is_asked_again_after_the_connection_closed() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    lookups = Lookups(d)
    d.client(produce("orders", 1))
    d.exchange.client_closed()
    lookups.done = True
    assert d.exchange.decisions_ready() == []
    assert lookups.asked == 1
