"""What the proxy knows about the upstream cluster, shared by all listeners and connections.

Why shared: a node id learned from one client's Metadata response is where every later client
connecting to that node's proxy port must be sent; and the API versions the broker supports
bound what every client may use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import FrameBuffer
from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.handlers import REGISTRY

log = logging.getLogger("kafkaguard.proxy")


class UpstreamCluster:
    """Broker addresses by node id and the negotiated API version ranges."""

    def __init__(self, bootstrap_servers: tuple[HostPort, ...], connect_timeout_s: float) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.connect_timeout_s = connect_timeout_s
        self._nodes: dict[int, HostPort] = {}
        self._broker_versions: Mapping[int, range] | None = None
        self._supported: dict[int, range] = {}
        self.topic_names: dict[UUID, str] = {}
        """Topic ids seen in broker responses; an id never seen is unknown (fail closed)."""

    # -- nodes -----------------------------------------------------------------------------
    def learn_node(self, node_id: int, host: str, port: int) -> None:
        known = self._nodes.get(node_id)
        if known is None or known.host != host or known.port != port:
            log.info("upstream node %d is at %s:%d", node_id, host, port)
            self._nodes[node_id] = HostPort(host, port)

    def node_address(self, node_id: int) -> HostPort | None:
        return self._nodes.get(node_id)

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None:
        for topic_id, name in topics:
            if topic_id.int and name:
                self.topic_names[topic_id] = name

    # -- versions --------------------------------------------------------------------------
    def record_broker_api_versions(self, versions: Mapping[int, range]) -> None:
        if versions != self._broker_versions:
            self._broker_versions = dict(versions)
            self._supported.clear()

    def supported_versions(self, api_key: int) -> range:
        """handler ∩ kio ∩ broker (the broker part once known; kio ∩ handler before)."""
        cached = self._supported.get(api_key)
        if cached is not None:
            return cached
        handler = REGISTRY.get(api_key)
        result = range(0)
        if handler is not None:
            result = handler.versions
            if self._broker_versions is not None and not handler.answered_by_proxy:
                broker = self._broker_versions.get(api_key, range(0))
                result = range(max(result.start, broker.start), min(result.stop, broker.stop))
                if result.start >= result.stop:
                    result = range(0)
        self._supported[api_key] = result
        return result

    async def probe(self) -> HostPort:
        """Ask a bootstrap server for its API versions; returns the server that answered.

        Raises ``OSError`` when no bootstrap server answers.
        """
        last: Exception | None = None
        for server in self.bootstrap_servers:
            try:
                versions = await asyncio.wait_for(
                    fetch_api_versions(server), timeout=self.connect_timeout_s
                )
            except (OSError, TimeoutError, ProtocolError) as exc:
                last = exc
                continue
            self.record_broker_api_versions(versions)
            return server
        raise OSError(f"no upstream bootstrap server answered: {last}")


async def fetch_api_versions(server: HostPort) -> dict[int, range]:
    """One ApiVersions round trip on a fresh connection (startup probe)."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        request = ApiVersionsRequest(
            client_software_name="kafkaguard", client_software_version="0.1.0"
        )
        writer.write(codec.encode_request(request, 0, "kafkaguard-probe"))
        frames = FrameBuffer()
        while True:
            data = await reader.read(65536)
            if not data:
                raise OSError("upstream closed the connection during the probe")
            got = frames.feed(data)
            if got:
                break
        response: Any = codec.decode_response(got[0], 18, 3)
        return {int(e.api_key): range(e.min_version, e.max_version + 1) for e in response.api_keys}
    finally:
        writer.close()
