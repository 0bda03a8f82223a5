"""The admin HTTP listener: ``/metrics``, ``/healthz``, ``/readyz`` for operators.

An operator interface, never a client one: it is served on its own address (``admin:``,
default ``127.0.0.1:9404``), never on a Kafka listener's port, and has no authentication, so
binding a non-loopback address logs a warning unless ``admin.allow_remote: true``.

It runs an event loop of its own on one thread, so a busy or stuck proxy loop cannot hide
itself: ``/healthz`` asks the proxy's loop to run a no-op and fails when the loop does not
within a second. Whoever reaches the port cannot exhaust the process either: one thread
serves every connection, a request's line and headers are at most ``admin.max_request_bytes``
and must arrive within ``admin.request_timeout_ms`` (its answer must be taken within it too), a
kept-alive connection is closed after ``admin.idle_timeout_ms`` without a request, and at most
``admin.max_connections`` are open. Nor can idle clients at that cap keep the liveness probe
and the scrape out: a new connection takes the slot of the connection waiting longest for a
request (:class:`ConnectionSlots`), and is answered 503 only when every open connection is being
answered. Each such close is counted (``kafkaguard_admin_connections_*``), never logged: a
client's bytes never reach the log. HTTP/1.0 and 1.1, GET and HEAD, no request body.

``/metrics`` is prometheus-client's exposition (text or OpenMetrics as the scraper asks,
gzip when accepted) of :class:`~kafkaguard.proxy.app.metrics.ProxyCollector`; the collector reads
plain counters the proxy's loop writes (no locks: a scrape may see one counter a request ahead
of another).

``/readyz`` answers 200 when every condition holds, else 503, naming each failing condition on
a line of its own: listeners bound, the ACL snapshot loaded, the upstream reachable, ZooKeeper
sessions up (the ACL store's and the SASL credential stores'). Every condition is read from
state the proxy keeps; a scrape opens no connection. The upstream is reachable when a broker
answered the proxy's traffic, or else its readiness probe (an ApiVersions request to a bootstrap
server or a known broker, :meth:`UpstreamCluster.answers`), at the last check: one check per
``admin.readiness_probe_interval_ms`` on the proxy's loop, the first being the startup probe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Hashable
from http import HTTPStatus
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder, gzip_accepted

from kafkaguard.proxy.app.metrics import (
    UPSTREAM_UNREACHABLE,
    AdminCounters,
    DecisionCounter,
    ProxyCollector,
    ServerView,
)
from kafkaguard.proxy.config import AdminConfig, HostPort, is_loopback
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.net.accept import BindError

log = logging.getLogger("kafkaguard.admin")
_errors = RateLimitedLog(log)

_HEALTH_TIMEOUT_S = 1.0
_STOP_TIMEOUT_S = 5.0
_LINGER_S = 1.0
_LINGER_BYTES = 65_536
_TEXT = "text/plain; charset=utf-8"


_C = TypeVar("_C", bound=Hashable)


class AllAnswering(Exception):
    """Every slot is held by a connection being answered: the new one is refused."""


class ConnectionSlots(Generic[_C]):
    """Which connections hold the ``admin.max_connections`` slots, and which one gives its slot
    up to a new connection.

    A connection waits from its accept until its request's head is complete, and again once its
    answer is written (for the next request, or for the client to close); in between it is
    being answered. Waiting costs a client nothing: waiting connections could otherwise hold
    every slot for up to ``admin.request_timeout_ms``, and a client re-opening them for as long
    as it likes, keeping the liveness probe out. So at the cap a new connection takes the slot
    of the connection waiting longest. Being answered ends within ``admin.request_timeout_ms``
    and is never cut (an answer half written is no answer); only when every slot is being
    answered is the new connection refused. Each step is O(1)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._waiting: OrderedDict[_C, None] = OrderedDict()
        """Waiting connections, the longest waiting first."""
        self._answering: set[_C] = set()

    def __len__(self) -> int:
        return len(self._waiting) + len(self._answering)

    def admit(self, connection: _C) -> _C | None:
        """Give ``connection`` a slot (it waits); return the connection to close for it (None:
        there was room). Raises :class:`AllAnswering`."""
        evicted = None
        if len(self) >= self.capacity:
            if not self._waiting:
                raise AllAnswering
            evicted, _ = self._waiting.popitem(last=False)
        self._waiting[connection] = None
        return evicted

    def answering(self, connection: _C) -> bool:
        """The request's head is complete: answer it, unless the connection gave up its slot
        (False: close it unanswered)."""
        if connection not in self._waiting:
            return False
        del self._waiting[connection]
        self._answering.add(connection)
        return True

    def answered(self, connection: _C) -> None:
        """The answer is written: the connection waits again, the latest to."""
        self._answering.remove(connection)
        self._waiting[connection] = None

    def release(self, connection: _C) -> None:
        """The connection is closed (a no-op when it gave up its slot)."""
        self._waiting.pop(connection, None)
        self._answering.discard(connection)


