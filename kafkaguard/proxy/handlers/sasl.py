"""SaslHandshake (17) and SaslAuthenticate (36): answered by the proxy, never forwarded.

The proxy terminates SASL on SASL_PLAINTEXT / SASL_SSL listeners (the broker behind it has no
security), so these requests are the proxy's own, as in Kafka they are the network layer's
(``SaslServerAuthenticator``) rather than ``KafkaApis``'. The state machine lives in
:mod:`kafkaguard.proxy.sasl.authenticator`; this module turns its outcomes into responses.

* On a listener without SASL both are answered ILLEGAL_SASL_STATE (34), as
  ``KafkaApis.handleSaslHandshakeRequest`` / ``handleSaslAuthenticateRequest`` do.
* SaslHandshake v0 is advertised (as Kafka does: librdkafka up to at least 2.0 only enables SASL
  when the handshake range includes v0, then uses v1) but a v0 request is answered
  UNSUPPORTED_VERSION and the connection closed, with a log line: after a v0 handshake Kafka
  expects *raw* SASL tokens without Kafka framing (pre-KIP-152 clients, Kafka < 1.0), which
  the proxy's framing layer cannot tell from Kafka requests. Every current client uses v1 +
  SaslAuthenticate.
* A failed step is answered SASL_AUTHENTICATION_FAILED (58) after a per-address delay that
  doubles with consecutive failures (bounded), then the connection is closed. The delay is
  also a window: until it ends, a credential check from the same address (any connection) is
  refused without computing anything and answered when the window ends (``FailureThrottle``).
  An unsupported mechanism is answered UNSUPPORTED_SASL_MECHANISM (33) with the enabled list,
  then closed.
* Mechanism steps that are CPU-bound (PLAIN's PBKDF2) run on the process's bounded
  authentication executor, one at a time per address; a full executor refuses the attempt at
  once (SASL_AUTHENTICATION_FAILED). The gate refuses any other request while a step is being
  evaluated. Delays are ``asyncio.sleep`` in the response, never blocking the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from functools import partial
from typing import Protocol

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    HandlerContext,
    Request,
    Respond,
    RespondLater,
    Verdict,
)
from kafkaguard.proxy.sasl.authenticator import AuthenticateOutcome, SaslAuthenticator
from kafkaguard.proxy.sasl.executor import AuthExecutorBusy
from kafkaguard.proxy.sasl.mechanism import SaslMechanismServer, StepResult

log = logging.getLogger("kafkaguard.sasl")

_AFTER_SUCCESS = "SaslAuthenticate request received after successful authentication"


class _HandshakeBody(Protocol):
    @property
    def mechanism(self) -> str: ...


class _AuthenticateBody(Protocol):
    @property
    def auth_bytes(self) -> bytes: ...


class SaslHandshakeHandler(ApiHandler[_HandshakeBody]):
    api_key = 17
    decode_request = True
    answered_by_proxy = True

    def on_request(self, request: Request[_HandshakeBody], ctx: HandlerContext) -> Verdict:
        version = request.header.api_version
        schema = codec.response_schema(self.api_key, version)
        auth = ctx.sasl
        if auth is None:
            return Respond(codec.make_entity(schema, ErrorCode.illegal_sasl_state))
        if version == 0:
            return Respond(
                codec.make_entity(schema, ErrorCode.unsupported_version),
                close_after="SaslHandshake v0 (raw SASL tokens without Kafka framing) is not "
                "supported; the client must use SaslHandshake v1 and SaslAuthenticate",
            )
        body = request.body
        outcome = auth.handshake(str(body.mechanism))
        if outcome.close_reason is None and auth.reauthenticating:
            log.debug(
                "%s: re-authentication of %s begins", ctx.session.client_host, ctx.session.principal
            )
        return Respond(
            codec.make_entity(schema, outcome.error_code, mechanisms=outcome.mechanisms),
            close_after=outcome.close_reason,
        )


class SaslAuthenticateHandler(ApiHandler[_AuthenticateBody]):
    api_key = 36
    decode_request = True
    answered_by_proxy = True

    def on_request(self, request: Request[_AuthenticateBody], ctx: HandlerContext) -> Verdict:
        version = request.header.api_version
        auth = ctx.sasl
        if auth is None:
            refused = AuthenticateOutcome(ErrorCode.illegal_sasl_state, _AFTER_SUCCESS)
            return Respond(_response(version, refused))
        reauthenticating = auth.reauthenticating
        begun = auth.begin_step(version, time.monotonic())
        body = request.body
        token = bytes(body.auth_bytes)
        host = ctx.session.client_host

        async def evaluate() -> Respond:
            if isinstance(begun, AuthenticateOutcome):
                outcome = begun
            else:
                outcome = await _step(auth, begun, token)
            if outcome.close_reason is not None:
                # Logged once, rate-limited, when the connection closes (its close reason).
                if outcome.delay_s > 0:
                    await asyncio.sleep(outcome.delay_s)
            elif outcome.authenticated is not None:
                log.info(
                    "%s on listener %s: %s as %s (session lifetime %s)",
                    host,
                    ctx.listener_name,
                    "re-authenticated" if reauthenticating else "authenticated",
                    outcome.authenticated,
                    f"{outcome.session_lifetime_ms} ms"
                    if outcome.session_lifetime_ms
                    else "unbounded",
                )
            return Respond(_response(version, outcome), close_after=outcome.close_reason)

        return RespondLater(evaluate)


async def _step(
    auth: SaslAuthenticator, mechanism: SaslMechanismServer, token: bytes
) -> AuthenticateOutcome:
    """Evaluate one token: inline when cheap; a password hash on the executor, one at a time
    per address. The failure window is decided again right before the hash: a check of the
    same address may have failed since :meth:`SaslAuthenticator.begin_step`, or while this
    attempt waited for it."""
    server = auth.server
    if not mechanism.blocking:
        return _finish(auth, mechanism.step(token))
    host = auth.session.client_host
    while True:
        refused = auth.refuse_if_throttled(time.monotonic())
        if refused is not None:
            return refused
        previous = server.checks_in_flight.get(host)
        if previous is None:
            break
        await previous.wait()
    done = server.checks_in_flight[host] = asyncio.Event()
    try:
        result = await server.executor.run(partial(mechanism.step, token))
        return _finish(auth, result)  # before the next attempt of the address wakes up
    except AuthExecutorBusy as exc:
        return auth.refuse_busy(str(exc))
    finally:
        del server.checks_in_flight[host]
        done.set()


def _finish(auth: SaslAuthenticator, result: StepResult) -> AuthenticateOutcome:
    return auth.finish_step(result, time.monotonic(), int(auth.server.wall_clock() * 1000))


_MAX_LIFETIME_MS = timedelta.max // timedelta(milliseconds=1)


def _response(version: int, outcome: AuthenticateOutcome) -> ResponsePayload:
    schema = codec.response_schema(36, version)
    values: dict[str, object] = {
        "error_message": outcome.error_message,
        "auth_bytes": outcome.auth_bytes,
    }
    if "session_lifetime" in schema.__dataclass_fields__:
        # An int64 on the wire (SaslAuthenticateResponse.json); kio carries it as a timedelta,
        # whose range ends near 2.7 million years: a token expiring later is answered with
        # that bound rather than raising.
        lifetime_ms = min(outcome.session_lifetime_ms, _MAX_LIFETIME_MS)
        values["session_lifetime"] = timedelta(milliseconds=lifetime_ms)
    return codec.make_entity(schema, outcome.error_code, **values)


HANDLERS: list[ApiHandler] = [SaslHandshakeHandler(), SaslAuthenticateHandler()]
