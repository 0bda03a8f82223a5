"""The contract of a SASL mechanism server: one small state machine per authentication.

``step(token)`` consumes one client token (the ``auth_bytes`` of a SaslAuthenticate request)
and returns what to answer:

* :class:`Challenge` — send ``data`` back (error code 0) and wait for the next token;
* :class:`Success` — authentication is complete for ``authorization_id``; ``data`` is the
  server's last message (SCRAM's ``v=…``), ``credential_expiry_ms`` the credential's end of
  life when it has one (an OAUTHBEARER token's ``exp``), which bounds the KIP-368 session;
* :class:`Failure` — answer SASL_AUTHENTICATION_FAILED with ``client_message`` and close.
  ``reason`` is for the proxy's log only: it may say that a user does not exist, the client
  message never does.

No I/O and no clocks beyond the ``now_ms`` a mechanism is built with: the asyncio shell owns
time, sockets and threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Challenge:
    data: bytes


@dataclass(frozen=True, slots=True)
class Success:
    authorization_id: str
    data: bytes = b""
    credential_expiry_ms: int | None = None
    """Epoch milliseconds after which the credential is no longer valid (KIP-368)."""
    claims: Mapping[str, object] | None = None
    """OAUTHBEARER: the validated token's claims (its groups claim, kafkaguard/policy/groups)."""


@dataclass(frozen=True, slots=True)
class Failure:
    reason: str
    """Logged by the proxy; may name the user or the exact check that failed."""
    client_message: str
    """Sent to the client; never reveals whether the user exists."""


StepResult = Challenge | Success | Failure


class SaslMechanismServer(Protocol):
    """The server side of one SASL exchange (one per SaslHandshake)."""

    @property
    def mechanism(self) -> str: ...

    @property
    def checks_credential(self) -> bool:
        """True when the next token is the one checked against a credential (PLAIN's only
        token, SCRAM's client-final proof, OAUTHBEARER's token): the step a per-address
        failure window refuses before any work is done for it."""
        ...

    @property
    def blocking(self) -> bool:
        """True when the next step costs milliseconds of CPU (a password hash): the shell
        runs it on the bounded authentication executor, never on the event loop."""
        ...

    def step(self, token: bytes) -> StepResult:
        """Evaluate one client token. After a :class:`Success` or :class:`Failure` the
        exchange is over; a further call returns :class:`Failure`."""
        ...


def clip(value: object, limit: int = 100) -> str:
    """``repr`` of a client-supplied value for a log line, at most ``limit`` characters of it:
    a user name or mechanism may be as long as ``sasl.max_receive_size``."""
    text = str(value)
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def invalid_credentials(mechanism: str, reauthenticating: bool = False) -> str:
    """Kafka's client-visible message for a failed ``SaslServer.evaluateResponse``
    (``SaslServerAuthenticator.handleSaslToken``): it deliberately says nothing about which
    check failed or whether the user exists."""
    what = "re-authentication" if reauthenticating else "authentication"
    return (
        f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
        f"{mechanism}"
    )


class ExchangeOver:
    """Mixin state for mechanisms: a step after the end of the exchange fails."""

    _done: bool = False

    def _over(self, mechanism: str) -> Failure:
        return Failure(
            f"{mechanism}: token received after the exchange ended",
            invalid_credentials(mechanism),
        )
