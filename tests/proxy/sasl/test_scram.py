"""SCRAM-SHA-256/512 server (sans-I/O): RFC 7677's test vector, Kafka's credential format,
and every way an exchange can fail without revealing whether the user exists."""

from __future__ import annotations

import base64

import pytest

from kafkaguard.proxy.sasl.mechanism import Challenge, Failure, Success, invalid_credentials
from kafkaguard.proxy.sasl.scram import (
    CredentialFormatError,
    ScramCredential,
    ScramServer,
    make_credential,
)
from tests.support.scram_client import ScramClient

SECRET = b"k" * 32

# RFC 7677 §3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def server(
    mechanism: str, users: dict[str, ScramCredential], nonce: str = "srvnonce"
) -> ScramServer:
    return ScramServer(
        mechanism,
        lambda user, mech: users.get(user) if mech == mechanism else None,
        unknown_user_secret=SECRET,
        nonce=lambda: nonce,
    )


def test_rfc7677_test_vector() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", iterations=4096, salt=RFC_SALT)
    s = server("SCRAM-SHA-256", {"user": credential}, RFC_SERVER_NONCE)
    assert s.step(RFC_CLIENT_FIRST) == Challenge(RFC_SERVER_FIRST)
    assert s.step(RFC_CLIENT_FINAL) == Success("user", RFC_SERVER_FINAL)
    assert isinstance(s.step(b"more"), Failure)  # the exchange is over


def test_wrong_proof_in_rfc_exchange_fails() -> None:
    credential = make_credential("SCRAM-SHA-256", "not-pencil", salt=RFC_SALT)
    s = server("SCRAM-SHA-256", {"user": credential}, RFC_SERVER_NONCE)
    s.step(RFC_CLIENT_FIRST)
    result = s.step(RFC_CLIENT_FINAL)
    assert isinstance(result, Failure)
    assert result.client_message == invalid_credentials("SCRAM-SHA-256")
    assert "invalid client proof" in result.reason


def test_kafka_credential_string_round_trip() -> None:
    credential = make_credential("SCRAM-SHA-512", "secret", iterations=8192)
    text = credential.to_kafka_string()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert ScramCredential.from_kafka_string(text) == credential
    with pytest.raises(CredentialFormatError, match="at least 4096"):
        ScramCredential.from_kafka_string(text.replace("8192", "1000"))
    with pytest.raises(CredentialFormatError, match="server_key"):
        ScramCredential.from_kafka_string("salt=AA==,stored_key=AA==,iterations=4096")
    with pytest.raises(ValueError, match="4096"):
        make_credential("SCRAM-SHA-256", "x", iterations=100)


@pytest.mark.parametrize(
    "mechanism,hash_name", [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")]
)
def test_full_exchange_with_independent_client(mechanism: str, hash_name: str) -> None:
    users = {"al,ice=": make_credential(mechanism, "s3cret", iterations=4096)}
    s = server(mechanism, users)
    client = ScramClient(hash_name, "al,ice=", "s3cret", "clientnonce")
    challenge = s.step(client.first())
    assert isinstance(challenge, Challenge)
    done = s.step(client.final(challenge.data))
    assert isinstance(done, Success) and done.authorization_id == "al,ice="
    assert client.verify(done.data)


def test_wrong_password_and_unknown_user_look_the_same() -> None:
    users = {"alice": make_credential("SCRAM-SHA-512", "right")}
    results = []
    firsts = []
    for user, password in (("alice", "wrong"), ("mallory", "whatever")):
        s = server("SCRAM-SHA-512", users)
        client = ScramClient("sha512", user, password, "n1")
        first = s.step(client.first())
        assert isinstance(first, Challenge)
        firsts.append(dict(kv.split("=", 1) for kv in first.data.decode().split(",")))
        results.append(s.step(client.final(first.data)))
    assert all(isinstance(r, Failure) for r in results)
    assert results[0].client_message == results[1].client_message  # type: ignore[union-attr]
    assert "no such user" in results[1].reason  # type: ignore[union-attr]
    # Same shape of server-first message; the fake salt is stable per name.
    assert firsts[0]["i"] == firsts[1]["i"] == "4096"
    assert len(base64.b64decode(firsts[0]["s"])) == len(base64.b64decode(firsts[1]["s"]))
    again = server("SCRAM-SHA-512", users).step(ScramClient("sha512", "mallory", "x", "n2").first())
    assert isinstance(again, Challenge) and f"s={firsts[1]['s']}," in again.data.decode()


def test_right_password_for_the_other_mechanism_fails() -> None:
    users = {"alice": make_credential("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-512", {})  # alice has no SCRAM-SHA-512 credential
    s._lookup = lambda user, mech: users.get(user) if mech == "SCRAM-SHA-256" else None
    client = ScramClient("sha512", "alice", "pw", "n")
    first = s.step(client.first())
    assert isinstance(first, Challenge)
    assert isinstance(s.step(client.final(first.data)), Failure)


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"\xff\xfe",
        b"y,,n=user,r=abc",  # channel binding flag y
        b"p=tls-unique,,n=user,r=abc",
        b"n,,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=user",
        b"n,,n=us,er,r=abc",
        b"garbage",
        b"n,,n=user,r=abc,tokenauth=true",  # delegation tokens are not issued by the proxy
    ],
)
def test_malformed_client_first(token: bytes) -> None:
    s = server("SCRAM-SHA-256", {"user": make_credential("SCRAM-SHA-256", "pencil")})
    result = s.step(token)
    assert isinstance(result, Failure)
    assert result.client_message == invalid_credentials("SCRAM-SHA-256")


