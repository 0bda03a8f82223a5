"""The connection's session hands the authorizer the client host as Kafka prints it."""

from __future__ import annotations

import ipaddress

import pytest

from kafkaguard.policy.authorizer import SecurityProtocol
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.proxy.session import Session, peer_address


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        (("::1", 5000, 0, 0), "0:0:0:0:0:0:0:1"),
        (("::ffff:10.0.0.7", 5000, 0, 0), "10.0.0.7"),
        (("192.168.1.1", 5000), "192.168.1.1"),
    ],
)
def test_request_context_carries_java_host_text(peer: tuple[object, ...], host: str) -> None:
    session = Session("L", SecurityProtocol.PLAINTEXT, peer_address(peer))
    header = RequestHeaderInfo(3, 12, 7, "client", 0)
    context = session.request_context(header)
    assert context.host == host == session.client_host
    assert context.client_address == ipaddress.ip_address(peer[0])  # type: ignore[arg-type]
    assert (context.api_key, context.correlation_id, context.client_id) == (3, 7, "client")
