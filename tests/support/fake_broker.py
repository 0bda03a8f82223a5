"""An in-process fake Kafka cluster (several nodes, one real loopback listener each) and a raw
Kafka client, for the edge cases a real Tansu broker cannot produce.

The broker answers ApiVersions (configurable ranges), Metadata, FindCoordinator (v0-3 and
batched v4+), DescribeCluster and Produce v10+/Fetch v16+ with ``node_endpoints``, each naming
every node at its *real* address; any other API gets its schema's empty, error-free response.
It records which node received each request and how many requests were outstanding at once,
and can be scripted to misbehave on the next request of an API (see :meth:`FakeBroker.script`).
Everything is encoded and decoded with :mod:`kafkaguard.protocol.codec`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.framing import FrameBuffer, frame
from kafkaguard.protocol.header import RequestHeaderInfo, peek_correlation_id, peek_request_header
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts, HostPort, LimitsConfig
from kafkaguard.tansu import free_base
from tests.support.handler_harness import described_topics
from tests.support.proxy_fixture import proxy_config

Action = str | float
"""``"close"`` (drop the connection instead of answering), ``"garbage"`` (unframeable bytes),
``"oversized"`` (a 2 GiB size prefix, a little data, then close), ``"undecodable"`` (well
framed, right correlation id, junk body), ``"wrong_correlation"``, ``"trickle"`` (a Fetch
response carrying 256 KiB of record bytes, written in 4 pieces 0.2 s apart; ``trickled`` is
set after the last piece), or a delay in seconds."""

TRICKLE_RECORDS = bytes(range(256)) * 1024


def make(entity_type: type[Any], **values: Any) -> Any:
    """An entity of ``entity_type`` with every field zero/empty except ``values`` (fields the
    schema version lacks are ignored, so one call fits every version)."""
    names = {f.name for f in dataclasses.fields(entity_type)}
    return codec.make_entity(entity_type, **{k: v for k, v in values.items() if k in names})


def set_fields(entity: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(entity)}
    return dataclasses.replace(entity, **{k: v for k, v in values.items() if k in names})


def request(api_key: int, version: int, **values: Any) -> Any:
    return make(codec.request_schema(api_key, version), **values)


@dataclass(frozen=True)
class Seen:
    node_id: int
    api_key: int
    api_version: int
    correlation_id: int


class FakeBroker:
    def __init__(
        self,
        node_ids: Iterable[int] = (1, 2, 3),
        versions: dict[int, range] | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.node_ids = tuple(node_ids)
        self.versions = versions or {k: codec.codec_versions(k) for k in codec.API_NAMES}
        self.delay_s = delay_s
        self.nodes: dict[int, HostPort] = {}
        self.seen: list[Seen] = []
        self.max_outstanding = 0
        self.open_connections = 0
        self.errors: list[BaseException] = []
        """Exceptions of the fake itself (a test should assert this stays empty)."""
        self.cluster_id = "fake-cluster"
        self.topics: dict[UUID, str] = {}
        """Topics Metadata describes when asked for them by id or by name."""
        self.trickled = asyncio.Event()
        self.trickled_bytes = b""
        self._script: dict[int, deque[Action]] = defaultdict(deque)
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def bootstrap(self) -> HostPort:
        return self.nodes[self.node_ids[0]]

    @property
    def ports(self) -> set[int]:
        return {a.port for a in self.nodes.values()}

    def script(self, api_key: int, *actions: Action) -> None:
        """Misbehave on the next ``len(actions)`` requests of ``api_key``."""
        self._script[api_key].extend(actions)

    def seen_api(self, api_key: int) -> list[Seen]:
        return [s for s in self.seen if s.api_key == api_key]

    async def start(self) -> FakeBroker:
        for node_id in self.node_ids:
            server = await asyncio.start_server(
                lambda r, w, n=node_id: self._connection(n, r, w), "127.0.0.1", 0
            )
            self._servers.append(server)
            self.nodes[node_id] = HostPort("127.0.0.1", server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    async def __aenter__(self) -> FakeBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- serving ---------------------------------------------------------------------------
    async def _connection(
        self, node_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.open_connections += 1
        queue: asyncio.Queue[tuple[RequestHeaderInfo, bytes] | None] = asyncio.Queue()
        outstanding = [0]
        responder = asyncio.create_task(self._respond(node_id, queue, writer, outstanding))
        frames = FrameBuffer()
        try:
            while data := await reader.read(65536):
                for f in frames.feed(data):
                    header = peek_request_header(f)
                    seen = Seen(node_id, header.api_key, header.api_version, header.correlation_id)
                    self.seen.append(seen)
                    if header.api_key == 0 and self._decode(header, f).acks == 0:
                        continue  # acks=0: Kafka sends nothing back
                    outstanding[0] += 1
                    self.max_outstanding = max(self.max_outstanding, outstanding[0])
                    queue.put_nowait((header, bytes(f)))
            queue.put_nowait(None)
            await responder
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception as exc:  # noqa: BLE001 - surfaced through self.errors
            self.errors.append(exc)
        finally:
            responder.cancel()
            writer.close()
            self.open_connections -= 1
            self._tasks.discard(task)

    async def _respond(
        self,
        node_id: int,
        queue: asyncio.Queue[tuple[RequestHeaderInfo, bytes] | None],
        writer: asyncio.StreamWriter,
        outstanding: list[int],
    ) -> None:
        try:
            await self._answer(node_id, queue, writer, outstanding)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception as exc:  # noqa: BLE001 - surfaced through self.errors
            self.errors.append(exc)
            writer.close()

    async def _answer(
        self,
        node_id: int,
        queue: asyncio.Queue[tuple[RequestHeaderInfo, bytes] | None],
        writer: asyncio.StreamWriter,
        outstanding: list[int],
    ) -> None:
        while (item := await queue.get()) is not None:
            header, raw = item
            pending = self._script.get(header.api_key)
            action = pending.popleft() if pending else self.delay_s
            if isinstance(action, float | int):
                await asyncio.sleep(action)
                out = codec.encode_response(self._body(header, raw), header.correlation_id)
            elif action == "close":
                writer.close()
                return
            elif action == "garbage":
                out = b"\xfe\xed\xfa\xce not kafka at all"
            elif action == "oversized":
                writer.write((2**31 - 1).to_bytes(4, "big") + b"\0" * 1024)
                await asyncio.sleep(0.2)
                writer.close()
                return
            elif action == "undecodable":
                out = frame(header.correlation_id.to_bytes(4, "big", signed=True) + b"\xff" * 9)
            elif action == "trickle":
                out = codec.encode_response(self._trickle_body(header), header.correlation_id)
                self.trickled_bytes = out
                quarter = len(out) // 4
                for start in range(0, len(out), quarter):
                    writer.write(out[start : start + quarter])
                    await writer.drain()
                    await asyncio.sleep(0.2)
                self.trickled.set()
                outstanding[0] -= 1
                continue
            elif action == "wrong_correlation":
                body = self._body(header, raw)
                out = codec.encode_response(body, header.correlation_id + 1000)
            else:
                raise AssertionError(f"unknown action {action!r}")
            outstanding[0] -= 1
            writer.write(out)
            await writer.drain()

    # -- responses ---------------------------------------------------------------------------
    @staticmethod
    def _decode(header: RequestHeaderInfo, raw: bytes | memoryview) -> Any:
        return codec.decode_request(raw, header.api_key, header.api_version)

    def _entries(self, body_type: type[Any], field_name: str, id_field: str) -> tuple[Any, ...]:
        entry_type = codec.nested_type(body_type, field_name)
        return tuple(
            make(entry_type, **{id_field: n}, host=a.host, port=a.port)
            for n, a in self.nodes.items()
        )

    def coordinator_for(self, key: str) -> int:
        """``-1`` (not available) for keys starting with "none", else a node by key hash."""
        if key.startswith("none"):
            return -1
        return self.node_ids[sum(key.encode()) % len(self.node_ids)]

    def _body(self, header: RequestHeaderInfo, raw: bytes) -> Any:
        key, version = header.api_key, header.api_version
        body: Any = codec.build_error_response(key, version, ErrorCode.none)
        schema = type(body)
        if key == 18:
            entry = codec.nested_type(schema, "api_keys")
            api_keys = tuple(
                make(entry, api_key=k, min_version=r.start, max_version=r.stop - 1)
                for k, r in sorted(self.versions.items())
                if r
            )
            return set_fields(body, api_keys=api_keys)
        if key == 3:
            brokers = self._entries(schema, "brokers", "node_id")
            asked = self._decode(header, raw).topics or ()
            return set_fields(
                body,
                brokers=brokers,
                controller_id=self.node_ids[0],
                cluster_id=self.cluster_id,
                topics=described_topics(schema, asked, self.topics),
            )
        if key == 60:
            brokers = self._entries(schema, "brokers", "broker_id")
            return set_fields(
                body, brokers=brokers, controller_id=self.node_ids[0], cluster_id=self.cluster_id
            )
        if key == 10:
            req = self._decode(header, raw)
            if version < 4:
                return self._coordinator(body, req.key)
            entry = codec.nested_type(schema, "coordinators")
            coordinators = tuple(self._coordinator(make(entry), k) for k in req.coordinator_keys)
            return set_fields(body, coordinators=coordinators)
        if (key == 0 and version >= 10) or (key == 1 and version >= 16):
            return set_fields(
                body, node_endpoints=self._entries(schema, "node_endpoints", "node_id")
            )
        return body

    def _trickle_body(self, header: RequestHeaderInfo) -> Any:
        schema = codec.response_schema(header.api_key, header.api_version)
        topic_type = codec.nested_type(schema, "responses")
        partition_type = codec.nested_type(topic_type, "partitions")
        partition = make(partition_type, partition_index=0, records=TRICKLE_RECORDS)
        topic = make(topic_type, topic="big", partitions=(partition,))
        return make(schema, responses=(topic,))

    def _coordinator(self, entity: Any, key: str) -> Any:
        node_id = self.coordinator_for(key)
        if node_id < 0:
            error = ErrorCode.coordinator_not_available
            return set_fields(entity, key=key, node_id=-1, host="", port=-1, error_code=error)
        address = self.nodes[node_id]
        return set_fields(entity, key=key, node_id=node_id, host=address.host, port=address.port)


def logged(caplog: pytest.LogCaptureFixture, *fragments: str) -> list[str]:
    """Messages of the proxy's logger (``kafkaguard.proxy``) holding every fragment."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "kafkaguard.proxy" and all(f in r.getMessage() for f in fragments)
    ]


