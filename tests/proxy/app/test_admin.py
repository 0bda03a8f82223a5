"""The admin listener: /metrics counts what the traffic did, /healthz, /readyz.

A proxy with ``admin:`` in front of a real Tansu; confluent-kafka produces to an allowed and a
denied topic, then the test reads ``/metrics`` over HTTP and checks the counters against that
traffic. ``/readyz`` is checked against a Tansu that is stopped and started again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import AuthorizerConfig, PolicyConfig
from kafkaguard.protocol import IMPLEMENTATION
from kafkaguard.proxy.app.metrics import UPSTREAM_UNREACHABLE
from kafkaguard.proxy.config import AdminConfig, MetricsConfig, load_config, parse_config
from kafkaguard.tansu import TansuBroker
from tests.support.handler_harness import acl
from tests.support.proxy_fixture import (
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient
from tests.support.tcp_relay import CountingRelay

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.integration


def get(proxy: RunningProxy, path: str) -> tuple[int, str]:
    assert proxy.server.admin is not None
    url = f"http://127.0.0.1:{proxy.server.admin.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples(text).items() if n == name and wanted <= ls)


@pytest.fixture
def admin_proxy(tansu: TansuBroker) -> Iterator[tuple[RunningProxy, str, str]]:
    allowed, denied = unique_name("ok"), unique_name("secret")
    bootstrap_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{tansu.port}"})
    for future in bootstrap_admin.create_topics(
        [NewTopic(allowed, 1, 1), NewTopic(denied, 1, 1)]
    ).values():
        future.result(15)
    acls = [
        acl("User:ANONYMOUS", "WRITE", "TOPIC", allowed),
        acl("User:ANONYMOUS", "DESCRIBE", "TOPIC", denied),
    ]
    policy = PolicyConfig(authorizer=AuthorizerConfig())
    config = dataclasses.replace(
        proxy_config(tansu.address, policy=policy), admin=AdminConfig(port=0)
    )
    running = start_proxy_thread(config)
    running.server.authorizer.load_snapshot(acls)  # type: ignore[attr-defined]
    try:
        yield running, allowed, denied
    finally:
        stop_proxy_thread(running)


def test_metrics_count_the_traffic(admin_proxy: tuple[RunningProxy, str, str]) -> None:
    proxy, allowed, denied = admin_proxy
    delivered: list[tuple[str, object]] = []
    producer = Producer(
        {"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "message.send.max.retries": 0}
    )
    for topic in (allowed, allowed, allowed, denied):
        producer.produce(
            topic, b"v", on_delivery=lambda err, msg: delivered.append((msg.topic(), err))
        )
        producer.flush(15)
    assert [err is None for _, err in delivered] == [True, True, True, False]

    status, text = get(proxy, "/metrics")
    assert status == 200
    assert value(text, "kafkaguard_build_info", implementation=IMPLEMENTATION) == 1
    assert value(text, "kafkaguard_connections_accepted_total", listener="PLAINTEXT") >= 1
    assert value(text, "kafkaguard_connections", listener="PLAINTEXT") >= 1
    # Produce: three allowed and one denied request (one topic each), one WRITE check each.
    assert value(text, "kafkaguard_requests_total", api="Produce") == 4
    assert value(text, "kafkaguard_responses_total", api="Produce", source="broker") == 3
    assert value(text, "kafkaguard_responses_total", api="Produce", source="proxy") == 1
    write = {"operation": "WRITE", "resource_type": "TOPIC"}
    assert value(text, "kafkaguard_authorization_decisions_total", result="allowed", **write) == 3
    assert value(text, "kafkaguard_authorization_decisions_total", result="denied", **write) == 1
    assert value(text, "kafkaguard_upstream_latency_seconds_count", api="Produce") == 3
    assert value(text, "kafkaguard_request_latency_seconds_count", api="Produce") == 4
    assert value(text, "kafkaguard_proxy_latency_seconds_count", api="Produce") == 4
    assert value(text, "kafkaguard_bytes_total", peer="client", direction="in") > 0
    assert value(text, "kafkaguard_acls") == 2
    assert value(text, "kafkaguard_ready") == 1
    assert value(text, "kafkaguard_upstream_reachable") == 1
    assert value(text, "process_open_fds") > 0

    producer.flush(1)
    del producer  # closes its connections: counted as client_closed
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        closed = value(
            get(proxy, "/metrics")[1], "kafkaguard_connections_closed_total", reason="client_closed"
        )
        if closed >= 1:
            break
        time.sleep(0.1)
    assert closed >= 1


def test_health_and_readiness(admin_proxy: tuple[RunningProxy, str, str]) -> None:
    proxy, _, _ = admin_proxy
    assert get(proxy, "/healthz") == (200, "ok\n")
    assert get(proxy, "/readyz") == (200, "ready\n")
    assert get(proxy, "/nothing")[0] == 404


def test_healthz_fails_while_the_event_loop_is_stuck(
    admin_proxy: tuple[RunningProxy, str, str],
) -> None:
    proxy, _, _ = admin_proxy
    proxy.loop.call_soon_threadsafe(time.sleep, 2.5)  # a blocking call on the loop
    time.sleep(0.2)
    status, body = get(proxy, "/healthz")
    assert (status, body) == (503, "event loop: no response within 1 s\n")
    time.sleep(2.5)
    assert get(proxy, "/healthz")[0] == 200


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


def test_readyz_names_the_upstream_while_it_is_down() -> None:
    broker = TansuBroker()
    broker.start()
    asyncio.run(broker.wait_ready())
    admin = AdminConfig(port=0, readiness_probe_interval_ms=200)
    proxy = start_proxy_thread(dataclasses.replace(proxy_config(broker.address), admin=admin))
    try:
        assert get(proxy, "/readyz")[0] == 200
        broker.stop()
        wait_until(lambda: get(proxy, "/readyz")[0] == 503, "/readyz: 503 once Tansu stopped")
        status, body = get(proxy, "/readyz")
        assert status == 503 and body == UPSTREAM_UNREACHABLE + "\n"
        metrics = get(proxy, "/metrics")[1]
        assert value(metrics, "kafkaguard_upstream_reachable") == 0
        assert value(metrics, "kafkaguard_ready") == 0
        broker = TansuBroker(port=broker.port)
        broker.start()
        asyncio.run(broker.wait_ready())
        wait_until(lambda: get(proxy, "/readyz") == (200, "ready\n"), "ready again")
    finally:
        stop_proxy_thread(proxy)
        broker.stop()


def test_readyz_and_metrics_scrapes_open_no_upstream_connection(tansu: TansuBroker) -> None:
    relay = CountingRelay(tansu.address)
    relay.start()
    admin = AdminConfig(port=0, readiness_probe_interval_ms=600_000)  # no probe in the test
    proxy = start_proxy_thread(dataclasses.replace(proxy_config(relay.address), admin=admin))
    try:
        before = relay.accepted
        assert before >= 1  # the startup probe went through the relay
        for _ in range(20):
            assert get(proxy, "/readyz") == (200, "ready\n")
            assert value(get(proxy, "/metrics")[1], "kafkaguard_upstream_reachable") == 1
        assert relay.accepted == before
    finally:
        stop_proxy_thread(proxy)
        relay.stop()


def test_the_readiness_probe_runs_once_per_interval(tansu: TansuBroker) -> None:
    relay = CountingRelay(tansu.address)
    relay.start()
    admin = AdminConfig(port=0, readiness_probe_interval_ms=300)
    proxy = start_proxy_thread(dataclasses.replace(proxy_config(relay.address), admin=admin))
    try:
        before = relay.accepted
        wait_until(lambda: relay.accepted >= before + 2, "two readiness probes")
        assert get(proxy, "/readyz") == (200, "ready\n")
    finally:
        stop_proxy_thread(proxy)
        relay.stop()


def test_broker_answers_to_traffic_stand_in_for_the_readiness_probe(tansu: TansuBroker) -> None:
    relay = CountingRelay(tansu.address)
    relay.start()
    admin = AdminConfig(port=0, readiness_probe_interval_ms=300)
    proxy = start_proxy_thread(dataclasses.replace(proxy_config(relay.address), admin=admin))
    host, port = proxy.bootstrap.rsplit(":", 1)
    try:
        with RawKafkaClient(host, int(port), timeout_s=10) as client:
            client.api_versions()  # the client's broker connection: through the relay
            before = relay.accepted
            deadline = time.monotonic() + 3  # ten intervals: no probe while the broker answers
            while time.monotonic() < deadline:
                client.api_versions()
                time.sleep(0.05)
            assert relay.accepted == before
        assert get(proxy, "/readyz") == (200, "ready\n")
        wait_until(lambda: relay.accepted > before, "a probe once the traffic stopped")
    finally:
        stop_proxy_thread(proxy)
        relay.stop()


@pytest.fixture
def limited_proxy(tansu: TansuBroker) -> Iterator[RunningProxy]:
    """A proxy whose admin listener has small limits."""
    admin = AdminConfig(port=0, max_connections=16, request_timeout_ms=1000, idle_timeout_ms=1000)
    running = start_proxy_thread(dataclasses.replace(proxy_config(tansu.address), admin=admin))
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def admin_address(proxy: RunningProxy) -> tuple[str, int]:
    assert proxy.server.admin is not None
    return "127.0.0.1", proxy.server.admin.port


def answers(proxy: RunningProxy, path: str) -> tuple[int, str] | None:
    """``get``, or None when the listener closed the connection without an answer."""
    try:
        return get(proxy, path)
    except (urllib.error.URLError, OSError):
        return None


class IdleFlood:
    """``count`` connections to ``address`` that send nothing, held open by a thread of its
    own: each one the listener closes is opened again (at most ``per_round`` per 20 ms round,
    a pace at which fewer connections than the cap arrive while one probe is accepted and read)."""

    def __init__(self, address: tuple[str, int], count: int, per_round: int = 4) -> None:
        self._address = address
        self._per_round = per_round
        self.sockets = [socket.create_connection(address, timeout=10) for _ in range(count)]
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idle-flood", daemon=True)

    def __enter__(self) -> IdleFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.sockets:
            sock.close()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            closed, _, _ = select.select(self.sockets, [], [], 0)
            for sock in closed[: self._per_round]:  # readable: the 503, or the end
                self.sockets.remove(sock)
                sock.close()
                self.sockets.append(socket.create_connection(self._address, timeout=10))
                self.reopened += 1


def test_idle_connections_kept_at_the_cap_neither_block_healthz_nor_add_threads(
    limited_proxy: RunningProxy,
) -> None:
    threads = threading.active_count()
    with IdleFlood(admin_address(limited_proxy), 300) as flood:
        assert threading.active_count() <= threads + 1 + 2  # the flood's own, at most 2 more
        wait_until(lambda: flood.reopened >= 32, "the flood re-opening what the listener closed")
        probes = [answers(limited_proxy, "/healthz") for _ in range(20)]
        assert probes == [(200, "ok\n")] * 20
        assert threading.active_count() <= threads + 1 + 2
        metrics = get(limited_proxy, "/metrics")[1]
    evicted = value(metrics, "kafkaguard_admin_connections_closed_total", reason="evicted")
    cut = value(metrics, "kafkaguard_admin_connections_closed_total", reason="request_timeout")
    assert evicted >= 1
    assert evicted + cut >= 300 - 16  # each past the cap took a slot; the last ones timed out
    assert value(metrics, "kafkaguard_admin_connections_refused_total") == 0


def test_an_ipv6_wildcard_admin_address_takes_ipv4_too(tansu: TansuBroker) -> None:
    admin = AdminConfig(bind_host="::", port=0, allow_remote=True)
    proxy = start_proxy_thread(dataclasses.replace(proxy_config(tansu.address), admin=admin))
    try:
        assert proxy.server.admin is not None
        for host in ("127.0.0.1", "[::1]"):
            url = f"http://{host}:{proxy.server.admin.port}/healthz"
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.read() == b"ok\n"
    finally:
        stop_proxy_thread(proxy)


def closed_by_peer(sock: socket.socket, dribble: bytes, timeout_s: float = 20.0) -> bool:
    """Send ``dribble`` every 0.2 s until the peer closes the connection (True) or
    ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            sock.sendall(dribble)
            readable, _, _ = select.select([sock], [], [], 0.2)
            if readable and not sock.recv(4096):
                return True
        except OSError:  # reset
            return True
    return False


