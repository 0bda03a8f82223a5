"""One request through the registry, and one response through its rewrite: the two steps of
the exchange that touch handlers (``KafkaApis.handle``), kept apart from its framing, ordering
and flow control so that tests and the fuzzers run them alone."""

from __future__ import annotations

from collections.abc import Callable

from kafkaguard.protocol import codec
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.inflight import ResponseTransform
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.support.ask import decide
from kafkaguard.proxy.handlers.support.base import (
    Close,
    HandlerContext,
    Request,
    ResponseRewrite,
    Verdict,
)


def handle_request(
    header: RequestHeaderInfo, frame: Frame, ctx: HandlerContext
) -> tuple[Verdict, bool]:
    """Registry lookup, version gate, decoding and the handler's decision for one request
    (``KafkaApis.handle``). Returns the verdict and whether the version is supported (an
    unsupported one is answered by :meth:`ApiHandler.unsupported_version`)."""
    handler = REGISTRY.get(header.api_key)
    if handler is None:
        return Close(
            f"api key {header.api_key} is not served by the proxy "
            f"(correlation id {header.correlation_id})"
        ), True
    if header.api_version not in ctx.supported_versions(header.api_key):
        return handler.unsupported_version(header, ctx), False
    body = handler.read_request(header, frame)
    return decide(handler, Request(header, frame, body), ctx), True


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
