"""SASL from the proxy to the upstream cluster: the proxy as a SASL *client*.

Configured by ``upstream.sasl: {mechanism, username, password_file}``; the password is read
from its own file (never from the configuration), re-read when the file changes.

Sans-I/O, in three layers:

* :class:`PlainClient` (RFC 4616) and :class:`ScramClient` (RFC 5802/7677, as Kafka's
  ``ScramSaslClient``: no channel binding, iterations ≥ 4096, the server's nonce must extend
  ours, and the server signature is verified — a broker that cannot prove it knows the
  credential fails authentication);
* :class:`UpstreamSaslExchange` — the Kafka framing around them: SaslHandshake v1, then
  SaslAuthenticate rounds, as request frames to send and response frames to feed back, with
  the proxy's own correlation ids. The exchange runs on a fresh upstream connection *before*
  any client request is written to it (the client's requests wait in the connection's
  backlog), so those ids cannot collide with a client's;
* the asyncio shells: :func:`authenticate_stream` (the startup probe) and
  ``UpstreamConnection.authenticate`` in :mod:`kafkaguard.proxy.net.connection`.

A rejection raises :class:`UpstreamAuthenticationError` with the broker's error code and
message; the connection it happened on is closed (never used unauthenticated).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Protocol

from kafkaguard.config_tree import ConfigSection
from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame, FrameBuffer
from kafkaguard.protocol.header import peek_correlation_id
from kafkaguard.proxy.sasl import plain, scram

MECHANISMS: Final = (plain.MECHANISM, *scram.MECHANISMS)
"""What the proxy can authenticate to a broker with."""
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
CLIENT_ID: Final = "kafkaguard"
CORRELATION_BASE: Final = 0x4B470000
"""First correlation id of the proxy's own SASL requests ("KG"); nothing else is in flight on
the connection while they are, so any value would do — a distinctive one reads well in a
broker's request log."""


class UpstreamAuthenticationError(Exception):
    """The broker refused the proxy's SASL authentication, or the exchange broke its rules.

    Not an ``OSError``: retrying the same credentials elsewhere cannot help."""


# -- configuration ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class UpstreamSaslConfig:
    """``upstream.sasl:`` — how the proxy authenticates to the brokers."""

    mechanism: str
    """PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (Kafka's ``sasl.mechanism``)."""
    username: str
    password_file: Path
    """A file holding the password (its first line; a trailing newline is ignored)."""


def parse_upstream_sasl_config(section: ConfigSection, base_dir: Path) -> UpstreamSaslConfig:
    mechanism = section.choice("mechanism", MECHANISMS, "SCRAM-SHA-512")
    username = section.get_str("username", None)
    if not username:
        raise section.error("username", "is required")
    value = section.get_str("password_file", None)
    if not value:
        raise section.error("password_file", "is required (a file holding the password)")
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base_dir / path
    section.reject_unknown()
    config = UpstreamSaslConfig(mechanism, username, path)
    try:
        read_password(path)
    except UpstreamAuthenticationError as exc:
        raise section.error("password_file", str(exc)) from None
    return config