class _Refusal(Exception):
    """A request the listener answers with ``status`` and then closes, counted as ``reason``."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class AdminServer:
    """The admin listener of one proxy process
    (:class:`~kafkaguard.proxy.app.server.ProxyServer`)."""

    def __init__(
        self, config: AdminConfig, server: ServerView, decisions: DecisionCounter | None
    ) -> None:
        self.config = config
        self._proxy = server
        self.counters = AdminCounters()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(ProxyCollector(server, decisions, self.not_ready, self.counters))
        ProcessCollector(registry=self._registry)  # CPU, memory, file descriptors
        self._proxy_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The admin thread's own loop."""
        self._thread: threading.Thread | None = None
        self._slots: ConnectionSlots[asyncio.StreamWriter] = ConnectionSlots(config.max_connections)
        """Used on the admin thread only."""
        self._upstream_reachable = False
        """The last readiness check's outcome (written on the proxy's loop, read here)."""
        self._watch: asyncio.Task[None] | None = None
        self.port = config.port

    def start(self) -> None:
        """Bind and serve (raises OSError when the address cannot be bound)."""
        self._proxy_loop = asyncio.get_running_loop()
        config = self.config
        if not is_loopback(config.bind_host) and not config.allow_remote:
            log.warning(
                "admin listener bound to %s: /metrics and the probes have no authentication; "
                "set admin.allow_remote: true to say this is intended",
                config.bind_host,
            )
        ipv6 = ":" in config.bind_host  # "::" takes IPv4 too, as Linux binds it by default
        try:
            sock = socket.create_server(
                (config.bind_host, config.port),
                family=socket.AF_INET6 if ipv6 else socket.AF_INET,
                dualstack_ipv6=ipv6 and socket.has_dualstack_ipv6(),
            )
        except OSError as exc:
            # create_server's message repeats the address as a tuple: the kernel's words only
            why = f"[Errno {exc.errno}] {os.strerror(exc.errno)}" if exc.errno else str(exc)
            where = HostPort(config.bind_host, config.port)
            raise BindError(exc.errno, f"the admin listener cannot bind {where}: {why}") from exc
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(self._loop, sock), name="kafkaguard-admin", daemon=True
        )
        self._thread.start()
        log.info(
            "admin listener on %s (/metrics, /healthz, /readyz)",
            HostPort(config.bind_host, self.port),
        )

    def watch_upstream(self) -> None:
        """The startup probe answered: the upstream is reachable; check again every
        ``admin.readiness_probe_interval_ms`` (on the proxy's loop, which owns the cluster)."""
        self._upstream_reachable = True
        self._watch = asyncio.get_running_loop().create_task(
            self._watch_upstream(), name="admin-readiness"
        )

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_STOP_TIMEOUT_S)
            self._loop = self._thread = None

    # -- readiness (the proxy's loop writes, the admin thread reads) -------------------------
    def not_ready(self) -> list[str]:
        """Each failing readiness condition, named (empty: ready)."""
        failing = list(self._proxy.not_ready())
        if not self._upstream_reachable:
            failing.append(UPSTREAM_UNREACHABLE)
        return failing

    async def _watch_upstream(self) -> None:
        interval = self.config.readiness_probe_interval_ms / 1000
        answered = self._broker_bytes()
        while True:
            await asyncio.sleep(interval)
            seen = self._broker_bytes()
            if seen != answered:  # a broker answered the traffic: no probe needed
                answered, reachable, why = seen, True, ""
            else:
                try:
                    await self._proxy.cluster.answers()
                    reachable, why = True, ""
                except Exception as exc:  # noqa: BLE001 - any failure is "unreachable" (fail closed)
                    reachable, why = False, str(exc)
            if reachable != self._upstream_reachable:
                if reachable:
                    log.info("readiness: the upstream answers again")
                else:
                    log.warning("readiness: the upstream does not answer: %s", why)
            self._upstream_reachable = reachable

    def _broker_bytes(self) -> int:
        return sum(listener.stats.bytes_from_broker for listener in self._proxy.listeners)

    # -- the admin thread ----------------------------------------------------------------------
    def _serve(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(
            asyncio.start_server(self._connection, sock=sock, limit=self.config.max_request_bytes)
        )
        try:
            loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counters = self.counters
        try:
            evicted = self._slots.admit(writer)
        except AllAnswering:
            counters.refused["max_connections"] += 1
            writer.write(_response(HTTPStatus.SERVICE_UNAVAILABLE, "busy\n", keep_alive=False))
            writer.close()
            return
        if evicted is not None:
            counters.closed["evicted"] += 1
            evicted.transport.abort()  # its task reads the end and finishes
        counters.open += 1
        try:
            await self._requests(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client went away
        except Exception as exc:  # noqa: BLE001 - never a traceback per connection
            _errors.log("error", logging.WARNING, "admin connection failed: %r", exc)
        finally:
            self._slots.release(writer)
            counters.open -= 1
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # an answer the client does not take
            else:
                writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests in turn until one asks to close, a limit is hit or the client goes."""
        config = self.config
        request_timeout = config.request_timeout_ms / 1000
        first = b""
        while True:
            try:
                lines = await asyncio.wait_for(
                    _read_head(reader, config.max_request_bytes, first), request_timeout
                )
                if lines is None:
                    return  # closed between requests
                method, path, headers, keep_alive = _request(lines)
            except TimeoutError:
                self.counters.closed["request_timeout"] += 1
                return
            except _Refusal as refusal:
                self.counters.closed[refusal.reason] += 1
                writer.write(_response(refusal.status, f"{refusal.status.phrase}\n", False))
                await _linger(reader, writer)
                return
            if not self._slots.answering(writer):
                return  # it gave up its slot while its head arrived
            status, content_type, body, more = await self._answer(method, path, headers)
            writer.write(
                _response(status, body, keep_alive, content_type, more, head=method == "HEAD")
            )
            try:
                await asyncio.wait_for(writer.drain(), request_timeout)
            except TimeoutError:
                self.counters.closed["request_timeout"] += 1
                return
            self._slots.answered(writer)
            if not keep_alive:
                await _linger(reader, writer)
                return
            try:
                first = await asyncio.wait_for(reader.read(1), config.idle_timeout_ms / 1000)
            except TimeoutError:
                self.counters.closed["idle_timeout"] += 1
                return
            if not first:
                return

    async def _answer(
        self, method: str, path: str, headers: dict[str, str]
    ) -> tuple[HTTPStatus, str, bytes | str, list[tuple[str, str]]]:
        """(status, content type, body, more headers) for one request."""
        if method not in ("GET", "HEAD"):
            return HTTPStatus.METHOD_NOT_ALLOWED, _TEXT, "GET or HEAD\n", [("Allow", "GET, HEAD")]
        if path == "/metrics":
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            try:
                output = encoder(self._registry)
            except Exception as exc:  # noqa: BLE001 - a collector's bug: 500, not a dead thread
                _errors.log("metrics", logging.ERROR, "rendering /metrics failed: %r", exc)
                return HTTPStatus.INTERNAL_SERVER_ERROR, _TEXT, "metrics failed\n", []
            if gzip_accepted(headers.get("accept-encoding", "")):
                return HTTPStatus.OK, content_type, gzip.compress(output), [_GZIP]
            return HTTPStatus.OK, content_type, output, []
        if path == "/healthz":
            status, text = await self._healthz()
            return status, _TEXT, text, []
        if path == "/readyz":
            failing = self.not_ready()
            if failing:
                body = "".join(f"{line}\n" for line in failing)
                return HTTPStatus.SERVICE_UNAVAILABLE, _TEXT, body, []
            return HTTPStatus.OK, _TEXT, "ready\n", []
        return HTTPStatus.NOT_FOUND, _TEXT, "not found: /metrics, /healthz, /readyz\n", []

    async def _healthz(self) -> tuple[HTTPStatus, str]:
        loop = self._proxy_loop
        answered: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            assert loop is not None
            loop.call_soon_threadsafe(_set_done, answered)
        except RuntimeError:  # the loop is closed
            return HTTPStatus.SERVICE_UNAVAILABLE, "event loop: closed\n"
        done, _ = await asyncio.wait({asyncio.wrap_future(answered)}, timeout=_HEALTH_TIMEOUT_S)
        if not done:
            return HTTPStatus.SERVICE_UNAVAILABLE, "event loop: no response within 1 s\n"
        return HTTPStatus.OK, "ok\n"


_GZIP = ("Content-Encoding", "gzip")


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Before closing after an answer, end the writing side and read what the client still
    sends (at most :data:`_LINGER_BYTES`, for at most :data:`_LINGER_S`): closing with bytes
    unread sends a reset, which can destroy the answer before the client reads it (RFC 9112
    §9.6)."""
    writer.write_eof()
    left = _LINGER_BYTES
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_LINGER_S):
            while left > 0 and (data := await reader.read(left)):
                left -= len(data)


def _set_done(future: concurrent.futures.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _read_head(reader: asyncio.StreamReader, budget: int, first: bytes) -> list[bytes] | None:
    """The request line and header lines (line ends kept), within ``budget`` bytes; None when
    the client closed before a request. ``first``: its first byte, already read. Raises
    :class:`_Refusal`. Empty lines before the request line are skipped (RFC 9112 §2.2)."""
    lines: list[bytes] = []
    while True:
        if first == b"\n":
            line, first = first, b""
        else:
            try:
                line = first + await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                raise _Refusal(
                    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request_too_large"
                ) from None
            except asyncio.IncompleteReadError as exc:
                if first or exc.partial or lines:
                    raise
                return None
            first = b""
        budget -= len(line)
        if budget < 0:
            raise _Refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request_too_large")
        if line in (b"\r\n", b"\n"):
            if lines:
                return lines
        else:
            lines.append(line)


def _request(lines: list[bytes]) -> tuple[str, str, dict[str, str], bool]:
    """(method, path, headers by lower-case name, keep the connection open after the answer)
    of a request head. Raises :class:`_Refusal`."""
    parts = lines[0].decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[0].isalpha():
        raise _Refusal(HTTPStatus.BAD_REQUEST, "bad_request")
    method, target, version = parts
    headers = _headers(lines)
    body = "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")
    keep_alive = (
        version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower() and not body
    )
    return method, target.partition("?")[0], headers, keep_alive


def _headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise _Refusal(HTTPStatus.BAD_REQUEST, "bad_request")
        headers[name.lower()] = value.strip()
    return headers


def _response(
    status: HTTPStatus,
    body: bytes | str,
    keep_alive: bool,
    content_type: str = _TEXT,
    headers: list[tuple[str, str]] | None = None,
    *,
    head: bool = False,
) -> bytes:
    data = body.encode() if isinstance(body, str) else body
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers or ()),
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return "\r\n".join([*lines, "", ""]).encode("latin-1") + (b"" if head else data)
