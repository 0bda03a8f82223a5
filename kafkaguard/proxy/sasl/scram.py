"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) with Kafka's credential format.

Credential (``ScramCredentialUtils.credentialToString``, also the value kept per mechanism in
ZooKeeper's ``/config/users/<name>``)::

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

with ``SaltedPassword = PBKDF2-HMAC-H(password, salt, n)``, ``StoredKey = H(HMAC(SaltedPassword,
"Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server Key")``; the password itself is
never stored. Kafka requires ``n >= 4096`` (``ScramMechanism.minIterations``).

The server follows ``ScramSaslServer``: the client-first message must use gs2 flag ``n`` (no
channel binding); an authorization id, when given, must equal the user name; the ``tokenauth``
extension (delegation tokens) is refused because the proxy issues none. Two differences from
Kafka, both on the side of revealing less: an unknown user gets a server-first message with a
salt derived from the name (stable across attempts) and fails only at the proof check, so the
exchange cannot tell whether the user exists; and the client-final channel binding ``c=`` is
checked against the gs2 header as RFC 5802 §5.1 requires.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kafkaguard.proxy.sasl.mechanism import (
    Challenge,
    ExchangeOver,
    Failure,
    StepResult,
    Success,
    clip,
    invalid_credentials,
)

MIN_ITERATIONS: Final = 4096
HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS: Final = tuple(HASHES)


class CredentialFormatError(ValueError):
    """A stored credential string is not in Kafka's format."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        """``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        """``ScramCredentialUtils.credentialFromString``."""
        props = parse_properties(text)
        try:
            iterations = int(props["iterations"])
            credential = cls(
                base64.b64decode(props["salt"], validate=True),
                base64.b64decode(props["stored_key"], validate=True),
                base64.b64decode(props["server_key"], validate=True),
                iterations,
            )
        except KeyError as exc:
            raise CredentialFormatError(f"SCRAM credential lacks {exc.args[0]!r}") from None
        except (ValueError, binascii.Error) as exc:
            raise CredentialFormatError(f"invalid SCRAM credential: {exc}") from None
        if iterations < MIN_ITERATIONS:
            raise CredentialFormatError(
                f"SCRAM iterations must be at least {MIN_ITERATIONS}, got {iterations}"
            )
        return credential


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` pairs separated by commas; the value may itself contain ``=``."""
    props: dict[str, str] = {}
    for token in text.strip().split(","):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise CredentialFormatError(f"invalid credential entry {token!r}")
        props[key.strip()] = value.strip()
    return props


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def make_credential(
    mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """What ``kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=…]'`` stores."""
    hash_name = HASHES[mechanism]
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """``ScramControlManager.finishUpsertion``: the stored and server keys of a salted password
    (what AlterUserScramCredentials carries; the password itself never reaches the broker)."""
    hash_name = HASHES[mechanism]
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


# ScramMessages: the printable characters RFC 5802 allows in a nonce (no comma).
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_EXTENSIONS = rf"(?:,[A-Za-z]={_VALUE})*"
_CLIENT_FIRST: Final = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?:m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>(?:,[A-Za-z][A-Za-z0-9]*={_VALUE})*))"
)
_CLIENT_FINAL: Final = re.compile(
    rf"(?P<without_proof>c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>{_PRINTABLE})"
    rf"{_EXTENSIONS}),p=(?P<proof>[A-Za-z0-9+/]+={{0,2}})"
)


def sasl_name_to_username(name: str) -> str:
    """``ScramFormatter.username``: RFC 5802's ``=2C`` / ``=3D`` escapes."""
    return name.replace("=2C", ",").replace("=3D", "=")


CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(user name, mechanism) → the stored credential, ``None`` when there is none."""


class ScramServer(ExchangeOver):
    """One SCRAM exchange: client-first → server-first → client-final → server-final."""

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        *,
        unknown_user_secret: bytes,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self._mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self._secret = unknown_user_secret
        self._nonce = nonce
        self._state = "first"
        self._username = ""
        self._gs2 = b""
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""

    @property
    def mechanism(self) -> str:
        return self._mechanism

    @property
    def checks_credential(self) -> bool:
        return self._state == "final"

    blocking = False
    """The server's side costs two HMACs and a hash (~20 µs): the PBKDF2 is the client's, the
    server stores StoredKey/ServerKey (RFC 5802 §3)."""

    def _fail(self, reason: str, message: str | None = None) -> Failure:
        self._state = "done"
        return Failure(
            f"{self._mechanism}: {reason}", message or invalid_credentials(self._mechanism)
        )

    def step(self, token: bytes) -> StepResult:
        if self._state == "first":
            return self._client_first(token)
        if self._state == "final":
            return self._client_final(token)
        return self._over(self._mechanism)

    def _fake_credential(self, username: str) -> ScramCredential:
        """Stable per name, so repeated probes see the same salt for an unknown user."""
        digest = _hmac("sha256", self._secret, username.encode("utf-8"))
        junk = _hmac("sha512", self._secret, b"keys" + digest)
        size = hashlib.new(self._hash).digest_size
        return ScramCredential(digest, junk[:size], junk[-size:], MIN_ITERATIONS)

    def _client_first(self, token: bytes) -> StepResult:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail("client-first message is not UTF-8")
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            return self._fail(f"invalid client-first message {clip(text)}")
        username = sasl_name_to_username(match["saslname"])
        authzid = match["authzid"]
        if authzid is not None and sasl_name_to_username(authzid) != username:
            return self._fail(
                f"authorization id {clip(authzid)} differs from user {clip(username)}",
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
            )
        extensions = dict(item.split("=", 1) for item in match["extensions"].split(",") if item)
        if extensions.get("tokenauth", "").lower() == "true":
            return self._fail(f"user {clip(username)} asked for delegation-token authentication")
        self._username = username
        self._gs2 = match["gs2"].encode("utf-8")
        credential = self._lookup(username, self._mechanism)
        self._known = credential is not None
        self._credential = credential or self._fake_credential(username)
        self._client_first_bare = match["bare"]
        self._full_nonce = match["nonce"] + self._nonce()
        self._server_first = (
            f"r={self._full_nonce},s={base64.b64encode(self._credential.salt).decode()},"
            f"i={self._credential.iterations}"
        )
        self._state = "final"
        return Challenge(self._server_first.encode("utf-8"))

    def _client_final(self, token: bytes) -> StepResult:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail("client-final message is not UTF-8")
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            return self._fail(f"invalid client-final message {clip(text)}")
        # ScramSaslServer checks endsWith, not equality: librdkafka < 2.1 sends the client
        # nonce twice (client nonce + the combined nonce). The proof covers what was sent.
        if not match["nonce"].endswith(self._full_nonce):
            return self._fail("invalid client nonce in the final client message")
        try:
            channel = base64.b64decode(match["channel"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except (ValueError, binascii.Error):
            return self._fail("client-final message has invalid base64")
        if channel != self._gs2:
            return self._fail("channel binding does not match the gs2 header")
        credential = self._credential
        assert credential is not None
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, match["without_proof"])
        ).encode("utf-8")
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            return self._fail(f"user {clip(self._username)}: client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        computed = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key) or not self._known:
            detail = "invalid client proof" if self._known else "no such user"
            return self._fail(f"user {clip(self._username)}: {detail}")
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        self._state = "done"
        return Success(self._username, b"v=" + base64.b64encode(server_signature))
