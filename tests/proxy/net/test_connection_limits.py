"""Connection limits (Kafka's ConnectionQuotas and Selector deadlines) against the fake broker:
idle expiry, per-address limits and overrides, the creation rate, the authentication timeout on
SASL and SSL listeners, the per-cause counters and the rate-limited log lines.

The finding these guard against: silent TCP connections from one address took every slot of a
listener and locked every other client out. Client sockets are bound to 127.0.0.x source
addresses (all of 127/8 is loopback on Linux) to play different hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
import ssl
import tracemalloc
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

import kafkaguard
from kafkaguard.certs import tooling
from kafkaguard.certs.tls import TlsConfig
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts, LimitsConfig
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.core.limits import (
    QUOTA_WINDOW_MS,
    ConnectionQuotas,
    Liveness,
    sweep_interval,
)
from kafkaguard.proxy.net.listener import ListenerRuntime
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import free_base
from tests.support.fake_broker import FakeBroker, RawClient, logged, request, wait_until
from tests.support.injected_handlers import faulty, registered
from tests.support.proxy_fixture import proxy_config

pytestmark = pytest.mark.timeout(60)

LOGGER = "kafkaguard.proxy"
METADATA = request(3, 12, topics=None)
API_VERSIONS = request(18, 3, client_software_name="raw", client_software_version="1")
ATTACKER = "127.0.0.2"
CONTROL = "127.0.0.1"


# -- sans-I/O: ConnectionQuotas and Liveness -----------------------------------------------------


def test_quotas_per_ip_and_overrides() -> None:
    limits = LimitsConfig(
        max_connections=10,
        max_connections_per_ip=2,
        max_connections_per_ip_overrides=MappingProxyType({"10.0.0.9": 4}),
    )
    quotas = ConnectionQuotas(limits)
    assert [quotas.admit("10.0.0.1", 0.0) for _ in range(3)] == [
        None,
        None,
        CloseCause.MAX_CONNECTIONS_PER_IP,
    ]
    assert [quotas.admit("10.0.0.9", 0.0) for _ in range(5)][-2:] == [
        None,
        CloseCause.MAX_CONNECTIONS_PER_IP,
    ]
    assert quotas.total == 6 and quotas.count("10.0.0.9") == 4
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1", 0.0) is None
    for _ in range(4):
        quotas.release("10.0.0.9")
    assert quotas.count("10.0.0.9") == 0 and quotas.total == 2


def test_quotas_max_connections_comes_first() -> None:
    quotas = ConnectionQuotas(LimitsConfig(max_connections=2, max_connections_per_ip=1))
    assert quotas.admit("a", 0.0) is None
    assert quotas.admit("b", 0.0) is None
    assert quotas.admit("c", 0.0) is CloseCause.MAX_CONNECTIONS
    assert quotas.admit("a", 0.0) is CloseCause.MAX_CONNECTIONS


def test_quotas_creation_rate_is_a_token_bucket() -> None:
    quotas = ConnectionQuotas(LimitsConfig(max_connection_creation_rate=5))
    assert [quotas.admit(f"h{i}", 10.0) for i in range(6)][-2:] == [
        None,
        CloseCause.CONNECTION_RATE,
    ]
    assert quotas.admit("x", 10.125) is CloseCause.CONNECTION_RATE  # 0.625 token refilled
    assert quotas.admit("x", 10.25) is None  # 1.25 tokens after 0.25 s at 5/s
    assert quotas.admit("x", 10.25) is CloseCause.CONNECTION_RATE
    assert sum(quotas.admit("y", 20.0) is None for _ in range(10)) == 5  # bucket holds 5
    # A connection refused for another reason takes no token.
    limited = ConnectionQuotas(
        LimitsConfig(max_connection_creation_rate=1, max_connections_per_ip=1)
    )
    assert limited.admit("a", 0.0) is None
    assert limited.admit("a", 1.0) is CloseCause.MAX_CONNECTIONS_PER_IP
    assert limited.admit("b", 1.0) is None


def test_ip_connection_rate_is_measured_as_kafka_measures_it() -> None:
    """KIP-612's ``connection_creation_rate``: Kafka's Rate over 11 one-second samples, counted
    as at least 10 s, so a fresh address may open ten times its quota at once. Over it, the
    connection is un-recorded and throttled for (O - T) / T * window, at most one window."""
    quotas = ConnectionQuotas(LimitsConfig(connection_creation_rate=5))
    burst = [quotas.admit("10.0.0.1", 100.0) for _ in range(52)]
    assert burst.count(None) == 50  # the 51st makes 51 / 10 s = 5.1 > 5
    assert burst[50:] == [CloseCause.IP_CONNECTION_RATE] * 2  # un-recorded: the same again
    assert quotas.throttle_s == pytest.approx(0.2)  # (5.1 - 5) / 5 * 10,000 ms
    assert quotas.total == 50
    assert quotas.admit("10.0.0.2", 100.0) is None  # per address
    # One second later: still 51 counted over 10 s. Later the window widens with the time
    # the samples span: 51 over 10.95 s is under 5 per second.
    assert quotas.admit("10.0.0.1", 101.0) is CloseCause.IP_CONNECTION_RATE
    assert quotas.admit("10.0.0.1", 110.95) is None
    # Nothing recorded for 11 s: the address is forgotten (the state kept is bounded), and
    # measured as a fresh one again.
    quotas.expire(122.0)
    assert not quotas._ip_rates
    assert [quotas.admit("10.0.0.1", 122.0) for _ in range(51)].count(None) == 50


def test_ip_connection_rate_overrides_and_order() -> None:
    limits = LimitsConfig(
        connection_creation_rate=1,
        connection_creation_rate_overrides=MappingProxyType({"10.0.0.9": 0, "10.0.0.8": 2**31 - 1}),
        max_connections_per_ip=3,
    )
    quotas = ConnectionQuotas(limits)
    # A quota of 0 throttles every connection for the longest time, one window.
    assert quotas.admit("10.0.0.9", 0.0) is CloseCause.IP_CONNECTION_RATE
    assert quotas.throttle_s == QUOTA_WINDOW_MS / 1000
    # The override to Kafka's default lifts the quota (only max_connections_per_ip is left).
    assert [quotas.admit("10.0.0.8", 0.0) for _ in range(4)][
        -1
    ] is CloseCause.MAX_CONNECTIONS_PER_IP
    # As in Kafka's ConnectionQuotas.inc: the rate is recorded before max.connections.per.ip is
    # checked, so a connection refused for that still counts towards its address's rate.
    refused = [quotas.admit("10.0.0.1", 0.0) for _ in range(10)]
    assert refused[:3] == [None] * 3
    assert refused[3:] == [CloseCause.MAX_CONNECTIONS_PER_IP] * 7
    assert quotas.admit("10.0.0.1", 0.0) is CloseCause.IP_CONNECTION_RATE  # 11 in 10 s
    # max_connections comes first and records nothing.
    full = ConnectionQuotas(LimitsConfig(max_connections=1, connection_creation_rate=0))
    assert full.admit("10.0.0.9", 0.0) is CloseCause.IP_CONNECTION_RATE
    assert full.total == 0
    full.reconfigure(LimitsConfig(max_connections=1))
    assert full.admit("10.0.0.9", 0.0) is None
    assert full.admit("10.0.0.9", 0.0) is CloseCause.MAX_CONNECTIONS


def test_ip_connection_rate_reconfigured_keeps_what_was_recorded() -> None:
    quotas = ConnectionQuotas(LimitsConfig())
    assert all(quotas.admit("10.0.0.1", 0.0) is None for _ in range(30))  # unlimited: unrecorded
    quotas.reconfigure(LimitsConfig(connection_creation_rate=2))
    assert sum(quotas.admit("10.0.0.1", 0.0) is None for _ in range(30)) == 20
    quotas.reconfigure(LimitsConfig(connection_creation_rate=3))  # the 20 recorded stay
    assert sum(quotas.admit("10.0.0.1", 0.0) is None for _ in range(30)) == 10


def test_liveness_idle_and_authentication_deadlines() -> None:
    idle = {"idle_s": 1.0, "auth_s": 5.0}
    live = Liveness(0.0)
    assert live.check(0.5, busy=False, authenticated=True, **idle) is None  # active at accept
    assert live.check(1.0, busy=False, authenticated=True, **idle) is None
    assert live.check(1.5, busy=False, authenticated=True, **idle) is CloseCause.IDLE
    busy = Liveness(0.0)
    for now in (1.0, 2.0, 3.0):
        assert busy.check(now, busy=True, authenticated=True, **idle) is None
    reading = Liveness(0.0)
    for now in (1.0, 2.0, 3.0):
        reading.active = True
        assert reading.check(now, busy=False, authenticated=True, **idle) is None
    anonymous = Liveness(0.0)
    for now in (1.0, 2.0, 3.0, 4.0):
        anonymous.active = True
        assert anonymous.check(now, busy=False, authenticated=False, **idle) is None
    anonymous.active = True
    assert anonymous.check(5.0, busy=False, authenticated=False, **idle) is (
        CloseCause.AUTHENTICATION_TIMEOUT
    )
    late = Liveness(0.0)
    assert late.check(4.0, busy=False, authenticated=True, **idle) is None
    assert late.check(9.0, busy=True, authenticated=False, **idle) is None  # once is enough
    assert sweep_interval(LimitsConfig(connections_max_idle_ms=300)) == pytest.approx(0.075)
    assert sweep_interval(LimitsConfig()) == 1.0


# -- against the fake broker ---------------------------------------------------------------------


LOOPS = {"asyncio": asyncio.new_event_loop}
with contextlib.suppress(ImportError):
    import uvloop

    LOOPS["uvloop"] = uvloop.new_event_loop


def on_each_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run ``test`` (an async test taking fixtures) once on asyncio's loop and once on uvloop,
    which ``kafkaguard run`` uses: accepting (``sock_accept``, ``connect_accepted_socket``)
    and the TLS handshake timeout are implemented separately in each."""

    def run(loop: str, **fixtures: Any) -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(test(**fixtures))

    parameters = list(inspect.signature(test).parameters.values())
    loop_parameter = inspect.Parameter("loop", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    run.__signature__ = inspect.Signature([loop_parameter, *parameters])  # type: ignore[attr-defined]
    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return pytest.mark.parametrize("loop", list(LOOPS))(run)  # type: ignore[no-any-return]


@dataclass
class Env:
    fake: FakeBroker
    proxy: ProxyServer
    caplog: pytest.LogCaptureFixture
    ssl_context: ssl.SSLContext | None = None

    @property
    def listener(self) -> ListenerRuntime:
        return self.proxy.listeners[0]

    @property
    def counters(self) -> dict[str, int]:
        return self.listener.counters

    @property
    def port(self) -> int:
        return self.listener.bootstrap_port

    async def connect(self, source: str = CONTROL, *, tls: bool = False) -> RawClient:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                "127.0.0.1",
                self.port,
                local_addr=(source, 0),
                ssl=self.ssl_context if tls else None,
                server_hostname="localhost" if tls else None,
            ),
            5,
        )
        return RawClient(reader, writer)

    def logged(self, *fragments: str) -> list[str]:
        return logged(self.caplog, *fragments)


