"""TLS and SNI of a listener's accepted connections: from the bare socket to a transport.

The TLS handshake is bounded by ``authentication_timeout_ms`` (Kafka: ``SocketServer`` plus the
``Selector``'s authentication deadline). Each handshake starts with the listener's newest
context (:class:`~kafkaguard.certs.tls.ServerTls`, files reloaded for new connections when they
change). ``routing: sni`` (kafkaguard/proxy/edge/sni.py) first peeks at the ClientHello's server
name (:func:`~kafkaguard.proxy.net.peek.read_client_hello_server_name`) so that the handshake
still reads it, and refuses a name that routes nowhere with a fatal ``unrecognized_name`` alert.
On SSL listeners the client certificate's principal is read once the handshake completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING

from kafkaguard.certs.tls import ServerTls
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.edge.sni import (
    MAX_RECORD_BYTES,
    UNRECOGNIZED_NAME_ALERT,
    ClientHelloError,
    UnroutableName,
)
from kafkaguard.proxy.net.peek import read_client_hello_server_name

if TYPE_CHECKING:
    from kafkaguard.policy.groups import GroupResolver
    from kafkaguard.policy.model import KafkaPrincipal
    from kafkaguard.proxy.config import ListenerConfig
    from kafkaguard.proxy.net.connection import ClientConnection


class Handshake:
    """A listener's TLS context and SNI routing, applied to each accepted socket."""

    __slots__ = ("_sni", "tls")

    def __init__(self, config: ListenerConfig) -> None:
        self.tls: ServerTls | None = (
            ServerTls(config.ssl, config.name) if config.ssl is not None else None
        )
        """SSL/SASL_SSL listeners: the TLS context every port of the listener serves with
        (files reloaded for new connections when they change)."""
        self._sni = config.sni

    @property
    def bounded(self) -> bool:
        """Whether a connection's set-up can take long (a TLS handshake, a ClientHello peek)
        and needs its own deadline."""
        return self.tls is not None or self._sni is not None

    def principal(self, transport: asyncio.BaseTransport) -> KafkaPrincipal:
        """The principal of the client certificate of an SSL listener's connection
        (kafkaguard/certs); raises ``NoMatchingRuleError`` when no mapping rule matches."""
        assert self.tls is not None
        return self.tls.authenticate(transport.get_extra_info("ssl_object"))

    def identity(
        self, transport: asyncio.BaseTransport, groups: GroupResolver | None
    ) -> tuple[KafkaPrincipal, tuple[KafkaPrincipal, ...]]:
        """The certificate's principal and the groups ``ssl_mapping_rules`` give its DN
        (none without a certificate); raises ``NoMatchingRuleError`` or ``GroupsError``."""
        principal = self.principal(transport)
        if groups is None or groups.ssl_mapper is None:
            return principal, ()
        assert self.tls is not None
        return principal, groups.of_certificate(
            self.tls.peer_dn(transport.get_extra_info("ssl_object"))
        )

    async def open(
        self, conn: socket.socket, connection: ClientConnection, deadline: float, timeout_ms: int
    ) -> None:
        """Hand the accepted socket to its connection, through the TLS handshake if any,
        which must be done by ``deadline`` (loop time; ``timeout_ms`` names it)."""
        loop = asyncio.get_running_loop()
        tls = self.tls
        try:
            # Only a TLS handshake (or the ClientHello peek) can take long: no timer otherwise.
            async with asyncio.timeout_at(deadline) if self.bounded else contextlib.nullcontext():
                if self._sni is not None and not await self._route(conn, connection):
                    return
                await loop.connect_accepted_socket(
                    lambda: connection,
                    conn,
                    # The newest context: it decides which session tickets resume (OpenSSL
                    # decrypts them with the keys of the context a handshake starts with), so
                    # a reload of the TLS files ends the tickets issued before it.
                    ssl=tls.current() if tls is not None else None,
                    # the deadline above decides
                    ssl_handshake_timeout=(
                        max(deadline - loop.time(), 0.0) + 1.0 if tls is not None else None
                    ),
                )
        except TimeoutError:
            conn.close()
            connection.close(
                f"TLS handshake not completed within {timeout_ms} ms (authentication_timeout_ms)",
                cause=CloseCause.AUTHENTICATION_TIMEOUT,
            )
        except OSError as exc:  # ssl.SSLError is an OSError
            conn.close()
            if tls is None:
                connection.close(f"connection failed: {exc}", cause=CloseCause.CLIENT_CLOSED)
            else:
                connection.close(
                    f"TLS handshake failed: {exc}", cause=CloseCause.AUTHENTICATION_FAILED
                )
        except asyncio.CancelledError:
            conn.close()
            connection.close(cause=CloseCause.SHUTDOWN)
            raise

    async def _route(self, conn: socket.socket, connection: ClientConnection) -> bool:
        """``routing: sni``: the upstream node named by the ClientHello's server name, peeked
        at so the TLS handshake still reads it; False once a refused connection is closed
        (with a fatal ``unrecognized_name`` alert) and counted (kafkaguard/proxy/edge/sni.py)."""
        sni = self._sni
        assert sni is not None
        try:
            connection.node_id = sni.route(await read_client_hello_server_name(conn))
        except (ClientHelloError, UnroutableName) as exc:
            with contextlib.suppress(OSError):
                conn.send(UNRECOGNIZED_NAME_ALERT)
                conn.recv(MAX_RECORD_BYTES)  # read what was peeked: the close is then a FIN,
                # not a reset that could discard the alert before the client reads it
            conn.close()
            connection.close(str(exc), cause=CloseCause.SNI)
            return False
        except EOFError:
            conn.close()
            connection.close(cause=CloseCause.CLIENT_CLOSED)
            return False
        return True
