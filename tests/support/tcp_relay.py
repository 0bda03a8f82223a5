"""A TCP relay on loopback that counts the connections it accepts, and can be cut.

Put in front of a real broker (as the upstream address a proxy is given), it shows how many
connections the proxy opened to that address, without changing a byte between them. While
:meth:`CountingRelay.cut`, every connection through it is closed and new ones are closed at
once: the client on that side is cut off from the broker (a network partition), until
:meth:`CountingRelay.restore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from kafkaguard.proxy.config import HostPort


class CountingRelay:
    """Relays every connection to ``target``; :attr:`accepted` counts them."""

    def __init__(self, target: HostPort) -> None:
        self.target = target
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.address = HostPort("127.0.0.1", 0)
        self._cut = False
        self._open: set[asyncio.StreamWriter] = set()

    @classmethod
    def on_port(cls, target: HostPort, port: int) -> CountingRelay:
        """A relay that will listen on ``port`` (0: any) once started."""
        relay = cls(target)
        relay.address = HostPort("127.0.0.1", port)
        return relay

    def cut(self) -> None:
        """Close every connection through the relay, and each new one as it comes."""

        def close() -> None:
            self._cut = True
            for writer in list(self._open):
                writer.transport.abort()

        self._loop.call_soon_threadsafe(close)

    def restore(self) -> None:
        def reopen() -> None:
            self._cut = False

        self._loop.call_soon_threadsafe(reopen)

    def start(self) -> None:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", self.address.port), self._loop
        ).result(10)
        self.address = HostPort("127.0.0.1", self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._open -= {writer, up_writer}
            up_writer.close()
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()
