"""The proxy process: upstream probe, listeners, signals, shutdown.

Start order matters: the upstream is probed first (its API versions bound what clients may
use), then every listener is opened. A listener never accepts a connection before the proxy
can make decisions for it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal

from kafkaguard.audit import AuditTrail
from kafkaguard.audit.config import LOG_ONLY
from kafkaguard.policy.authorizer import Authorizer
from kafkaguard.policy.config import build_authorizer
from kafkaguard.proxy.cluster import UpstreamCluster
from kafkaguard.proxy.config import ProxyConfig
from kafkaguard.proxy.listener import ListenerRuntime

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
        self.authorizer = authorizer or build_authorizer(
            config.policy, decision_listener=self.audit.on_decision if self.audit.active else None
        )
        self.listeners = [
            ListenerRuntime(
                listener,
                self.cluster,
                config.listener_limits(listener),
                self.authorizer,
                log_only=modes[listener.name] == LOG_ONLY,
            )
            for listener in config.listeners
        ]
        self._stopped = asyncio.Event()

    async def start(self, probe_attempts: int = 30) -> None:
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

    def bootstrap(self, listener_name: str | None = None) -> str:
        listener = (
            self.listeners[0]
            if listener_name is None
            else next(ls for ls in self.listeners if ls.config.name == listener_name)
        )
        return f"{listener.config.advertised_host}:{listener.bootstrap_port}"

    def stop(self) -> None:
        self._stopped.set()

    def reload(self) -> None:
        """SIGHUP: re-read the ACL store now (stores that can, e.g. the file store)."""
        store = getattr(self.authorizer, "store", None)
        request_reload = getattr(store, "request_reload", None)
        if callable(request_reload):
            log.info("SIGHUP: reloading the ACL store")
            request_reload()

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGINT: self.stop, signal.SIGTERM: self.stop, signal.SIGHUP: self.reload}
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        try:
            await self._stopped.wait()
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)

    async def serve_forever_until_stopped(self) -> None:
        """Wait for :meth:`stop` without installing signal handlers (embedding, tests)."""
        await self._stopped.wait()

    async def close(self) -> None:
        for listener in self.listeners:
            await listener.close()
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