@contextlib.asynccontextmanager
async def environment(
    caplog: pytest.LogCaptureFixture, limits: LimitsConfig, **listener: Any
) -> AsyncIterator[Env]:
    """The fake broker and a proxy whose one listener has ``limits`` (and ``listener``
    overrides, e.g. ``security_protocol``, ``sasl``, ``ssl``)."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    ssl_context = listener.pop("client_ssl", None)
    async with FakeBroker((1,)) as fake:
        config = proxy_config(
            fake.bootstrap, broker_ports=BrokerPorts(free_base(fake.node_ids), {}), limits=limits
        )
        if listener:
            config = replace(config, listeners=(replace(config.listeners[0], **listener),))
        server = ProxyServer(config)
        await server.start(probe_attempts=1)
        try:
            yield Env(fake, server, caplog, ssl_context)
        finally:
            await server.close()
        assert not fake.errors
    crashes = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert not crashes, [r.getMessage() for r in crashes]


async def open_many(env: Env, count: int, source: str) -> list[RawClient]:
    return [await env.connect(source) for _ in range(count)]


async def close_all(clients: list[RawClient]) -> None:
    for client in clients:
        await client.close()


async def still_open(clients: list[RawClient], wait_s: float = 0.3) -> list[RawClient]:
    """The clients whose connection the proxy did not close within ``wait_s``."""
    closed = await asyncio.gather(*(c.closed_by_peer(wait_s) for c in clients))
    return [c for c, gone in zip(clients, closed, strict=True) if not gone]


@on_each_loop
async def test_idle_connection_is_closed(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig(connections_max_idle_ms=300)) as env:
        silent = await env.connect()
        started = asyncio.get_running_loop().time()
        assert await silent.closed_by_peer(wait_s=3)
        elapsed = asyncio.get_running_loop().time() - started
        assert 0.25 <= elapsed < 1.5, elapsed
        await wait_until(lambda: env.counters[CloseCause.IDLE] == 1)
        assert env.logged("idle for 300 ms (connections_max_idle_ms)")
        await wait_until(lambda: env.fake.open_connections == 0)  # its upstream went too
        await silent.close()


@on_each_loop
async def test_pending_request_is_not_idle(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig(connections_max_idle_ms=300)) as env:
        client = await env.connect()
        env.fake.script(3, 1.2)  # the broker takes 1.2 s: four idle times
        client.send(METADATA, correlation_id=7)
        corr, response = await client.recv(3, 12, wait_s=3)
        assert corr == 7 and response.brokers
        assert env.counters[CloseCause.IDLE] == 0
        assert await client.closed_by_peer(wait_s=3)  # idle again once answered
        assert env.counters[CloseCause.IDLE] == 1
        await client.close()


@on_each_loop
async def test_active_connection_is_not_idle(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig(connections_max_idle_ms=300)) as env:
        client = await env.connect()
        for correlation_id in range(12):  # 1.2 s of requests 0.1 s apart
            await client.roundtrip(METADATA, correlation_id=correlation_id)
            await asyncio.sleep(0.1)
        assert env.counters[CloseCause.IDLE] == 0
        await client.roundtrip(METADATA, correlation_id=99)
        await client.close()


@on_each_loop
async def test_one_address_cannot_take_every_slot(caplog: pytest.LogCaptureFixture) -> None:
    """The finding: silent connections from one address locked every other client out."""
    limits = LimitsConfig(max_connections=20, max_connections_per_ip=5)
    async with environment(caplog, limits) as env:
        flood = await open_many(env, 20, ATTACKER)
        held = await still_open(flood)
        assert len(held) == 5
        assert env.counters[CloseCause.MAX_CONNECTIONS_PER_IP] == 15
        # Refused before any upstream connection was opened for them.
        await wait_until(lambda: env.fake.open_connections == 5)
        control = await env.connect(CONTROL)
        response = await control.roundtrip(METADATA, correlation_id=1)
        assert response.brokers
        assert env.listener.quotas.count(ATTACKER) == 5
        await control.close()
        await close_all(flood)
        await wait_until(lambda: env.listener.quotas.total == 0)


@on_each_loop
async def test_per_ip_overrides(caplog: pytest.LogCaptureFixture) -> None:
    limits = LimitsConfig(
        max_connections_per_ip=2,
        max_connections_per_ip_overrides=MappingProxyType({"127.0.0.3": 6, "127.0.0.4": 0}),
    )
    async with environment(caplog, limits) as env:
        plain_host = await open_many(env, 4, ATTACKER)
        trusted = await open_many(env, 8, "127.0.0.3")
        blocked = await open_many(env, 2, "127.0.0.4")
        assert len(await still_open(plain_host)) == 2
        assert len(await still_open(trusted)) == 6
        assert len(await still_open(blocked)) == 0
        assert env.counters[CloseCause.MAX_CONNECTIONS_PER_IP] == 2 + 2 + 2
        await close_all(plain_host + trusted + blocked)


@on_each_loop
async def test_max_connections_counts_every_address(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig(max_connections=3)) as env:
        first = await open_many(env, 3, ATTACKER)
        other = await env.connect("127.0.0.5")
        assert await other.closed_by_peer(wait_s=2)
        assert env.counters[CloseCause.MAX_CONNECTIONS] == 1
        assert env.logged("refused connection from 127.0.0.5", "max_connections (3)")
        await first[0].close()
        await wait_until(lambda: env.listener.quotas.total == 2)
        again = await env.connect("127.0.0.5")
        await again.roundtrip(METADATA)
        await close_all([*first[1:], other, again])


@on_each_loop
async def test_connection_creation_rate(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig(max_connection_creation_rate=5)) as env:
        burst = await open_many(env, 15, ATTACKER)
        held = await still_open(burst)
        # 5 from the full bucket, plus at most what refilled during the burst.
        assert 5 <= len(held) <= 7, len(held)
        assert env.counters[CloseCause.CONNECTION_RATE] == 15 - len(held)
        await asyncio.sleep(1.0)  # the bucket refills
        later = await env.connect(CONTROL)
        await later.roundtrip(METADATA)
        await close_all([*burst, later])


@on_each_loop
async def test_ip_connection_creation_rate(caplog: pytest.LogCaptureFixture) -> None:
    """KIP-612: a connection over its address's ``connection_creation_rate`` is accepted, never
    read (no answer, no broker connection) and closed after the throttle time (1 s here, the
    longest), as Kafka's Acceptor does; other addresses and per-address overrides apply."""
    limits = LimitsConfig(
        connection_creation_rate=1,
        connection_creation_rate_overrides=MappingProxyType({"127.0.0.3": 0, CONTROL: 1000}),
    )
    async with environment(caplog, limits) as env:
        admitted = await open_many(env, 10, ATTACKER)  # 10 in the first 10 s window
        await admitted[-1].roundtrip(METADATA, correlation_id=1)
        over = await open_many(env, 3, ATTACKER)
        blocked = await env.connect("127.0.0.3")
        for client in (*over, blocked):
            client.send(METADATA, correlation_id=2)
        # Held, not closed at once: the throttle time is one whole window.
        assert len(await still_open([*over, blocked], wait_s=0.3)) == 4
        assert env.counters[CloseCause.IP_CONNECTION_RATE] == 4
        assert env.listener.quotas.total == 10  # the throttled ones are not counted
        # Then closed, never answered, never connected upstream.
        for client in (*over, blocked):
            with pytest.raises(EOFError):
                await client.recv_frame(wait_s=5)  # closed without a response frame
        assert env.fake.open_connections == 10
        assert env.logged("127.0.0.2 is over its connection_creation_rate (1/s)", "held unread")
        # The control address's own quota is far above: unaffected.
        control = await open_many(env, 20, CONTROL)
        await control[-1].roundtrip(METADATA, correlation_id=3)
        assert not env.listener.admission.throttled  # every held socket was closed
        await close_all([*admitted, *over, blocked, *control])


