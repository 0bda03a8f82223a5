"""A listener's port per upstream broker: the proxy address that stands for each node.

Port-per-broker mapping: a client that learns node N from a Metadata (or FindCoordinator, …)
response is given ``advertised_host:port_for(N)``; connecting there reaches node N's real
address. A node's port is bound the first time the node appears. The socket is bound and
listening *before* the rewritten response leaves the proxy, so a client that connects at once
lands in the backlog instead of being refused. With ``routing: sni`` every node is a name on
the listener's own port instead (kafkaguard/proxy/edge/sni.py).
"""

from __future__ import annotations

import logging

from kafkaguard.proxy.config import ListenerConfig
from kafkaguard.proxy.net.accept import Acceptor, BindError
from kafkaguard.proxy.net.cluster import UpstreamCluster

log = logging.getLogger("kafkaguard.proxy")


class NodePortUnavailable(RuntimeError):
    """A node has no proxy port (outside an explicit map, or the port cannot be bound)."""


class NodePortMap:
    """The :class:`~kafkaguard.proxy.core.context.NodePorts` of one listener."""

    def __init__(
        self, config: ListenerConfig, cluster: UpstreamCluster, acceptor: Acceptor
    ) -> None:
        self._config = config
        self._cluster = cluster
        self._acceptor = acceptor
        self.ports: dict[int, int] = {}
        """The proxy port of each node bound so far."""
        self.bootstrap_port = config.port
        """The listener's own port (the one bound, once ``port: 0`` was given one)."""

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Learn node ``node_id`` at ``host:port``; return the proxy address that stands for it:
        its name on the listener's port (``routing: sni``), else the advertised host and the
        node's own port (bound the first time)."""
        self._cluster.learn_node(node_id, host, port)
        sni = self._config.sni
        if sni is not None:
            return sni.host_for(node_id), self.bootstrap_port
        proxy_port = self.ports.get(node_id)
        if proxy_port is None:
            proxy_port = self._open(node_id)
        return self._config.advertised_host, proxy_port

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        """The proxy address already standing for node ``node_id``, None before any."""
        sni = self._config.sni
        if sni is not None:
            known = self._cluster.node_address(node_id) is not None
            return (sni.host_for(node_id), self.bootstrap_port) if known else None
        port = self.ports.get(node_id)
        return None if port is None else (self._config.advertised_host, port)

    def _open(self, node_id: int) -> int:
        config = self._config
        port = config.broker_ports.port_for(node_id)
        if port is None:
            raise NodePortUnavailable(
                f"listener {config.name} has no proxy port for upstream node {node_id}"
            )
        try:
            sock = self._acceptor.bind(port, f"node {node_id}'s port")
        except BindError as exc:
            raise NodePortUnavailable(str(exc)) from exc
        self.ports[node_id] = port
        log.info(
            "listener %s serves upstream node %d on %s:%d",
            config.name,
            node_id,
            config.bind_host,
            port,
        )
        if self._acceptor.stopped:  # shutting down: the port is reserved, never served
            sock.close()
        else:
            self._acceptor.serve(sock, node_id)
        return port
