"""PLAIN and OAUTHBEARER servers (sans-I/O). OAUTHBEARER tokens are minted by jwcrypto, an
implementation independent of the PyJWT that verifies them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.mechanism import Challenge, Failure, Success
from kafkaguard.proxy.sasl.oauthbearer import (
    ALGORITHMS,
    INVALID_TOKEN,
    JwtValidator,
    KeyLoadError,
    OAuthBearerServer,
    StaticKeys,
    TokenInvalid,
    load_pem_key,
    parse_jwks,
)
from tests.support.jose_tokens import (
    AUDIENCE,
    EXTENSION,
    ISSUER,
    IdentityProvider,
    client_message,
    jwks,
    unsigned_token,
)

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

PROVIDERS = {alg: IdentityProvider(alg, f"{alg}-1") for alg in ALGORITHMS}
ED448 = IdentityProvider("EdDSA", "ed448-1", crv="Ed448")
RSA = PROVIDERS["RS256"]
EC = PROVIDERS["ES256"]


def validator(**kw: Any) -> JwtValidator:
    values: dict[str, Any] = {
        "sources": (StaticKeys(parse_jwks(json.dumps(jwks(*PROVIDERS.values(), ED448)), "t")),),
        "expected_issuer": ISSUER,
        "expected_audience": (AUDIENCE,),
    }
    values.update(kw)
    return JwtValidator(**values)


def refused(token: str, why: str, **kw: Any) -> None:
    with pytest.raises(TokenInvalid, match=why):
        validator(**kw).validate(token, time.time())


@pytest.mark.parametrize("provider", [*PROVIDERS.values(), ED448], ids=[*PROVIDERS, "Ed448"])
def test_every_algorithm_family(provider: IdentityProvider) -> None:
    token = provider.token()
    name, claims = validator().validate(token, time.time())
    assert name == "alice"
    result = OAuthBearerServer(validator(), time.time).step(client_message(token, traceid="1"))
    assert isinstance(result, Success)
    assert result.authorization_id == "alice"
    assert result.credential_expiry_ms == claims["exp"] * 1000


def test_principal_from_configured_claim_trimmed() -> None:
    token = RSA.token(preferred_username=" svc-orders ")
    name, _ = validator(principal_claim="preferred_username").validate(token, time.time())
    assert name == "svc-orders"
    refused(token, "no non-blank string claim 'email'", principal_claim="email")
    refused(RSA.token(sub="  "), "no non-blank string claim 'sub'")
    refused(RSA.token(sub=42), "no non-blank string claim")


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda: RSA.token(exp=None), "exp"),
        (lambda: RSA.token(iat=None), "iat"),
        (lambda: RSA.token(exp=str(int(time.time()) + 600)), "exp is not a number"),
        (lambda: RSA.token(iat=True), "iat is not a number"),
        (lambda: RSA.token(exp=int(time.time()) - 100), "expired"),
        (lambda: RSA.token(iat=int(time.time()) + 900), "exp .* is before iat"),
        (lambda: RSA.token(iat=-5), "negative"),
        (lambda: RSA.token(exp=10**30), "exp is out of range"),  # int64 ms in SaslAuthenticate
        (lambda: RSA.token(nbf=int(time.time()) + 600), "not valid before"),
        (lambda: RSA.token(aud="other"), "Audience doesn't match"),
        (lambda: RSA.token(aud=["x", "y"]), "Audience doesn't match"),
        (lambda: RSA.token(aud=None), "aud"),
        (lambda: RSA.token(iss="https://evil.test"), "Invalid issuer"),
        (lambda: RSA.token(iss=None), "iss"),
        (lambda: RSA.token(scope=["read", "read"]), "repeated scope"),
        (lambda: RSA.token(scope=["read", " "]), "blank"),
        (lambda: IdentityProvider("RS256", "RS256-1").token(), "bad signature"),  # same kid
        (lambda: IdentityProvider("ES256", "ES256-1").token(), "bad signature"),
        (lambda: RSA.token(header={"kid": "unknown"}), "no RS256 key with kid 'unknown'"),
        (lambda: RSA.token()[:-4] + "AAAA", "bad signature"),
        (lambda: RSA.token(header={"crit": [EXTENSION], EXTENSION: 1}), "critical ext"),
        (lambda: unsigned_token(), "algorithm 'none' is not accepted"),
        (lambda: RSA.hmac_with_public_key("HS256"), "algorithm 'HS256' is not accepted"),
        (lambda: "a.b", "undecodable"),
        (lambda: "!!!.e30.e30", "undecodable"),
    ],
)
def test_bad_tokens(make, why: str) -> None:  # type: ignore[no-untyped-def]
    refused(make(), why)


def test_clock_skew_and_times_as_jose4j() -> None:
    now = time.time()
    within = RSA.token(aud=["a", "kafka"], exp=int(now) - 10, iat=int(now) - 600)
    validator(clock_skew_s=30).validate(within, now)  # expired 10 s ago, within the skew
    refused(within, "expired", clock_skew_s=0)
    outside = RSA.token(exp=int(now) - 31, iat=int(now) - 600)
    refused(outside, "expired", clock_skew_s=30)
    soon = RSA.token(nbf=int(now) + 20)
    validator(clock_skew_s=30).validate(soon, now)
    refused(soon, "not valid before", clock_skew_s=0)
    # jose4j does not refuse an iat in the future (no setIssuedAtRestrictions); PyJWT would.
    validator().validate(RSA.token(iat=int(now) + 300), now)


def test_audience_absent_from_config_refuses_a_token_that_has_one() -> None:
    """jose4j's AudValidator with no expected audience refuses any ``aud`` (Kafka's
    ``sasl.oauthbearer.expected.audience`` doc: unset, tokens *without* aud are accepted)."""
    refused(RSA.token(), "Invalid audience", expected_audience=())
    for empty in ("", []):  # PyJWT alone would accept these
        refused(RSA.token(aud=empty), "present but no audience expected", expected_audience=())
    validator(expected_audience=()).validate(RSA.token(aud=None), time.time())


def test_scope_claim_as_kafka_reads_it() -> None:
    v = validator(scope_claim="scp")
    v.validate(RSA.token(scp="read write"), time.time())  # one scope "read write"
    v.validate(RSA.token(scp=["read", "write"]), time.time())
    v.validate(RSA.token(scp=7), time.time())  # neither: no scopes
    with pytest.raises(TokenInvalid, match="repeated"):
        v.validate(RSA.token(scp=["a", " a"]), time.time())


def test_alg_confusion_is_refused_even_with_an_hmac_key_in_the_jwks() -> None:
    """jose4j (DISALLOW_NONE only) would verify HS256 against an "oct" JWK; kafkaguard never
    accepts HMAC, and an "oct" entry in a JWKS is skipped."""
    oct_key = {"kty": "oct", "kid": "RS256-1", "k": "c2VjcmV0"}
    keys = parse_jwks(json.dumps({"keys": [RSA.jwk(), oct_key]}), "t")
    assert len(keys) == 1
    for alg in ("HS256", "HS384", "HS512"):
        refused(RSA.hmac_with_public_key(alg), f"algorithm '{alg}' is not accepted")


def test_the_jwk_alg_does_not_bind_its_key() -> None:
    """jose4j's VerificationJwkSelector looks at the key type, not the JWK's ``alg`` (measured
    with Kafka's validator: test_oauthbearer_kafka_referee.py)."""
    assert validator().validate(RSA.token(header={"alg": "PS256"}), time.time())[0] == "alice"
    refused(EC.token(header={"kid": RSA.kid}), "no ES256 key")


def test_algorithms_narrow_what_is_accepted() -> None:
    refused(EC.token(), "algorithm 'ES256' is not accepted", algorithms=("RS256",))


def test_invalid_token_error_challenge_then_failure() -> None:
    server = OAuthBearerServer(validator(), time.time)
    expired = RSA.token(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200)
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
    document = {
        "keys": [
            RSA.jwk(),
            EC.jwk(alg=None),
            RSA.jwk(kid="enc", use="enc"),
            {"kty": "oct", "k": "x"},
            {"kty": "RSA", "n": "!"},
            "junk",
        ]
    }
    keys = parse_jwks(json.dumps(document), "t")
    assert [k.kid for k in keys] == ["RS256-1", "ES256-1"]
    pem = tmp_path / "ed.pem"
    pem.write_bytes(PROVIDERS["EdDSA"].public_pem())
    only_pem = validator(sources=(StaticKeys((load_pem_key(pem),)),))
    assert only_pem.validate(PROVIDERS["EdDSA"].token(), time.time())[0] == "alice"
    with pytest.raises(TokenInvalid):
        only_pem.validate(RSA.token(), time.time())
    for bad in ("{}", '{"keys": [{"kty": "oct", "k": "x"}]}', "not json"):
        with pytest.raises(KeyLoadError):
            parse_jwks(bad, "t")
    (tmp_path / "bad.pem").write_text("{}")
    with pytest.raises(KeyLoadError):
        load_pem_key(tmp_path / "bad.pem")
