"""Handlers a test has the dispatcher use in place of a real one (:func:`registered`).

The dispatcher and the Produce and Fetch handlers are compiled (kafkaguard/protocol/build.py;
docs/design.md#the-compiled-modules): a compiled module calls its own functions directly, and
a compiled object takes no attribute it does not declare, so a test cannot patch
``dispatch.decide`` or a handler's method. It injects a handler instead, in the registry the
dispatcher reads: a module global holding data, which compiled code reads from the module on
every request as Python does (only functions and ``Final`` names are bound early).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any
from uuid import UUID

import pytest

from kafkaguard.policy.authorizer import AuthorizationResult
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.proxy.core import dispatch
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Authorize,
    HandlerContext,
    Request,
    Verdict,
)


def registered(monkeypatch: pytest.MonkeyPatch, handler: ApiHandler) -> None:
    """The dispatcher finds ``handler`` for its api key until the test ends."""
    handlers = {**dispatch.REGISTRY, handler.api_key: handler}
    monkeypatch.setattr(dispatch, "REGISTRY", MappingProxyType(handlers))


def faulty(key: int, message: str) -> ApiHandler:
    """A handler of api key ``key`` whose decision raises ``RuntimeError(message)``: a bug in a
    handler, met once the request is read."""

    class Faulty(ApiHandler):
        api_key = key

        def on_request(self, request: Request, ctx: HandlerContext) -> Verdict | Authorize:
            raise RuntimeError(message)

    return Faulty()


def counting(inner: ApiHandler, started: list[int]) -> ApiHandler:
    """``inner``, each of whose ``on_request`` calls appends the request's correlation id to
    ``started`` (how often a decision began, not a step of it)."""

    class Counting(ApiHandler):
        api_key = inner.api_key
        answered_by_proxy = inner.answered_by_proxy

        def __init__(self) -> None:
            super().__init__()
            self.versions = inner.versions

        def read_request(self, header: RequestHeaderInfo, frame: Frame) -> Any:
            return inner.read_request(header, frame)

        def topic_ids(self, request: Request) -> Iterable[UUID]:
            return inner.topic_ids(request)

        def on_request(self, request: Request, ctx: HandlerContext) -> Verdict | Authorize:
            started.append(request.header.correlation_id)
            return inner.on_request(request, ctx)

        def on_authorized(
            self,
            request: Request,
            ctx: HandlerContext,
            state: Any,
            results: Sequence[AuthorizationResult],
        ) -> Verdict | Authorize:
            return inner.on_authorized(request, ctx, state, results)

    return Counting()