@on_each_loop
async def test_ip_connection_creation_rate_reconfigured(caplog: pytest.LogCaptureFixture) -> None:
    """A reload (ListenerRuntime.reconfigure) applies a new quota to the next connection; the
    connections already open stay."""
    async with environment(caplog, LimitsConfig()) as env:
        before = await env.connect(ATTACKER)
        await before.roundtrip(METADATA, correlation_id=1)
        blocked = replace(
            env.listener.limits,
            connection_creation_rate_overrides=MappingProxyType({ATTACKER: 0}),
        )
        env.listener.reconfigure(blocked, log_only=False)
        refused = await env.connect(ATTACKER)
        assert await refused.closed_by_peer(wait_s=5)
        assert env.counters[CloseCause.IP_CONNECTION_RATE] == 1
        await before.roundtrip(METADATA, correlation_id=2)  # open before: kept
        env.listener.reconfigure(LimitsConfig(), log_only=False)
        after = await env.connect(ATTACKER)
        await after.roundtrip(METADATA, correlation_id=3)
        await close_all([before, refused, after])


@on_each_loop
async def test_refusals_log_one_line_a_second(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig(max_connections_per_ip=1)) as env:
        kept = await env.connect(ATTACKER)
        started = asyncio.get_running_loop().time()
        refused = await open_many(env, 50, ATTACKER)
        await wait_until(lambda: env.counters[CloseCause.MAX_CONNECTIONS_PER_IP] == 50)
        within_a_second = asyncio.get_running_loop().time() - started < 1.0
        lines = env.logged("refused connection", "max_connections_per_ip")
        assert len(lines) <= (1 if within_a_second else 2), lines
        await asyncio.sleep(1.05)
        last = await env.connect(ATTACKER)
        await wait_until(lambda: env.counters[CloseCause.MAX_CONNECTIONS_PER_IP] == 51)
        lines = env.logged("refused connection", "max_connections_per_ip")
        assert "similar lines suppressed" in lines[-1], lines
        assert len(lines) <= 3
        await close_all([kept, *refused, last])


