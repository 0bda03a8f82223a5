"""Delegation tokens (api keys 38–41): always answered by the proxy, never forwarded.

Why no token request ever reaches the broker: the proxy terminates authentication, and the
broker behind it runs without security. A token the broker issued would be an HMAC for a
broker that cannot check it, handed to a client that can only present it to the proxy — which
has no delegation-token authentication (SASL/SCRAM with ``tokenauth``). Forwarding would also
let any client create, renew, expire or list tokens on the broker without Kafka's checks.

What Kafka answers instead: ``KafkaApis.allowTokenRequests`` refuses every token request on a
channel that is PLAINTEXT, 1-way SSL (``User:ANONYMOUS``) or itself token-authenticated, with
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (64), before any ACL check. Until the proxy can issue and
verify tokens, no channel through it can carry one meaningfully, so the proxy gives that
answer on every listener, shaped like the corresponding ``handleXxxTokenRequest``:

* CreateDelegationToken → ``CreateDelegationTokenResponse.prepareResponse(version, throttle,
  error, owner, requester)``: owner = the request's owner if named, else the requester;
  requester = the connection's principal; timestamps −1, empty token id and HMAC.
* Renew / Expire → error 64, ``expiryTimestamp`` −1 (``DelegationTokenManager.ErrorTimestamp``).
* Describe → error 64, no tokens.

kio cannot *decode* a negative timestamp, but it encodes one; the −1 fields are written as
one millisecond before the epoch, which is −1 on the wire.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    B,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)

ERROR_TIMESTAMP: Final = datetime.fromtimestamp(0, UTC) - timedelta(milliseconds=1)
"""``DelegationTokenManager.ErrorTimestamp`` (−1 ms since the epoch)."""

_NOT_ALLOWED = ErrorCode.delegation_token_request_not_allowed


class _CreateTokenBody(Protocol):
    """``owner_principal_name`` (v3+) is read by name, ``owner_principal_type`` with it."""

    @property
    def owner_principal_type(self) -> str | None: ...


class _TokenRequestNotAllowed(ApiHandler[B]):
    """Answer 64 locally; the response carries no other information."""

    answered_by_proxy = True

    def on_request(self, request: Request[B], ctx: HandlerContext) -> Verdict:
        return Respond(self.response(request, ctx))

    def response(self, request: Request[B], ctx: HandlerContext) -> ResponsePayload:
        return codec.build_error_response(self.api_key, request.header.api_version, _NOT_ALLOWED)


class CreateDelegationTokenHandler(_TokenRequestNotAllowed[_CreateTokenBody]):
    """``KafkaApis.handleCreateTokenRequest``: the channel check comes before the
    CREATE_TOKENS check on the owner and the renewer-type check, so neither is reached."""

    api_key = 38
    decode_request = True

    def response(self, request: Request[_CreateTokenBody], ctx: HandlerContext) -> ResponsePayload:
        body = request.body
        requester = ctx.session.principal
        owner_name = getattr(body, "owner_principal_name", None)
        if owner_name:  # v3+; null or empty means "the requester"
            owner_type, owner_name = body.owner_principal_type or "", owner_name
        else:
            owner_type, owner_name = requester.principal_type, requester.name
        values: dict[str, object] = {
            "principal_type": owner_type,
            "principal_name": owner_name,
            "issue_timestamp": ERROR_TIMESTAMP,
            "expiry_timestamp": ERROR_TIMESTAMP,
            "max_timestamp": ERROR_TIMESTAMP,
        }
        schema = codec.response_schema(self.api_key, request.header.api_version)
        if "token_requester_principal_type" in schema.__dataclass_fields__:
            values["token_requester_principal_type"] = requester.principal_type
            values["token_requester_principal_name"] = requester.name
        return codec.make_entity(schema, _NOT_ALLOWED, **values)


class RenewDelegationTokenHandler(_TokenRequestNotAllowed[None]):
    """``KafkaApis.handleRenewTokenRequest``: 64 with expiry −1."""

    api_key = 39

    def response(self, request: Request[None], ctx: HandlerContext) -> ResponsePayload:
        schema = codec.response_schema(self.api_key, request.header.api_version)
        return codec.make_entity(schema, _NOT_ALLOWED, expiry_timestamp=ERROR_TIMESTAMP)


class ExpireDelegationTokenHandler(RenewDelegationTokenHandler):
    """``KafkaApis.handleExpireTokenRequest``: 64 with expiry −1."""

    api_key = 40


class DescribeDelegationTokenHandler(_TokenRequestNotAllowed[None]):
    """``KafkaApis.handleDescribeTokensRequest``: 64 (checked before "tokens disabled", 61)
    and an empty token list."""

    api_key = 41


HANDLERS: list[ApiHandler] = [
    CreateDelegationTokenHandler(),
    RenewDelegationTokenHandler(),
    ExpireDelegationTokenHandler(),
    DescribeDelegationTokenHandler(),
]
