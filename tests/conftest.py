"""Shared fixtures: a real Tansu broker and a kafkaguard proxy in front of it, on loopback.

Every process and server started here is stopped here. Tansu keeps every record in memory, so
tests use unique topic names (``unique_name``) and delete what they create in long runs.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBinding
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.proxy.config import (
    BrokerPorts,
    HostPort,
    LimitsConfig,
    ListenerConfig,
    ProxyConfig,
    UpstreamConfig,
)
from kafkaguard.proxy.server import ProxyServer
from kafkaguard.tansu import NODE_ID, TansuBroker, free_base, free_port

ALLOW_ALL = PolicyConfig(authorizer=AuthorizerConfig(super_users=frozenset({"User:ANONYMOUS"})))

TANSU_NODE_ID = NODE_ID

SESSION_TIMEOUT_MS = 6000
"""Tansu finishes a group join after about half of session.timeout.ms."""


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


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
    """The YAML ACL store of an enforcing proxy (:func:`enforcing_proxy`)."""

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap()


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


@pytest.fixture(scope="session")
def tansu() -> Iterator[TansuBroker]:
    """One Tansu broker for the whole session (it starts in ~0.1 s but holds all records)."""
    broker = TansuBroker()
    broker.start()
    try:
        asyncio.run(broker.wait_ready())
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def proxy(tansu: TansuBroker) -> Iterator[RunningProxy]:
    """A kafkaguard proxy in front of the session's Tansu, on fresh loopback ports."""
    running = start_proxy_thread(
        proxy_config(tansu.address, broker_ports=BrokerPorts(free_base([TANSU_NODE_ID]), {}))
    )
    try:
        yield running
    finally:
        stop_proxy_thread(running)


StartEnforcingProxy = Callable[[Iterable[AclBinding]], RunningProxy]


@pytest.fixture
def enforcing_proxy(tansu: TansuBroker, tmp_path: Path) -> Iterator[StartEnforcingProxy]:
    """``enforcing_proxy(acls)`` starts a proxy in front of the session's Tansu that enforces
    ``acls`` (kept in a YAML file store, ``running.acl_file``, so CreateAcls/DeleteAcls take the
    production write path); every proxy started is stopped at teardown."""
    started: list[RunningProxy] = []

    def start(acls: Iterable[AclBinding]) -> RunningProxy:
        acl_file = tmp_path / f"acls-{len(started)}.yaml"
        acl_file.write_text(format_acl_text(list(acls)), encoding="utf-8")
        policy = PolicyConfig(
            authorizer=AuthorizerConfig(),
            acl_store=AclStoreConfig(type="file", path=acl_file),
        )
        running = start_proxy_thread(proxy_config(tansu.address, policy=policy))
        running.acl_file = acl_file
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            stop_proxy_thread(running)


@pytest.fixture
async def async_proxy(tansu: TansuBroker) -> AsyncIterator[ProxyServer]:
    """A proxy on the test's own event loop (for asyncio clients and raw-socket tests)."""
    server = ProxyServer(
        proxy_config(tansu.address, broker_ports=BrokerPorts(free_base([TANSU_NODE_ID]), {}))
    )
    await server.start(probe_attempts=10)
    try:
        yield server
    finally:
        await server.close()


# -- ZooKeeper (issue 6): `zookeeper` (session) and `zookeeper_factory` live in policy/ --------
# -- Apache Kafka (issue 8): `kafka_upstream`, `kafka_referee` (session) live in kafka/ ---------
#    (tests/kafka is on pytest's `pythonpath`: a package named `kafka` would shadow kafka-python)
from kafka_fixture import kafka_referee, kafka_upstream  # noqa: E402,F401
from policy.zk_fixture import chroot, raw_zk, zookeeper, zookeeper_factory  # noqa: E402,F401
