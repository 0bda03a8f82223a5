"""SASL/PLAIN (RFC 4616) checked against salted password hashes.

Kafka's ``PlainServerCallbackHandler`` compares with plaintext passwords from the JAAS file;
the proxy never stores a password. A PLAIN credential is::

    algorithm=pbkdf2-sha512,salt=<base64>,hash=<base64>,iterations=<n>

with ``hash = PBKDF2-HMAC-SHA512(password, salt, n)``, written by ``kafkaguard users add
--mechanism PLAIN``. Checking one costs ``n`` hash iterations, so the proxy runs PLAIN steps
on its bounded authentication executor (:mod:`kafkaguard.proxy.sasl.executor`), and not at all
for an address inside its failure window. An unknown user costs the same work against a dummy
credential, so timing does not tell whether the user exists either.

Messages follow ``PlainSaslServer.evaluateResponse`` exactly.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kafkaguard.proxy.sasl.mechanism import ExchangeOver, Failure, StepResult, Success, clip
from kafkaguard.proxy.sasl.scram import CredentialFormatError, parse_properties

MECHANISM: Final = "PLAIN"
ALGORITHM: Final = "pbkdf2-sha512"
DEFAULT_ITERATIONS: Final = 100_000
MIN_ITERATIONS: Final = 4096
INVALID: Final = "Authentication failed: Invalid username or password"


@dataclass(frozen=True, slots=True)
class PlainCredential:
    salt: bytes
    hash: bytes
    iterations: int

    def to_string(self) -> str:
        b64 = base64.b64encode
        return (
            f"algorithm={ALGORITHM},salt={b64(self.salt).decode()},"
            f"hash={b64(self.hash).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_string(cls, text: str) -> PlainCredential:
        props = parse_properties(text)
        if props.get("algorithm", ALGORITHM) != ALGORITHM:
            raise CredentialFormatError(f"unknown PLAIN hash algorithm {props['algorithm']!r}")
        try:
            credential = cls(
                base64.b64decode(props["salt"], validate=True),
                base64.b64decode(props["hash"], validate=True),
                int(props["iterations"]),
            )
        except KeyError as exc:
            raise CredentialFormatError(f"PLAIN credential lacks {exc.args[0]!r}") from None
        except (ValueError, binascii.Error) as exc:
            raise CredentialFormatError(f"invalid PLAIN credential: {exc}") from None
        if credential.iterations < MIN_ITERATIONS:
            raise CredentialFormatError(
                f"PLAIN iterations must be at least {MIN_ITERATIONS}, got {credential.iterations}"
            )
        return credential

    def matches(self, password: str) -> bool:
        computed = hashlib.pbkdf2_hmac(
            "sha512", password.encode("utf-8"), self.salt, self.iterations
        )
        return hmac.compare_digest(computed, self.hash)


def make_credential(
    password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> PlainCredential:
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
    return PlainCredential(salt, digest, iterations)


_DUMMY = PlainCredential(b"\0" * 32, b"\0" * 64, DEFAULT_ITERATIONS)

PlainLookup = Callable[[str], PlainCredential | None]


class PlainServer(ExchangeOver):
    """One PLAIN exchange: a single ``authzid NUL authcid NUL passwd`` token."""

    blocking = True
    """Checking a hash is CPU-bound: the shell runs :meth:`step` on the authentication
    executor."""

    def __init__(self, lookup: PlainLookup) -> None:
        self._lookup = lookup

    @property
    def mechanism(self) -> str:
        return MECHANISM

    @property
    def checks_credential(self) -> bool:
        return not self._done

    def step(self, token: bytes) -> StepResult:
        if self._done:
            return self._over(MECHANISM)
        self._done = True
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return Failure("PLAIN: token is not UTF-8", INVALID)
        tokens = text.split("\0")
        if len(tokens) != 3:
            message = f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            return Failure(f"PLAIN: {message}", message)
        authzid, username, password = tokens
        if not username:
            message = "Authentication failed: username not specified"
            return Failure(f"PLAIN: {message}", message)
        if not password:
            message = "Authentication failed: password not specified"
            return Failure(f"PLAIN: {message}", message)
        credential = self._lookup(username)
        ok = (credential or _DUMMY).matches(password)
        if credential is None or not ok:
            detail = "no such user" if credential is None else "wrong password"
            return Failure(f"PLAIN: user {clip(username)}: {detail}", INVALID)
        if authzid and authzid != username:
            message = (
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
            return Failure(f"PLAIN: {message} ({clip(authzid)} vs {clip(username)})", message)
        return Success(username)
