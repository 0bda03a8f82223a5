"""Who is on the other end of a client connection (KIP-504's request context, per connection).

The principal starts as ``User:ANONYMOUS`` (Kafka's PLAINTEXT principal) and is replaced when a
listener authenticates the client (TLS client certificate or SASL).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from kafkaguard.policy.authorizer import IPAddress, SecurityProtocol, java_host_address
from kafkaguard.policy.model import KafkaPrincipal


@dataclass(slots=True)
class Session:
    listener_name: str
    security_protocol: SecurityProtocol
    client_address: IPAddress
    principal: KafkaPrincipal = KafkaPrincipal.ANONYMOUS
    client_host: str = field(init=False)
    """The address as Java prints it (ACL host matching and audit lines)."""

    def __post_init__(self) -> None:
        self.client_host = java_host_address(self.client_address)


def peer_address(peername: object) -> IPAddress:
    """The IP of a socket peer; non-IP peers (tests over pipes) count as 0.0.0.0."""
    if isinstance(peername, tuple) and peername:
        try:
            return ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
        except ValueError:
            pass
    return ipaddress.IPv4Address(0)
