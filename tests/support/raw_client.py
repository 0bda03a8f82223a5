"""A blocking raw-socket Kafka client for tests: encodes requests and decodes responses with
kafkaguard's own kio codec, so a test sees every field of every response frame exactly as a
client would receive it."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any

from kafkaguard.protocol import codec
from kafkaguard.protocol.framing import FrameBuffer

API_VERSIONS = 18


class RawKafkaClient:
    """One connection; ``request()`` sends a request and returns (raw frame, decoded body).

    ``source``: the local address to connect from (any 127.x.y.z on Linux's loopback, so
    one test can be several clients). ``preamble``: bytes written first (a PROXY protocol
    header, as a load balancer would), then ``tls`` wraps the socket (handshake done), naming
    ``server_name`` (default ``host``; Python sends no SNI for an IP address)."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = 10.0,
        *,
        source: str | None = None,
        preamble: bytes = b"",
        tls: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> None:
        self.address = (host, port)
        self.sock = socket.create_connection(
            self.address, timeout=timeout_s, source_address=None if source is None else (source, 0)
        )
        try:
            if preamble:
                self.sock.sendall(preamble)
            if tls is not None:
                self.sock = tls.wrap_socket(self.sock, server_hostname=server_name or host)
        except BaseException:
            self.sock.close()
            raise
        self.timeout_s = timeout_s
        self._frames = FrameBuffer()
        self._pending: list[bytes] = []
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, body: Any, client_id: str = "kafkaguard-test") -> int:
        self._correlation_id += 1
        self.sock.sendall(codec.encode_request(body, self._correlation_id, client_id))
        return self._correlation_id

    def read_frame(self) -> bytes:
        """The next whole response frame (size prefix included); raises EOFError on close."""
        deadline = time.monotonic() + self.timeout_s
        while not self._pending:
            if time.monotonic() > deadline:
                raise TimeoutError("no response frame")
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("the connection was closed")
            self._pending += [bytes(f) for f in self._frames.feed(data)]
        return self._pending.pop(0)

    def request(self, body: Any) -> tuple[bytes, Any]:
        api_key, version = int(body.__api_key__), int(body.__version__)
        correlation_id = self.send(body)
        frame = self.read_frame()
        (got,) = struct.unpack_from(">i", frame, 4)
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        return frame, codec.decode_response(frame, api_key, version)

    def api_versions(self) -> dict[int, range]:
        schema = codec.request_schema(API_VERSIONS, 3)
        _, response = self.request(
            schema(client_software_name="kafkaguard-test", client_software_version="0")
        )
        assert response.error_code == codec.ErrorCode.none
        return {int(e.api_key): range(e.min_version, e.max_version + 1) for e in response.api_keys}


def build_request(api_key: int, version: int, **values: Any) -> Any:
    """A request of (api_key, version) from ``values``, ignoring names this version lacks."""
    schema = codec.request_schema(api_key, version)
    names = {f.name for f in dataclasses.fields(schema)}
    return schema(**{k: v for k, v in values.items() if k in names})


def schema_module(api_key: int, version: int) -> Any:
    """The kio module of a request schema, for its nested entity classes."""
    return sys.modules[codec.request_schema(api_key, version).__module__]


def addresses(entity: Any, path: str = "") -> Iterator[tuple[str, str | None, int | None]]:
    """Every (path, host, port) pair carried anywhere in a decoded response."""
    if dataclasses.is_dataclass(entity) and not isinstance(entity, type):
        names = {f.name for f in dataclasses.fields(entity)}
        if "host" in names and "port" in names:
            yield path or "<root>", entity.host, int(entity.port)  # type: ignore[attr-defined]
        for name in names:
            yield from addresses(getattr(entity, name), f"{path}.{name}" if path else name)
    elif isinstance(entity, tuple):
        for i, item in enumerate(entity):
            yield from addresses(item, f"{path}[{i}]")
