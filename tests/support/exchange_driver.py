"""Drive :class:`kafkaguard.proxy.core.exchange.Exchange` in memory, as h11's tests drive its
``Connection``: bytes in, commands out, no sockets and no event loop.

The exchange gets real parts: a :class:`StandardAuthorizer` with the given ACLs, an
:class:`UpstreamCluster` (never connected), a real SASL state machine on SASL listeners.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kafkaguard.policy.authorizer import Authorizer, SecurityProtocol
from kafkaguard.policy.config import AuthorizerConfig, parse_super_users
from kafkaguard.policy.model import AclBinding, KafkaPrincipal
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.protocol import codec
from kafkaguard.protocol.framing import Frame
from kafkaguard.proxy.config import HostPort, LimitsConfig
from kafkaguard.proxy.core.commands import Await, CloseConnection, Command, SendBroker, SendClient
from kafkaguard.proxy.core.context import ConnectionContext
from kafkaguard.proxy.core.exchange import Exchange
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.net.cluster import UpstreamCluster
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.authenticator import SaslAuthenticator, SaslServer
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import MappingCredentialStore
from kafkaguard.proxy.session import Session

PASSWORD = "alice-secret"
USERS = {"alice": {"PLAIN": plain.make_credential(PASSWORD, iterations=4096).to_string()}}


class NodePorts:
    """Proxy ports for upstream nodes, as a listener hands them out (30000 + node id)."""

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return "proxy.test", 30000 + node_id

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        return "proxy.test", 30000 + node_id


class Driver:
    """One exchange and a clock; every call returns the commands the exchange gave back."""

    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        *,
        principal: str = "User:alice",
        super_users: str = "",
        sasl: bool = False,
        limits: LimitsConfig | None = None,
        ask: Callable[[StandardAuthorizer], Authorizer] | None = None,
    ) -> None:
        """``ask``: what the connection asks instead of the authorizer, given it (an authorizer
        in front of it, injected: the exchange's modules are compiled, their objects closed)."""
        self.now = 1000.0
        authorizer = StandardAuthorizer(
            AuthorizerConfig(super_users=parse_super_users(super_users))
        )
        authorizer.load_snapshot(acls)
        self.authorizer = authorizer
        """The connection's authorizer: ``load_snapshot`` changes the ACLs mid-connection."""
        protocol = SecurityProtocol.SASL_PLAINTEXT if sasl else SecurityProtocol.PLAINTEXT
        session = Session(
            "LISTENER",
            protocol,
            ipaddress.ip_address("10.0.0.1"),
            KafkaPrincipal.ANONYMOUS if sasl else KafkaPrincipal.parse(principal),
        )
        self.sasl = (
            SaslAuthenticator(
                SaslServer(
                    SaslListenerConfig(("PLAIN",)),
                    store=MappingCredentialStore(USERS),
                    wall_clock=lambda: self.now,
                ),
                session,
            )
            if sasl
            else None
        )
        self.cluster = UpstreamCluster((HostPort("127.0.0.1", 9),), 1.0)
        context = ConnectionContext(
            "LISTENER",
            session,
            authorizer if ask is None else ask(authorizer),
            self.cluster,
            NodePorts(),
            sasl=self.sasl,
            peer="10.0.0.1:50000",
        )
        self.exchange = Exchange(
            context,
            limits or LimitsConfig(),
            RateLimitedLog(logging.getLogger("kafkaguard.proxy"), clock=lambda: self.now),
            self.now,
            clock=lambda: self.now,
        )

    def connect(self) -> list[Command]:
        """``client_connected`` and, when the exchange opens the broker, ``broker_connected``."""
        commands = self.exchange.client_connected()
        if any(type(c).__name__ == "OpenBroker" for c in commands):
            commands += self.exchange.broker_connected()
        return commands

    def client(self, *frames: Frame) -> list[Command]:
        return self.exchange.receive_client(b"".join(frames))

    def broker(self, *frames: Frame) -> list[Command]:
        return self.exchange.receive_broker(b"".join(frames))


def request(body: Any, correlation_id: int, client_id: str | None = "test") -> bytes:
    return codec.encode_request(body, correlation_id, client_id)


def response(body: Any, correlation_id: int) -> bytes:
    return codec.encode_response(body, correlation_id)


def to_broker(commands: Iterable[Command]) -> list[bytes]:
    """The frames the commands write to the broker, in order."""
    return [bytes(f) for c in commands if isinstance(c, SendBroker) for f in c.frames]


def to_client(commands: Iterable[Command]) -> bytes:
    """The bytes the commands write to the client, in order."""
    return b"".join(bytes(d) for c in commands if isinstance(c, SendClient) for d in c.data)


def closed(commands: Iterable[Command]) -> CloseConnection | None:
    found = [c for c in commands if isinstance(c, CloseConnection)]
    assert len(found) <= 1, found
    return found[0] if found else None


def awaited(commands: Iterable[Command]) -> list[Await]:
    return [c for c in commands if isinstance(c, Await)]


def split_frames(data: bytes) -> list[bytes]:
    """Whole size-prefixed frames of ``data``."""
    frames = []
    while data:
        size = int.from_bytes(data[:4], "big")
        frames.append(data[: 4 + size])
        data = data[4 + size :]
    return frames
