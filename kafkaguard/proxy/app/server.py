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

SIGHUP re-reads the ACL store and the configuration file, and applies what can change without
a restart (:meth:`ProxyServer.reload_config`; what is reloadable: kafkaguard/proxy/app/reload.py).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from kafkaguard.audit import AuditTrail
from kafkaguard.audit.config import LOG_ONLY
from kafkaguard.config_tree import ConfigError
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import Authorizer
from kafkaguard.policy.config import build_authorizer
from kafkaguard.policy.groups import GroupResolver, GroupsError
from kafkaguard.policy.internal_topics import InternalTopicGuard, InternalTopics
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.proxy.app.admin import AdminServer
from kafkaguard.proxy.app.log_format import configure_logging
from kafkaguard.proxy.app.metrics import DecisionCounter
from kafkaguard.proxy.app.reload import ReloadPlan, describe, plan_reload
from kafkaguard.proxy.config import (
    ListenerConfig,
    ProxyConfig,
    UpstreamConfig,
    load_config,
)
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.proxy.net.accept import BindError
from kafkaguard.proxy.net.cluster import UpstreamCluster
from kafkaguard.proxy.net.listener import ListenerRuntime
from kafkaguard.proxy.sasl.client import read_password
from kafkaguard.proxy.sasl.executor import executor_for

log = logging.getLogger("kafkaguard.proxy")

_LISTENER_READY_TIMEOUT_S: Final = 30.0
"""A reload waits this long for the authorizer to be ready for an added listener."""
PROBE_WARNING_INTERVAL_S: Final = 10.0
"""While the upstream is unreachable at start, one warning per cause per this many seconds,
the next saying how many similar ones it stands for (a probe a second would print a screen of
identical lines before giving up)."""
GROUPS_POLL_INTERVAL_S: Final = 1.0
"""How often the groups file's (mtime, size, inode) is compared (the ACL file's default)."""


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


def audit_connection(upstream: UpstreamConfig) -> dict[str, Any]:
    """librdkafka settings of the audit topic's producer (kafkaguard/audit/kafka_sink.py) and
    of the Kafka-topic ACL and SCRAM stores (docs/acl-store.md):
    the proxy's own way to the brokers, ``upstream`` with its TLS and SASL settings, so the
    producer writes as the proxy does, past the ACLs kafkaguard enforces on clients."""
    settings: dict[str, Any] = {
        "bootstrap.servers": ",".join(str(server) for server in upstream.bootstrap_servers),
        "socket.connection.setup.timeout.ms": int(upstream.connect_timeout_s * 1000),
    }
    tls, sasl = upstream.ssl, upstream.sasl
    protocol = ("SASL_" if sasl is not None else "") + ("SSL" if tls is not None else "PLAINTEXT")
    settings["security.protocol"] = protocol
    if tls is not None:
        settings["ssl.ca.location"] = str(tls.ca_file) if tls.ca_file else "probe"
        if tls.cert_file is not None:
            settings["ssl.certificate.location"] = str(tls.cert_file)
        if tls.key_file is not None:
            settings["ssl.key.location"] = str(tls.key_file)
        settings["ssl.endpoint.identification.algorithm"] = (
            "https" if tls.check_hostname else "none"
        )
    if sasl is not None:
        settings["sasl.mechanism"] = sasl.mechanism
        settings["sasl.username"] = sasl.username
        settings["sasl.password"] = read_password(sasl.password_file)
    return settings


def store_connection(config: ProxyConfig, listener: ListenerConfig) -> dict[str, Any] | None:
    """The upstream connection of a listener's ``scram_credentials: kafka`` store (else None:
    no password file is read for nothing)."""
    sasl = listener.sasl
    if sasl is None or sasl.scram_credentials != "kafka":
        return None
    return audit_connection(config.upstream)


