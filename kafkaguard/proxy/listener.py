"""A listener: its bootstrap port plus one proxy port per upstream broker.

Port-per-broker mapping: a client that learns node N from a Metadata (or FindCoordinator, …)
response is given ``advertised_host:port_for(N)``; connecting there reaches node N's real
address. A node's port is bound the first time the node appears. The socket is bound and
listening *before* the rewritten response leaves the proxy, so a client that connects at once
lands in the backlog instead of being refused.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Coroutine
from typing import Any

from kafkaguard.certs.tls import ServerTls
from kafkaguard.policy.authorizer import Authorizer, SecurityProtocol
from kafkaguard.proxy.cluster import UpstreamCluster
from kafkaguard.proxy.config import LimitsConfig, ListenerConfig
from kafkaguard.proxy.connection import ClientConnection
from kafkaguard.proxy.sasl.authenticator import SaslServer
from kafkaguard.proxy.sasl.credentials import LiveCredentialStore, build_credential_store

log = logging.getLogger("kafkaguard.proxy")

_TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A client that has not finished its TLS handshake by then is dropped."""


class NodePortUnavailable(RuntimeError):
    """A node has no proxy port (outside an explicit map, or the port cannot be bound)."""


class ListenerRuntime:
    """The servers, connections and node ports of one configured listener."""

    def __init__(
        self,
        config: ListenerConfig,
        cluster: UpstreamCluster,
        limits: LimitsConfig,
        authorizer: Authorizer,
        *,
        log_only: bool = False,
    ) -> None:
        self.config = config
        self.authorizer = authorizer
        self.log_only = log_only
        """``enforcement: log_only``: decisions are made and audited, requests handled as if
        allowed (kafkaguard/audit; ACL administration excepted, see ENFORCED_IN_LOG_ONLY)."""
        self.security_protocol = SecurityProtocol(config.security_protocol)
        self.cluster = cluster
        self.limits = limits
        self.connections: set[ClientConnection] = set()
        self._servers: list[asyncio.Server] = []
        self._node_ports: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.bootstrap_port: int = config.port
        self.tls: ServerTls | None = (
            ServerTls(config.ssl, config.name) if config.ssl is not None else None
        )
        """SSL/SASL_SSL listeners: the TLS context every port of the listener serves with
        (files reloaded for new connections when they change)."""
        self.sasl: SaslServer | None = (
            SaslServer(config.sasl, store=build_credential_store(config.sasl))
            if config.sasl is not None
            else None
        )
        """SASL_PLAINTEXT/SASL_SSL listeners: mechanisms, credentials and failure delays
        shared by the listener's connections (kafkaguard/proxy/sasl)."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a connection-scoped coroutine, keeping a reference so it is not collected."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        # SASL credentials kept in ZooKeeper: first full load before the port opens.
        if self.sasl is not None and isinstance(self.sasl.store, LiveCredentialStore):
            await self.sasl.store.start()
        sock = self._bind(self.config.port)
        self.bootstrap_port = sock.getsockname()[1]
        await self._serve(sock, None)
        log.info(
            "listener %s (%s) ready on %s:%d, advertised as %s",
            self.config.name,
            self.config.security_protocol,
            self.config.bind_host,
            self.bootstrap_port,
            self.config.advertised_host,
        )

    def _bind(self, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.config.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.config.bind_host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    async def _serve(self, sock: socket.socket, node_id: int | None) -> None:
        server = await asyncio.get_running_loop().create_server(
            lambda: self._accept(node_id),
            sock=sock,
            ssl=self.tls.context if self.tls is not None else None,
            ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S if self.tls is not None else None,
        )
        self._servers.append(server)

    def _accept(self, node_id: int | None) -> ClientConnection:
        return ClientConnection(self, node_id)

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Learn node ``node_id`` at ``host:port``; return the proxy address that stands for it."""
        self.cluster.learn_node(node_id, host, port)
        proxy_port = self._node_ports.get(node_id)
        if proxy_port is None:
            proxy_port = self._open_node_port(node_id)
        return self.config.advertised_host, proxy_port

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        port = self._node_ports.get(node_id)
        return None if port is None else (self.config.advertised_host, port)

    def _open_node_port(self, node_id: int) -> int:
        port = self.config.broker_ports.port_for(node_id)
        if port is None:
            raise NodePortUnavailable(
                f"listener {self.config.name} has no proxy port for upstream node {node_id}"
            )
        try:
            sock = self._bind(port)
        except OSError as exc:
            raise NodePortUnavailable(
                f"listener {self.config.name} cannot bind port {port} for node {node_id}: {exc}"
            ) from exc
        self._node_ports[node_id] = port
        log.info(
            "listener %s serves upstream node %d on %s:%d",
            self.config.name,
            node_id,
            self.config.bind_host,
            port,
        )
        self.spawn(self._serve(sock, node_id))
        return port

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            connection.close()
        for server in self._servers:
            await server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        if self.sasl is not None and isinstance(self.sasl.store, LiveCredentialStore):
            await self.sasl.store.close()
