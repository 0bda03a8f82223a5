"""SASL/OAUTHBEARER (RFC 7628) with JWTs validated as Kafka's ``BrokerJwtValidator`` does.

Client message (``OAuthBearerClientInitialResponse``)::

    n,[a=<authzid>],\\x01auth=Bearer <jwt>\\x01[key=value\\x01]*\\x01

The JWS signature, its header (``crit``) and the ``aud``/``iss`` claims are checked by PyJWT
(docs/design.md, "JWT validation"); the rest follows ``BrokerJwtValidator`` (jose4j's
``JwtConsumer`` as Kafka builds it, then ``ClaimValidationUtils``):

* algorithms RS/PS/ES 256-512 and EdDSA (``algorithms`` narrows them); ``none`` and HMAC never;
* a key is chosen as jose4j's ``VerificationJwkSelector`` does: the token's ``kid`` when it has
  one, a key type and curve that fit ``alg``, ``use`` absent or ``sig`` (the JWK's own ``alg`` is
  not looked at); several candidates are each tried;
* ``exp`` and ``iat`` required, numeric and not negative; ``nbf`` honoured; ``exp`` not before
  ``iat`` or ``nbf``; expired when ``now - clock_skew_s >= exp``, not yet valid when
  ``now + clock_skew_s < nbf`` (``iat`` in the future is allowed, as jose4j's default);
* ``iss`` equal to ``expected_issuer`` when set; ``aud`` containing one of
  ``expected_audience`` when set, and *absent* when not (jose4j's ``AudValidator``);
* the principal is the claim ``principal_claim`` (``sasl.oauthbearer.sub.claim.name``), a
  string, trimmed, not blank; the scope claim (``sasl.oauthbearer.scope.claim.name``) a string
  or a list of distinct non-blank strings.

Keys come from PEM files, a JWKS file (re-read when its mtime or size changes, looked at once a
second at most, as Kafka's ``CachedFile`` with its last-modified policy) or an HTTPS JWKS
endpoint (:class:`HttpsJwks`, Kafka's ``RefreshingHttpsJwks``).

As ``OAuthBearerSaslServer``: an invalid token is answered with an RFC 7628 error *challenge*
``{"status":"invalid_token"}`` (error code 0); the client acknowledges with a single ``\\x01``
and only then is the exchange failed, with that JSON as the error message. Why the token was
invalid is logged, never sent. The token's ``exp`` bounds the KIP-368 session lifetime.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import ssl
import threading
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any, Final, Protocol

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.exceptions import InvalidSignatureError, PyJWTError

from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.sasl.mechanism import (
    Challenge,
    ExchangeOver,
    Failure,
    StepResult,
    Success,
    clip,
)

log = logging.getLogger("kafkaguard.sasl")

MECHANISM: Final = "OAUTHBEARER"
ALGORITHMS: Final = (
    *("RS256", "RS384", "RS512"),
    *("PS256", "PS384", "PS512"),
    *("ES256", "ES384", "ES512"),
    "EdDSA",
)
"""The public-key algorithms jose4j verifies; Kafka's ``DISALLOW_NONE`` also lets HMAC through,
kafkaguard never (docs/deviations.md)."""
INVALID_TOKEN: Final = '{"status":"invalid_token"}'

PublicKey = (
    rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
)
_PUBLIC_KEY_TYPES: Final = (
    rsa.RSAPublicKey,
    ec.EllipticCurvePublicKey,
    ed25519.Ed25519PublicKey,
    ed448.Ed448PublicKey,
)
_CURVES: Final[dict[str, type[ec.EllipticCurve]]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}
_JWS: Final = jwt.PyJWS()
_JWT: Final = jwt.PyJWT()
_PYJWT_OPTIONS: Final[jwt.types.Options] = {
    # Time claims are checked below with the caller's clock and jose4j's rules (PyJWT refuses an
    # ``iat`` in the future and reads "123" as a number; jose4j does neither). ``sub``/``jti``
    # types are not checked by Kafka unless ``sub`` is the principal claim.
    "require": ["exp", "iat"],
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_sub": False,
    "verify_jti": False,
}

MISSING_KEY_ID_CACHE_MAX_ENTRIES: Final = 16
MISSING_KEY_ID_CACHE_IN_FLIGHT_S: Final = 60.0
MISSING_KEY_ID_MAX_KEY_LENGTH: Final = 1000
"""``RefreshingHttpsJwks``: an unknown ``kid`` (up to this long) expedites one refresh, then not
again for 60 s; 16 such ``kid`` remembered."""
EXPEDITED_REFRESH_MIN_INTERVAL_S: Final = 1.0
"""At most one expedited refresh a second however many different unknown ``kid`` arrive (Kafka
has no such floor: docs/deviations.md)."""
JWKS_MAX_BYTES: Final = 1 << 20
JWKS_FETCH_TIMEOUT_S: Final = 10.0


class TokenInvalid(ValueError):
    """Why a token was refused (logged only)."""


class KeyLoadError(ValueError):
    """A JWKS (file or endpoint) or PEM key cannot be used."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    key: PublicKey
    kid: str | None = None
    any_kid: bool = False
    """A PEM key has no ``kid``: it is tried whatever ``kid`` a token names."""

    def fits(self, alg: str, kid: str | None) -> bool:
        """jose4j's ``VerificationJwkSelector``: the token's ``kid`` when it names one, a key
        type (and curve) the algorithm verifies with. Like it, not the JWK's ``alg``: Kafka
        accepts a PS256 token signed with an RSA key published as ``"alg": "RS256"``."""
        if kid is not None and self.kid != kid and not self.any_kid:
            return False
        if alg[:2] in ("RS", "PS"):
            return isinstance(self.key, rsa.RSAPublicKey)
        if alg == "EdDSA":
            return isinstance(self.key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey)
        curve = _CURVES.get(alg)
        return (
            curve is not None
            and isinstance(self.key, ec.EllipticCurvePublicKey)
            and isinstance(self.key.curve, curve)
        )


