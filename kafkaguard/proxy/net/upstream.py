"""The broker connection factory: one client connection's connection to its upstream broker.

:class:`BrokerConnector` is what a listener offers its connections for this: the targets (the
bootstrap servers, or the node the client connected to), ``upstream.ssl``, the connect timeout
and the proxy's own SASL handshake towards the broker (``upstream.sasl``,
kafkaguard/proxy/sasl/client.py) before any client request is written, and the listener's
``upstream_connect_errors`` counter. The broker side's ``asyncio.Protocol``
(:class:`~kafkaguard.proxy.net.connection.UpstreamConnection`) stays in the shell beside the
client side's: a request's bytes pass one module of the shell each way (docs/design.md).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING

from kafkaguard.proxy.net.connection import ClientConnection, ConnectFailed, UpstreamConnection
from kafkaguard.proxy.sasl.client import UpstreamAuthenticationError

if TYPE_CHECKING:
    from kafkaguard.proxy.config import HostPort
    from kafkaguard.proxy.core.stats import ListenerStats
    from kafkaguard.proxy.net.cluster import UpstreamCluster


class BrokerConnector:
    """Opens the broker connections of one listener's client connections."""

    __slots__ = ("_cluster", "_stats")

    def __init__(self, cluster: UpstreamCluster, stats: ListenerStats) -> None:
        self._cluster = cluster
        self._stats = stats

    async def connect(
        self, client: ClientConnection, node_id: int | None
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
        self, client: ClientConnection, upstream: UpstreamConnection, target: HostPort
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
