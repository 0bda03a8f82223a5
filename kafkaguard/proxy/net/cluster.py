"""What the proxy knows about the upstream cluster, shared by all listeners and connections.

Why shared: a node id learned from one client's Metadata response is where every later client
connecting to that node's proxy port must be sent; the API versions the broker supports bound
what every client may use; and the broker's latest ApiVersions response is what a client not
yet authenticated on a SASL listener is answered from (it has no broker connection).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable, Mapping
from typing import Any, Final
from uuid import UUID

from kafkaguard.certs.tls import UpstreamTlsConfig, build_client_context
from kafkaguard.protocol import codec
from kafkaguard.protocol.answer_memo import AnswerMemo
from kafkaguard.protocol.codec import ErrorCode, codec_versions
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame, FrameBuffer
from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.sasl.authenticator import API_VERSIONS
from kafkaguard.proxy.sasl.client import (
    SASL_AUTHENTICATE,
    UpstreamAuthenticationError,
    UpstreamSasl,
    UpstreamSaslConfig,
    UpstreamSaslExchange,
    authenticate_stream,
)

log = logging.getLogger("kafkaguard.proxy")

METADATA: Final = 3
METADATA_VERSION: Final = 12
"""The Metadata version asked for the brokers (or the broker's newest, if older)."""
BROKERS_REFRESH_S: Final = 1.0
PROBE_CLIENT_ID: Final = "kafkaguard-probe"


class UpstreamCluster:
    """Broker addresses by node id and the negotiated API version ranges."""

    def __init__(
        self,
        bootstrap_servers: tuple[HostPort, ...],
        connect_timeout_s: float,
        *,
        tls: UpstreamTlsConfig | None = None,
        sasl: UpstreamSaslConfig | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.connect_timeout_s = connect_timeout_s
        # --- upstream security: every connection to a broker (probe included) uses these ---
        self.ssl_context: ssl.SSLContext | None = (
            build_client_context(tls) if tls is not None else None
        )
        """TLS towards the brokers (``upstream.ssl``); None: plaintext."""
        self.sasl: UpstreamSasl | None = UpstreamSasl(sasl) if sasl is not None else None
        """SASL towards the brokers (``upstream.sasl``); None: no authentication."""
        # --- end upstream security ---
        self._nodes: dict[int, HostPort] = {}
        self.broker_versions: Mapping[int, range] | None = None
        """The broker's version range of each API key, from its latest ApiVersions answer
        (None before any): data the dispatcher's version gate reads; what the proxy serves is
        intersected with it where the handlers are (``handlers.supported_versions``)."""
        self._api_versions: dict[int, Any] = {}
        """The broker's latest error-free ApiVersions response of each version seen."""
        self.api_versions_answers = AnswerMemo()
        """Clients' ApiVersions answers by the broker's (their rewrite depends on it alone)."""
        self.topic_names: dict[UUID, str] = {}
        """Topic ids seen in broker responses; an id never seen is unknown (fail closed)."""
        self._brokers_asked: asyncio.Task[None] | None = None
        """The Metadata request for the cluster's brokers in flight or last made (one at a
        time, and at most one per :data:`BROKERS_REFRESH_S`)."""
        self._brokers_asked_at = float("-inf")

    # -- nodes -----------------------------------------------------------------------------
    def learn_node(self, node_id: int, host: str, port: int) -> None:
        known = self._nodes.get(node_id)
        if known is None or known.host != host or known.port != port:
            log.info("upstream node %d is at %s:%d", node_id, host, port)
            self._nodes[node_id] = HostPort(host, port)

    def node_address(self, node_id: int) -> HostPort | None:
        return self._nodes.get(node_id)

    async def find_node(self, node_id: int) -> HostPort | None:
        """Node ``node_id``'s address, asking the cluster for its brokers when it is not known
        yet: with ``routing: sni`` a client may name a node this process has not seen in a
        response (another worker, or another proxy behind the same name, answered its
        Metadata). The name is the client's to choose, so requests are coalesced and made at
        most once per :data:`BROKERS_REFRESH_S`: unknown names cannot make the proxy flood
        the cluster. None when the cluster does not know the node either."""
        known = self._nodes.get(node_id)
        if known is not None:
            return known
        loop = asyncio.get_running_loop()
        task = self._brokers_asked
        if (task is None or task.done()) and loop.time() - self._brokers_asked_at >= (
            BROKERS_REFRESH_S
        ):
            self._brokers_asked_at = loop.time()
            task = self._brokers_asked = loop.create_task(self._learn_brokers())
        if task is not None and not task.done():
            await asyncio.shield(task)
        return self._nodes.get(node_id)

    async def _learn_brokers(self) -> None:
        for server in self.bootstrap_servers:
            try:
                brokers = await asyncio.wait_for(
                    fetch_brokers(server, self), timeout=self.connect_timeout_s
                )
            except (OSError, TimeoutError, ProtocolError, UpstreamAuthenticationError) as exc:
                log.warning("upstream %s did not list its cluster's brokers: %s", server, exc)
                continue
            for node_id, host, port in brokers:
                self.learn_node(node_id, host, port)
            return

    def node_addresses(self) -> list[HostPort]:
        """Every broker address learned so far."""
        return list(self._nodes.values())

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None:
        for topic_id, name in topics:
            if topic_id.int and name:
                self.topic_names[topic_id] = name

    # -- versions --------------------------------------------------------------------------
    def record_broker_api_versions(self, response: Any) -> None:
        """Keep an error-free ApiVersions response of the broker: its ranges
        (:attr:`broker_versions`) bound what the proxy serves; later clients may be answered from it
        (:meth:`latest_api_versions`)."""
        version = int(response.__version__)
        if self._api_versions.get(version) is response:
            return  # kept already, and every kept response has the current ranges
        versions = version_ranges(response)
        if versions != self.broker_versions:
            self.broker_versions = versions
            self._api_versions.clear()  # the broker changed: answers of other versions are stale
        self._api_versions[version] = response

    def latest_api_versions(self, version: int) -> Any | None:
        """The broker's latest ApiVersions response to answer a ``version`` request from: of
        that version, else the nearest newer one (every field of ``version`` can be derived from
        it), else the newest older one; None before any."""
        seen = self._api_versions
        if not seen:
            return None
        newer = [v for v in seen if v >= version]
        return seen[min(newer) if newer else max(seen)]

    def sasl_exchange(self) -> UpstreamSaslExchange | None:
        """A fresh SASL exchange for a new upstream connection (None without ``upstream.sasl``).
        Raises :class:`UpstreamAuthenticationError` when the password file cannot be read."""
        if self.sasl is None:
            return None
        broker = self.broker_versions
        return self.sasl.exchange(broker.get(SASL_AUTHENTICATE) if broker is not None else None)

    async def probe(self) -> HostPort:
        """Ask a bootstrap server for its API versions (over TLS and after SASL
        authentication when configured) and keep its whole response; returns the server that
        answered.

        Raises ``OSError`` when no bootstrap server answers, and
        :class:`UpstreamAuthenticationError` at once when one refuses the proxy's SASL
        credentials (retrying cannot help).
        """
        server, response = await self._first_answer(
            self.bootstrap_servers, "bootstrap server", self.sasl
        )
        self.record_broker_api_versions(response)
        return server

    async def answers(self) -> HostPort:
        """Readiness: the first of the bootstrap servers, then the known brokers, to answer an
        ApiVersions request (over TLS when configured, without SASL: a broker answers
        ApiVersions before authentication, KIP-43). Nothing is kept. Raises ``OSError`` when
        none answers."""
        servers = [*self.bootstrap_servers, *self.node_addresses()]
        return (await self._first_answer(servers, "bootstrap server or broker"))[0]

    async def _first_answer(
        self, servers: Iterable[HostPort], what: str, sasl: UpstreamSasl | None = None
    ) -> tuple[HostPort, Any]:
        last: Exception | None = None
        for server in servers:
            try:
                response = await asyncio.wait_for(
                    fetch_api_versions(server, ssl_context=self.ssl_context, sasl=sasl),
                    timeout=self.connect_timeout_s,
                )
            except (OSError, TimeoutError, ProtocolError) as exc:
                last = exc
                continue
            return server, response
        raise OSError(f"no upstream {what} answered: {last}")


async def open_connection(
    server: HostPort, ssl_context: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection of the proxy's own to ``server``, over the upstream TLS when given (the
    server's name is what the certificate must cover, as librdkafka and the Java client check).
    Shared with the tools' own Admin reads (kafkaguard/proxy/app/wire_admin.py), which must
    reach a cluster exactly as the proxy does."""
    return await asyncio.open_connection(
        server.host,
        server.port,
        ssl=ssl_context,
        server_hostname=server.host if ssl_context is not None else None,
    )


async def ask(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    frames: FrameBuffer,
    request: Any,
    version: int,
    client_id: str,
) -> Any:
    """Send ``request`` on the proxy's own connection to a broker and decode its answer."""
    writer.write(codec.encode_request(request, version, client_id))
    got: list[Frame] = []
    while not got:
        data = await reader.read(65536)
        if not data:
            raise OSError(f"upstream closed the connection before answering {client_id}")
        got = frames.feed(data)
    return codec.decode_response(got[0], int(request.__api_key__), version)


async def fetch_brokers(server: HostPort, cluster: UpstreamCluster) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every broker, from a Metadata request for no topics on a
    fresh connection to ``server`` (over the cluster's TLS, after its SASL exchange)."""
    version = min(_newest_metadata(cluster.broker_versions), METADATA_VERSION)
    if version < 1:  # v0 cannot ask for no topics
        raise ProtocolError("the upstream answers no Metadata version the proxy can send")
    reader, writer = await open_connection(server, cluster.ssl_context)
    try:
        frames = FrameBuffer()
        exchange = cluster.sasl_exchange()
        if exchange is not None:
            await authenticate_stream(exchange, reader, writer, frames)
        request = codec.make_entity(  # other fields zero: false, no authorized operations
            codec.request_schema(METADATA, version), topics=(), allow_auto_topic_creation=False
        )
        response = await ask(reader, writer, frames, request, version, "kafkaguard-brokers")
        return [(b.node_id, b.host, b.port) for b in response.brokers]
    finally:
        writer.close()


def _newest_metadata(broker: Mapping[int, range] | None) -> int:
    """The newest Metadata version kio and the broker both speak (the proxy's own request)."""
    ours = codec_versions(METADATA)
    theirs = ours if broker is None else broker.get(METADATA, range(0))
    if theirs.start >= ours.stop or ours.start >= theirs.stop:
        return -1
    return min(ours.stop, theirs.stop) - 1


async def fetch_api_versions(
    server: HostPort,
    *,
    ssl_context: ssl.SSLContext | None = None,
    sasl: UpstreamSasl | None = None,
) -> Any:
    """The broker's ApiVersions response on a fresh connection (startup probe), error-free and
    of the newest version both sides know: v3 first (every broker since Kafka 2.4), then the
    newest shared one if that is newer, because ApiVersionsResponse v4 also lists features
    whose minimum version is 0, which v0-3 leave out (older answers derive from a newer one,
    not the reverse). With ``sasl``, the connection then authenticates (SaslHandshake +
    SaslAuthenticate), so bad credentials are found at start. Raises
    :class:`UpstreamAuthenticationError` when they are refused."""
    reader, writer = await open_connection(server, ssl_context)
    try:
        frames = FrameBuffer()
        response = await ask_api_versions(reader, writer, frames, 3, PROBE_CLIENT_ID)
        versions = version_ranges(response)
        newest = min(versions.get(API_VERSIONS, range(0)).stop, codec_versions(API_VERSIONS).stop)
        if newest - 1 > 3:
            response = await ask_api_versions(reader, writer, frames, newest - 1, PROBE_CLIENT_ID)
        if sasl is not None:
            exchange = sasl.exchange(versions.get(SASL_AUTHENTICATE))
            try:
                await authenticate_stream(exchange, reader, writer, frames)
            except UpstreamAuthenticationError as exc:
                raise UpstreamAuthenticationError(
                    f"upstream {server} refused the proxy's SASL authentication "
                    f"({sasl.describe()}): {exc}"
                ) from None
            log.info("authenticated to upstream %s with %s", server, sasl.describe())
        return response
    finally:
        writer.close()


async def ask_api_versions(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    frames: FrameBuffer,
    version: int,
    client_id: str,
) -> Any:
    """ApiVersions ``version`` on an open connection (the first request of every connection
    of the proxy's own, before SASL: KIP-511 names the client software). An error code is a
    :class:`ProtocolError`: a broker that answers one cannot be talked to."""
    request = codec.make_entity(
        codec.request_schema(API_VERSIONS, version),
        client_software_name="kafkaguard",
        client_software_version="0.1.0",
    )
    response = await ask(reader, writer, frames, request, version, client_id)
    if response.error_code != ErrorCode.none:
        raise ProtocolError(f"ApiVersions v{version} answered {ErrorCode(response.error_code)!r}")
    return response


def version_ranges(response: Any) -> dict[int, range]:
    """The version range of each API key an ApiVersions response lists."""
    return {int(e.api_key): range(e.min_version, e.max_version + 1) for e in response.api_keys}