def read_password(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UpstreamAuthenticationError(f"cannot read password file {path}: {detail}") from None
    password = text.split("\n", 1)[0].rstrip("\r")
    if not password:
        raise UpstreamAuthenticationError(f"password file {path} is empty")
    return password


class PasswordSource:
    """The password of ``password_file``, re-read when the file's stamp changes (rotation
    without a restart: new upstream connections use the new password)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._password = ""
        self._lock = threading.Lock()

    def get(self) -> str:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._password:  # being replaced: keep the one we have
                return self._password
            raise UpstreamAuthenticationError(
                f"cannot read password file {self.path}: {exc.strerror}"
            ) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            if stamp != self._stamp:
                self._password = read_password(self.path)
                self._stamp = stamp
            return self._password


# -- mechanisms ---------------------------------------------------------------------------------
class MechanismClient(Protocol):
    def first(self) -> bytes:
        """The client's initial token."""
        ...

    def respond(self, challenge: bytes) -> bytes | None:
        """The next token for the server's ``challenge``; None when the exchange is complete
        (the challenge was the server's last message and it checked out)."""
        ...


class PlainClient:
    """RFC 4616: ``authzid NUL authcid NUL passwd`` with an empty authzid, as Kafka sends."""

    def __init__(self, username: str, password: str) -> None:
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self._sent = False

    def first(self) -> bytes:
        self._sent = True
        return self._token

    def respond(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise UpstreamAuthenticationError("PLAIN: unexpected challenge from the broker")
        return None


SaltedCache = dict[tuple[str, str, bytes, int], bytes]
"""(mechanism, password, salt, iterations) → SaltedPassword: brokers answer a user with the
same salt every time, so the PBKDF2 work is done once, not per connection."""


def _sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """RFC 5802 client: client-first → (server-first) client-final → (server-final) done."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        cache: SaltedCache | None = None,
    ) -> None:
        if mechanism not in scram.HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self._mechanism = mechanism
        self._hash = scram.HASHES[mechanism]
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._cache = cache if cache is not None else {}
        self._bare = f"n={_sasl_name(username)},r={self._nonce}"
        self._gs2 = "n,,"
        self._state = "first"
        self._server_signature = b""

    def first(self) -> bytes:
        self._state = "server-first"
        return (self._gs2 + self._bare).encode()

    def _fail(self, reason: str) -> UpstreamAuthenticationError:
        self._state = "failed"
        return UpstreamAuthenticationError(f"{self._mechanism}: {reason}")

    def respond(self, challenge: bytes) -> bytes | None:
        if self._state == "server-first":
            return self._client_final(challenge)
        if self._state == "server-final":
            self._verify(challenge)
            return None
        raise self._fail("unexpected challenge")

    def _client_final(self, challenge: bytes) -> bytes:
        try:
            text = challenge.decode("utf-8")
            attrs = dict(item.split("=", 1) for item in text.split(","))
            nonce, salt_b64, iterations_text = attrs["r"], attrs["s"], attrs["i"]
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iterations_text)
        except (UnicodeDecodeError, ValueError, KeyError, binascii.Error):
            raise self._fail(f"invalid server-first message {challenge[:100]!r}") from None
        if "e" in attrs:
            raise self._fail(f"server error {attrs['e']!r}")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("the server nonce does not extend the client nonce")
        if iterations < scram.MIN_ITERATIONS:
            raise self._fail(
                f"requested iterations {iterations} is less than the minimum {scram.MIN_ITERATIONS}"
            )
        key = (self._mechanism, self._password, salt, iterations)
        salted = self._cache.get(key)
        if salted is None:
            salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = salted
        client_key = hmac.new(salted, b"Client Key", self._hash).digest()
        stored_key = hashlib.new(self._hash, client_key).digest()
        channel = base64.b64encode(self._gs2.encode()).decode()
        without_proof = f"c={channel},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self._hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self._hash).digest()
        self._server_signature = hmac.new(server_key, auth_message, self._hash).digest()
        self._state = "server-final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, challenge: bytes) -> None:
        text = challenge.decode("utf-8", "replace")
        if text.startswith("e="):
            raise self._fail(f"server error {text[2:]!r}")
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not hmac.compare_digest(challenge, expected):
            raise self._fail("invalid server signature (the broker does not know the credential)")
        self._state = "done"


def mechanism_client(
    mechanism: str, username: str, password: str, cache: SaltedCache | None = None
) -> MechanismClient:
    """The client side of ``mechanism`` (PLAIN or a SCRAM one) for ``username``: the proxy's
    towards its brokers, and the tools' own Admin reads (kafkaguard/proxy/app/wire_admin.py)."""
    if mechanism == plain.MECHANISM:
        return PlainClient(username, password)
    return ScramClient(mechanism, username, password, cache=cache)


# -- the Kafka exchange -------------------------------------------------------------------------
def authenticate_version(broker_versions: Any) -> int:
    """The highest SaslAuthenticate version both sides know (``broker_versions``: the range
    the broker advertised, or None when unknown: v1, which every broker since Kafka 2.2 has)."""
    if broker_versions is None:
        return 1
    for version in (2, 1, 0):
        if version in broker_versions:
            return version
    raise UpstreamAuthenticationError("the broker does not support SaslAuthenticate")


@dataclass
class UpstreamSaslExchange:
    """SaslHandshake v1 + SaslAuthenticate rounds, as frames. ``start()`` gives the first
    request; each response frame goes to ``receive()``, which returns the next request or
    None once authenticated. Raises :class:`UpstreamAuthenticationError` on any refusal."""

    mechanism: str
    client: MechanismClient
    version: int = 1
    """SaslAuthenticate version (:func:`authenticate_version`)."""
    session_lifetime_ms: int = 0
    """KIP-368: the broker's session lifetime (SaslAuthenticate v1+), 0 when unlimited."""
    done: bool = False
    _correlation_id: int = CORRELATION_BASE
    _expect: tuple[int, int] = (SASL_HANDSHAKE, 1)

    def _request(self, body: Any) -> bytes:
        self._correlation_id += 1
        self._expect = (int(body.__api_key__), int(body.__version__))
        return codec.encode_request(body, self._correlation_id, CLIENT_ID)

    def _authenticate(self, token: bytes) -> bytes:
        schema = codec.request_schema(SASL_AUTHENTICATE, self.version)
        return self._request(codec.make_entity(schema, auth_bytes=token))

    def start(self) -> bytes:
        schema = codec.request_schema(SASL_HANDSHAKE, 1)
        return self._request(codec.make_entity(schema, mechanism=self.mechanism))

    def receive(self, frame: Frame) -> bytes | None:
        if self.done:
            raise UpstreamAuthenticationError("unexpected response after SASL authentication")
        try:
            correlation_id = peek_correlation_id(frame)
        except ProtocolError as exc:
            raise UpstreamAuthenticationError(f"malformed SASL response: {exc}") from None
        if correlation_id != self._correlation_id:
            raise UpstreamAuthenticationError(
                f"response correlation id {correlation_id} does not match "
                f"request {self._correlation_id}"
            )
        api_key, version = self._expect
        try:
            response: Any = codec.decode_response(frame, api_key, version)
        except ProtocolError as exc:
            raise UpstreamAuthenticationError(f"malformed SASL response: {exc}") from None
        error = codec.ErrorCode(response.error_code)
        if api_key == SASL_HANDSHAKE:
            if error != codec.ErrorCode.none:
                enabled = ", ".join(response.mechanisms) or "none"
                raise UpstreamAuthenticationError(
                    f"SaslHandshake for {self.mechanism} failed with {error.name.upper()} "
                    f"({int(error.value)}; broker mechanisms: {enabled})"
                )
            return self._authenticate(self.client.first())
        if error != codec.ErrorCode.none:
            message = response.error_message or "no message"
            raise UpstreamAuthenticationError(
                f"{error.name.upper()} ({int(error.value)}): {message}"
            )
        lifetime = getattr(response, "session_lifetime", None)
        if isinstance(lifetime, timedelta):
            self.session_lifetime_ms = int(lifetime.total_seconds() * 1000)
        token = self.client.respond(bytes(response.auth_bytes))
        if token is None:
            self.done = True
            return None
        return self._authenticate(token)


class UpstreamSasl:
    """Per cluster: the configuration, the password file and the PBKDF2 cache; makes one
    :class:`UpstreamSaslExchange` per upstream connection."""

    def __init__(self, config: UpstreamSaslConfig) -> None:
        self.config = config
        self._password = PasswordSource(config.password_file)
        self._cache: SaltedCache = {}

    def exchange(self, broker_versions: Any = None) -> UpstreamSaslExchange:
        """Raises :class:`UpstreamAuthenticationError` when the password cannot be read."""
        config = self.config
        client = mechanism_client(
            config.mechanism, config.username, self._password.get(), self._cache
        )
        return UpstreamSaslExchange(
            self.config.mechanism, client, authenticate_version(broker_versions)
        )

    def describe(self) -> str:
        return f"{self.config.mechanism} as {self.config.username!r}"


async def authenticate_stream(
    exchange: UpstreamSaslExchange,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    frames: FrameBuffer | None = None,
) -> None:
    """Run ``exchange`` on a stream connection (the startup probe)."""
    frames = frames or FrameBuffer()
    pending: list[Frame] = []
    request: bytes | None = exchange.start()
    while request is not None:
        writer.write(request)
        while not pending:
            data = await reader.read(65536)
            if not data:
                raise OSError("the broker closed the connection during SASL authentication")
            pending.extend(frames.feed(data))
        request = exchange.receive(pending.pop(0))
    if pending:
        raise UpstreamAuthenticationError("unexpected response after SASL authentication")


__all__ = [
    "MECHANISMS",
    "PlainClient",
    "ScramClient",
    "UpstreamAuthenticationError",
    "UpstreamSasl",
    "UpstreamSaslConfig",
    "UpstreamSaslExchange",
    "authenticate_stream",
    "parse_upstream_sasl_config",
]
