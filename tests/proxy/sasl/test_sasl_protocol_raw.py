"""SASL at the protocol level with a raw socket: the gate before authentication, malformed and
oversized tokens, unsupported mechanisms, handshake v0, KIP-368 re-authentication and session
expiry — against a real proxy in front of Tansu."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.tansu import TansuBroker
from tests.support.proxy_fixture import RunningProxy, stop_proxy_thread
from tests.support.raw_client import RawKafkaClient, build_request
from tests.support.sasl_proxy import PASSWORDS, start_sasl_proxy
from tests.support.scram_client import ScramClient

pytestmark = pytest.mark.integration


@pytest.fixture
def sasl_proxy(tansu: TansuBroker, tmp_path: Path) -> Iterator[RunningProxy]:
    running = start_sasl_proxy(tansu, tmp_path, [], reauth_ms=1500)
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def connect(proxy: RunningProxy) -> RawKafkaClient:
    host, port = proxy.bootstrap.rsplit(":", 1)
    return RawKafkaClient(host, int(port), timeout_s=5)


def assert_closed(client: RawKafkaClient) -> None:
    """The proxy closes the connection (EOF or reset), sending nothing more."""
    with pytest.raises((EOFError, ConnectionResetError)):
        client.read_frame()


def handshake(client: RawKafkaClient, mechanism: str) -> Any:
    return client.request(build_request(17, 1, mechanism=mechanism))[1]


def authenticate(client: RawKafkaClient, token: bytes, version: int = 2) -> Any:
    return client.request(build_request(36, version, auth_bytes=token))[1]


def scram_login(client: RawKafkaClient, user: str, password: str, nonce: str = "n0") -> Any:
    assert handshake(client, "SCRAM-SHA-256").error_code == ErrorCode.none
    scram = ScramClient("sha256", user, password, nonce)
    first = authenticate(client, scram.first())
    assert first.error_code == ErrorCode.none, first
    final = authenticate(client, scram.final(first.auth_bytes))
    if final.error_code == ErrorCode.none:
        assert scram.verify(final.auth_bytes)
    return final


def METADATA() -> Any:
    return build_request(
        3,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def metadata(client: RawKafkaClient) -> Any:
    return client.request(METADATA())[1]


def test_api_versions_advertise_sasl(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        versions = client.api_versions()
        assert versions[17] == range(0, 2)  # v0 advertised for librdkafka, refused if used
        assert versions[36] == range(0, 3)


def test_data_request_before_authentication_closes(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        client.send(METADATA())
        assert_closed(client)


def test_data_request_between_handshake_and_authenticate_closes(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        client.send(METADATA())
        assert_closed(client)


def test_unsupported_mechanism_lists_the_enabled_ones(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        response = handshake(client, "GSSAPI")
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert response.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
        assert_closed(client)


def test_handshake_v0_is_refused(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        response = client.request(build_request(17, 0, mechanism="PLAIN"))[1]
        assert response.error_code == ErrorCode.unsupported_version
        assert_closed(client)


@pytest.mark.parametrize(
    "mechanism,token",
    [
        ("SCRAM-SHA-512", b"not a scram message"),
        ("SCRAM-SHA-512", b"\xff\xfe\x00garbage"),
        ("PLAIN", b"no-nul-separators"),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer\x01"),
    ],
)
def test_malformed_token_fails_and_closes(
    sasl_proxy: RunningProxy, mechanism: str, token: bytes
) -> None:
    with connect(sasl_proxy) as client:
        assert handshake(client, mechanism).error_code == ErrorCode.none
        response = authenticate(client, token)
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message
        assert_closed(client)


def test_oversized_token_closes_without_answer(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        frame = codec.encode_request(build_request(36, 2, auth_bytes=b"\0" * 600_000), 9, "x")
        with contextlib.suppress(OSError):  # a reset while sending is a close, as required
            client.sock.sendall(frame)
        assert_closed(client)


def test_wrong_password_message_does_not_reveal_the_user(sasl_proxy: RunningProxy) -> None:
    messages = []
    for user in ("alice", "nobody"):
        with connect(sasl_proxy) as client:
            final = scram_login(client, user, "wrong")
            assert final.error_code == ErrorCode.sasl_authentication_failed
            messages.append(final.error_message)
            assert_closed(client)
    assert messages[0] == messages[1]
    assert messages[0] == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )


def test_authenticated_session_lifetime_and_reauthentication(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        final = scram_login(client, "alice", PASSWORDS["alice"])
        assert final.error_code == ErrorCode.none
        assert final.session_lifetime.total_seconds() * 1000 == 1500  # connections_max_reauth_ms
        assert metadata(client).brokers  # authenticated: requests are forwarded
        # A second SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE, not closed.
        again = authenticate(client, b"x")
        assert again.error_code == ErrorCode.illegal_sasl_state
        # KIP-368 re-authentication as the same principal keeps the connection.
        assert scram_login(client, "alice", PASSWORDS["alice"], "n1").error_code == 0
        assert metadata(client).brokers


def test_reauthentication_cannot_change_the_principal(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        assert scram_login(client, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        final = scram_login(client, "bob", PASSWORDS["bob"], "n1")
        assert final.error_code == ErrorCode.sasl_authentication_failed
        assert final.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert_closed(client)


def test_reauthentication_cannot_change_the_mechanism(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        assert scram_login(client, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        response = authenticate(client, b"\0alice\0" + PASSWORDS["alice"].encode())
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert "not supported for re-authentication" in response.error_message
        assert_closed(client)


def test_expired_session_is_closed_on_next_request(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        assert scram_login(client, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        assert metadata(client).brokers
        time.sleep(1.7)
        client.send(METADATA())
        assert_closed(client)


def test_plaintext_listener_answers_sasl_with_illegal_state(proxy: RunningProxy) -> None:
    with connect(proxy) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        response = authenticate(client, b"\0a\0b")
        assert response.error_code == ErrorCode.illegal_sasl_state
        assert metadata(client).brokers  # still open and usable


def test_garbage_instead_of_a_request_closes(sasl_proxy: RunningProxy) -> None:
    with connect(sasl_proxy) as client:
        client.sock.sendall(b"\x00\x00\x00\x05hello")
        assert_closed(client)
    host, port = sasl_proxy.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"\xff\xff\xff\xff")  # negative frame size
        sock.settimeout(5)
        assert sock.recv(100) == b""
