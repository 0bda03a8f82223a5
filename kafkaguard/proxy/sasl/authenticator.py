"""SASL on a connection, without I/O: Kafka's ``SaslServerAuthenticator`` as a state machine.

Two objects:

* :class:`SaslServer` — one per listener: enabled mechanisms, the credential store, the JWT
  validator, principal mapping, the per-address failure window (:class:`FailureThrottle`),
  outcome counters, and a reference to the process's password-hashing executor.
* :class:`SaslAuthenticator` — one per client connection::

      HANDSHAKE ──SaslHandshake ok──▶ AUTHENTICATE ──Success──▶ COMPLETE
          ▲  ApiVersions, SaslHandshake   │ SaslAuthenticate only   │ anything; SaslHandshake
          │                               ▼                         │ starts re-authentication
          └────────── (re-auth) ◀─────  FAILED (closes)  ◀──────────┘

  :meth:`SaslAuthenticator.check` is the gate the connection runs on *every* request before
  anything else: before authentication completes only ApiVersions and the SASL requests
  pass, and none larger than ``max_receive_size``; after it, a session past its KIP-368
  lifetime passes nothing but a SaslHandshake (re-authentication).

Re-authentication (KIP-368) keeps the mechanism and the principal: a different mechanism or a
token/user that maps to another principal fails with Kafka's messages and closes the
connection. Session lifetime = min(``connections_max_reauth_ms``, credential expiry − now),
sent in SaslAuthenticate v1+ (``ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs``).

Time is passed in: ``now`` is ``time.monotonic()`` seconds, ``wall_ms`` epoch milliseconds.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kafkaguard.policy.groups import GroupResolver, GroupsError
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.policy.principal_mapping import KerberosShortNamer, NoMatchingRuleError
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.sasl import oauthbearer, plain, scram
from kafkaguard.proxy.sasl.config import OAuthBearerConfig, SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import (
    CredentialStore,
    FileCredentialStore,
    LiveCredentialStore,
)
from kafkaguard.proxy.sasl.executor import (
    AUTHENTICATION_QUEUE_SIZE,
    AUTHENTICATION_THREADS,
    AuthExecutor,
)
from kafkaguard.proxy.sasl.mechanism import (
    Challenge,
    Failure,
    SaslMechanismServer,
    StepResult,
    Success,
    clip,
    invalid_credentials,
)
from kafkaguard.proxy.session import Session

log = logging.getLogger("kafkaguard.sasl")

Groups = tuple[KafkaPrincipal, ...]

API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36


class FailureThrottle:
    """Kafka's ``connection.failed.authentication.delay.ms`` as a window per client address.

    Kafka delays the answer to a failed authentication (``SaslServerAuthenticator`` fails,
    the ``Selector`` closes the channel only after the delay) but a client that hangs up and
    reconnects pays nothing, and each of its attempts costs a password hash. Here a failure
    opens a window for its address of ``base`` seconds, doubling with each further failure up
    to ``maximum``; inside it the address's credential checks are refused *before* any work
    (:meth:`remaining`), answered when the window ends. The failure's own answer is also sent
    when the window ends, so a client that waits for its answer is never refused by its own
    failure: only one that does not wait (reconnects at once, or tries on parallel
    connections) is. Forgotten after ``forget_after_s`` without failures or on a success.
    Bounded memory (LRU)."""

    def __init__(
        self,
        base_ms: int,
        maximum_ms: int,
        forget_after_s: float = 300.0,
        max_addresses: int = 10_000,
    ) -> None:
        self._base = base_ms / 1000
        self._max = maximum_ms / 1000
        self._forget = forget_after_s
        self._cap = max_addresses
        self._failures: OrderedDict[str, tuple[int, float, float]] = OrderedDict()
        """address → (consecutive failures, time of the last, end of its window)."""

    def failure(self, address: str, now: float) -> float:
        """Record a failure; the seconds its window lasts (and its answer waits)."""
        count, last, _ = self._failures.pop(address, (0, now, now))
        if now - last > self._forget:
            count = 0
        count += 1
        delay = 0.0 if self._base <= 0 else min(self._base * 2 ** min(count - 1, 30), self._max)
        self._failures[address] = (count, now, now + delay)
        while len(self._failures) > self._cap:
            self._failures.popitem(last=False)
        return float(delay)

    def remaining(self, address: str, now: float) -> float:
        """Seconds left in ``address``'s failure window; 0 outside one."""
        entry = self._failures.get(address)
        return 0.0 if entry is None else max(0.0, entry[2] - now)

    def success(self, address: str) -> None:
        self._failures.pop(address, None)


