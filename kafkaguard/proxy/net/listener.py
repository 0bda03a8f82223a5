"""A listener: its bootstrap port plus one proxy port per upstream broker, and its connections.

What a listener does is split by role, each in a module of its own in kafkaguard/proxy/net/:

* accepting (:mod:`~kafkaguard.proxy.net.accept`: Kafka's ``Acceptor``, the PROXY protocol
  header) and the limits on what is accepted (:mod:`~kafkaguard.proxy.net.admission`: Kafka's
  ``ConnectionQuotas``, the creation-rate throttle, the idle sweep, the per-cause counters);
* TLS and SNI (:mod:`~kafkaguard.proxy.net.handshake`), from the bare socket to a transport;
* the proxy port of each upstream node (:mod:`~kafkaguard.proxy.net.node_ports`) and the broker
  connection factory (:mod:`~kafkaguard.proxy.net.upstream`);
* here: what ties them together for the listener's connections (the exchange each connection
  is given once its transport is up, the bookkeeping when it closes), reload and shutdown.

Reload (kafkaguard/proxy/app/reload.py): :meth:`ListenerRuntime.reconfigure` swaps the limits
(:meth:`~kafkaguard.proxy.net.admission.Admission.reconfigure` says which connections see
what) and the enforcement mode, which every connection's next decision follows. An added
listener is first opened (:meth:`ListenerRuntime.open`), then accepts
(:meth:`ListenerRuntime.accept`); a removed one is drained and closed as at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Coroutine, Mapping
from typing import Any

from kafkaguard.certs.tls import ServerTls
from kafkaguard.policy.authorizer import Authorizer, SecurityProtocol
from kafkaguard.policy.groups import GroupResolver, GroupsError
from kafkaguard.policy.principal_mapping import NoMatchingRuleError
from kafkaguard.proxy.config import LimitsConfig, ListenerConfig
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.core.context import ConnectionContext
from kafkaguard.proxy.core.exchange import Exchange
from kafkaguard.proxy.core.limits import ConnectionQuotas
from kafkaguard.proxy.core.stats import ListenerStats
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.net.accept import Acceptor
from kafkaguard.proxy.net.admission import Admission
from kafkaguard.proxy.net.cluster import UpstreamCluster
from kafkaguard.proxy.net.connection import ClientConnection
from kafkaguard.proxy.net.handshake import Handshake
from kafkaguard.proxy.net.node_ports import NodePortMap
from kafkaguard.proxy.net.upstream import BrokerConnector
from kafkaguard.proxy.sasl.authenticator import SaslAuthenticator, SaslServer
from kafkaguard.proxy.sasl.executor import AuthExecutor
from kafkaguard.proxy.sasl.stores import build_credential_store
from kafkaguard.proxy.session import Session, peer_address

log = logging.getLogger("kafkaguard.proxy")


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
        auth_executor: AuthExecutor | None = None,
        reuse_port: bool = False,
        store_connection: Mapping[str, Any] | None = None,
        groups: GroupResolver | None = None,
    ) -> None:
        """``store_connection``: librdkafka settings reaching the protected cluster, for a
        ``scram_credentials: kafka`` store (docs/acl-store.md). ``reuse_port``: ``workers`` >
        1, every port is bound with ``SO_REUSEPORT``, shared with the other workers
        (kafkaguard/proxy/app/workers.py); the kernel spreads connections over them."""
        self.config = config
        self.authorizer = authorizer
        self.groups = groups
        """``authorizer.extensions.groups``: the group sources of the listener's sessions."""
        self.log_only = log_only
        """``enforcement: log_only``: decisions are made and audited, requests handled as if
        allowed (kafkaguard/audit; ACL administration excepted, see ENFORCED_IN_LOG_ONLY)."""
        self.security_protocol = SecurityProtocol(config.security_protocol)
        self.cluster = cluster
        self.connections: set[ClientConnection] = set()
        """Connections past their TLS handshake and not yet closed."""
        self.stats = ListenerStats()
        """Requests, responses, bytes and latencies of the data path (read by /metrics)."""
        self.admission = Admission(self, limits, self.connections, self.stats)
        self.handshake = Handshake(config)
        self.acceptor = Acceptor(config, self.admission, self.handshake, reuse_port=reuse_port)
        self.node_ports = NodePortMap(config, cluster, self.acceptor)
        self.brokers = BrokerConnector(cluster, self.stats)
        """The broker connection factory of the listener's connections."""
        self._unserved: socket.socket | None = None
        """The bootstrap socket between :meth:`open` and :meth:`accept`."""
        self.draining = False
        """Shutdown: accepting stopped, connections close once their requests are answered."""
        self._drained: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.sasl: SaslServer | None = (
            SaslServer(
                config.sasl,
                store=build_credential_store(config.sasl, store_connection),
                executor=auth_executor,
                groups=groups,
            )
            if config.sasl is not None
            else None
        )
        """SASL_PLAINTEXT/SASL_SSL listeners: mechanisms, credentials and failure delays
        shared by the listener's connections (kafkaguard/proxy/sasl)."""

    # -- what the rest of the proxy reads ------------------------------------------------------
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def limits(self) -> LimitsConfig:
        return self.admission.limits

    @property
    def quotas(self) -> ConnectionQuotas:
        return self.admission.quotas

    @property
    def counters(self) -> dict[str, int]:
        """Connections refused or closed since start, by :class:`CloseCause` value."""
        return self.admission.counters

    @property
    def rate_log(self) -> RateLimitedLog:
        return self.admission.rate_log

    @property
    def tls(self) -> ServerTls | None:
        return self.handshake.tls

    @property
    def bootstrap_port(self) -> int:
        return self.node_ports.bootstrap_port

    # -- start ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """:meth:`open`, then :meth:`accept`."""
        await self.open()
        self.accept()

    async def open(self) -> None:
        """Load what the listener needs and bind its bootstrap port, without accepting yet: a
        reload opens every added listener before it applies anything (a port already in use
        rejects the whole reload), and accepts on them only once the new settings are in
        force. :meth:`close` releases what this took."""
        # SASL credentials kept in ZooKeeper, a JWKS endpoint: first load before the port opens.
        if self.sasl is not None:
            await self.sasl.start()
        sock = self.acceptor.bind(self.config.port)
        self._unserved = sock
        self.node_ports.bootstrap_port = sock.getsockname()[1]

    def accept(self) -> None:
        """Start accepting on the port :meth:`open` bound, and the idle sweep."""
        sock, self._unserved = self._unserved, None
        if sock is None:
            raise RuntimeError(f"listener {self.config.name} is not open")
        self.acceptor.serve(sock, None)
        self.admission.start_sweeping()
        log.info(
            "listener %s (%s) ready on %s:%d, advertised as %s",
            self.config.name,
            self.config.security_protocol,
            self.config.bind_host,
            self.bootstrap_port,
            self.config.advertised_host,
        )

    # -- reload ----------------------------------------------------------------------------------
    def reconfigure(self, limits: LimitsConfig, *, log_only: bool) -> None:
        """A reload: the listener's limits and enforcement mode from now on (see the module
        docstring for which connections see what)."""
        if log_only != self.log_only:
            self.log_only = log_only  # ConnectionContext reads it for every decision
            if log_only:
                log.warning(
                    "listener %s is now in log_only mode: requests are authorized and audited "
                    "but forwarded even when denied",
                    self.config.name,
                )
            else:
                log.info("listener %s now enforces its authorization decisions", self.config.name)
        if limits != self.limits:
            self.admission.reconfigure(limits)

    # -- the listener's connections (ConnectionOwner) ------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a connection-scoped coroutine, keeping a reference so it is not collected."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start_exchange(
        self, connection: ClientConnection, transport: asyncio.BaseTransport
    ) -> Exchange | None:
        """The session, context and exchange of a connection whose transport is up: the
        listener's settings as they are now (a reload changes them for later connections)."""
        config = self.config
        session = Session(
            config.name,
            self.security_protocol,
            connection.client_address or peer_address(transport.get_extra_info("peername")),
            authority=connection.authority,
            group_resolver=self.groups,
        )
        self.connections.add(connection)
        if self.handshake.tls is not None and config.security_protocol == "SSL":
            try:  # the principal of the client certificate (kafkaguard/certs), its groups
                session.authenticated(*self.handshake.identity(transport, self.groups))
            except (NoMatchingRuleError, GroupsError) as exc:
                connection.close(
                    f"SSL authentication failed: {exc}", cause=CloseCause.AUTHENTICATION_FAILED
                )
                return None
            log.debug("%s: authenticated as %s", connection.peer, session.principal)
        context = ConnectionContext(
            config.name,
            session,
            self.authorizer,
            self.cluster,
            self.node_ports,
            enforcement=self,
            sasl=SaslAuthenticator(self.sasl, session) if self.sasl is not None else None,
            peer=connection.peer,
            connection_id=connection.connection_id,
        )
        return Exchange(
            context, self.limits, self.rate_log, connection.accepted_at, stats=self.stats
        )

    def connection_closed(
        self, connection: ClientConnection, cause: CloseCause, reason: str | None, level: int
    ) -> None:
        """Bookkeeping of a closing connection: counters, quota, one rate-limited line (per
        cause and level: a stream of benign lines must not hide a warning)."""
        self.admission.release(connection, cause)
        self.connections.discard(connection)
        if reason is not None:
            self.rate_log.log(
                (self.config.name, cause, level),
                level,
                "closing connection from %s on listener %s: %s (%d requests unanswered)",
                connection.peer,
                self.config.name,
                reason,
                connection.unanswered,
                extra=connection.log_fields,
            )
        if self._drained is not None and not self.connections:
            self._drained.set()

    # -- shutdown ------------------------------------------------------------------------------
    def stop_accepting(self) -> None:
        """Close every listening socket; abandon TLS handshakes in progress; close the
        connections held for their address's ``connection_creation_rate``."""
        self.acceptor.stop()
        self.admission.close_throttled()

    def drain(self) -> tuple[int, int, int]:
        """Shutdown, first step: stop accepting and reading; each connection closes once its
        requests in flight are answered. Returns (connections, requests in flight, requests
        received but not started: dropped)."""
        self.draining = True
        self.stop_accepting()
        self.admission.stop_sweeping()
        self._drained = asyncio.Event()
        connections = len(self.connections)
        in_flight = dropped = 0
        for connection in list(self.connections):
            waiting, not_started = connection.drain()
            in_flight += waiting
            dropped += not_started
        if not self.connections:
            self._drained.set()
        return connections, in_flight, dropped

    async def drained(self) -> None:
        """Wait until every connection :meth:`drain` left open has closed."""
        if self._drained is not None:
            await self._drained.wait()

    def cut(self) -> tuple[int, int]:
        """Shutdown, last step: close what is still open. Returns (connections, requests left
        unanswered)."""
        connections = len(self.connections)
        unanswered = 0
        for connection in list(self.connections):
            unanswered += connection.unanswered
            connection.close(cause=CloseCause.SHUTDOWN)
        return connections, unanswered

    async def close(self) -> None:
        self.stop_accepting()
        self.admission.stop_sweeping()
        for connection in list(self.connections):
            connection.close(cause=CloseCause.SHUTDOWN)
        for task in list(self._tasks):
            task.cancel()
        if self.sasl is not None:
            await self.sasl.close()