def parse_jwks(document: bytes | str, origin: str) -> tuple[VerificationKey, ...]:
    """The signature keys of a JWKS (RFC 7517 §5); keys of other kinds or uses are skipped, as
    jose4j's selector would never choose them."""
    try:
        data = json.loads(document)
    except (ValueError, RecursionError) as exc:
        raise KeyLoadError(f"{origin}: not a JWKS: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise KeyLoadError(f"{origin}: a JWKS is a JSON object with a 'keys' list")
    keys = [key for jwk in data["keys"] if (key := _key_from_jwk(jwk)) is not None]
    if not keys:
        raise KeyLoadError(f"{origin}: no signature key for {', '.join(ALGORITHMS)}")
    return tuple(keys)


def _key_from_jwk(jwk: object) -> VerificationKey | None:
    if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
        return None
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        return None
    # Without its "alg": PyJWK would bind the key to it, jose4j does not. PyJWK guesses an
    # algorithm from "kty" and "crv" then, except for Ed448 (OKP: EdDSA whatever the curve).
    algorithm = "EdDSA" if jwk.get("kty") == "OKP" else None
    try:
        key = jwt.PyJWK({k: v for k, v in jwk.items() if k != "alg"}, algorithm).key
    except (PyJWTError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(key, _PUBLIC_KEY_TYPES):
        return None  # an "oct" (HMAC) key
    return VerificationKey(key, kid)


def load_pem_key(path: Path) -> VerificationKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise KeyLoadError(f"{path}: cannot read a PEM public key: {exc}") from exc
    if not isinstance(key, _PUBLIC_KEY_TYPES):
        raise KeyLoadError(f"{path}: only RSA, EC and EdDSA public keys verify JWTs")
    return VerificationKey(key, any_kid=True)


class KeySource(Protocol):
    """Where verification keys come from."""

    def current(self) -> Sequence[VerificationKey]:
        """The keys in force now; cheap (called for every token)."""
        ...

    def unknown_kid(self, kid: str) -> bool:
        """A token named a ``kid`` no key has: True when the source looks again for it
        (``RefreshingHttpsJwks.maybeExpediteRefresh``)."""
        ...


@dataclass(frozen=True, slots=True)
class StaticKeys:
    """PEM public keys, read at start."""

    loaded: tuple[VerificationKey, ...]

    def current(self) -> Sequence[VerificationKey]:
        return self.loaded

    def unknown_kid(self, kid: str) -> bool:
        return False


class JwksFile:
    """A JWKS file, re-read when its modification time or size changes (Kafka 4.x's
    ``JwksFileVerificationKeyResolver`` through ``CachedFile``), looked at with one ``stat`` a
    ``check_interval_s`` at most. A file that no longer parses leaves the previous keys in force
    (logged), as the credentials file does."""

    def __init__(
        self,
        path: Path,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._interval = check_interval_s
        self._clock = clock
        self._stamp = self._stat()
        try:
            self._keys = parse_jwks(path.read_bytes(), str(path))
        except OSError as exc:
            raise KeyLoadError(f"{path}: cannot read a JWKS: {exc}") from exc
        self._checked = clock()

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def current(self) -> Sequence[VerificationKey]:
        now = self._clock()
        if now - self._checked >= self._interval:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp
                self._reload()
        return self._keys

    def _reload(self) -> None:
        try:
            self._keys = parse_jwks(self.path.read_bytes(), str(self.path))
        except (OSError, KeyLoadError) as exc:
            log.error("JWKS file not reloaded, the previous keys stay in force: %s", exc)
            return
        log.info("JWKS file %s reloaded: %d keys", self.path, len(self._keys))

    def unknown_kid(self, kid: str) -> bool:
        return False


class _HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """A JWKS endpoint may redirect, never away from HTTPS."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        if not newurl.lower().startswith("https://"):
            raise KeyLoadError(f"{req.full_url}: redirected away from HTTPS to {newurl}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class HttpsJwks:
    """Kafka's ``RefreshingHttpsJwks``: the JWKS of ``url``, fetched once before the listener
    opens (a failure stops the start, as ``init`` does), then refreshed every ``refresh_ms`` and
    whenever a token names an unknown ``kid`` (:meth:`unknown_kid`; once per ``kid`` a minute).
    Each refresh retries with Kafka's ``Retry``: waits from ``retry_backoff_ms`` doubling, for
    at most ``retry_backoff_max_ms`` in all; a refresh that fails keeps the keys in force.

    All network I/O runs on one thread of its own, one fetch at a time (a fetch asked for while
    one runs is done once after it), at most :data:`JWKS_MAX_BYTES` read with a
    :data:`JWKS_FETCH_TIMEOUT_S` timeout; the event loop only reads the current key tuple."""

    def __init__(
        self,
        url: str,
        *,
        refresh_ms: int = 3_600_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        ca_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._refresh_s = refresh_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._backoff_max_s = retry_backoff_max_ms / 1000
        self._clock = clock
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), _HttpsOnlyRedirects()
        )
        self._keys: tuple[VerificationKey, ...] = ()
        self._lock = threading.Lock()
        self._missing: OrderedDict[str, float] = OrderedDict()
        """Unknown ``kid`` → when it may expedite a refresh again (``missingKeyIds``)."""
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._rate_log = RateLimitedLog(log, 60.0)

    async def start(self) -> None:
        """The first fetch (off the event loop), then the refresh thread."""
        if self._thread is not None:
            return
        self._keys = await asyncio.to_thread(self._fetch)
        log.info(
            "JWKS %s: %d keys; refreshed every %.0f s", self.url, len(self._keys), self._refresh_s
        )
        self._thread = threading.Thread(target=self._run, name="kafkaguard-jwks", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        """Stop refreshing; a fetch under way ends within its timeout, in the background."""
        self._closed.set()
        self._wake.set()

    def current(self) -> Sequence[VerificationKey]:
        return self._keys

    def unknown_kid(self, kid: str) -> bool:
        if len(kid) > MISSING_KEY_ID_MAX_KEY_LENGTH or self._thread is None:
            return False
        now = self._clock()
        with self._lock:
            again = self._missing.get(kid)
            if again is not None:
                self._missing.move_to_end(kid)  # an access-ordered LinkedHashMap in Kafka
                if again > now:
                    return False
            self._missing[kid] = now + MISSING_KEY_ID_CACHE_IN_FLIGHT_S
            self._missing.move_to_end(kid)
            while len(self._missing) > MISSING_KEY_ID_CACHE_MAX_ENTRIES:
                self._missing.popitem(last=False)
        self._wake.set()
        return True

    def _run(self) -> None:
        due = self._clock() + self._refresh_s
        last_expedited = float("-inf")
        while not self._closed.is_set():
            expedited = self._wake.wait(max(0.0, due - self._clock()))
            if self._closed.is_set():
                return
            if expedited:
                pause = last_expedited + EXPEDITED_REFRESH_MIN_INTERVAL_S - self._clock()
                if pause > 0 and self._closed.wait(pause):
                    return
                self._wake.clear()
                last_expedited = self._clock()
            else:
                due = max(due + self._refresh_s, self._clock())
            self._refresh()

    def _refresh(self) -> None:
        """``RefreshingHttpsJwks.refresh`` with ``Retry.execute``."""
        end = self._clock() + self._backoff_max_s
        attempt = 0
        while True:
            attempt += 1
            try:
                keys = self._fetch()
            except KeyLoadError as exc:
                wait = min(self._backoff_s * 2 ** (attempt - 1), end - self._clock())
                if wait <= 0 and not self._closed.is_set():
                    self._rate_log.log(
                        ("jwks-refresh", self.url),
                        logging.WARNING,
                        "JWKS refresh failed after %d attempts, the keys in force stay: %s",
                        attempt,
                        exc,
                    )
                if wait <= 0 or self._closed.wait(wait):
                    return
                continue
            with self._lock:
                for key in keys:
                    if key.kid is not None:
                        self._missing.pop(key.kid, None)
                self._keys = keys
            log.info("JWKS %s refreshed: %d keys", self.url, len(keys))
            return

    def _fetch(self) -> tuple[VerificationKey, ...]:
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        try:
            with self._opener.open(request, timeout=JWKS_FETCH_TIMEOUT_S) as response:
                body = response.read(JWKS_MAX_BYTES + 1)
        except (OSError, HTTPException, ValueError) as exc:
            raise KeyLoadError(f"{self.url}: cannot fetch the JWKS: {exc}") from None
        if len(body) > JWKS_MAX_BYTES:
            raise KeyLoadError(f"{self.url}: the JWKS is larger than {JWKS_MAX_BYTES} bytes")
        return parse_jwks(body, self.url)


@dataclass(frozen=True, slots=True)
class JwtValidator:
    sources: Sequence[KeySource]
    expected_issuer: str | None = None
    expected_audience: tuple[str, ...] = ()
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    algorithms: tuple[str, ...] = field(default=ALGORITHMS)

    def validate(self, token: str, now_s: float) -> tuple[str, dict[str, Any]]:
        """(principal name, claims) of a valid token; :class:`TokenInvalid` otherwise."""
        try:
            header = _JWS.get_unverified_header(token)
        except PyJWTError as exc:
            raise TokenInvalid(f"undecodable token: {exc}") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise TokenInvalid(f"algorithm {clip(alg)} is not accepted")
        kid: str | None = header.get("kid")
        candidates = [k for s in self.sources for k in s.current() if k.fits(alg, kid)]
        if not candidates:
            if kid is not None:
                for source in self.sources:
                    source.unknown_kid(kid)
            raise TokenInvalid(f"no {alg} key{f' with kid {clip(kid)}' if kid else ''}")
        claims = self._verified_claims(token, alg, candidates)
        if not self.expected_audience and claims.get("aud") is not None:
            # jose4j's AudValidator; PyJWT lets an empty one ("", []) through
            raise TokenInvalid(f"aud {clip(claims['aud'])} present but no audience expected")
        self._check_times(claims, int(now_s))
        self._check_scope(claims)
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"no non-blank string claim {clip(self.principal_claim)}")
        return principal.strip(), claims

    def _verified_claims(
        self, token: str, alg: str, candidates: Sequence[VerificationKey]
    ) -> dict[str, Any]:
        for candidate in candidates:
            try:
                claims: dict[str, Any] = _JWT.decode(
                    token,
                    candidate.key,
                    algorithms=[alg],
                    options=_PYJWT_OPTIONS,
                    audience=list(self.expected_audience) or None,
                    issuer=self.expected_issuer,
                )
            except InvalidSignatureError:
                continue
            except PyJWTError as exc:
                raise TokenInvalid(str(exc)) from None
            return claims
        raise TokenInvalid("bad signature")

    def _check_times(self, claims: dict[str, Any], now: int) -> None:
        """jose4j's ``NumericDateValidator`` and Kafka's ``ClaimValidationUtils``."""
        exp, iat = _numeric_date(claims, "exp"), _numeric_date(claims, "iat")
        nbf = _numeric_date(claims, "nbf") if "nbf" in claims else None
        skew = self.clock_skew_s
        if exp < 0 or iat < 0:
            raise TokenInvalid(f"negative exp ({exp}) or iat ({iat})")
        if now - skew >= exp:
            raise TokenInvalid(f"expired at {exp}")
        if exp < iat:
            raise TokenInvalid(f"exp {exp} is before iat {iat}")
        if nbf is not None and (exp < nbf or now + skew < nbf):
            raise TokenInvalid(f"not valid before {nbf}")

    def _check_scope(self, claims: dict[str, Any]) -> None:
        """``BrokerJwtValidator``: a string is one scope, a list many, anything else none."""
        raw = claims.get(self.scope_claim)
        scopes = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        seen: set[str] = set()
        for scope in scopes:
            if not isinstance(scope, str) or not scope.strip() or scope.strip() in seen:
                raise TokenInvalid(f"{clip(self.scope_claim)}: blank or repeated scope")
            seen.add(scope.strip())


_MAX_NUMERIC_DATE: Final = (2**63 - 1) // 1000
"""jose4j's ``NumericDate.getValueInMillis`` fails beyond this many seconds (long overflow)."""


def _numeric_date(claims: dict[str, Any], name: str) -> int:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenInvalid(f"{name} is not a number: {clip(value)}")
    if abs(value) > _MAX_NUMERIC_DATE:
        raise TokenInvalid(f"{name} is out of range: {clip(value)}")
    return int(value)


_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KVPAIR = r"[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01"
_CLIENT_MESSAGE: Final = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KVPAIR})*)\x01"
)
_AUTH: Final = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)", re.ASCII)