class SaslServer:
    """What every connection of one SASL listener shares."""

    def __init__(
        self,
        config: SaslListenerConfig,
        *,
        store: CredentialStore | None = None,
        wall_clock: Callable[[], float] = time.time,
        executor: AuthExecutor | None = None,
        groups: GroupResolver | None = None,
    ) -> None:
        self.config = config
        self.groups = groups
        """The group sources (the file for every mechanism, the token claim for OAUTHBEARER)."""
        self.executor = executor or AuthExecutor(AUTHENTICATION_THREADS, AUTHENTICATION_QUEUE_SIZE)
        """Runs ``blocking`` steps (password hashes); shared by every listener of the
        process (:mod:`kafkaguard.proxy.sasl.executor`)."""
        self.mechanisms = config.enabled_mechanisms
        if store is None and config.credentials_file is not None:
            store = FileCredentialStore(config.credentials_file)
        self.store = store
        self.validator: oauthbearer.JwtValidator | None = None
        self.jwks_endpoint: oauthbearer.HttpsJwks | None = None
        """Started by :meth:`start` (its first fetch) and stopped by :meth:`close`."""
        if config.oauthbearer is not None:
            self.validator = self._jwt_validator(config.oauthbearer)
        self.short_namer = (
            KerberosShortNamer(config.kerberos_principal_to_local_rules)
            if config.kerberos_principal_to_local_rules is not None
            else None
        )
        self.throttle = FailureThrottle(
            config.failed_authentication_delay_ms, config.max_failed_authentication_delay_ms
        )
        self.checks_in_flight: dict[str, asyncio.Event] = {}
        """Addresses with a credential check on the executor, set when it ends. The asyncio
        shell lets one address have one check at a time, so the window a failure opens is
        decided before the next attempt from the same address hashes anything."""
        self.wall_clock = wall_clock
        self._unknown_user_secret = secrets.token_bytes(32)
        # Authentication outcomes on this listener (attempts = the other four added up).
        self.attempts = 0
        self.successes = 0
        self.failures = 0
        """Evaluated and failed: wrong credentials, malformed tokens, wrong states."""
        self.throttled = 0
        """Refused inside the address's failure window, nothing computed."""
        self.refused_queue_full = 0
        """Refused because the authentication executor was full, nothing computed."""
        self.outcomes: dict[tuple[str, str], int] = {}
        """Attempts by (mechanism, outcome: success, failure, throttled, busy)."""

    def _jwt_validator(self, oauth: OAuthBearerConfig) -> oauthbearer.JwtValidator:
        sources: list[oauthbearer.KeySource] = []
        if oauth.public_key_files:
            pems = tuple(oauthbearer.load_pem_key(p) for p in oauth.public_key_files)
            sources.append(oauthbearer.StaticKeys(pems))
        if oauth.jwks_file is not None:
            sources.append(oauthbearer.JwksFile(oauth.jwks_file))
        if oauth.jwks_endpoint_url is not None:
            self.jwks_endpoint = oauthbearer.HttpsJwks(
                oauth.jwks_endpoint_url,
                refresh_ms=oauth.jwks_endpoint_refresh_ms,
                retry_backoff_ms=oauth.jwks_endpoint_retry_backoff_ms,
                retry_backoff_max_ms=oauth.jwks_endpoint_retry_backoff_max_ms,
                ca_file=oauth.jwks_endpoint_ca_file,
            )
            sources.append(self.jwks_endpoint)
        return oauthbearer.JwtValidator(
            tuple(sources),
            expected_issuer=oauth.expected_issuer,
            expected_audience=oauth.expected_audience,
            principal_claim=oauth.principal_claim,
            scope_claim=oauth.scope_claim,
            clock_skew_s=oauth.clock_skew_s,
            algorithms=oauth.algorithms,
        )

    async def start(self) -> None:
        """What must be loaded before the listener opens: SCRAM credentials kept in ZooKeeper,
        the first key set of a JWKS endpoint (a failure stops the start, as Kafka's)."""
        if isinstance(self.store, LiveCredentialStore):
            await self.store.start()
        if self.jwks_endpoint is not None:
            await self.jwks_endpoint.start()

    async def close(self) -> None:
        if isinstance(self.store, LiveCredentialStore):
            await self.store.close()
        if self.jwks_endpoint is not None:
            await self.jwks_endpoint.close()

    def count(self, mechanism: str | None, outcome: str) -> None:
        """One evaluated (or refused) authentication attempt."""
        self.attempts += 1
        key = (mechanism or "?", outcome)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def new_mechanism(self, mechanism: str) -> SaslMechanismServer:
        if mechanism == plain.MECHANISM:
            store = self.store
            assert store is not None
            return plain.PlainServer(store.plain_credential)
        if mechanism in scram.MECHANISMS:
            store = self.store
            assert store is not None
            return scram.ScramServer(
                mechanism,
                store.scram_credential,
                unknown_user_secret=self._unknown_user_secret,
            )
        if mechanism == oauthbearer.MECHANISM:
            assert self.validator is not None
            return oauthbearer.OAuthBearerServer(self.validator, self.wall_clock)
        raise ValueError(f"mechanism {mechanism} is not enabled")

    def principal(self, authorization_id: str) -> KafkaPrincipal:
        """``User:<authorization id>``, through the short-name rules when configured
        (raises :class:`NoMatchingRuleError` when none applies)."""
        name = authorization_id
        if self.short_namer is not None:
            name = self.short_namer.short_name(authorization_id)
        return KafkaPrincipal(KafkaPrincipal.USER_TYPE, name)


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    STEPPING = "stepping"
    """A token is being evaluated (possibly off the event loop); nothing else may arrive."""
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HandshakeOutcome:
    error_code: ErrorCode
    mechanisms: tuple[str, ...]
    close_reason: str | None = None


