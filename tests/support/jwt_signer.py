"""Mint JWTs for tests with ``cryptography`` (RS256, ES256), and their JWKS."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class Signer:
    def __init__(self, alg: str = "RS256", kid: str = "k1") -> None:
        self.alg = alg
        self.kid = kid
        self.key: Any = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if alg == "RS256"
            else ec.generate_private_key(ec.SECP256R1())
        )

    def jwk(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        if self.alg == "RS256":
            return {
                "kty": "RSA",
                "kid": self.kid,
                "alg": "RS256",
                "use": "sig",
                "n": _int(numbers.n),
                "e": _int(numbers.e),
            }
        return {
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": _int(numbers.x),
            "y": _int(numbers.y),
        }

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def token(
        self,
        claims: dict[str, Any] | None = None,
        *,
        header: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> str:
        now = int(time.time())
        body: dict[str, Any] = {
            "sub": "alice",
            "iss": "https://issuer.test",
            "aud": "kafka",
            "iat": now,
            "exp": now + 600,
        }
        body.update(claims or {})
        body.update(overrides)
        body = {k: v for k, v in body.items() if v is not None}
        head = {"alg": self.alg, "typ": "JWT", "kid": self.kid, **(header or {})}
        signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(body).encode())}"
        data = signing_input.encode()
        if self.alg == "RS256":
            signature = self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.key.sign(data, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input}.{b64url(signature)}"


def client_message(token: str, authzid: str = "", **extensions: str) -> bytes:
    """RFC 7628 client initial response, as Kafka clients send it."""
    kv = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{kv}\x01".encode()
