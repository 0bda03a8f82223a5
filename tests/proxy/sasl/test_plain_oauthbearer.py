"""PLAIN and OAUTHBEARER servers (sans-I/O)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.mechanism import Challenge, Failure, Success
from kafkaguard.proxy.sasl.oauthbearer import (
    INVALID_TOKEN,
    JwtValidator,
    KeyLoadError,
    OAuthBearerServer,
    TokenInvalid,
    load_jwks,
    load_pem_key,
)
from tests.support.jwt_signer import Signer, client_message

# -- PLAIN -------------------------------------------------------------------------------------

CRED = plain.make_credential("s3cret", iterations=4096)


def plain_server() -> plain.PlainServer:
    return plain.PlainServer({"alice": CRED}.get)


def test_plain_success_and_credential_format() -> None:
    assert plain_server().step(b"\0alice\0s3cret") == Success("alice")
    assert plain_server().step(b"alice\0alice\0s3cret") == Success("alice")
    text = CRED.to_string()
    assert "s3cret" not in text and text.startswith("algorithm=pbkdf2-sha512,salt=")
    assert plain.PlainCredential.from_string(text) == CRED


@pytest.mark.parametrize(
    "token,message",
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0mallory\0s3cret", "Authentication failed: Invalid username or password"),
        (b"\0alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"a\0b\0c\0d", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0\0s3cret", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (
            b"admin\0alice\0s3cret",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        ),
        (b"\xff\0alice\0s3cret", "Authentication failed: Invalid username or password"),
    ],
)
def test_plain_failures_use_kafka_messages(token: bytes, message: str) -> None:
    result = plain_server().step(token)
    assert isinstance(result, Failure)
    assert result.client_message == message


def test_plain_unknown_user_is_only_in_the_log() -> None:
    wrong = plain_server().step(b"\0alice\0wrong")
    unknown = plain_server().step(b"\0mallory\0x")
    assert isinstance(wrong, Failure) and isinstance(unknown, Failure)
    assert wrong.client_message == unknown.client_message
    assert "no such user" in unknown.reason and "wrong password" in wrong.reason


def test_plain_one_token_only() -> None:
    s = plain_server()
    assert isinstance(s.step(b"\0alice\0s3cret"), Success)
    assert isinstance(s.step(b"\0alice\0s3cret"), Failure)


# -- OAUTHBEARER ---------------------------------------------------------------------------------

RSA = Signer("RS256", "rsa-1")
EC = Signer("ES256", "ec-1")


def validator(**kw: object) -> JwtValidator:
    values: dict[str, object] = {
        "keys": [load_jwk(RSA), load_jwk(EC)],
        "expected_issuer": "https://issuer.test",
        "expected_audience": ("kafka",),
    }
    values.update(kw)
    return JwtValidator(**values)  # type: ignore[arg-type]


def load_jwk(signer: Signer):  # type: ignore[no-untyped-def]
    from kafkaguard.proxy.sasl.oauthbearer import key_from_jwk

    key = key_from_jwk(signer.jwk())
    assert key is not None
    return key


@pytest.mark.parametrize("signer", [RSA, EC], ids=["RS256", "ES256"])
def test_good_token(signer: Signer) -> None:
    token = signer.token()
    name, claims = validator().validate(token, time.time())
    assert name == "alice"
    server = OAuthBearerServer(validator(), time.time)
    result = server.step(client_message(token, traceid="123"))
    assert isinstance(result, Success)
    assert result.authorization_id == "alice"
    assert result.credential_expiry_ms == claims["exp"] * 1000


def test_principal_from_configured_claim() -> None:
    token = RSA.token(preferred_username="svc-orders")
    name, _ = validator(principal_claim="preferred_username").validate(token, time.time())
    assert name == "svc-orders"
    with pytest.raises(TokenInvalid, match="no string claim"):
        validator(principal_claim="email").validate(token, time.time())


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda: RSA.token(exp=int(time.time()) - 100), "expired"),
        (lambda: RSA.token(exp=None), "no numeric 'exp'"),
        (lambda: RSA.token(nbf=int(time.time()) + 600), "not valid before"),
        (lambda: RSA.token(aud="other"), "audience"),
        (lambda: RSA.token(aud=["x", "y"]), "audience"),
        (lambda: RSA.token(iss="https://evil.test"), "issuer"),
        (lambda: Signer("RS256", "rsa-1").token(), "bad signature"),  # same kid, other key
        (lambda: Signer("ES256", "ec-1").token(), "bad signature"),
        (lambda: RSA.token(header={"kid": "unknown"}), "no RS256 key"),
        (lambda: RSA.token(header={"alg": "none"}), "algorithm"),
        (lambda: RSA.token(header={"alg": "HS256"}), "algorithm"),
        (lambda: RSA.token()[:-4] + "AAAA", "bad signature"),
        (lambda: "a.b", "3 parts"),
        (lambda: "!!!.e30.e30", "undecodable"),
    ],
)
def test_bad_tokens(make, why: str) -> None:  # type: ignore[no-untyped-def]
    token = make()
    with pytest.raises(TokenInvalid, match=why):
        validator().validate(token, time.time())


def test_audience_list_and_clock_skew() -> None:
    now = time.time()
    token = RSA.token(aud=["a", "kafka"], exp=int(now) - 10)
    validator(clock_skew_s=30).validate(token, now)  # within the skew
    with pytest.raises(TokenInvalid, match="expired"):
        validator(clock_skew_s=0).validate(token, now)


def test_invalid_token_error_challenge_then_failure() -> None:
    server = OAuthBearerServer(validator(), time.time)
    expired = RSA.token(exp=int(time.time()) - 3600)
    challenge = server.step(client_message(expired))
    assert challenge == Challenge(INVALID_TOKEN.encode())
    failure = server.step(b"\x01")
    assert isinstance(failure, Failure)
    assert failure.client_message == INVALID_TOKEN  # nothing about *why*
    assert "expired" in failure.reason


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,auth=Bearer x\x01\x01",  # missing kvsep after the gs2 header
        b"n,,\x01auth=Bearer a.b.c\x01",  # no final kvsep
        b"n,,\x01host=x\x01\x01",  # no auth
        b"n,,\x01auth=Basic abc\x01\x01",
        b"y,,\x01auth=Bearer a.b.c\x01\x01",
        b"\xff",
    ],
)
def test_malformed_client_message(message: bytes) -> None:
    result = OAuthBearerServer(validator(), time.time).step(message)
    assert isinstance(result, Failure)
    assert result.client_message.startswith("Invalid OAUTHBEARER client first message")


def test_authzid_must_match_token_principal() -> None:
    result = OAuthBearerServer(validator(), time.time).step(
        client_message(RSA.token(), authzid="bob")
    )
    assert isinstance(result, Failure)
    assert "different from the token's principal name" in result.client_message


def test_key_files(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [RSA.jwk(), EC.jwk(), {"kty": "oct", "k": "x"}]}))
    keys = load_jwks(jwks)
    assert len(keys) == 2
    pem = tmp_path / "ec.pem"
    pem.write_bytes(EC.public_pem())
    only_pem = JwtValidator([load_pem_key(pem)])
    assert only_pem.validate(EC.token(), time.time())[0] == "alice"
    with pytest.raises(TokenInvalid):
        only_pem.validate(RSA.token(), time.time())
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(KeyLoadError):
        load_jwks(tmp_path / "bad.json")
    with pytest.raises(KeyLoadError):
        load_pem_key(tmp_path / "bad.json")