@on_each_loop
async def test_bad_frames_log_one_line_a_second(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig()) as env:
        clients = await open_many(env, 20, ATTACKER)
        for client in clients:
            client.writer.write((DEFAULT_MAX_FRAME_BYTES + 1).to_bytes(4, "big") + b"\0" * 8)
        assert not await still_open(clients, wait_s=3)
        await wait_until(lambda: env.counters[CloseCause.BAD_REQUEST] == 20)
        assert len(env.logged("bad request", "exceeds the limit")) <= 2
        await close_all(clients)


# -- authentication timeout -----------------------------------------------------------------------


def _sasl_listener(tmp_path: Path) -> dict[str, Any]:
    users = tmp_path / "users.yaml"
    credential = plain.make_credential("alice-secret", iterations=4096).to_string()
    write_users_file(users, {"alice": {"PLAIN": credential}})
    sasl = SaslListenerConfig(enabled_mechanisms=("PLAIN",), credentials_file=users)
    return {"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "sasl": sasl}


@on_each_loop
async def test_authentication_timeout_on_a_sasl_listener(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    limits = LimitsConfig(authentication_timeout_ms=500)
    async with environment(caplog, limits, **_sasl_listener(tmp_path)) as env:
        silent = await env.connect()
        chatty = await env.connect()
        versions = await chatty.roundtrip(API_VERSIONS, correlation_id=1)
        assert versions.error_code == ErrorCode.none
        honest = await env.connect()
        handshake = await honest.roundtrip(request(17, 1, mechanism="PLAIN"), correlation_id=1)
        assert handshake.error_code == ErrorCode.none
        token = request(36, 2, auth_bytes=b"\0alice\0alice-secret")
        assert (await honest.roundtrip(token, correlation_id=2)).error_code == ErrorCode.none
        started = asyncio.get_running_loop().time()
        assert await silent.closed_by_peer(wait_s=3)
        assert await chatty.closed_by_peer(wait_s=3)
        assert asyncio.get_running_loop().time() - started < 1.5
        assert env.counters[CloseCause.AUTHENTICATION_TIMEOUT] == 2
        assert env.logged("authentication not completed within 500 ms")
        await asyncio.sleep(0.3)  # well past the deadline: the authenticated one stays
        assert (await honest.roundtrip(METADATA, correlation_id=3)).brokers
        await close_all([silent, chatty, honest])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsConfig, ssl.SSLContext]:
    root = tmp_path_factory.mktemp("pki")
    tooling.init_ca(root)
    server = tooling.issue_server(root, hosts=["localhost"], ips=["127.0.0.1"])
    settings = TlsConfig(cert_file=server.cert_path, key_file=server.key_path)
    client = ssl.create_default_context(cafile=str(root / tooling.CA_CERT))
    return settings, client


@on_each_loop
async def test_authentication_timeout_on_an_ssl_listener(
    caplog: pytest.LogCaptureFixture, pki: tuple[TlsConfig, ssl.SSLContext]
) -> None:
    settings, client_context = pki
    limits = LimitsConfig(authentication_timeout_ms=500)
    listener = {"name": "SECURE", "security_protocol": "SSL", "ssl": settings}
    async with environment(caplog, limits, client_ssl=client_context, **listener) as env:
        silent = await env.connect()  # TCP only: never starts the TLS handshake
        secure = await env.connect(tls=True)
        started = asyncio.get_running_loop().time()
        assert await silent.closed_by_peer(wait_s=3)
        assert asyncio.get_running_loop().time() - started < 1.5
        assert env.counters[CloseCause.AUTHENTICATION_TIMEOUT] == 1
        assert env.logged("TLS handshake not completed within 500 ms")
        await wait_until(lambda: env.listener.quotas.total == 1)
        await asyncio.sleep(0.3)
        assert (await secure.roundtrip(METADATA, correlation_id=1)).brokers
        await close_all([silent, secure])


@pytest.fixture
def mtls(tmp_path: Path) -> tuple[Path, TlsConfig, ssl.SSLContext]:
    """A CA, a server certificate, and a client context holding ``CN=alice``'s certificate."""
    tooling.init_ca(tmp_path)
    server = tooling.issue_server(tmp_path, hosts=["localhost"], ips=["127.0.0.1"])
    client = tooling.issue_client(tmp_path, common_name="alice")
    ca = tmp_path / tooling.CA_CERT
    settings = TlsConfig(
        cert_file=server.cert_path, key_file=server.key_path, ca_file=ca, client_auth="required"
    )
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(client.cert_path, client.key_path)
    return tmp_path, settings, context


def _tls_round_trip(
    port: int, context: ssl.SSLContext, session: ssl.SSLSession | None
) -> tuple[bool, ssl.SSLSession | None]:
    """One TLS connection offering ``session`` (a blocking client, as Python's ``ssl`` resumes
    only there): one Metadata round trip; (resumed, the session to offer next time)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost", session=session) as sock,
    ):
        sock.sendall(codec.encode_request(METADATA, 1, "resume"))
        size = int.from_bytes(sock.recv(4), "big")
        while size > 0:
            size -= len(sock.recv(size))
        return sock.session_reused, sock.session  # after data: TLS 1.3 tickets come late


@on_each_loop
async def test_a_resumed_tls_session_keeps_its_principal_until_a_reload(
    caplog: pytest.LogCaptureFixture, mtls: tuple[Path, TlsConfig, ssl.SSLContext]
) -> None:
    """Session tickets: a client that reconnects with its ticket skips the full handshake
    (and the client certificate's verification) and is still its certificate's principal.
    A reload of the TLS files ends the tickets issued before it, as Kafka's new SSLContext on
    a keystore update does: the next connection is a full handshake under the new files."""
    root, settings, context = mtls
    listener = {"name": "MTLS", "security_protocol": "SSL", "ssl": settings}
    async with environment(caplog, LimitsConfig(), **listener) as env:
        resumed, session = await asyncio.to_thread(_tls_round_trip, env.port, context, None)
        assert not resumed and session is not None
        resumed, session = await asyncio.to_thread(_tls_round_trip, env.port, context, session)
        assert resumed
        assert len(env.logged("authenticated as User:CN=alice")) == 2
        tooling.issue_server(root, hosts=["localhost"], ips=["127.0.0.1"], force=True)
        resumed, _ = await asyncio.to_thread(_tls_round_trip, env.port, context, session)
        assert not resumed
        assert env.listener.tls is not None and env.listener.tls.reloads == 1
        assert len(env.logged("authenticated as User:CN=alice")) == 3


@on_each_loop
async def test_counters_start_at_zero_for_every_cause(caplog: pytest.LogCaptureFixture) -> None:
    async with environment(caplog, LimitsConfig()) as env:
        assert env.counters == {str(cause): 0 for cause in CloseCause}
        client = await env.connect()
        await client.roundtrip(METADATA)
        await client.close()
        await wait_until(lambda: env.counters[CloseCause.CLIENT_CLOSED] == 1)
        assert sum(env.counters.values()) == 1


@on_each_loop
async def test_a_stalled_partial_request_is_idle(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing read for the idle time: a request begun and never finished does not keep the
    connection (it is not in flight: the proxy has not received it)."""
    async with environment(caplog, LimitsConfig(connections_max_idle_ms=300)) as env:
        client = await env.connect()
        client.writer.write(b"\x00\x00")  # half a size prefix
        assert await client.closed_by_peer(wait_s=3)
        assert env.counters[CloseCause.IDLE] == 1
        await client.close()


async def test_handler_faults_log_one_traceback_a_second_per_api(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered(monkeypatch, faulty(3, "bug in a handler"))
    async with environment(caplog, LimitsConfig()) as env:
        clients = await open_many(env, 10, CONTROL)
        for client in clients:
            client.send(METADATA, correlation_id=1)
        assert not await still_open(clients, wait_s=3)
        await wait_until(lambda: env.counters[CloseCause.INTERNAL_ERROR] == 10)
        tracebacks = env.logged("handler for metadata failed", "RuntimeError: bug in a handler")
        assert len(tracebacks) == 1, tracebacks
        assert "Traceback (most recent call last)" in tracebacks[0]
        assert len(env.logged("internal error while authorizing the request")) == 1
        await close_all(clients)


def test_listener_limits_override_the_top_level_ones(tmp_path: Path) -> None:
    from kafkaguard.proxy.config import load_config

    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"
        "limits: {max_connections: 50, connections_max_idle_ms: 1000}\n"
        "shutdown_timeout_ms: 2500\n"
        "listeners:\n"
        "  - {name: INSIDE, port: 9192}\n"
        "  - name: OUTSIDE\n"
        "    port: 9292\n"
        "    limits:\n"
        "      max_connections_per_ip: 3\n"
        "      max_connections_per_ip_overrides: '10.0.0.1:100, [::1]:7'\n"
        "      connection_creation_rate: 20\n"
        "      connection_creation_rate_overrides: '10.0.0.1:0, ::ffff:10.0.0.2:500'\n"
        "      authentication_timeout_ms: 2000\n",
        encoding="utf-8",
    )
    config = load_config(config_file)
    inside, outside = (config.listener_limits(ls) for ls in config.listeners)
    assert config.shutdown_timeout_ms == 2500
    assert inside.max_connections == outside.max_connections == 50
    assert inside.max_connections_per_ip == 2**31 - 1
    assert outside.max_connections_per_ip == 3
    assert outside.connections_max_idle_ms == 1000
    assert outside.authentication_timeout_ms == 2000
    assert outside.max_connections_for("10.0.0.1") == 100
    assert outside.max_connections_for("::1") == 7
    assert outside.max_connections_for("10.0.0.2") == 3
    assert inside.connection_creation_rate_for("10.0.0.1") == 2**31 - 1  # Kafka's default
    assert outside.connection_creation_rate_for("10.0.0.1") == 0
    assert outside.connection_creation_rate_for("10.0.0.2") == 500  # IPv4-mapped: one spelling
    assert outside.connection_creation_rate_for("10.0.0.3") == 20


def test_process_limits_and_config_errors(tmp_path: Path) -> None:
    """Authentication threads are one pool for every listener: a listener cannot set them.
    Bad overrides and explicit node-port maps (YAML keys are read as text) are checked."""
    from kafkaguard.proxy.config import ConfigError, load_config

    def load(text: str) -> Any:
        config_file = tmp_path / "config.yaml"
        config_file.write_text(
            "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n" + text, encoding="utf-8"
        )
        return load_config(config_file)

    config = load(
        "limits: {authentication_threads: 2, authentication_queue_size: 0}\n"
        "listeners: [{name: A, port: 9192, broker_ports: {map: {0: 9300, 7: 9307}}}]\n"
    )
    assert (config.limits.authentication_threads, config.limits.authentication_queue_size) == (
        2,
        0,
    )
    assert dict(config.listeners[0].broker_ports.explicit) == {0: 9300, 7: 9307}
    # One spelling per address: a dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
    mapped = load(
        "limits: {max_connections_per_ip_overrides: '[::ffff:10.0.0.9]:4, 0:0::1:2'}\n"
        "listeners: [{name: A, port: 9192}]\n"
    )
    assert mapped.limits.max_connections_for("10.0.0.9") == 4
    assert mapped.limits.max_connections_for("::1") == 2
    with pytest.raises(ConfigError, match="authentication_threads: is a top-level limit"):
        load("listeners: [{name: A, port: 9192, limits: {authentication_threads: 2}}]\n")
    with pytest.raises(ConfigError, match="max_connections_per_ip_overrides: must be 'ip:count"):
        load(
            "limits: {max_connections_per_ip_overrides: 'broker1:3'}\n"
            "listeners: [{name: A, port: 9192}]\n"
        )
    with pytest.raises(ConfigError, match="connection_creation_rate_overrides: must be 'ip:count"):
        load(
            "limits: {connection_creation_rate_overrides: '10.0.0.1:fast'}\n"
            "listeners: [{name: A, port: 9192}]\n"
        )
    with pytest.raises(ConfigError, match="connection_creation_rate"):
        load("limits: {connection_creation_rate: -1}\nlisteners: [{name: A, port: 9192}]\n")


IDLE_CONNECTIONS = 200
IDLE_BYTES = 4_500
"""What kafkaguard's own code may keep allocated for one idle PLAINTEXT connection, its broker
connection included (measured: ~3.1 kB on either loop). Before issue 39 it kept ~3 kB more:
three empty deques (an empty deque holds a 64-item block), a table of seven bound methods and
two empty sets per connection."""


@on_each_loop
async def test_an_idle_connection_costs_little_memory(caplog: pytest.LogCaptureFixture) -> None:
    """Python memory allocated in kafkaguard's code (traced by tracemalloc, any frame of the
    allocation's stack in the package) and still held per idle connection, measured over
    connections opened once the listener is warm; bench/connection_flood_bench.py --idle
    measures the whole process's RSS for 10,000 (bench/RESULTS.md)."""
    package = f"{Path(kafkaguard.__file__).parent}/"
    async with environment(caplog, LimitsConfig()) as env:
        caplog.set_level(logging.WARNING, logger=LOGGER)
        warm = await open_many(env, 5, CONTROL)
        await wait_until(lambda: env.fake.open_connections == 5)
        tracemalloc.start(25)  # from here: only what these connections allocate is traced
        try:
            clients = await open_many(env, IDLE_CONNECTIONS, CONTROL)
            await wait_until(lambda: env.fake.open_connections == 5 + IDLE_CONNECTIONS)
            await asyncio.sleep(0.2)  # nothing left to set up
            traces = tracemalloc.take_snapshot().traces
        finally:
            tracemalloc.stop()
        assert len(env.listener.connections) == 5 + IDLE_CONNECTIONS
        ours = sum(
            trace.size
            for trace in traces
            if any(frame.filename.startswith(package) for frame in trace.traceback)
        )
        per_connection = ours / IDLE_CONNECTIONS
        assert 500 < per_connection <= IDLE_BYTES, per_connection
        await close_all(clients + warm)
