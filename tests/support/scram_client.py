"""An independent SCRAM client (RFC 5802 §3) for tests: written from the RFC, not from the
proxy's server, so the two check each other."""

from __future__ import annotations

import base64
import hashlib
import hmac


class ScramClient:
    def __init__(self, hash_name: str, user: str, password: str, nonce: str) -> None:
        self.hash = hash_name
        self.user = user.replace("=", "=3D").replace(",", "=2C")
        self.password = password
        self.nonce = nonce
        self.server_signature = b""

    def first(self, authzid: str = "") -> bytes:
        self.gs2 = f"n,{'a=' + authzid if authzid else ''},"
        self.bare = f"n={self.user},r={self.nonce}"
        return (self.gs2 + self.bare).encode()

    def final(
        self, server_first: bytes, *, password: str | None = None, nonce_prefix: str = ""
    ) -> bytes:
        """``nonce_prefix`` imitates librdkafka < 2.1, which repeats its own nonce."""
        text = server_first.decode()
        attrs = dict(item.split("=", 1) for item in text.split(","))
        salt = base64.b64decode(attrs["s"])
        iterations = int(attrs["i"])
        salted = hashlib.pbkdf2_hmac(
            self.hash, (password or self.password).encode(), salt, iterations
        )
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        channel = base64.b64encode(self.gs2.encode()).decode()
        without_proof = f"c={channel},r={nonce_prefix}{attrs['r']}"
        auth_message = f"{self.bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_message, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self.server_signature)