def test_authzid_must_equal_user() -> None:
    s = server("SCRAM-SHA-256", {"user": make_credential("SCRAM-SHA-256", "pencil")})
    result = s.step(b"n,a=admin,n=user,r=abc")
    assert isinstance(result, Failure)
    assert "authorization id that is different from username" in result.client_message
    ok = server("SCRAM-SHA-256", {"user": make_credential("SCRAM-SHA-256", "pencil")})
    client = ScramClient("sha256", "user", "pencil", "abc")
    first = ok.step(client.first(authzid="user"))
    assert isinstance(first, Challenge)
    assert isinstance(ok.step(client.final(first.data)), Success)


def _final_variants(final: bytes) -> list[bytes]:
    without, proof = final.rsplit(b",p=", 1)
    channel, nonce = without.split(b",", 1)
    return [
        b"c=eSws," + nonce + b",p=" + proof,  # channel binding "y,," instead of "n,,"
        channel + b",r=othernonce,p=" + proof,  # nonce mismatch
        without + b",p=" + base64.b64encode(b"short"),  # proof of the wrong length
        without + b",p=%%%",  # not base64
        without,  # no proof
        b"",
    ]


@pytest.mark.parametrize("variant", range(6))
def test_malformed_client_final(variant: int) -> None:
    users = {"user": make_credential("SCRAM-SHA-256", "pencil")}
    s = server("SCRAM-SHA-256", users)
    client = ScramClient("sha256", "user", "pencil", "abc")
    first = s.step(client.first())
    assert isinstance(first, Challenge)
    result = s.step(_final_variants(client.final(first.data))[variant])
    assert isinstance(result, Failure)
    assert result.client_message == invalid_credentials("SCRAM-SHA-256")


def test_client_final_nonce_is_checked_with_endswith_like_kafka() -> None:
    """librdkafka < 2.1 repeats the client nonce in the client-final message; Kafka's
    ``ScramSaslServer`` accepts a nonce that *ends with* the combined one, and so must we."""
    users = {"alice": make_credential("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    client = ScramClient("sha256", "alice", "pw", "cn")
    first = s.step(client.first())
    assert isinstance(first, Challenge)
    final = client.final(first.data, nonce_prefix="cn")
    assert b",r=cncn" in final
    assert isinstance(s.step(final), Success)
    other = server("SCRAM-SHA-256", users)
    first = other.step(client.first())
    assert isinstance(first, Challenge)
    assert isinstance(other.step(client.final(first.data, nonce_prefix="x")), Success)
    # ... but the combined nonce itself must be there, at the end.
    third = server("SCRAM-SHA-256", users)
    first = third.step(client.first())
    assert isinstance(first, Challenge)
    tampered = client.final(first.data).replace(b",r=cn", b",r=cX")
    assert isinstance(third.step(tampered), Failure)