def test_a_slowloris_is_cut_after_the_request_timeout(limited_proxy: RunningProxy) -> None:
    with socket.create_connection(admin_address(limited_proxy), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert closed_by_peer(sock, b"a")  # a header line that never ends
    metrics = get(limited_proxy, "/metrics")[1]
    assert (
        value(metrics, "kafkaguard_admin_connections_closed_total", reason="request_timeout") == 1
    )


def test_a_kept_alive_connection_is_closed_when_idle(limited_proxy: RunningProxy) -> None:
    with socket.create_connection(admin_address(limited_proxy), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).endswith(b"\r\n\r\nok\n")
        assert closed_by_peer(sock, b"")
    metrics = get(limited_proxy, "/metrics")[1]
    assert value(metrics, "kafkaguard_admin_connections_closed_total", reason="idle_timeout") == 1


def test_at_the_cap_a_kept_alive_connection_between_requests_gives_up_its_slot(
    limited_proxy: RunningProxy,
) -> None:
    address = admin_address(limited_proxy)
    with socket.create_connection(address, timeout=10) as kept:
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(kept).endswith(b"\r\n\r\nok\n")
        idle = [socket.create_connection(address, timeout=10) for _ in range(16)]  # the cap
        try:
            readable, _, _ = select.select([kept], [], [], 10)
            assert readable and kept.recv(1) == b""  # closed: it waited longest
            assert answers(limited_proxy, "/healthz") == (200, "ok\n")
        finally:
            for sock in idle:
                sock.close()
    metrics = get(limited_proxy, "/metrics")[1]
    assert value(metrics, "kafkaguard_admin_connections_closed_total", reason="evicted") >= 1


def read_response(sock: socket.socket, *, head_only: bool = False) -> bytes:
    """One response: its head, then (unless ``head_only``) Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if head_only:
        return data  # with whatever came after the head
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.startswith(b"Content-Length:")
    )
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk
        body += chunk
    return head + b"\r\n\r\n" + body


def test_head_and_other_methods(limited_proxy: RunningProxy) -> None:
    with socket.create_connection(admin_address(limited_proxy), timeout=10) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = read_response(sock, head_only=True)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 3\r\n" in head
        assert head.endswith(b"\r\n\r\n")  # no body (one write: it would have come along)
        sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab")
        answer = read_response(sock)
        assert answer.startswith(b"HTTP/1.1 405 ") and b"Allow: GET, HEAD\r\n" in answer
        assert b"Connection: close\r\n" in answer  # the body is not read
        assert sock.recv(1) == b""


@pytest.mark.parametrize(
    ("request_bytes", "status", "reason"),
    [
        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, "request_too_large"),
        (
            b"GET /metrics HTTP/1.1\r\n" + b"X-Many: a\r\n" * 1000 + b"\r\n",
            431,
            "request_too_large",
        ),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "bad_request"),
        (b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", 400, "bad_request"),
    ],
    ids=["long-header", "many-headers", "not-http", "bad-header"],
)
def test_hostile_requests_are_answered_counted_and_not_logged(
    limited_proxy: RunningProxy,
    caplog: pytest.LogCaptureFixture,
    request_bytes: bytes,
    status: int,
    reason: str,
) -> None:
    with socket.create_connection(admin_address(limited_proxy), timeout=10) as sock:
        sock.sendall(request_bytes)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"Connection: close\r\n" in answer
    metrics = get(limited_proxy, "/metrics")[1]
    assert value(metrics, "kafkaguard_admin_connections_closed_total", reason=reason) == 1
    assert [r for r in caplog.records if r.name == "kafkaguard.admin"] == []


def test_the_example_admin_section_uncommented_is_valid(tmp_path: Path) -> None:
    example = (Path(__file__).parents[3] / "config.example.yaml").read_text(encoding="utf-8")
    section = example[example.index("#admin:\n") :].partition("\n\n")[0]
    uncommented = "\n".join(line[1:] for line in section.splitlines())
    path = tmp_path / "config.yaml"
    path.write_text(example.replace(section, uncommented), encoding="utf-8")
    config = load_config(path)
    assert config.admin == AdminConfig()  # every value shown is the default
    keys = set(yaml.safe_load(uncommented)["admin"])
    assert keys == {field.name for field in dataclasses.fields(AdminConfig)}  # and every key
    assert config.metrics == MetricsConfig(per_principal=False, max_principals=100)
    assert config.log_format == "text"


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            "max_connections: 5, request_timeout_ms: 100, idle_timeout_ms: 200, "
            "max_request_bytes: 1024, readiness_probe_interval_ms: 300",
            AdminConfig(
                port=9404,
                max_connections=5,
                request_timeout_ms=100,
                idle_timeout_ms=200,
                max_request_bytes=1024,
                readiness_probe_interval_ms=300,
            ),
        ),
        ("max_connections: 0", "max_connections"),
        ("request_timeout_ms: 0", "request_timeout_ms"),
        ("idle_timeout_ms: 0", "idle_timeout_ms"),
        ("max_request_bytes: 100", "max_request_bytes"),
        ("readiness_probe_interval_ms: 10", "readiness_probe_interval_ms"),
    ],
)
def test_the_admin_limits_are_parsed_and_bounded(keys: str, expected: object) -> None:
    text = (
        "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"
        "listeners: [{name: PLAINTEXT, port: 19092}]\n"
        f"admin: {{{keys}}}\n"
    )
    if isinstance(expected, AdminConfig):
        assert parse_config(ConfigSection.from_text(text, "c.yaml")).admin == expected
    else:
        with pytest.raises(ConfigError, match=f"admin.{expected}"):
            parse_config(ConfigSection.from_text(text, "c.yaml"))
