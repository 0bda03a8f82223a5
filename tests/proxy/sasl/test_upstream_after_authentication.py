"""A SASL listener connects to the broker only for authenticated clients: ApiVersions before
authentication is answered by the proxy, a wrong password never reaches the broker, and an
authenticated client's requests (pipelined right behind its SaslAuthenticate too) go, in
order, over one broker connection opened after authentication and kept across KIP-368
re-authentication. A client that leaves while its password check waits for the executor
never has it computed."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.proxy.sasl.executor import AuthExecutor
from kafkaguard.tansu import free_base
from tests.support.fake_broker import FakeBroker, RawClient, request, wait_until
from tests.support.proxy_fixture import proxy_config

pytestmark = pytest.mark.integration

PASSWORD = "alice-secret"
API_VERSIONS = codec.codec_versions(18)


class CountingBroker(FakeBroker):
    """Counts every connection accepted, however short-lived."""

    accepted = 0

    async def _connection(self, node_id: int, reader: Any, writer: Any) -> None:
        self.accepted += 1
        await super()._connection(node_id, reader, writer)


@contextlib.asynccontextmanager
async def sasl_and_plain_proxy(
    tmp_path: Path, executor: AuthExecutor | None = None
) -> AsyncIterator[tuple[CountingBroker, ProxyServer, ProxyServer]]:
    """A SASL_PLAINTEXT proxy and, for reference, a PLAINTEXT one, in front of one broker;
    the broker's connection count starts at 0 once both probes are done."""
    users = tmp_path / "users.yaml"
    credential = plain.make_credential(PASSWORD, iterations=plain.MIN_ITERATIONS)
    write_users_file(users, {"alice": {"PLAIN": credential.to_string()}})
    sasl = SaslListenerConfig(
        ("PLAIN",),
        credentials_file=users,
        failed_authentication_delay_ms=10,
        max_failed_authentication_delay_ms=10,
    )
    async with CountingBroker(node_ids=(1,)) as broker:
        servers = [
            ProxyServer(
                proxy_config(
                    broker.bootstrap,
                    broker_ports=BrokerPorts(free_base(broker.node_ids), {}),
                    name="SASL_PLAINTEXT",
                    security_protocol="SASL_PLAINTEXT",
                    sasl=sasl,
                )
            ),
            ProxyServer(
                proxy_config(
                    broker.bootstrap, broker_ports=BrokerPorts(free_base(broker.node_ids), {})
                )
            ),
        ]
        if executor is not None:
            listener_sasl = servers[0].listeners[0].sasl
            assert listener_sasl is not None
            listener_sasl.executor = executor
        for server in servers:
            await server.start(probe_attempts=1)
        try:
            await wait_until(lambda: broker.open_connections == 0)
            broker.accepted = 0
            broker.seen.clear()
            yield broker, servers[0], servers[1]
        finally:
            for server in servers:
                await server.close()
            assert not broker.errors


async def connect(server: ProxyServer) -> RawClient:
    host, port = server.bootstrap().rsplit(":", 1)
    return await RawClient.connect(host, int(port))


def api_versions(version: int) -> Any:
    return request(18, version, client_software_name="raw", client_software_version="1")


def authenticate(password: str) -> Any:
    return request(36, 2, auth_bytes=f"\0alice\0{password}".encode())


async def test_anonymous_client_never_reaches_the_broker(tmp_path: Path) -> None:
    async with sasl_and_plain_proxy(tmp_path) as (broker, sasl_proxy, plain_proxy):
        reference = await connect(plain_proxy)
        client = await connect(sasl_proxy)
        for version in API_VERSIONS:  # the proxy's own answer is the forwarded one, byte for byte
            client.send(api_versions(version), version)
            reference.send(api_versions(version), version)
            assert await client.recv_frame() == await reference.recv_frame()
        await reference.close()
        await wait_until(lambda: broker.open_connections == 0)
        seen_by_reference = len(broker.seen)
        answer = await client.roundtrip(request(17, 1, mechanism="PLAIN"), 10)
        assert answer.error_code == ErrorCode.none
        client.send(authenticate("wrong"), 11)
        _, refused = await client.recv(36, 2)
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert await client.closed_by_peer()
        assert broker.accepted == 1  # the reference's
        assert len(broker.seen) == seen_by_reference


async def test_authenticated_requests_go_in_order_over_one_connection(tmp_path: Path) -> None:
    async with sasl_and_plain_proxy(tmp_path) as (broker, sasl_proxy, _):
        client = await connect(sasl_proxy)
        await client.roundtrip(api_versions(3), 1)
        assert (await client.roundtrip(request(17, 1, mechanism="PLAIN"), 2)).error_code == 0
        assert broker.accepted == 0
        # SaslAuthenticate and three requests in one write: the proxy holds the three until
        # the password is checked, then forwards them in order.
        data = codec.encode_request(authenticate(PASSWORD), 3, "raw")
        data += codec.encode_request(request(3, 12, topics=None), 4, "raw")
        data += codec.encode_request(api_versions(3), 5, "raw")
        data += codec.encode_request(request(3, 12, topics=None), 6, "raw")
        client.writer.write(data)
        _, authenticated = await client.recv(36, 2)
        assert authenticated.error_code == ErrorCode.none
        correlation_id, metadata = await client.recv(3, 12)
        assert correlation_id == 4 and metadata.brokers
        assert (await client.recv(18, 3))[0] == 5
        assert (await client.recv(3, 12))[0] == 6
        assert [(s.api_key, s.correlation_id) for s in broker.seen] == [(3, 4), (18, 5), (3, 6)]
        # KIP-368 re-authentication keeps the broker connection.
        assert (await client.roundtrip(request(17, 1, mechanism="PLAIN"), 7)).error_code == 0
        assert (await client.roundtrip(authenticate(PASSWORD), 8)).error_code == 0
        assert (await client.roundtrip(request(3, 12, topics=None), 9)).brokers
        assert broker.accepted == 1
        assert broker.open_connections == 1
        await client.close()


async def test_a_queued_password_check_of_a_client_that_left_never_runs(tmp_path: Path) -> None:
    executor = AuthExecutor(1, 8)
    release = threading.Event()
    async with sasl_and_plain_proxy(tmp_path, executor) as (broker, sasl_proxy, _):
        busy = asyncio.ensure_future(executor.run(release.wait))  # the one thread is taken
        await wait_until(lambda: executor.started == 1)
        client = await connect(sasl_proxy)
        assert (await client.roundtrip(request(17, 1, mechanism="PLAIN"), 1)).error_code == 0
        client.send(authenticate("wrong"), 2)
        listener = sasl_proxy.listeners[0]
        await wait_until(lambda: executor.pending == 2)  # queued behind the busy thread
        await client.close()
        await wait_until(lambda: not listener.connections)
        release.set()
        await busy
        await wait_until(lambda: executor.pending == 0)
        assert executor.started == 1  # the password was never hashed
        assert listener.sasl is not None and not listener.sasl.checks_in_flight
        assert broker.accepted == 0
    executor.close()
