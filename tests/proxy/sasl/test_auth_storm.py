"""A real proxy (SASL_PLAINTEXT, PLAIN) in front of the fake broker: the per-address failure
window is decided before any password hash, across reconnections, and a storm of wrong
passwords computes a bounded number of hashes.

Nothing asserts a latency: hashes are counted by the listener's own executor, and the bound
follows from the configured windows and the storm's duration."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.authenticator import SaslServer
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.proxy.sasl.executor import AuthExecutor
from kafkaguard.tansu import free_base
from tests.support.fake_broker import FakeBroker, RawClient, request, wait_until
from tests.support.proxy_fixture import proxy_config

pytestmark = pytest.mark.integration

PASSWORD = "alice-secret"


@contextlib.asynccontextmanager
async def sasl_proxy(
    tmp_path: Path, delay_ms: int, max_delay_ms: int, executor: AuthExecutor
) -> AsyncIterator[tuple[ProxyServer, SaslServer]]:
    users = tmp_path / "users.yaml"
    credential = plain.make_credential(PASSWORD, iterations=plain.MIN_ITERATIONS)
    write_users_file(users, {"alice": {"PLAIN": credential.to_string()}})
    sasl = SaslListenerConfig(
        ("PLAIN",),
        credentials_file=users,
        failed_authentication_delay_ms=delay_ms,
        max_failed_authentication_delay_ms=max_delay_ms,
    )
    async with FakeBroker(node_ids=(1,)) as broker:
        config = proxy_config(
            broker.bootstrap,
            broker_ports=BrokerPorts(free_base(broker.node_ids), {}),
            name="SASL_PLAINTEXT",
            security_protocol="SASL_PLAINTEXT",
            sasl=sasl,
        )
        server = ProxyServer(config)
        listener_sasl = server.listeners[0].sasl
        assert listener_sasl is not None
        listener_sasl.executor = executor  # this test's own: its counts are the listener's
        await server.start(probe_attempts=1)
        try:
            yield server, listener_sasl
        finally:
            await server.close()
            executor.close()
            assert not broker.errors


async def connect(server: ProxyServer, source: str = "127.0.0.1") -> RawClient:
    host, port = server.bootstrap().rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(source, 0))
    client = RawClient(reader, writer)
    handshake = await client.roundtrip(request(17, 1, mechanism="PLAIN"))
    assert handshake.error_code == ErrorCode.none
    return client


def send_plain(client: RawClient, password: str) -> None:
    client.send(request(36, 2, auth_bytes=f"\0alice\0{password}".encode()), 2)


async def answer(client: RawClient, wait_s: float = 5.0) -> Any:
    return (await client.recv(36, 2, wait_s))[1]


async def test_reconnecting_at_once_inside_the_window_hashes_nothing(tmp_path: Path) -> None:
    executor = AuthExecutor(1, 8)
    async with sasl_proxy(tmp_path, 800, 800, executor) as (server, sasl):
        first = await connect(server)
        send_plain(first, "wrong")
        await wait_until(lambda: sasl.failures == 1)  # hashed, failed: its window is open
        assert executor.started == 1

        # The client gives up on its answer and reconnects at once, right password this time.
        again = await connect(server)
        send_plain(again, PASSWORD)
        refused = await answer(again)
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert await again.closed_by_peer()
        assert executor.started == 1  # refused without a hash
        assert sasl.throttled == 1

        assert (await answer(first)).error_code == ErrorCode.sasl_authentication_failed
        remaining = sasl.throttle.remaining("127.0.0.1", time.monotonic())
        await asyncio.sleep(remaining + 0.05)  # the window is over
        later = await connect(server)
        send_plain(later, PASSWORD)
        assert (await answer(later)).error_code == ErrorCode.none
        assert executor.started == 2
        metadata = await later.roundtrip(request(3, 12, topics=None), correlation_id=3)
        assert metadata.brokers
        assert (sasl.attempts, sasl.successes, sasl.failures, sasl.throttled) == (3, 1, 1, 1)


def hashes_bound(elapsed_s: float, delay_s: float, max_delay_s: float) -> int:
    """The most checks one address can have in ``elapsed_s``: one at a time, each failure
    opening a window (doubling up to the maximum) before the next may start."""
    count, spent, window = 1, 0.0, delay_s
    while spent + window <= elapsed_s:
        spent += window
        count += 1
        window = min(window * 2, max_delay_s)
    return count


async def test_a_storm_of_wrong_passwords_computes_a_bounded_number_of_hashes(
    tmp_path: Path,
) -> None:
    sources = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
    per_source, storm_s, delay_s, max_delay_s = 4, 1.5, 0.05, 0.2
    executor = AuthExecutor(1, 4)
    async with sasl_proxy(tmp_path, int(delay_s * 1000), int(max_delay_s * 1000), executor) as (
        server,
        sasl,
    ):
        good = await connect(server, "127.0.0.1")
        send_plain(good, PASSWORD)
        assert (await answer(good)).error_code == ErrorCode.none
        sent = [0]

        async def attacker(source: str) -> None:
            """Send a wrong password, hang up without waiting for the answer, reconnect."""
            while time.monotonic() < deadline:
                client = await connect(server, source)
                send_plain(client, "wrong")
                sent[0] += 1
                await client.writer.drain()
                client.writer.close()

        start = time.monotonic()
        deadline = start + storm_s
        attackers = [asyncio.create_task(attacker(s)) for s in sources for _ in range(per_source)]
        metadata_ok = 0
        while time.monotonic() < deadline:  # the authenticated client keeps working
            response = await good.roundtrip(request(3, 12, topics=None), metadata_ok + 10)
            assert response.brokers
            metadata_ok += 1
        await asyncio.gather(*attackers)
        # An attempt whose client left before its check began is never made (nor counted).
        await wait_until(lambda: not sasl.checks_in_flight and not executor.pending)
        elapsed = time.monotonic() - start
        assert sasl.attempts <= sent[0] + 1

        bound = len(sources) * hashes_bound(elapsed, delay_s, max_delay_s)
        assert executor.started <= bound + 1  # + the good client's own
        assert sasl.throttled > 2 * executor.started  # most attempts cost nothing
        assert sasl.attempts == (
            sasl.successes + sasl.failures + sasl.throttled + sasl.refused_queue_full
        )
        assert sasl.refused_queue_full == executor.refused
        assert metadata_ok > 0
