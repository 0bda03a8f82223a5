"""The proxy process: upstream probe, listeners, signals, shutdown.

Start order matters: the upstream is probed first (its API versions bound what clients may
use), then every listener is opened. A listener never accepts a connection before the proxy
can make decisions for it.

Shutdown (SIGTERM, SIGINT) is graceful: listening sockets close, clients are no longer read,
requests already in flight get their responses for up to ``shutdown_timeout_ms``, then every
connection is closed, the authorizer stopped and the audit queue flushed. A producer with
acks=all therefore sees each of its requests either acknowledged or failed by a disconnect,
never acknowledged-and-lost. A second signal ends the wait at once (Kafka's broker, by
contrast, has no such drain: ``SocketServer.shutdown`` closes its processors).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import time
from collections.abc import Iterator
from typing import Any

from kafkaguard.audit import AuditTrail
from kafkaguard.audit.config import LOG_ONLY
from kafkaguard.policy.authorizer import Authorizer
from kafkaguard.policy.config import build_authorizer
from kafkaguard.proxy.admin import AdminServer
from kafkaguard.proxy.cluster import UpstreamCluster
from kafkaguard.proxy.config import HostPort, ProxyConfig
from kafkaguard.proxy.listener import ListenerRuntime
from kafkaguard.proxy.metrics import DecisionCounter
from kafkaguard.proxy.sasl.executor import executor_for

log = logging.getLogger("kafkaguard.proxy")


def raise_open_file_limit() -> int:
    """A 1:1 proxy holds two descriptors per client: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("cannot raise the open-file limit above %d", soft)
    return soft


