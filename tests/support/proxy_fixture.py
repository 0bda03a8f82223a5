"""A kafkaguard proxy for tests, on loopback: its config and a proxy run on a loop thread.

``tests/conftest.py`` builds the ``proxy``/``enforcing_proxy``/``async_proxy`` fixtures from
these; tests that need a differently configured proxy call them directly. Tansu keeps every
record in memory, so tests use unique topic names (:func:`unique_name`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaguard.policy.config import AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBinding
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import (
    BrokerPorts,
    HostPort,
    LimitsConfig,
    ListenerConfig,
    ProxyConfig,
    UpstreamConfig,
)
from kafkaguard.tansu import NODE_ID, free_base, free_port

ALLOW_ALL = PolicyConfig(authorizer=AuthorizerConfig(super_users=frozenset({"User:ANONYMOUS"})))

TANSU_NODE_ID = NODE_ID

SESSION_TIMEOUT_MS = 6000
"""Tansu finishes a group join after about half of session.timeout.ms."""


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def created_topic(proxy: RunningProxy, prefix: str = "t") -> Iterator[str]:
    """A topic of one partition with a :func:`unique_name`, created through ``proxy`` (the
    allow-all one) with confluent-kafka's admin client, deleted afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique_name(prefix)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(15)
    try:
        yield name
    finally:
        for future in admin.delete_topics([name]).values():
            future.result(15)


def proxy_config(
    upstream: HostPort,
    *,
    port: int = 0,
    broker_ports: BrokerPorts | None = None,
    limits: LimitsConfig | None = None,
    name: str = "PLAINTEXT",
    policy: PolicyConfig | None = None,
    security_protocol: str = "PLAINTEXT",
    sasl: Any = None,
) -> ProxyConfig:
    """A one-listener config. The default policy makes ``User:ANONYMOUS`` (every PLAINTEXT
    client) a super user, so backbone tests exercise forwarding, not ACLs."""
    listener = ListenerConfig(
        name=name,
        security_protocol=security_protocol,
        bind_host="127.0.0.1",
        port=port or free_port(),
        advertised_host="127.0.0.1",
        # Tansu's node id is 111: base + 111 must be a port that is free right now.
        broker_ports=broker_ports or BrokerPorts(free_base([TANSU_NODE_ID]), {}),
        sasl=sasl,
    )
    return ProxyConfig(
        listeners=(listener,),
        upstream=UpstreamConfig((upstream,), connect_timeout_s=5.0),
        limits=limits or LimitsConfig(),
        policy=policy or ALLOW_ALL,
    )


@dataclass
class RunningProxy:
    """A proxy served by an event loop in a background thread (for blocking clients)."""

    server: ProxyServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    acl_file: Path | None = None
    """The YAML ACL store of an enforcing proxy (the ``enforcing_proxy`` fixture)."""

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap()


StartEnforcingProxy = Callable[[Iterable[AclBinding]], RunningProxy]
"""The ``enforcing_proxy`` fixture: ``enforcing_proxy(acls)`` starts a proxy enforcing them."""


def start_proxy_thread(
    config: ProxyConfig,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> RunningProxy:
    """Start a proxy on its own loop thread; blocking clients (confluent-kafka, kafka-python)
    then talk to it from the test thread. ``loop_factory`` supplies a custom event loop (e.g.
    one whose resolver knows a name only the proxy may resolve)."""
    loop = (loop_factory or asyncio.new_event_loop)()
    server_box: dict[str, Any] = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            server = ProxyServer(config)
            try:
                await server.start(probe_attempts=10)
            except BaseException as exc:  # noqa: BLE001 - surfaced in the test thread
                server_box["error"] = exc
                ready.set()
                return
            server_box["server"] = server
            ready.set()
            await server.serve_forever_until_stopped()
            await server.close()

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, name="kafkaguard-test-proxy", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("proxy did not start within 30 s")
    if "error" in server_box:
        raise server_box["error"]
    return RunningProxy(server_box["server"], loop, thread)


def stop_proxy_thread(proxy: RunningProxy) -> None:
    proxy.loop.call_soon_threadsafe(proxy.server.stop)
    if proxy.thread is not None:
        proxy.thread.join(15)
    proxy.loop.close()
