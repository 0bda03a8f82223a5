"""The broker connection factory: one client connection's connection to its upstream broker.

:class:`BrokerConnector` is what a listener offers its connections for this: the targets (the
bootstrap servers, or the node the client connected to), ``upstream.ssl``, the connect timeout
and the proxy's own SASL handshake towards the broker (``upstream.sasl``,
kafkaguard/proxy/sasl/client.py) before any client request is written, and the listener's
``upstream_connect_errors`` counter. :class:`UpstreamConnection` is the broker side's
``asyncio.Protocol``; what it reports goes to the :class:`BrokerClient` it serves (the client
connection, kafkaguard/proxy/net/connection.py), which this module does not import.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame, FrameBuffer
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError, UpstreamSaslExchange

if TYPE_CHECKING:
    from kafkaguard.proxy.config import HostPort
    from kafkaguard.proxy.core.stats import ListenerStats
    from kafkaguard.proxy.net.cluster import UpstreamCluster

_SASL_MAX_FRAME = 1 << 20
"""Largest broker response accepted during the proxy's own SASL exchange (a challenge)."""


class BrokerClient(Protocol):
    """What the broker side reports to the client connection it serves."""

    @property
    def closed(self) -> bool:
        """The client connection closed (a broker connection opened meanwhile is dropped)."""
        ...

    def broker_data(self, data: bytes) -> None: ...

    def broker_write_full(self, full: bool) -> None: ...

    def upstream_lost(self, exc: Exception | None) -> None: ...


@dataclass(frozen=True, slots=True)
class ConnectFailed:
    """No broker connection: the client connection is closed with this reason."""

    reason: str
    level: int = logging.WARNING


class BrokerConnector:
    """Opens the broker connections of one listener's client connections."""

    __slots__ = ("_cluster", "_stats")

    def __init__(self, cluster: UpstreamCluster, stats: ListenerStats) -> None:
        self._cluster = cluster
        self._stats = stats

    async def connect(
        self, client: BrokerClient, node_id: int | None
    ) -> UpstreamConnection | ConnectFailed | None:
        """A connected (and, with ``upstream.sasl``, authenticated) broker connection for
        ``client``: to node ``node_id``, or to the first bootstrap server that answers (None:
        a bootstrap connection). None when the client left meanwhile."""
        loop = asyncio.get_running_loop()
        cluster = self._cluster
        if node_id is None:
            targets = list(cluster.bootstrap_servers)
        else:
            address = await cluster.find_node(node_id)
            targets = [address] if address is not None else []
        if not targets:
            return ConnectFailed(f"no known address for upstream node {node_id}")
        error: BaseException | None = None
        tls = cluster.ssl_context  # upstream.ssl
        for target in targets:
            try:
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(
                        partial(UpstreamConnection, client, target),
                        target.host,
                        target.port,
                        ssl=tls,
                        server_hostname=target.host if tls is not None else None,
                    ),
                    timeout=cluster.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                error = exc
                self._stats.upstream_connect_errors += 1
                continue
            if client.closed:
                upstream.close()
                return None
            if cluster.sasl is not None:  # authenticate before any client request is written
                refused, error = await self._authenticate(client, upstream, target)
                if refused is not None or client.closed:
                    upstream.close()
                    return refused
                if error is not None:
                    self._stats.upstream_connect_errors += 1
                    continue
            return upstream
        return ConnectFailed(f"cannot connect upstream ({', '.join(map(str, targets))}): {error}")

    async def _authenticate(
        self, client: BrokerClient, upstream: UpstreamConnection, target: HostPort
    ) -> tuple[ConnectFailed | None, BaseException | None]:
        """The proxy's SASL exchange on a new broker connection. Returns (refused: the client
        connection is closed with it; a connection error: try the next target)."""
        cluster = self._cluster
        assert cluster.sasl is not None
        try:
            exchange = cluster.sasl_exchange()
            assert exchange is not None
            await asyncio.wait_for(
                upstream.authenticate(exchange), timeout=cluster.connect_timeout_s
            )
        except UpstreamAuthenticationError as exc:
            return (
                ConnectFailed(
                    f"upstream {target} refused the proxy's SASL authentication "
                    f"({cluster.sasl.describe()}): {exc}",
                    logging.ERROR,
                ),
                None,
            )
        except (OSError, TimeoutError) as exc:
            upstream.close()
            return None, exc if str(exc) else TimeoutError("SASL authentication timed out")
        return None, None


class UpstreamConnection(asyncio.Protocol):
    """The broker side of one client connection."""

    __slots__ = (
        "_auth",
        "_auth_done",
        "_auth_frames",
        "_auth_ok",
        "_client",
        "_reading_paused",
        "_target",
        "_transport",
    )

    def __init__(self, client: BrokerClient, target: HostPort) -> None:
        self._client = client
        self._target = target
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._auth: UpstreamSaslExchange | None = None
        """The proxy's own SASL exchange with the broker, while it runs (upstream.sasl)."""
        self._auth_frames: FrameBuffer | None = None
        self._auth_done: asyncio.Future[None] | None = None
        self._auth_ok = False
        """Authenticated: only then is this connection the client's (and its loss theirs)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, frames: list[Frame]) -> None:
        if self._transport is not None:
            self._transport.writelines(frames)

    # -- upstream SASL (kafkaguard/proxy/sasl/client.py) -------------------------------------
    def authenticate(self, exchange: UpstreamSaslExchange) -> asyncio.Future[None]:
        """Run ``exchange`` on this connection before anything else is sent on it; the
        future completes when the broker accepted the proxy's credentials, or fails with
        :class:`UpstreamAuthenticationError` (refused) / ``OSError`` (connection lost)."""
        self._auth = exchange
        self._auth_frames = FrameBuffer(_SASL_MAX_FRAME)
        self._auth_done = asyncio.get_running_loop().create_future()
        self.send([exchange.start()])
        return self._auth_done

    def _auth_failed(self, exc: BaseException) -> None:
        self._auth = None
        if self._auth_done is not None and not self._auth_done.done():
            self._auth_done.set_exception(exc)

    def _auth_received(self, data: bytes) -> None:
        exchange = self._auth
        frames = self._auth_frames
        assert exchange is not None and frames is not None
        try:
            for frame in frames.feed(data):
                if exchange.done:
                    raise UpstreamAuthenticationError("unexpected response after SASL")
                request = exchange.receive(frame)
                if request is not None:
                    self.send([request])
        except UpstreamAuthenticationError as exc:
            self._auth_failed(exc)
            return
        except ProtocolError as exc:
            self._auth_failed(UpstreamAuthenticationError(f"bad response from the broker: {exc}"))
            return
        if exchange.done and not frames.pending_bytes:
            self._auth = None
            self._auth_frames = None
            self._auth_ok = True
            if self._auth_done is not None and not self._auth_done.done():
                self._auth_done.set_result(None)

    # -- relaying ----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._auth is not None:
            self._auth_received(data)
        else:
            self._client.broker_data(data)

    def pause_writing(self) -> None:
        self._client.broker_write_full(True)

    def resume_writing(self) -> None:
        self._client.broker_write_full(False)

    def pause_reading(self) -> None:
        if self._transport is not None and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._auth_done is not None and not self._auth_ok:  # SASL never completed on it
            self._auth_failed(
                OSError(f"the broker closed the connection during SASL authentication: {exc}")
                if exc
                else OSError("the broker closed the connection during SASL authentication")
            )
            return
        self._client.upstream_lost(exc)