class ProxyServer:
    def __init__(
        self,
        config: ProxyConfig,
        authorizer: Authorizer | None = None,
        *,
        config_path: str | Path | None = None,
        embedded_upstream: bool = False,
        worker: int = 0,
    ) -> None:
        """``config_path``: the file a reload re-reads (default: the file ``config`` was loaded
        from, none for a config built in code); ``embedded_upstream``: ``config.upstream`` is
        the embedded broker ``kafkaguard run`` started for ``upstream.embedded``; ``worker``: this
        process's index among ``workers`` (kafkaguard/proxy/app/workers.py)."""
        self.config = config
        if config_path is None and not config.source.startswith("<"):  # "<defaults>", "<string>"
            config_path = config.source
        self.config_path = Path(config_path) if config_path is not None else None
        self.embedded_upstream = embedded_upstream
        self.cluster = UpstreamCluster(
            config.upstream.bootstrap_servers,
            config.upstream.connect_timeout_s,
            tls=config.upstream.ssl,  # upstream security (kafkaguard/proxy/sasl/client.py)
            sasl=config.upstream.sasl,
        )
        modes = {ls.name: config.listener_enforcement(ls) for ls in config.listeners}
        self.audit = AuditTrail(
            config.audit,
            modes,
            connection=audit_connection(config.upstream) if config.audit.writes_topic else None,
        )
        """Audit trail and per-listener decision counters (``audit.counters``); it sees
        decisions only through the decision listener of an authorizer built here."""
        self._audit_hook = self.audit.on_decision if self.audit.active else None
        """The audit trail's decision listener while it needs decisions (a reload switching
        a listener to log_only may set it: :meth:`_wire_audit`)."""
        self.decisions = DecisionCounter(config.metrics, self._to_audit) if config.admin else None
        """Authorization decisions by listener, operation, resource type and result (only
        counted when the admin listener serves them)."""
        self._own_authorizer = authorizer is None
        self.authorizer = authorizer or build_authorizer(
            config.policy,
            decision_listener=self.decisions or self._audit_hook,
            connection=audit_connection(config.upstream)
            if config.policy.acl_store.type == "kafka"
            else None,
        )
        self.guard = InternalTopicGuard(self.authorizer, internal_topics(config))
        """What the listeners ask: the authorizer behind the internal-topics rule."""
        self.auth_executor = executor_for(config.limits)
        """Password hashing for every SASL listener: a bounded share of the CPU."""
        try:
            self.groups = GroupResolver.from_config(config.policy.authorizer.groups)
        except GroupsError as exc:
            raise ConfigError(f"authorizer.extensions.groups: {exc}") from exc
        """``authorizer.extensions.groups`` (None: not configured), shared by every listener;
        its file is polled (:meth:`_poll_groups`) and re-read on SIGHUP."""
        self._groups_poller: asyncio.Task[None] | None = None
        self.listeners = [
            ListenerRuntime(
                listener,
                self.cluster,
                config.listener_limits(listener),
                self.guard,
                log_only=modes[listener.name] == LOG_ONLY,
                auth_executor=self.auth_executor,
                reuse_port=config.workers > 1,
                store_connection=store_connection(config, listener),
                groups=self.groups,
            )
            for listener in config.listeners
        ]
        self.reloads: dict[str, int] = {"applied": 0, "rejected": 0}
        """Configuration reloads by result (``applied``, ``rejected``)."""
        self._reload_lock = asyncio.Lock()
        """One reload at a time: a SIGHUP during a reload is served after it."""
        self._reloads: set[asyncio.Task[Any]] = set()
        self._retired: dict[ListenerRuntime, asyncio.Task[None]] = {}
        """Listeners a reload removed, still draining."""
        self.started = False
        """Every listener is accepting (readiness)."""
        admin = config.admin
        if admin is not None and admin.port and worker:  # worker i: admin.port + i
            admin = replace(admin, port=admin.port + worker)
        self.admin = AdminServer(admin, self, self.decisions) if admin is not None else None
        self._stopped = asyncio.Event()
        self._hurry = asyncio.Event()
        """A second stop signal: end the drain at once."""

    async def start(self, probe_attempts: int = 30) -> None:
        if self.admin is not None:  # first: /healthz and /readyz answer during start-up too
            self.admin.start()
        warnings = RateLimitedLog(log, PROBE_WARNING_INTERVAL_S)
        for attempt in range(1, probe_attempts + 1):
            try:
                server = await self.cluster.probe()
                log.info("upstream %s answered the version probe (attempt %d)", server, attempt)
                if self.admin is not None:  # readiness: checked again at intervals from now
                    self.admin.watch_upstream()
                break
            except OSError as exc:
                if attempt == probe_attempts:
                    raise
                warnings.log(
                    ("upstream-unreachable", str(exc)),
                    logging.WARNING,
                    "upstream not reachable yet (attempt %d of %d): %s",
                    attempt,
                    probe_attempts,
                    exc,
                )
                await asyncio.sleep(1.0)
        # KIP-504: a listener accepts connections only once its authorizer is ready for it.
        ready = self.authorizer.start([ls.config.name for ls in self.listeners])
        if self.groups is not None and self.groups.file is not None:
            self._groups_poller = asyncio.get_running_loop().create_task(
                self._poll_groups(self.groups), name="groups-file-poll"
            )
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
        """SIGHUP: re-read the ACL store now (stores that can, e.g. the file store), then the
        configuration file (:meth:`reload_config`, in a task of its own)."""
        store = getattr(self.authorizer, "store", None)
        request_reload = getattr(store, "request_reload", None)
        if callable(request_reload):
            log.info("SIGHUP: reloading the ACL store")
            request_reload()
        if self.groups is not None:
            self._refresh_groups(self.groups)
        task = asyncio.get_running_loop().create_task(self.reload_config(), name="config-reload")
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _poll_groups(self, groups: GroupResolver) -> None:
        """The groups file checked every second, as the ACL file (FileAclStore's default
        ``poll_interval_s``); a session takes a new mapping at its next request."""
        while True:
            await asyncio.sleep(GROUPS_POLL_INTERVAL_S)
            self._refresh_groups(groups)

    @staticmethod
    def _refresh_groups(groups: GroupResolver) -> None:
        before = groups.generation
        error = groups.refresh()
        if error is not None:
            log.error("groups file rejected, the mapping in force is kept: %s", error)
        elif groups.generation != before:
            log.info("groups file reloaded (generation %d)", groups.generation)

    # -- configuration reload (kafkaguard/proxy/app/reload.py) -------------------------------------
    async def reload_config(self, path: str | Path | None = None) -> ReloadPlan | None:
        """Re-read the configuration (``path``, default :attr:`config_path`) and apply what can
        change without a restart. The file is parsed and validated whole, and added listeners
        are opened, before anything is applied; any failure rejects the reload (logged with
        the reason, counted in :attr:`reloads`) and the running configuration stays. Returns
        the plan applied, or None."""
        async with self._reload_lock:
            source = Path(path) if path is not None else self.config_path
            if source is None:
                log.info("configuration reload: the proxy was not started from a file")
                return None
            if not self.started or self._stopped.is_set():
                self._reject(source, "the proxy is not serving (starting or stopping)")
                return None
            try:
                new = await asyncio.to_thread(load_config, source)
            except ConfigError as exc:  # check-config's message, word for word
                self._reject(source, f"configuration error: {exc}")
                return None
            plan = plan_reload(
                self.config,
                new,
                reconfigurable_authorizer=callable(getattr(self.authorizer, "reconfigure", None)),
                reloadable_options=frozenset(getattr(self.authorizer, "reloadable_options", ())),
                embedded_upstream=self.embedded_upstream,
            )
            try:
                added = await self._open_listeners(plan.config, plan.added)
            except Exception as exc:  # any failure to open one rejects the reload
                log.debug("opening the added listeners failed", exc_info=True)
                self._reject(source, f"cannot open an added listener: {exc}")
                return None
            if self._stopped.is_set():  # a stop signal came while they were being opened
                for runtime in added:
                    await runtime.close()
                self._reject(source, "the proxy is stopping")
                return None
            self._apply(plan, added)
            self._log_applied(source, plan)
            return plan

    def _reject(self, source: Path, reason: str) -> None:
        self.reloads["rejected"] += 1
        log.error(
            "configuration reload from %s rejected, the running configuration stays: %s",
            source,
            reason,
        )

    async def _open_listeners(
        self, config: ProxyConfig, listeners: Iterable[ListenerConfig]
    ) -> list[ListenerRuntime]:
        """Runtimes for the added listeners, opened (bound) but not accepting yet; on any
        failure the ones already opened are closed again."""
        opened: list[ListenerRuntime] = []
        try:
            for listener in listeners:
                opened.append(await self._open_listener(config, listener))
            if opened:  # KIP-504: a listener accepts only once its authorizer is ready
                await self._authorizer_ready([ls.config.name for ls in opened])
        except BaseException:
            for runtime in opened:
                await runtime.close()
            raise
        return opened

    async def _open_listener(
        self, config: ProxyConfig, listener: ListenerConfig
    ) -> ListenerRuntime:
        """One added listener, opened; closed again if that fails (the error names it)."""
        runtime: ListenerRuntime | None = None
        try:
            runtime = ListenerRuntime(  # loads its TLS files and SASL credential store
                listener,
                self.cluster,
                config.listener_limits(listener),
                self.guard,
                log_only=config.listener_enforcement(listener) == LOG_ONLY,
                auth_executor=self.auth_executor,
                reuse_port=config.workers > 1,
                store_connection=store_connection(config, listener),
                groups=self.groups,
            )
            await runtime.open()
        except BaseException as exc:  # cancelled (a shutdown) too: release what it took
            if runtime is not None:
                await runtime.close()
            if not isinstance(exc, Exception):
                raise
            where = f"listener {listener.name} on {listener.bind_host}:{listener.port}: "
            raise RuntimeError(f"{'' if isinstance(exc, BindError) else where}{exc}") from exc
        return runtime

    async def _authorizer_ready(self, listeners: list[str]) -> None:
        ready = self.authorizer.start(listeners)
        try:
            async with asyncio.timeout(_LISTENER_READY_TIMEOUT_S):
                for future in ready.values():
                    await future
        except TimeoutError as exc:
            raise RuntimeError(
                f"the authorizer was not ready for {', '.join(listeners)} within "
                f"{_LISTENER_READY_TIMEOUT_S:.0f} s"
            ) from exc

    def _apply(self, plan: ReloadPlan, added: list[ListenerRuntime]) -> None:
        """Swap every reloadable setting in, without awaiting: no request sees half of it."""
        old, new = self.config, plan.config
        reconfigure = getattr(self.authorizer, "reconfigure", None)
        if callable(reconfigure) and new.policy.authorizer != old.policy.authorizer:
            reconfigure(new.policy.authorizer)
        self.guard.rules = internal_topics(new)
        modes = {ls.name: new.listener_enforcement(ls) for ls in new.listeners}
        runtimes = {ls.config.name: ls for ls in (*self.listeners, *added)}
        for listener in new.listeners:
            runtimes[listener.name].reconfigure(
                new.listener_limits(listener), log_only=modes[listener.name] == LOG_ONLY
            )
        retired = [ls for ls in self.listeners if ls.config.name not in modes]
        self.listeners = [runtimes[ls.name] for ls in new.listeners]  # a new list: /metrics
        self.audit.set_modes(modes)
        self._wire_audit()
        if (new.log_level, new.log_format) != (old.log_level, old.log_format):
            configure_logging(new.log_level, new.log_format)
        self.config = new
        for runtime in added:
            runtime.accept()
        for runtime in retired:
            self._retire(runtime)
        self.reloads["applied"] += 1

    def _log_applied(self, source: Path, plan: ReloadPlan) -> None:
        applied = f"applied {describe(plan.applied)}" if plan.applied else "nothing to apply"
        log.info("configuration reloaded from %s: %s", source, applied)
        if plan.restart_needed:
            log.warning(
                "configuration reload: %s changed but need%s a restart; the running value%s "
                "stay%s in force",
                describe(plan.restart_needed),
                "s" if len(plan.restart_needed) == 1 else "",
                "" if len(plan.restart_needed) == 1 else "s",
                "s" if len(plan.restart_needed) == 1 else "",
            )
        if any(ls.ssl is not None or ls.sasl is not None for ls in plan.config.listeners):
            log.info(
                "configuration reload: TLS certificate, key and CA files and SASL credential "
                "files need no reload, they are re-read when they change"
            )

    def _to_audit(self, event: DecisionEvent) -> None:
        """After the decision counter: the audit trail, while it needs decisions."""
        hook = self._audit_hook
        if hook is not None:
            hook(event)

    def _wire_audit(self) -> None:
        """After a reload changed the enforcement modes: hand decisions to the audit trail
        only while it needs them (a ``log_only`` listener or ``audit.enabled``); without one,
        the authorizer skips the work a decision listener costs."""
        hook = self.audit.on_decision if self.audit.active else None
        if hook == self._audit_hook:
            return
        self._audit_hook = hook
        if (
            self.decisions is None
            and self._own_authorizer
            and isinstance(self.authorizer, StandardAuthorizer)
        ):
            self.authorizer.decision_listener = hook

    def _retire(self, listener: ListenerRuntime) -> None:
        """A listener a reload removed: drain it as at shutdown, in the background."""
        self._retired[listener] = asyncio.get_running_loop().create_task(
            self._drain_retired(listener), name=f"retire-{listener.config.name}"
        )

    async def _drain_retired(self, listener: ListenerRuntime) -> None:
        name = listener.config.name
        timeout = self.config.shutdown_timeout_ms / 1000
        connections, in_flight, dropped = listener.drain()
        log.info(
            "listener %s removed by a reload: stopped accepting; %d connections with %d "
            "requests in flight get up to %.1f s to be answered (%d not started are dropped)",
            name,
            connections,
            in_flight,
            timeout,
            dropped,
        )
        try:
            async with asyncio.timeout(timeout):
                await listener.drained()
        except TimeoutError:
            pass
        cut, unanswered = listener.cut()
        await listener.close()
        self._retired.pop(listener, None)
        log.info(
            "listener %s closed: %d of %d connections closed in time, %d cut with %d requests "
            "unanswered",
            name,
            connections - cut,
            connections,
            cut,
            unanswered,
        )

    async def serve_forever(self, *, serving: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM/SIGINT, then drain (:meth:`drain`); the signal handlers stay
        installed meanwhile, so a second signal cuts the drain short. :meth:`close` follows.
        ``serving`` is called once the handlers are installed (a SIGHUP before that would
        end the process: ``kafkaguard run --pid-file`` writes the file then)."""
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGINT: self.stop, signal.SIGTERM: self.stop, signal.SIGHUP: self.reload}
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        if serving is not None:
            serving()
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
        authorizer_not_ready = getattr(self.authorizer, "not_ready", None)
        if callable(authorizer_not_ready):  # the OPA authorizer: its server's health
            yield from authorizer_not_ready()
        stores: list[tuple[str, object]] = [("acl store", getattr(self.authorizer, "store", None))]
        stores += [
            (f"listener {ls.config.name} credentials", ls.sasl.store)
            for ls in self.listeners
            if ls.sasl is not None
        ]
        for what, store in stores:
            if getattr(store, "connected", True) is False:
                yield f"zookeeper: the {what} has no ZooKeeper session"
            store_not_ready = getattr(store, "not_ready", None)
            if callable(store_not_ready):  # the Kafka-topic stores (docs/acl-store.md)
                yield from (f"{what}: {reason}" for reason in store_not_ready())

    async def close(self) -> None:
        if self.admin is not None:
            self.admin.stop()
        for task in list(self._reloads):
            task.cancel()
        if self._groups_poller is not None:
            self._groups_poller.cancel()
        for listener, task in list(self._retired.items()):
            task.cancel()
            await listener.close()
        self._retired.clear()
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


def internal_topics(config: ProxyConfig) -> InternalTopics:
    """The proxy's internal topics: ``_kafkaguard-*``, the configured audit topic (whether or
    not records go there now: the name is the proxy's) and the Kafka-topic stores' topics
    (docs/acl-store.md), and who may touch them."""
    stores = {config.policy.acl_store.topic} if config.policy.acl_store.type == "kafka" else set()
    stores.update(
        listener.sasl.kafka.topic
        for listener in config.listeners
        if listener.sasl is not None
        and listener.sasl.scram_credentials == "kafka"
        and listener.sasl.kafka is not None
    )
    return InternalTopics(
        names=frozenset({config.audit.kafka.topic, *stores}),
        principals=config.policy.authorizer.internal_topic_principals,
    )
