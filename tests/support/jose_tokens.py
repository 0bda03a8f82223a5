"""JWTs for tests, minted by jwcrypto: a JOSE implementation independent of the PyJWT that
kafkaguard verifies with, so a shared misreading of RFC 7515/7518 cannot pass unnoticed.

:class:`IdentityProvider` holds one signing key (any algorithm kafkaguard accepts); ``token()``
mints a JWT with Kafka-like defaults, ``jwk()`` is its public JWKS entry.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from jwcrypto import jwk, jws
from jwcrypto.common import JWSEHeaderParameter

EXTENSION = "exp.test"
"""A critical header parameter no verifier understands (RFC 7515 §4.1.11): tokens that list it
in ``crit`` must be refused."""

ISSUER = "https://issuer.test"
AUDIENCE = "kafka"

_KEY_SPECS: dict[str, dict[str, Any]] = {
    **{
        f"{family}{bits}": {"kty": "RSA", "size": 2048}
        for family in ("RS", "PS")
        for bits in (256, 384, 512)
    },
    "ES256": {"kty": "EC", "crv": "P-256"},
    "ES384": {"kty": "EC", "crv": "P-384"},
    "ES512": {"kty": "EC", "crv": "P-521"},
    "EdDSA": {"kty": "OKP", "crv": "Ed25519"},
}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class IdentityProvider:
    """One signing key of an OAuth/OIDC provider: ``alg`` one of :data:`_KEY_SPECS`, or
    ``"EdDSA"`` with ``crv="Ed448"``."""

    def __init__(self, alg: str = "RS256", kid: str | None = "k1", *, crv: str | None = None):
        self.alg = alg
        self.kid = kid
        spec = dict(_KEY_SPECS[alg])
        if crv is not None:
            spec["crv"] = crv
        self.key = jwk.JWK.generate(**spec, **({"kid": kid} if kid else {}))

    def jwk(self, **extra: Any) -> dict[str, Any]:
        """The public JWK as a provider publishes it (``alg`` and ``use`` set; ``alg=None``
        leaves it out)."""
        entry: dict[str, Any] = {**self.key.export_public(as_dict=True), "alg": self.alg}
        entry["use"] = "sig"
        entry.update(extra)
        return {k: v for k, v in entry.items() if v is not None}

    def public_pem(self) -> bytes:
        return bytes(self.key.export_to_pem())

    def token(
        self,
        claims: dict[str, Any] | None = None,
        *,
        header: dict[str, Any] | None = None,
        key: jwk.JWK | None = None,
        **overrides: Any,
    ) -> str:
        """A signed JWT: ``sub`` alice, :data:`ISSUER`, :data:`AUDIENCE`, ``iat`` now, ``exp``
        in ten minutes, then ``claims`` and ``overrides`` (a ``None`` value removes a claim);
        ``header`` adds to or replaces the protected header, ``key`` signs instead of ours."""
        now = int(time.time())
        body: dict[str, Any] = {
            "sub": "alice",
            "iss": ISSUER,
            "aud": AUDIENCE,
            "iat": now,
            "exp": now + 600,
            **(claims or {}),
            **overrides,
        }
        body = {k: v for k, v in body.items() if v is not None}
        protected = {"alg": self.alg, "typ": "JWT", **({"kid": self.kid} if self.kid else {})}
        protected.update(header or {})
        protected = {k: v for k, v in protected.items() if v is not None}
        registry = {EXTENSION: JWSEHeaderParameter("test extension", True, True, None)}
        signed = jws.JWS(json.dumps(body).encode(), header_registry=registry)
        signed.allowed_algs = [protected["alg"]]
        signed.add_signature(key or self.key, alg=None, protected=json.dumps(protected))
        return str(signed.serialize(compact=True))

    def hmac_with_public_key(self, alg: str = "HS256") -> str:
        """The algorithm-confusion attack: HMAC-signed with our *public* key (PEM) as secret."""
        secret = jwk.JWK(kty="oct", k=b64url(self.public_pem()))
        return self.token(header={"alg": alg}, key=secret)


def unsigned_token(**claims: Any) -> str:
    """``alg: none`` (RFC 7519 §6): header and claims, empty signature."""
    now = int(time.time())
    body = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, **claims}
    header = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    return f"{header}.{b64url(json.dumps(body).encode())}."


def jwks(*providers: IdentityProvider) -> dict[str, Any]:
    return {"keys": [p.jwk() for p in providers]}


def client_message(token: str, authzid: str = "", **extensions: str) -> bytes:
    """RFC 7628 client initial response, as Kafka clients send it."""
    kv = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{kv}\x01".encode()
