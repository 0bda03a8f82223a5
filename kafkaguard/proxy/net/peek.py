"""Peeking at what precedes the Kafka bytes on a freshly accepted socket, before any protocol
object owns it: the PROXY protocol header (taken off by its exact length) and the TLS
ClientHello's server name (left in place for the handshake). The bytes are parsed by
:mod:`kafkaguard.proxy.edge.proxy_protocol` and :mod:`kafkaguard.proxy.edge.sni`, without I/O;
this module only reads them, with ``MSG_PEEK``, as the listener's accept path needs."""

from __future__ import annotations

import asyncio
import socket

from kafkaguard.proxy.edge.proxy_protocol import MAX_HEADER_BYTES, ProxyHeader, ProxyProtocolError
from kafkaguard.proxy.edge.proxy_protocol import parse as parse_proxy_header
from kafkaguard.proxy.edge.sni import (
    MAX_RECORD_BYTES,
    client_hello_record_size,
    client_hello_server_name,
)


async def read_proxy_header(sock: socket.socket, versions: frozenset[int]) -> ProxyHeader:
    """Take exactly one PROXY protocol header off the non-blocking ``sock``: what follows it
    (a TLS ClientHello, a Kafka request) stays in the socket for the TLS layer or the
    connection. Each read peeks (``MSG_PEEK``, as the spec's §9 sample receiver does) at up to
    :data:`MAX_HEADER_BYTES`; a complete header is then taken off by its exact length, the
    bytes of an incomplete one are taken off (they can only be header bytes) before waiting
    for more, so the wait for readability never spins on bytes already seen.

    Raises :class:`ProxyProtocolError` (not a valid header, or closed inside one),
    ``EOFError`` (closed before its first byte) or ``OSError``."""
    loop = asyncio.get_running_loop()
    taken = b""
    while True:
        await _readable(loop, sock)
        try:
            peeked = sock.recv(MAX_HEADER_BYTES - len(taken), socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue
        if not peeked:
            if taken:
                raise ProxyProtocolError(
                    f"the connection closed after {len(taken)} bytes of a PROXY protocol header"
                )
            raise EOFError("the connection closed before its PROXY protocol header")
        header = parse_proxy_header(taken + peeked, versions)
        if header is not None:
            await _take(loop, sock, header.length - len(taken))
            return header
        taken += await _take(loop, sock, len(peeked))


async def read_client_hello_server_name(sock: socket.socket) -> str | None:
    """The server name of the TLS ClientHello at the head of the non-blocking ``sock``, peeked
    at (``MSG_PEEK``): the bytes stay for the TLS handshake. While the first TLS record is
    incomplete, ``SO_RCVLOWAT`` holds the wait for readability until it can be whole (peeked
    bytes stay in the buffer, so waiting for any byte would spin); a wake-up without new bytes
    is the end of the stream.

    Raises :class:`ClientHelloError`, ``EOFError`` (closed before a whole record) or
    ``OSError``."""
    loop = asyncio.get_running_loop()
    seen = -1
    while True:
        await _readable(loop, sock)
        try:
            peeked = sock.recv(MAX_RECORD_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue
        if len(peeked) == seen:
            raise EOFError("the connection closed before a whole TLS ClientHello")
        seen = len(peeked)
        size = client_hello_record_size(peeked)
        if len(peeked) >= size:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            return client_hello_server_name(peeked[:size])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)


async def _take(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes already peeked at (so they are in the socket's buffer)."""
    chunks = []
    while size > 0:
        try:
            chunk = sock.recv(size)
        except (BlockingIOError, InterruptedError):
            await _readable(loop, sock)
            continue
        if not chunk:
            raise ProxyProtocolError("the connection closed inside its PROXY protocol header")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Wait until ``sock`` has bytes (or EOF) to read. ``loop.sock_recv`` cannot peek."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    fd = sock.fileno()
    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