class ProxyServer:
    def __init__(self, config: ProxyConfig, authorizer: Authorizer | None = None) -> None:
        self.config = config
        self.cluster = UpstreamCluster(
            config.upstream.bootstrap_servers,
            config.upstream.connect_timeout_s,
            tls=config.upstream.ssl,  # upstream security (kafkaguard/proxy/sasl/client.py)
            sasl=config.upstream.sasl,
        )
        modes = {ls.name: config.listener_enforcement(ls) for ls in config.listeners}
        self.audit = AuditTrail(config.audit, modes)
        """Audit trail and per-listener decision counters (``audit.counters``); it sees
        decisions only through the decision listener of an authorizer built here."""
        audit = self.audit.on_decision if self.audit.active else None
        self.decisions = DecisionCounter(config.metrics, audit) if config.admin else None
        """Authorization decisions by listener, operation, resource type and result (only
        counted when the admin listener serves them)."""
        self.authorizer = authorizer or build_authorizer(
            config.policy, decision_listener=self.decisions or audit
        )
        self.auth_executor = executor_for(config.limits)
        """Password hashing for every SASL listener: a bounded share of the CPU."""
        self.listeners = [
            ListenerRuntime(
                listener,
                self.cluster,
                config.listener_limits(listener),
                self.authorizer,
                log_only=modes[listener.name] == LOG_ONLY,
                auth_executor=self.auth_executor,
            )
            for listener in config.listeners
        ]
        self.reloads: dict[str, int] = {}
        """Configuration reloads by result (``applied``, ``rejected``)."""
        self.started = False
        """Every listener is accepting (readiness)."""
        self.admin = AdminServer(config.admin, self, self.decisions) if config.admin else None
        self._stopped = asyncio.Event()
        self._hurry = asyncio.Event()
        """A second stop signal: end the drain at once."""

    async def start(self, probe_attempts: int = 30) -> None:
        if self.admin is not None:  # first: /healthz and /readyz answer during start-up too
            self.admin.start()
        for attempt in range(1, probe_attempts + 1):
            try:
                server = await self.cluster.probe()
                log.info("upstream %s answered the version probe", server)
                break
            except OSError as exc:
                if attempt == probe_attempts:
                    raise
                log.warning("upstream not reachable yet (attempt %d): %s", attempt, exc)
                await asyncio.sleep(1.0)
        # KIP-504: a listener accepts connections only once its authorizer is ready for it.
        ready = self.authorizer.start([ls.config.name for ls in self.listeners])
        self.audit.start()
        for listener in self.listeners:
            await ready[listener.config.name]
            if listener.log_only:
                log.warning(
                    "listener %s is in log_only mode: requests are authorized and audited "
                    "but forwarded even when denied",
                    listener.config.name,
                )
            await listener.start()
        self.started = True

    def bootstrap(self, listener_name: str | None = None) -> str:
        listener = (
            self.listeners[0]
            if listener_name is None
            else next(ls for ls in self.listeners if ls.config.name == listener_name)
        )
        return f"{listener.config.advertised_host}:{listener.bootstrap_port}"

    def stop(self) -> None:
        """First call: stop (a graceful drain follows in :meth:`serve_forever`); any later
        call: end that drain at once."""
        if self._stopped.is_set():
            if not self._hurry.is_set():
                log.warning("second stop signal: closing every connection now")
            self._hurry.set()
        self._stopped.set()

    def reload(self) -> None:
        """SIGHUP: re-read the ACL store now (stores that can, e.g. the file store)."""
        store = getattr(self.authorizer, "store", None)
        request_reload = getattr(store, "request_reload", None)
        if callable(request_reload):
            log.info("SIGHUP: reloading the ACL store")
            request_reload()

    async def serve_forever(self) -> None:
        """Serve until SIGTERM/SIGINT, then drain (:meth:`drain`); the signal handlers stay
        installed meanwhile, so a second signal cuts the drain short. :meth:`close` follows."""
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGINT: self.stop, signal.SIGTERM: self.stop, signal.SIGHUP: self.reload}
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        try:
            await self._stopped.wait()
            await self.drain()
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)

    async def drain(self, timeout_s: float | None = None) -> tuple[int, int]:
        """Graceful shutdown, before :meth:`close`: stop accepting and reading, wait up to
        ``timeout_s`` (default ``shutdown_timeout_ms``) or a second :meth:`stop` for the
        requests in flight to be answered, then close what is left. One log line at the start
        and one at the end. Returns (connections cut, requests they left unanswered)."""
        timeout = self.config.shutdown_timeout_ms / 1000 if timeout_s is None else timeout_s
        started = time.monotonic()
        connections = in_flight = dropped = 0
        for listener in self.listeners:
            counts = listener.drain()
            connections += counts[0]
            in_flight += counts[1]
            dropped += counts[2]
        log.info(
            "shutting down: stopped accepting; %d connections with %d requests in flight get "
            "up to %.1f s to be answered (%d requests received but not started are dropped; "
            "a second signal stops at once)",
            connections,
            in_flight,
            timeout,
            dropped,
        )
        waits: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(listener.drained()) for listener in self.listeners
        ]
        waits.append(asyncio.ensure_future(self._hurry.wait()))
        # return_exceptions: the cancellation below must not leave an unretrieved error.
        everything: asyncio.Future[Any] = asyncio.gather(*waits[:-1], return_exceptions=True)
        try:
            await asyncio.wait(
                {everything, waits[-1]}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for future in waits:
                future.cancel()
        cut = unanswered = 0
        for listener in self.listeners:
            left, lost = listener.cut()
            cut += left
            unanswered += lost
        log.info(
            "shutdown drain finished in %.2f s: %d of %d connections closed in time, "
            "%d cut with %d requests unanswered%s",
            time.monotonic() - started,
            connections - cut,
            connections,
            cut,
            unanswered,
            " (second signal)" if self._hurry.is_set() else "",
        )
        return cut, unanswered

    async def serve_forever_until_stopped(self) -> None:
        """Wait for :meth:`stop` without installing signal handlers (embedding, tests)."""
        await self._stopped.wait()

    def not_ready(self) -> Iterator[str]:
        """Each readiness condition that fails, named (``/readyz``; the admin thread calls
        this: it only reads)."""
        if not self.started:
            yield "listeners: not all bound yet"
        elif self._stopped.is_set():
            yield "listeners: shutting down"
        if not getattr(self.authorizer, "ready", True):
            yield "acls: the ACL snapshot is not loaded yet"
        stores: list[tuple[str, object]] = [("acl store", getattr(self.authorizer, "store", None))]
        stores += [
            (f"listener {ls.config.name} credentials", ls.sasl.store)
            for ls in self.listeners
            if ls.sasl is not None
        ]
        for what, store in stores:
            if getattr(store, "connected", True) is False:
                yield f"zookeeper: the {what} has no ZooKeeper session"

    def upstream_addresses(self) -> list[HostPort]:
        """Where the upstream can be reached: the bootstrap servers, then known brokers."""
        return [*self.cluster.bootstrap_servers, *self.cluster.node_addresses()]

    async def close(self) -> None:
        if self.admin is not None:
            self.admin.stop()
        for listener in self.listeners:
            await listener.close()
        self.auth_executor.close()
        try:
            await self.authorizer.close()
        finally:
            await self.audit.close()  # after the listeners: no decision comes after it


def install_event_loop_policy() -> str:
    """uvloop in production; plain asyncio when it is not installed."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"
