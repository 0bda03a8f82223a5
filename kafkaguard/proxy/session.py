"""Who is on the other end of a client connection (KIP-504's request context, per connection).

The principal starts as ``User:ANONYMOUS`` (Kafka's PLAINTEXT principal) and is replaced when a
listener authenticates the client (TLS client certificate or SASL).

A connection's groups (``Group:`` principals, kafkaguard/policy/groups.py) are set with its
principal: the groups file's for the principal, plus the credential's own (an OAUTHBEARER
token's claim, a certificate's DN). They stay for the session, re-evaluated when the client
re-authenticates (KIP-368) and, for the file, at the first request after a new file is in force
(its generation changed).

The client address is the socket's peer, or on a ``proxy_protocol`` listener the client the
load balancer's PROXY protocol header names (kafkaguard/proxy/edge/proxy_protocol.py): what the
authorizer matches ACL hosts against, what audit events and SASL failure throttling key on.

Compiled with the allowed path (kafkaguard/protocol/build.py; issue 39 item 3):
:meth:`Session.request_context` runs for every request, and compiled it reads the session's
attributes natively and builds the context tuple in C, where the interpreted method and the
``RequestContext.of_request`` it called cost 4.6k instructions per request.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from kafkaguard.policy.authorizer import (
    IPAddress,
    RequestContext,
    SecurityProtocol,
    java_host_address,
)
from kafkaguard.policy.groups import merged
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.protocol.header import RequestHeaderInfo

if TYPE_CHECKING:
    from kafkaguard.policy.groups import GroupResolver

_new_context: Final = tuple.__new__
"""``RequestContext.of_request``'s constructor (one ``tuple.__new__``, kafkaguard/policy/
authorizer.py), called here directly: the named tuple class stays Python (mypyc compiles no
tuple subclass), and its classmethod would be an interpreted frame per request."""


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
    group_resolver: GroupResolver | None = None
    """The configured group sources (None: no groups, nothing done per request)."""
    groups: tuple[KafkaPrincipal, ...] = ()
    """The connection's ``Group:`` principals, held with :attr:`principal`."""
    client_host: str = field(init=False)
    """The address as Java prints it (ACL host matching and audit lines)."""
    _credential_groups: tuple[KafkaPrincipal, ...] = field(init=False, default=())
    _groups_generation: int = field(init=False, default=-1)
    """The groups file generation :attr:`groups` was computed from (-1: not yet)."""

    def __post_init__(self) -> None:
        self.client_host = java_host_address(self.client_address)

    def authenticated(
        self, principal: KafkaPrincipal, credential_groups: tuple[KafkaPrincipal, ...] = ()
    ) -> None:
        """The principal an authentication (or re-authentication) established, with the groups
        its credential named; the file's groups are looked up now."""
        self.principal = principal
        self._credential_groups = credential_groups
        self._regroup()

    def _regroup(self) -> None:
        resolver = self.group_resolver
        if resolver is None:
            return
        self._groups_generation = resolver.generation
        self.groups = merged(resolver.of_principal(self.principal), self._credential_groups)

    def request_context(self, header: RequestHeaderInfo) -> RequestContext:
        """KIP-504's context of one request of this connection, as the authorizer sees it."""
        resolver = self.group_resolver
        if resolver is not None and resolver.generation != self._groups_generation:
            self._regroup()  # a new groups file is in force (or the first request)
        # RequestContext.of_request's tuple, its fields in their order (policy/authorizer.py).
        return _new_context(
            RequestContext,
            (
                self.listener_name,
                self.security_protocol,
                self.principal,
                self.client_address,
                header.api_key,
                header.api_version,
                header.client_id,
                header.correlation_id,
                self.client_host,
                self.groups,
            ),
        )


def peer_address(peername: object) -> IPAddress:
    """The IP of a socket peer; non-IP peers (tests over pipes) count as 0.0.0.0."""
    if isinstance(peername, tuple) and peername:
        try:
            return ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
        except ValueError:
            pass
    return ipaddress.IPv4Address(0)
