"""An authorizer that must look decisions up first (``DecisionPendingError``, the OPA
authorizer): the exchange holds the request and those after it, asks the shell to await the
lookups (:class:`AwaitDecisions`) and, once told they are in, asks again and goes on in
order. Driven in memory, as tests/proxy/core/test_exchange.py drives the exchange."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    DecisionPendingError,
    RequestContext,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.core.commands import AwaitDecisions, PauseClient, ResumeClient
from kafkaguard.proxy.handlers import REGISTRY
from tests.proxy.core.test_exchange import ALICE_WRITES_ORDERS, produce, produce_response
from tests.support.entities import req
from tests.support.exchange_driver import Driver, request, split_frames, to_broker, to_client
from tests.support.injected_handlers import counting, registered


class Lookups:
    """The driver's authorizer behind an ``authorize`` pending until :attr:`done` (given to
    the connection as ``Driver(ask=lookups.over)``; its other questions are the real one's)."""

    def __init__(self) -> None:
        self.real: StandardAuthorizer | None = None
        self.done = False
        self.ready: Any = object()
        self.asked = 0
        self.contexts: list[RequestContext] = []

    def over(self, real: StandardAuthorizer) -> Any:
        self.real = real
        return self

    def authorize(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        self.asked += 1
        self.contexts.append(context)
        if not self.done:
            raise DecisionPendingError(self.ready)
        assert self.real is not None
        return self.real.authorize(context, actions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_pending_decision_holds_the_request_and_those_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lookups = Lookups()
    d = Driver(ALICE_WRITES_ORDERS, ask=lookups.over)
    d.connect()
    started: list[int] = []
    registered(monkeypatch, counting(REGISTRY[0], started))
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
    assert lookups.contexts[0] is lookups.contexts[1]  # the held request, known by its context
    assert started == [1, 2]  # a two-phase handler goes on from its Authorize step
    answered = d.broker(produce_response("orders", 1), produce_response("orders", 2))
    assert len(split_frames(to_client(answered))) == 2


def test_a_denial_decided_after_the_lookup_is_answered_by_the_proxy() -> None:
    lookups = Lookups()
    d = Driver(ALICE_WRITES_ORDERS, ask=lookups.over)
    d.connect()
    assert to_broker(d.client(produce("secret", 1))) == []
    lookups.done = True
    out = d.exchange.decisions_ready()
    assert to_broker(out) == []
    (frame,) = split_frames(to_client(out))
    assert frame  # TOPIC_AUTHORIZATION_FAILED from the proxy (tests/proxy/core/test_exchange.py)


def test_nothing_is_asked_again_after_the_connection_closed() -> None:
    lookups = Lookups()
    d = Driver(ALICE_WRITES_ORDERS, ask=lookups.over)
    d.connect()
    d.client(produce("orders", 1))
    d.exchange.client_closed()
    lookups.done = True
    assert d.exchange.decisions_ready() == []
    assert lookups.asked == 1


def test_a_handler_asking_directly_is_asked_again_from_its_start_with_the_same_context() -> None:
    lookups = Lookups()
    d = Driver(ALICE_WRITES_ORDERS, ask=lookups.over)
    d.connect()
    find = request(req(10, 1, key="orders-group", key_type=0), 5)
    assert to_broker(d.client(find)) == []
    lookups.done = True
    out = d.exchange.decisions_ready()
    assert lookups.asked == 2 and lookups.contexts[0] is lookups.contexts[1]
    (frame,) = split_frames(to_client(out))  # denied by the proxy: no ACL on the group
    assert codec.decode_response(frame, 10, 1).error_code == ErrorCode.group_authorization_failed
    assert d.exchange.stats.requests[10] == 1
