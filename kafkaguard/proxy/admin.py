"""The admin HTTP listener: ``/metrics``, ``/healthz``, ``/readyz`` for operators.

An operator interface, never a client one: it is served on its own address (``admin:``,
default ``127.0.0.1:9404``), never on a Kafka listener's port, and has no authentication, so
binding a non-loopback address logs a warning unless ``admin.allow_remote: true``.

It runs on a thread of its own (prometheus-client's threading WSGI server), so a busy or stuck
event loop cannot hide itself: ``/healthz`` asks the loop to run a no-op and fails when the loop
does not within a second. ``/metrics`` is prometheus-client's WSGI app over
:class:`~kafkaguard.proxy.metrics.ProxyCollector`; the collector reads plain counters the loop
writes (no locks: a scrape may see one counter a request ahead of another).

``/readyz`` answers 200 when every condition holds, else 503, naming each failing condition on
a line of its own: listeners bound, the ACL snapshot loaded, the upstream reachable (a TCP
connection to a bootstrap server or a known broker within a second), ZooKeeper sessions up
(the ACL store's and the SASL credential stores').
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from kafkaguard.proxy.config import AdminConfig, HostPort
from kafkaguard.proxy.metrics import UPSTREAM_UNREACHABLE, DecisionCounter, ProxyCollector

if TYPE_CHECKING:
    from kafkaguard.proxy.server import ProxyServer

log = logging.getLogger("kafkaguard.admin")

_PROBE_TIMEOUT_S = 1.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


class _Server(ThreadingWSGIServer):
    address_family = socket.AF_INET


class _Server6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AdminServer:
    """The admin listener of one :class:`ProxyServer`."""

    def __init__(
        self, config: AdminConfig, server: ProxyServer, decisions: DecisionCounter | None
    ) -> None:
        self.config = config
        self._proxy = server
        self._loop: asyncio.AbstractEventLoop | None = None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ProxyCollector(server, decisions, self.not_ready))
        ProcessCollector(registry=registry)  # CPU, memory, file descriptors of the process
        self._metrics = make_wsgi_app(registry)
        self._httpd: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = config.port

    def start(self) -> None:
        """Bind and serve (raises OSError when the address cannot be bound)."""
        self._loop = asyncio.get_running_loop()
        config = self.config
        if not is_loopback(config.bind_host) and not config.allow_remote:
            log.warning(
                "admin listener bound to %s: /metrics and the probes have no authentication; "
                "set admin.allow_remote: true to say this is intended",
                config.bind_host,
            )
        server_class = _Server6 if ":" in config.bind_host else _Server
        self._httpd = make_server(
            config.bind_host, config.port, self._app, server_class, handler_class=_QuietHandler
        )
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="kafkaguard-admin", daemon=True
        )
        self._thread.start()
        log.info(
            "admin listener on %s (/metrics, /healthz, /readyz)",
            HostPort(config.bind_host, self.port),
        )

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- the WSGI app (admin thread) ---------------------------------------------------------
    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return self._metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            return _text(start_response, *self._healthz())
        if path == "/readyz":
            return _text(start_response, *self._readyz())
        return _text(start_response, "404 Not Found", "not found: /metrics, /healthz, /readyz\n")

    def _healthz(self) -> tuple[str, str]:
        loop = self._loop
        answered = threading.Event()
        try:
            assert loop is not None
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # the loop is closed
            return "503 Service Unavailable", "event loop: closed\n"
        if not answered.wait(_PROBE_TIMEOUT_S):
            return "503 Service Unavailable", "event loop: no response within 1 s\n"
        return "200 OK", "ok\n"

    def not_ready(self) -> list[str]:
        """Each failing readiness condition, named (empty: ready)."""
        failing = list(self._proxy.not_ready())
        if not _upstream_reachable(self._proxy.upstream_addresses()):
            failing.append(UPSTREAM_UNREACHABLE)
        return failing

    def _readyz(self) -> tuple[str, str]:
        failing = self.not_ready()
        if failing:
            return "503 Service Unavailable", "".join(f"{line}\n" for line in failing)
        return "200 OK", "ready\n"


def _upstream_reachable(addresses: Iterable[HostPort]) -> bool:
    for address in addresses:
        try:
            with socket.create_connection((address.host, address.port), _PROBE_TIMEOUT_S):
                return True
        except OSError:
            continue
    return False


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]