async def wait_until(predicate: Callable[[], bool], wait_s: float = 5.0) -> None:
    """Poll ``predicate`` until true; ``TimeoutError`` after ``wait_s``."""
    deadline = asyncio.get_running_loop().time() + wait_s
    for _ in itertools.count():
        if predicate():
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def proxy_in_front(
    broker: FakeBroker,
    broker_ports: BrokerPorts | None = None,
    limits: LimitsConfig | None = None,
) -> AsyncIterator[ProxyServer]:
    """A kafkaguard proxy on this event loop in front of ``broker``."""
    ports = broker_ports or BrokerPorts(free_base(broker.node_ids), {})
    server = ProxyServer(proxy_config(broker.bootstrap, broker_ports=ports, limits=limits))
    await server.start(probe_attempts=1)
    try:
        yield server
    finally:
        await server.close()


class RawClient:
    """A bare Kafka connection: write any bytes, read whole response frames (with timeouts)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._frames = FrameBuffer()
        self._ready: deque[bytes] = deque()

    @classmethod
    async def connect(cls, host: str, port: int, wait_s: float = 5.0) -> RawClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), wait_s)
        return cls(reader, writer)

    def send(self, body: Any, correlation_id: int, client_id: str | None = "raw") -> bytes:
        data = codec.encode_request(body, correlation_id, client_id)
        self.writer.write(data)
        return data

    async def recv_frame(self, wait_s: float = 5.0) -> bytes:
        """The next response frame; ``EOFError`` when the proxy closed the connection."""
        async with asyncio.timeout(wait_s):
            while not self._ready:
                try:
                    data = await self.reader.read(65536)
                except ConnectionError:
                    data = b""
                if not data:
                    raise EOFError("connection closed")
                self._ready.extend(bytes(f) for f in self._frames.feed(data))
        return self._ready.popleft()

    async def recv(self, api_key: int, version: int, wait_s: float = 5.0) -> tuple[int, Any]:
        data = await self.recv_frame(wait_s)
        return peek_correlation_id(data), codec.decode_response(data, api_key, version)

    async def roundtrip(self, body: Any, correlation_id: int = 1, wait_s: float = 5.0) -> Any:
        self.send(body, correlation_id)
        corr, response = await self.recv(body.__api_key__, body.__version__, wait_s)
        assert corr == correlation_id
        return response

    async def closed_by_peer(self, wait_s: float = 5.0) -> bool:
        """True when the peer closes within ``wait_s`` (any response frames are discarded)."""
        try:
            while True:
                await self.recv_frame(wait_s)
        except EOFError:
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
