"""A TCP relay on loopback that counts the connections it accepts.

Put in front of a real broker (as the upstream address a proxy is given), it shows how many
connections the proxy opened to that address, without changing a byte between them.
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

    def start(self) -> None:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
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
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()