@dataclass(frozen=True, slots=True)
class AuthenticateOutcome:
    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    close_reason: str | None = None
    """Set on failure: answer, then close."""
    authenticated: KafkaPrincipal | None = None
    """Set when this step completed (re-)authentication."""
    delay_s: float = 0.0
    """Seconds to wait before answering (a failure: the end of the address's window)."""


class SaslAuthenticator:
    """The SASL state of one connection; writes the principal into its :class:`Session`."""

    def __init__(self, server: SaslServer, session: Session) -> None:
        self.server = server
        self.session = session
        self.state = State.HANDSHAKE
        self._mechanism: SaslMechanismServer | None = None
        self._mechanism_name: str | None = None
        self._previous: tuple[str, KafkaPrincipal] | None = None
        """(mechanism, principal) of the session being re-authenticated."""
        self._bad_reauth_mechanism: str | None = None
        self.session_expiry: float | None = None
        """``time.monotonic()`` after which only re-authentication is accepted."""
        self.client_supports_reauth = False

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    def _what(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    # -- the gate ----------------------------------------------------------------------------
    def check(self, api_key: int, frame_size: int, now: float) -> str | None:
        """``None`` if a request may be handled now, else why the connection must close."""
        state = self.state
        if state is State.COMPLETE:
            if api_key == SASL_HANDSHAKE:
                return None
            if self.session_expiry is not None and now >= self.session_expiry:
                return (
                    f"SASL session of {self.session.principal} expired without "
                    "re-authentication (connections_max_reauth_ms / credential lifetime)"
                )
            return None
        if frame_size - 4 > self.server.config.max_receive_size:
            return (
                f"request of {frame_size - 4} bytes during SASL {self._what()} exceeds "
                f"max_receive_size {self.server.config.max_receive_size}"
            )
        allowed: tuple[int, ...] = ()
        if state is State.HANDSHAKE:
            allowed = (API_VERSIONS, SASL_HANDSHAKE)
        elif state is State.AUTHENTICATE:
            allowed = (SASL_AUTHENTICATE,)
        if api_key in allowed:
            return None
        if state is State.FAILED:
            return f"request after a failed SASL {self._what()}"
        return f"api key {api_key} before SASL {self._what()} completed (state {state.value})"

    # -- SaslHandshake -----------------------------------------------------------------------
    def handshake(self, mechanism: str) -> HandshakeOutcome:
        """``handleHandshakeRequest`` (v1; the gate has already admitted the request)."""
        enabled = self.server.mechanisms
        if self.state is State.COMPLETE:
            assert self._mechanism_name is not None
            self._previous = (self._mechanism_name, self.session.principal)
        elif self.state is not State.HANDSHAKE:
            self.state = State.FAILED
            return HandshakeOutcome(
                ErrorCode.illegal_sasl_state, enabled, "SaslHandshake in the wrong state"
            )
        if mechanism not in enabled:
            self.state = State.FAILED
            return HandshakeOutcome(
                ErrorCode.unsupported_sasl_mechanism,
                enabled,
                f"unsupported SASL mechanism {clip(mechanism)} (enabled: {', '.join(enabled)})",
            )
        self._bad_reauth_mechanism = None
        if self._previous is not None and self._previous[0] != mechanism:
            # Kafka answers the handshake normally and fails the next SaslAuthenticate.
            self._bad_reauth_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._previous[0]}'"
            )
        else:
            self._mechanism = self.server.new_mechanism(mechanism)
            self._mechanism_name = mechanism
        self.state = State.AUTHENTICATE
        return HandshakeOutcome(ErrorCode.none, enabled)

    # -- SaslAuthenticate --------------------------------------------------------------------
    def begin_step(self, version: int, now: float) -> SaslMechanismServer | AuthenticateOutcome:
        """Start evaluating one SaslAuthenticate: the mechanism to ``step`` (on the executor
        when it is ``blocking``, then :meth:`finish_step`), or an immediate outcome: a step
        that would check a credential from an address inside its failure window is refused
        here, before anything is computed."""
        if self.state is State.COMPLETE:
            # KafkaApis.handleSaslAuthenticateRequest on an authenticated connection.
            return AuthenticateOutcome(
                ErrorCode.illegal_sasl_state,
                "SaslAuthenticate request received after successful authentication",
            )
        if self.state is not State.AUTHENTICATE:
            self.state = State.FAILED
            return self._failed(
                "SaslAuthenticate in the wrong state", "Unexpected SaslAuthenticate", now
            )
        if version > 0:
            self.client_supports_reauth = True
        if self._bad_reauth_mechanism is not None:
            message = self._bad_reauth_mechanism
            self.state = State.FAILED
            return self._failed(message, message, now)
        assert self._mechanism is not None
        self.state = State.STEPPING
        return self.refuse_if_throttled(now) or self._mechanism

    def refuse_if_throttled(self, now: float) -> AuthenticateOutcome | None:
        """While a step is pending: if it checks a credential and the address is inside its
        failure window, fail it (nothing computed), to be answered when the window ends."""
        assert self.state is State.STEPPING and self._mechanism is not None
        if not self._mechanism.checks_credential:
            return None
        remaining = self.server.throttle.remaining(self.session.client_host, now)
        if remaining <= 0:
            return None
        self.state = State.FAILED
        self.server.count(self._mechanism_name, "throttled")
        self.server.throttled += 1
        return AuthenticateOutcome(
            ErrorCode.sasl_authentication_failed,
            f"Authentication failed: too many failed {self._what()}s from this address, "
            "retry later",
            close_reason=(
                f"SASL {self._what()} refused without checking credentials: "
                f"{remaining * 1000:.0f} ms left in the address's failure window "
                "(failed_authentication_delay_ms)"
            ),
            delay_s=remaining,
        )

    def refuse_busy(self, detail: str) -> AuthenticateOutcome:
        """The executor is full: fail the pending step at once, nothing computed."""
        assert self.state is State.STEPPING
        self.state = State.FAILED
        self.server.count(self._mechanism_name, "busy")
        self.server.refused_queue_full += 1
        return AuthenticateOutcome(
            ErrorCode.sasl_authentication_failed,
            "Authentication failed: the server is busy, retry later",
            close_reason=f"SASL {self._what()} refused: {detail}",
        )

    def finish_step(self, result: StepResult, now: float, wall_ms: int) -> AuthenticateOutcome:
        assert self.state is State.STEPPING and self._mechanism_name is not None
        if isinstance(result, Failure):
            self.state = State.FAILED
            message = result.client_message
            if self.reauthenticating and message == invalid_credentials(self._mechanism_name):
                message = invalid_credentials(self._mechanism_name, reauthenticating=True)
            return self._failed(result.reason, message, now)
        if isinstance(result, Challenge):
            self.state = State.AUTHENTICATE
            return AuthenticateOutcome(ErrorCode.none, None, result.data)
        identity = self._identity(result)
        if isinstance(identity, str):
            self.state = State.FAILED
            return self._failed(
                identity, invalid_credentials(self._mechanism_name, self.reauthenticating), now
            )
        principal, credential_groups = identity
        if self._previous is not None and self._previous[1] != principal:
            old = self._previous[1]
            message = (
                f"Cannot change principals during re-authentication from "
                f"{old.principal_type}.{old.name}: {principal.principal_type}.{principal.name}"
            )
            self.state = State.FAILED
            return self._failed(message, message, now)
        lifetime_ms = self._session_lifetime_ms(result.credential_expiry_ms, wall_ms)
        self.session_expiry = None if lifetime_ms is None else now + lifetime_ms / 1000
        self.session.authenticated(principal, credential_groups)
        self.state = State.COMPLETE
        self._previous = None
        self._mechanism = None
        self.server.throttle.success(self.session.client_host)
        self.server.count(self._mechanism_name, "success")
        self.server.successes += 1
        return AuthenticateOutcome(
            ErrorCode.none,
            None,
            result.data,
            session_lifetime_ms=lifetime_ms or 0,
            authenticated=principal,
        )

    def _identity(self, result: Success) -> tuple[KafkaPrincipal, Groups] | str:
        """The principal of a successful exchange and its credential's groups (the token's
        claim), or why there is none: no mapping rule applies, or the claim says nothing usable
        (a source that fails fails authentication, kafkaguard/policy/groups.py)."""
        try:
            principal = self.server.principal(result.authorization_id)
        except NoMatchingRuleError as exc:
            return f"no principal mapping rule applies: {exc}"
        groups = self.server.groups
        try:
            return principal, groups.of_token(result.claims) if groups is not None else ()
        except GroupsError as exc:
            return f"groups of {principal}: {exc}"

    def _session_lifetime_ms(self, credential_expiry_ms: int | None, wall_ms: int) -> int | None:
        max_reauth = self.server.config.connections_max_reauth_ms
        if credential_expiry_ms is None and max_reauth <= 0:
            return None
        if credential_expiry_ms is None:
            return max_reauth
        remaining = max(0, credential_expiry_ms - wall_ms)
        return remaining if max_reauth <= 0 else min(remaining, max_reauth)

    def _failed(self, reason: str, message: str, now: float) -> AuthenticateOutcome:
        """A failed exchange: counted, and a window opened for the address."""
        self.server.count(self._mechanism_name, "failure")
        self.server.failures += 1
        return AuthenticateOutcome(
            ErrorCode.sasl_authentication_failed,
            message,
            close_reason=f"SASL {self._what()} failed: {reason}",
            delay_s=self.server.throttle.failure(self.session.client_host, now),
        )