class OAuthBearerServer(ExchangeOver):
    """One OAUTHBEARER exchange."""

    def __init__(self, validator: JwtValidator, clock: Callable[[], float]) -> None:
        self._validator = validator
        self._clock = clock
        self._error: str | None = None
        self._reason = ""

    @property
    def mechanism(self) -> str:
        return MECHANISM

    @property
    def checks_credential(self) -> bool:
        return not self._done and self._error is None

    blocking = False
    """One signature check (RS256 ~35 µs, ES256 ~80 µs, Ed25519 less) costs less than a thread
    hop; keys are fetched on :class:`HttpsJwks`'s own thread, never here."""

    def step(self, token: bytes) -> StepResult:
        if self._done:
            return self._over(MECHANISM)
        if self._error is not None:
            self._done = True
            ack = "" if token == b"\x01" else " (and the client did not acknowledge with 0x01)"
            return Failure(f"OAUTHBEARER: token refused: {self._reason}{ack}", self._error)
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        match = _CLIENT_MESSAGE.fullmatch(text)
        if match is None:
            self._done = True
            message = "Invalid OAUTHBEARER client first message"
            return Failure(f"OAUTHBEARER: {message}", message)
        pairs = dict(item.split("=", 1) for item in match["kvpairs"].split("\x01") if item)
        auth = pairs.get("auth")
        if auth is None:
            self._done = True
            message = "Invalid OAUTHBEARER client first message: 'auth' not specified"
            return Failure(f"OAUTHBEARER: {message}", message)
        auth_match = _AUTH.fullmatch(auth)
        if auth_match is None or auth_match["scheme"].lower() != "bearer":
            self._done = True
            message = "Invalid OAUTHBEARER client first message: invalid 'auth' value"
            return Failure(f"OAUTHBEARER: {message}", message)
        try:
            principal, claims = self._validator.validate(auth_match["token"], self._clock())
        except TokenInvalid as exc:
            self._error = INVALID_TOKEN
            self._reason = clip(exc, 300)
            return Challenge(INVALID_TOKEN.encode("utf-8"))
        authzid = match["authzid"]
        if authzid and authzid != principal:
            self._done = True
            message = (
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({principal})"
            )
            return Failure(f"OAUTHBEARER: {message}", message)
        self._done = True
        return Success(principal, b"", int(claims["exp"]) * 1000, claims)
