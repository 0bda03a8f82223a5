"""The two-phase handler contract (handlers/support/base.py ``Authorize``): the dispatcher
decides each step's actions in one ``authorize`` call and hands the results back; a step
without actions checks nothing; a later step is asked for only when the handler needs it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.proxy.core.dispatch import decide
from kafkaguard.proxy.handlers.support.authz import topic
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    Authorize,
    Checks,
    Close,
    Forward,
    HandlerContext,
    Request,
    Respond,
    StepwiseHandler,
    Verdict,
)
from tests.proxy.handlers.test_produce import WRITE_ORDERS, errors, produce
from tests.support.entities import req
from tests.support.exchange_driver import request as encoded
from tests.support.handler_harness import HandlerHarness, acl


class CountingHarness(HandlerHarness):
    """Counts the context's ``authorize`` calls."""

    def __init__(self, acls: Sequence[Any] = ()) -> None:
        super().__init__(acls)
        self.calls = 0

    def authorize(self, request: Request, actions: Sequence[Action]) -> list[AuthorizationResult]:
        self.calls += 1
        return super().authorize(request, actions)


class TwoSteps(ApiHandler):
    """Checks ``first``; only when it is allowed, ``second`` (as a transactional Produce)."""

    api_key = 3

    def __init__(self, first: Sequence[Action], second: Sequence[Action]) -> None:
        self.first, self.second = first, second
        self.seen: list[list[AuthorizationResult]] = []

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict | Authorize:
        return Authorize(self.first, "first")

    def on_authorized(
        self,
        request: Request,
        ctx: HandlerContext,
        state: Any,
        results: Sequence[AuthorizationResult],
    ) -> Verdict | Authorize:
        self.seen.append(list(results))
        if state == "first" and all(r is AuthorizationResult.ALLOWED for r in results):
            return Authorize(self.second, "second")
        return FORWARD if state == "second" else Close("denied")


class Stepwise(StepwiseHandler):
    """``first``, then, only when every one is allowed, ``second``: as :class:`TwoSteps`, but
    written as one generator (the group family's handlers)."""

    api_key = 3

    def __init__(self, first: Sequence[Action], second: Sequence[Action]) -> None:
        self.first, self.second = first, second

    def checks(self, request: Request, ctx: HandlerContext) -> Checks:
        results = yield self.first
        if not all(r is AuthorizationResult.ALLOWED for r in results):
            return Close("denied")
        yield self.second
        return FORWARD


def metadata_request() -> Request:
    frame = encoded(req(3, 12, topics=(), allow_auto_topic_creation=False), 7)
    return Request(peek_request_header(frame), frame, None)


def write(name: str) -> Action:
    return Action(AclOperation.WRITE, topic(name), 1, True, True)


def test_each_step_is_one_authorize_call_whose_results_the_handler_reads() -> None:
    h = CountingHarness([WRITE_ORDERS, acl("User:alice", "WRITE", "TOPIC", "audit")])
    handler = TwoSteps([write("orders"), write("secret")], [write("audit")])
    verdict = decide(handler, metadata_request(), h)
    assert isinstance(verdict, Close)  # "secret" denied: the second step never asked
    assert h.calls == 1
    assert handler.seen == [[AuthorizationResult.ALLOWED, AuthorizationResult.DENIED]]
    assert h.checked() == [
        ("WRITE", "TOPIC", "orders", "ALLOWED"),
        ("WRITE", "TOPIC", "secret", "DENIED"),
    ]


def test_a_later_step_follows_an_allowed_one_in_order() -> None:
    h = CountingHarness([WRITE_ORDERS, acl("User:alice", "WRITE", "TOPIC", "audit")])
    handler = TwoSteps([write("orders")], [write("audit")])
    assert decide(handler, metadata_request(), h) is FORWARD
    assert h.calls == 2
    assert h.checked() == [
        ("WRITE", "TOPIC", "orders", "ALLOWED"),
        ("WRITE", "TOPIC", "audit", "ALLOWED"),
    ]


def test_a_step_without_actions_checks_nothing() -> None:
    h = CountingHarness()
    handler = TwoSteps([], [])
    assert decide(handler, metadata_request(), h) is FORWARD
    assert h.calls == 0 and h.checked() == []
    assert handler.seen == [[], []]


def test_an_allowed_transactional_produce_checks_its_transactional_id_then_its_topics() -> None:
    h = CountingHarness([WRITE_ORDERS, acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "tx")])
    assert isinstance(h.send(produce("orders", transactional_id="tx", txn=True)), Forward)
    assert h.calls == 2
    assert h.checked() == [
        ("WRITE", "TRANSACTIONAL_ID", "tx", "ALLOWED"),
        ("WRITE", "TOPIC", "orders", "ALLOWED"),
    ]


def test_a_produce_to_several_topics_is_decided_in_one_call() -> None:
    h = CountingHarness([WRITE_ORDERS])
    body = produce("orders", "secret", "orders")
    verdict = h.send(body)
    assert h.calls == 1
    assert [(a.resource_pattern.name, a.resource_reference_count) for a, _ in h.checks] == [
        ("orders", 2),
        ("secret", 1),
    ]
    sent = h.forwarded_body(verdict, body)  # split: "secret" is answered 29 by the proxy
    assert [t.name for t in sent.topic_data] == ["orders", "orders"]


def test_the_shared_one_topic_action_carries_no_decision() -> None:
    """A producer's one-topic action is built once and shared; an ACL change still decides
    the next request."""
    h = CountingHarness([WRITE_ORDERS])
    assert isinstance(h.send(produce("orders")), Forward)
    first = h.checks[0][0]
    h.authorizer.load_snapshot([])
    denied = h.send(produce("orders"))
    assert h.checks[0][0] is first
    assert isinstance(denied, Respond)
    assert {code for _, _, code in errors(denied.response)} == {
        ErrorCode.topic_authorization_failed
    }


def test_a_stepwise_decision_makes_one_call_per_yield_and_stops_where_it_returns() -> None:
    h = CountingHarness([WRITE_ORDERS, acl("User:alice", "WRITE", "TOPIC", "audit")])
    assert decide(Stepwise([write("orders")], [write("audit")]), metadata_request(), h) is FORWARD
    assert h.calls == 2
    assert h.checked() == [
        ("WRITE", "TOPIC", "orders", "ALLOWED"),
        ("WRITE", "TOPIC", "audit", "ALLOWED"),
    ]
    h = CountingHarness([WRITE_ORDERS])
    denied = decide(Stepwise([write("secret")], [write("audit")]), metadata_request(), h)
    assert isinstance(denied, Close) and denied.reason == "denied"
    assert h.calls == 1 and h.checked() == [("WRITE", "TOPIC", "secret", "DENIED")]


def test_a_stepwise_step_without_actions_checks_nothing() -> None:
    h = CountingHarness()
    assert decide(Stepwise([], []), metadata_request(), h) is FORWARD
    assert h.calls == 0 and h.checked() == []
