"""ApiVersions (api key 18): advertise only what the proxy can parse and enforce.

The request is forwarded so the client receives the broker's own feature fields (KIP-584
finalized features matter to KIP-848 consumers), but the ``api_keys`` list is narrowed to the
intersection of what the broker advertises, what kio can decode and what the proxy has a
handler for. A version the proxy cannot parse is never advertised
(``docs/design.md#fail-closed``).

A client on a SASL listener that has not authenticated yet has no broker connection (nothing
it sends may make the proxy connect to a broker), so its ApiVersions is answered by the proxy:
from the broker's latest ApiVersions response (the start-up probe's, refreshed by every
forwarded one), at the client's version, narrowed the same way, throttle time 0. Kafka's
``SaslServerAuthenticator`` likewise answers ApiVersions itself before authentication.

An ApiVersions request of a version the proxy does not know is answered, as Kafka does
(``KafkaApis.handleApiVersionsRequest``), with a v0-shaped UNSUPPORTED_VERSION response that
lists the supported versions, so the client can retry with one it shares.

Every client connection starts with ApiVersions, and the broker's answer is the same for all
of them until the broker changes: the cluster's ``AnswerMemo`` (``protocol/answer_memo.py``)
keeps the client's answer to the last few distinct broker answers, so a byte-identical one is
not decoded and re-encoded again. The broker is still asked every time; only the rewrite is
reused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Protocol, cast

from kafkaguard.protocol.codec import (
    API_NAMES,
    Entity,
    ErrorCode,
    ResponsePayload,
    make_entity,
    nested_type,
    replace,
    response_schema,
)
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded
from kafkaguard.proxy.handlers.support.responses import convert

_ALL_FEATURES_VERSION = 4
"""ApiVersionsResponse v0-3 leave out supported features whose minimum version is 0."""


class _ApiVersion(Protocol):
    @property
    def api_key(self) -> int: ...


class _Feature(Protocol):
    @property
    def min_version(self) -> int: ...


class _ApiVersionsResponse(ErrorCoded, Protocol):
    """What the handler reads of an ``ApiVersionsResponse`` (``supported_features``: v3+,
    read only there)."""

    @property
    def api_keys(self) -> Sequence[_ApiVersion]: ...
    @property
    def supported_features(self) -> Sequence[_Feature]: ...


class ApiVersionsHandler(ApiHandler[None]):
    api_key = 18

    def on_request(self, request: Request[None], ctx: HandlerContext) -> Verdict:
        if ctx.upstream_deferred:
            return Respond(_narrowed(ctx, _from_broker(ctx, request.header.api_version)))

        def rewrite(response: ResponsePayload) -> ResponsePayload:
            # (read through the Protocol: the response goes on to the context as it is)
            if cast(_ApiVersionsResponse, response).error_code != ErrorCode.none:
                return response
            ctx.record_broker_api_versions(response)
            return _narrowed(ctx, response)

        return Forward(
            rewrite=rewrite,
            transform=ctx.api_versions_answers.transform(
                request.header, rewrite, ctx.record_broker_api_versions
            ),
        )

    def unsupported_version(self, header: RequestHeaderInfo, ctx: HandlerContext) -> Verdict:
        schema = response_schema(self.api_key, 0)
        entries = _advertised(ctx, nested_type(schema, "api_keys"), API_NAMES)
        return Respond(make_entity(schema, ErrorCode.unsupported_version, api_keys=entries))


def _narrowed(ctx: HandlerContext, response: ResponsePayload) -> ResponsePayload:
    """``response`` with the API list the proxy advertises."""
    entry_type = nested_type(type(response), "api_keys")
    broker_keys = {int(e.api_key) for e in cast(_ApiVersionsResponse, response).api_keys}
    # APIs the proxy answers itself (ACL admin, …) are advertised whether or not the broker
    # has them; everything else is what the broker offers, narrowed.
    return replace(response, api_keys=_advertised(ctx, entry_type, broker_keys | set(API_NAMES)))


def _from_broker(ctx: HandlerContext, version: int) -> ResponsePayload:
    """The broker's answer to an ApiVersions ``version`` request, derived from its latest one
    the way ``ApiVersionsResponse`` builds each version (before any probe: no broker API)."""
    schema = response_schema(ApiVersionsHandler.api_key, version)
    broker = ctx.latest_api_versions(version)
    if broker is None:
        return make_entity(schema)
    response = convert(broker, schema)
    names = _field_names(schema)
    changes: dict[str, object] = {}
    if "throttle_time" in names:
        changes["throttle_time"] = timedelta(0)
    if "supported_features" in names and version < _ALL_FEATURES_VERSION:
        features = cast(_ApiVersionsResponse, response).supported_features
        changes["supported_features"] = tuple(f for f in features if f.min_version >= 1)
    return replace(response, **changes)


def _field_names(schema: type[Entity]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(schema))


def _advertised(
    ctx: HandlerContext, entry_type: Callable[..., Entity], api_keys: Iterable[int]
) -> tuple[Entity, ...]:
    """One ``entry_type`` per API key with a supported version, in key order."""
    return tuple(
        entry_type(api_key=api_key, min_version=supported.start, max_version=supported.stop - 1)
        for api_key in sorted(api_keys)
        if (supported := ctx.supported_versions(api_key))
    )


HANDLERS: list[ApiHandler] = [ApiVersionsHandler()]
