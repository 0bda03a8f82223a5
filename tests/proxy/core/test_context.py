"""A connection's :class:`ConnectionContext` (kafkaguard/proxy/core/context.py): every check
of one request is asked with one KIP-504 context, a new request gets its own, the proxy's
internal topics are refused before the authorizer is asked, and ``enforcement: log_only``
answers as if allowed but never for those topics."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.model import AclOperation, KafkaPrincipal
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.core.context import ConnectionContext, FixedEnforcement
from kafkaguard.proxy.handlers.support.authz import topic
from kafkaguard.proxy.handlers.support.base import Request
from kafkaguard.proxy.net.cluster import UpstreamCluster
from kafkaguard.proxy.session import Session
from tests.proxy.core.test_exchange import produce
from tests.support.exchange_driver import NodePorts

ALLOWED, DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED


class Recording:
    """An authorizer that allows ``orders`` only, and keeps every context it is asked with."""

    def __init__(self) -> None:
        self.contexts: list[RequestContext] = []

    def authorize(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        self.contexts.append(context)
        return [ALLOWED if a.resource_pattern.name == "orders" else DENIED for a in actions]


def context(authorizer: Recording, *, log_only: bool = False) -> ConnectionContext:
    session = Session(
        "LISTENER",
        SecurityProtocol.PLAINTEXT,
        ipaddress.ip_address("10.0.0.1"),
        KafkaPrincipal.parse("User:alice"),
    )
    cluster = UpstreamCluster((HostPort("127.0.0.1", 9),), 1.0)
    return ConnectionContext(
        "LISTENER",
        session,
        authorizer,  # type: ignore[arg-type]  # only authorize() is asked here
        cluster,
        NodePorts(),
        enforcement=FixedEnforcement(log_only=log_only),
    )


def produce_request(correlation_id: int) -> Request:
    frame = produce("orders", correlation_id)
    return Request(peek_request_header(frame), frame, None)


def writes(*names: str) -> list[Action]:
    return [Action(AclOperation.WRITE, topic(name), 1, True, True) for name in names]


def test_one_context_per_request_however_many_checks() -> None:
    authorizer = Recording()
    ctx = context(authorizer)
    first, second = produce_request(7), produce_request(8)
    assert ctx.authorize(first, writes("orders", "secret")) == [ALLOWED, DENIED]
    assert ctx.authorize(first, writes("orders")) == [ALLOWED]
    assert ctx.authorize(second, writes("orders")) == [ALLOWED]
    one, again, other = authorizer.contexts
    assert one is again and other is not one
    assert (one.correlation_id, other.correlation_id) == (7, 8)
    assert (one.api_key, one.host) == (0, "10.0.0.1")
    assert one.principal == KafkaPrincipal.parse("User:alice")


def test_internal_topics_are_refused_before_the_authorizer_is_asked() -> None:
    authorizer = Recording()
    ctx = context(authorizer)
    assert ctx.authorize(produce_request(1), writes("_kafkaguard-acls")) == [DENIED]
    assert authorizer.contexts == []  # not asked: a super user would be allowed there
    assert ctx.internal_topic(produce_request(2), "_kafkaguard-acls")
    assert not ctx.internal_topic(produce_request(3), "orders")


def test_log_only_allows_what_is_denied_but_never_an_internal_topic() -> None:
    ctx = context(Recording(), log_only=True)
    results = ctx.authorize(produce_request(1), writes("orders", "secret", "_kafkaguard-acls"))
    assert results == [ALLOWED, ALLOWED, DENIED]
