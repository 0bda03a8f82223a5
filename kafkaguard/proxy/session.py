"""Who is on the other end of a client connection (KIP-504's request context, per connection).

The principal starts as ``User:ANONYMOUS`` (Kafka's PLAINTEXT principal) and is replaced when a
listener authenticates the client (TLS client certificate or SASL).

The client address is the socket's peer, or on a ``proxy_protocol`` listener the client the
load balancer's PROXY protocol header names (kafkaguard/proxy/edge/proxy_protocol.py): what the
authorizer matches ACL hosts against, what audit events and SASL failure throttling key on.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from kafkaguard.policy.authorizer import (
    IPAddress,
    RequestContext,
    SecurityProtocol,
    java_host_address,
)
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.protocol.header import RequestHeaderInfo


@dataclass(slots=True)
class Session:
    listener_name: str
    security_protocol: SecurityProtocol
    client_address: IPAddress
    principal: KafkaPrincipal = KafkaPrincipal.ANONYMOUS
    authority: str | None = None
    """The host name the client asked the load balancer for (its TLS SNI), from a PROXY
    protocol v2 PP2_TYPE_AUTHORITY TLV; nothing is decided on it (``routing: sni`` reads
    the ClientHello itself, kafkaguard/proxy/edge/sni.py)."""
    client_host: str = field(init=False)
    """The address as Java prints it (ACL host matching and audit lines)."""

    def __post_init__(self) -> None:
        self.client_host = java_host_address(self.client_address)

    def request_context(self, header: RequestHeaderInfo) -> RequestContext:
        """KIP-504's context of one request of this connection, as the authorizer sees it."""
        return RequestContext.of_request(
            self.listener_name,
            self.security_protocol,
            self.principal,
            self.client_address,
            self.client_host,
            header.api_key,
            header.api_version,
            header.client_id,
            header.correlation_id,
        )


def peer_address(peername: object) -> IPAddress:
    """The IP of a socket peer; non-IP peers (tests over pipes) count as 0.0.0.0."""
    if isinstance(peername, tuple) and peername:
        try:
            return ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
        except ValueError:
            pass
    return ipaddress.IPv4Address(0)
