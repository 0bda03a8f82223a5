"""ApiVersions (api key 18): advertise only what the proxy can parse and enforce.

The request is forwarded so the client receives the broker's own feature fields (KIP-584
finalized features matter to KIP-848 consumers), but the ``api_keys`` list is narrowed to the
intersection of what the broker advertises, what kio can decode and what the proxy has a
handler for. A version the proxy cannot parse is never advertised (principle 2).

An ApiVersions request of a version the proxy does not know is answered, as Kafka does
(``KafkaApis.handleApiVersionsRequest``), with a v0-shaped UNSUPPORTED_VERSION response that
lists the supported versions, so the client can retry with one it shares.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.static.primitive import i16

from kafkaguard.protocol.codec import API_NAMES, ErrorCode, nested_type, replace
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.proxy.handlers.base import (
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)


class ApiVersionsHandler(ApiHandler):
    api_key = 18

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        def rewrite(response: Any) -> Any:
            if response.error_code != ErrorCode.none:
                return response
            ctx.record_broker_api_versions(
                {e.api_key: range(e.min_version, e.max_version + 1) for e in response.api_keys}
            )
            entry_type = nested_type(type(response), "api_keys")
            broker_keys = {int(e.api_key) for e in response.api_keys}
            # APIs the proxy answers itself (ACL admin, …) are advertised whether or not the
            # broker has them; everything else is what the broker offers, narrowed.
            entries = _advertised(ctx, entry_type, broker_keys | set(API_NAMES))
            return replace(response, api_keys=entries)

        return Forward(rewrite=rewrite)

    def unsupported_version(self, header: RequestHeaderInfo, ctx: HandlerContext) -> Verdict:
        entries = _advertised(ctx, ApiVersionV0, API_NAMES)
        return Respond(
            ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=entries)
        )


def _advertised(
    ctx: HandlerContext, entry_type: type[Any], api_keys: Iterable[int]
) -> tuple[Any, ...]:
    """One ``entry_type`` per API key with a supported version, in key order."""
    return tuple(
        entry_type(
            api_key=i16(api_key),
            min_version=i16(supported.start),
            max_version=i16(supported.stop - 1),
        )
        for api_key in sorted(api_keys)
        if (supported := ctx.supported_versions(api_key))
    )


HANDLERS: list[ApiHandler] = [ApiVersionsHandler()]
