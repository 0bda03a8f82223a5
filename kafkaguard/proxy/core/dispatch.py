"""One request's whole decision, and one response through its rewrite: the two steps of the
exchange that touch handlers (``KafkaApis.handle``), kept apart from its framing, ordering and
flow control so that tests and the fuzzers run them alone.

A request's decision is read here from top to bottom (docs/design.md#request-path): the
registry finds the handler, the version gate checks handler ∩ kio ∩ broker, the topic ids the
request names are resolved, the handler's ``on_request`` reads the request and returns the
checks Kafka makes (:class:`Authorize`), each step is decided in one ``authorize`` call, and
the handler's ``on_authorized`` builds the verdict from the results. Handlers never call the
context to authorize on this path; the loop over the steps is here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kafkaguard.policy.authorizer import DecisionPendingError
from kafkaguard.protocol import codec
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.inflight import ResponseTransform
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Authorize,
    Close,
    HandlerContext,
    Request,
    ResponseRewrite,
    Verdict,
)
from kafkaguard.proxy.handlers.support.questions import ask_topic_names

_NO_VERSIONS = range(0)


def handle_request(
    header: RequestHeaderInfo, frame: Frame, ctx: HandlerContext
) -> tuple[Verdict, bool]:
    """Registry lookup, version gate, decoding and the decision for one request
    (``KafkaApis.handle``). Returns the verdict and whether the version is supported (an
    unsupported one is answered by :meth:`ApiHandler.unsupported_version`)."""
    api_key = header.api_key
    handler = REGISTRY.get(api_key)
    if handler is None:
        return Close(
            f"api key {api_key} is not served by the proxy (correlation id {header.correlation_id})"
        ), True
    version = header.api_version
    # handler ∩ kio (ApiHandler.versions), then the broker's own range once known, except for
    # the APIs the proxy answers itself (handlers/__init__.supported_versions, as advertised).
    # A method, not a property: a Python call through a property costs more in 3.11.
    if version not in handler.versions or not (
        (broker := ctx.broker_versions()) is None
        or version in broker.get(api_key, _NO_VERSIONS)
        or handler.answered_by_proxy
    ):
        return handler.unsupported_version(header, ctx), False
    body = handler.read_request(header, frame)
    return decide(handler, Request(header, frame, body), ctx), True


def decide(handler: ApiHandler, request: Request, ctx: HandlerContext) -> Verdict:
    """``handler``'s verdict, once the names of the topic ids its request lists are known
    (``KafkaApis`` resolves ids before its checks; ``questions.ask_topic_names``)."""
    unseen = [i for i in handler.topic_ids(request) if ctx.topic_name(i) is None]
    if unseen:  # every request of every API passes here: nothing more on the common path

        def named() -> Verdict:
            return _verdict(handler, request, ctx)

        asked = ask_topic_names(ctx, unseen, named)
        if asked is not None:
            return asked
    return _verdict(handler, request, ctx)


def _verdict(handler: ApiHandler, request: Request, ctx: HandlerContext) -> Verdict:
    """``on_request``, and each :class:`Authorize` step it returns decided in one ``authorize``
    call (none for a step without actions: nothing is checked, nothing audited), its results
    handed to ``on_authorized`` until a verdict comes back."""
    return _steps(handler, request, ctx, handler.on_request(request, ctx))


def _steps(
    handler: ApiHandler, request: Request, ctx: HandlerContext, step: Verdict | Authorize
) -> Verdict:
    while isinstance(step, Authorize):
        actions = step.actions
        try:
            results = ctx.authorize(request, actions) if actions else []
        except DecisionPendingError as pending:  # OPA: go on from this step, not from the start
            pending.resume = partial(_steps, handler, request, ctx, step)
            raise
        step = handler.on_authorized(request, ctx, step.state, results)
    return step


def response_transform(
    rewrite: ResponseRewrite,
    header: RequestHeaderInfo,
    decode_if: Callable[[Frame], bool] | None = None,
) -> ResponseTransform:
    """Decode → rewrite → re-encode, or the broker's own bytes when nothing changed."""

    def transform(frame: Frame) -> Frame:
        if decode_if is not None and not decode_if(frame):
            return frame
        body = codec.decode_response(frame, header.api_key, header.api_version)
        new = rewrite(body)
        if new is body:
            return frame
        return codec.encode_response(new, header.correlation_id)

    return transform
