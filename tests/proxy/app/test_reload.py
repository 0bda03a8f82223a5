"""Configuration reload without a restart (issue 14): SIGHUP and ``kafkaguard reload``.

First the plan (kafkaguard/proxy/app/reload.py: which changed settings apply, which need a
restart), then a proxy on a loop thread reloading its file (enforcement switched on an open
connection, a rejected reload applying nothing, a removed listener drained), then
``kafkaguard run`` as a subprocess in front of Tansu, reloaded twice while a producer keeps
producing: once with new super users, a lower per-address connection limit and an added
listener (``kafkaguard reload``), once with an invalid file (SIGHUP).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from kafkaguard.certs import tooling
from kafkaguard.cli import main
from kafkaguard.config_tree import ConfigSection
from kafkaguard.policy.model import AclOperation, ResourceType, acl_binding
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.protocol import codec
from kafkaguard.proxy.app.metrics import ProxyCollector
from kafkaguard.proxy.app.reload import plan_reload
from kafkaguard.proxy.config import HostPort, ProxyConfig, load_config, parse_config
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient

TOPIC_AUTHORIZATION_FAILED = codec.ErrorCode.topic_authorization_failed
QUIET = {"log_level": 3}

# -- the plan ------------------------------------------------------------------------------------

RUNNING = """\
upstream:
  bootstrap_servers: ['127.0.0.1:9092']
listeners:
  - name: PLAINTEXT
    port: 19092
  - name: INTERNAL
    port: 19192
    limits:
      max_connections: 50
  - name: OLD
    port: 19292
authorizer:
  super_users: 'User:admin'
limits:
  max_connections_per_ip: 100
admin:
  port: 9404
"""

EDITED = """\
upstream:
  bootstrap_servers: ['127.0.0.1:9093']
listeners:
  - name: PLAINTEXT
    port: 19093
    enforcement: log_only
  - name: INTERNAL
    port: 19192
    limits:
      max_connections: 60
  - name: NEW
    port: 19392
authorizer:
  class: 'some.module:OtherAuthorizer'
  super_users: 'User:admin;User:ops'
  allow_everyone_if_no_acl_found: true
limits:
  max_connections_per_ip: 5
  authentication_threads: 2
admin:
  port: 9405
logging:
  level: DEBUG
shutdown_timeout_ms: 5000
audit:
  enabled: true
"""


def _parse(text: str) -> ProxyConfig:
    return parse_config(ConfigSection.from_text(text, "c.yaml"), Path("/nonexistent"))


def test_plan_applies_what_can_change_and_names_what_needs_a_restart() -> None:
    plan = plan_reload(_parse(RUNNING), _parse(EDITED))
    assert set(plan.applied) == {
        "listeners[PLAINTEXT].enforcement",
        "listeners[INTERNAL].limits.max_connections",
        "listeners[NEW] (added)",
        "listeners[OLD] (removed)",
        "authorizer.super_users",
        "authorizer.allow_everyone_if_no_acl_found",
        "limits.max_connections_per_ip",
        "logging.level",
        "shutdown_timeout_ms",
    }
    assert set(plan.restart_needed) == {
        "upstream.bootstrap_servers",
        "listeners[PLAINTEXT].port",
        "listeners[PLAINTEXT].broker_ports",  # its default base is port + 1
        "authorizer.class",
        "limits.authentication_threads",
        "admin.port",
        "audit.enabled",
    }
    assert [ls.name for ls in plan.added] == ["NEW"] and plan.removed == ("OLD",)

    config = plan.config  # new reloadable values, running values for the rest
    plaintext, internal, new = config.listeners
    assert (plaintext.name, plaintext.port, config.listener_enforcement(plaintext)) == (
        "PLAINTEXT",
        19092,
        "log_only",
    )
    assert config.listener_limits(internal).max_connections == 60
    assert config.listener_limits(internal).max_connections_per_ip == 5
    assert config.listener_limits(new).max_connections_per_ip == 5
    assert config.limits.authentication_threads == 1
    assert config.upstream.bootstrap_servers == (HostPort("127.0.0.1", 9092),)
    assert config.admin is not None and config.admin.port == 9404
    assert config.audit.enabled is False
    authorizer = config.policy.authorizer
    assert authorizer.super_users == frozenset({"User:admin", "User:ops"})
    assert authorizer.allow_everyone_if_no_acl_found is True
    assert authorizer.class_path == "kafkaguard.policy.standard:StandardAuthorizer"
    assert (config.log_level, config.shutdown_timeout_ms) == ("DEBUG", 5000)

    # The next reload of the same file applies nothing and warns about the same settings.
    again = plan_reload(config, _parse(EDITED))
    assert again.applied == () and set(again.restart_needed) == set(plan.restart_needed)


def test_plan_of_an_unchanged_file_is_empty() -> None:
    plan = plan_reload(_parse(RUNNING), _parse(RUNNING))
    assert (plan.applied, plan.restart_needed, plan.added, plan.removed) == ((), (), (), ())


def test_an_authorizer_without_reconfigure_keeps_its_settings() -> None:
    edited = RUNNING.replace("'User:admin'", "'User:ops'")
    plan = plan_reload(_parse(RUNNING), _parse(edited), reconfigurable_authorizer=False)
    assert (plan.applied, plan.restart_needed) == ((), ("authorizer.super_users",))
    assert plan.config.policy.authorizer.super_users == frozenset({"User:admin"})


OPA = """\
authorizer:
  class: kafkaguard.policy.opa:OpaAuthorizer
  options:
    url: http://127.0.0.1:8181/v1/data/kafka/authz/allow
    super_users: 'User:ops'
"""


def test_reloadable_options_of_a_pluggable_authorizer_are_applied_the_others_kept() -> None:
    listeners = RUNNING.split("authorizer:")[0]
    running = _parse(listeners + OPA)
    edited = OPA.replace("'User:ops'", "'User:ops;Group:admins'")
    plan = plan_reload(
        running,
        _parse(listeners + edited),
        reloadable_options=frozenset({"super_users"}),
    )
    assert (plan.applied, plan.restart_needed) == (("authorizer.options.super_users",), ())
    options = plan.config.policy.authorizer.options
    assert options["super_users"] == "User:ops;Group:admins"

    moved = edited.replace(":8181/", ":8182/")
    plan = plan_reload(
        plan.config,
        _parse(listeners + moved.replace("'User:ops;", "'")),
        reloadable_options=frozenset({"super_users"}),
    )
    assert plan.applied == ("authorizer.options.super_users",)
    assert plan.restart_needed == ("authorizer.options",)  # the url: a restart
    assert dict(plan.config.policy.authorizer.options) == {
        "url": "http://127.0.0.1:8181/v1/data/kafka/authz/allow",
        "super_users": "Group:admins",
    }
    # Without reloadable options (the standard authorizer's), options are a restart as before.
    plan = plan_reload(running, _parse(listeners + edited))
    assert (plan.applied, plan.restart_needed) == ((), ("authorizer.options",))


def test_a_listener_override_is_named_once_per_listener() -> None:
    edited = RUNNING.replace(
        "max_connections_per_ip: 100",
        "max_connections_per_ip: 100\n  connections_max_idle_ms: 1000",
    )
    edited = edited.replace(
        "max_connections: 50", "max_connections: 50\n      max_frame_bytes: 2048"
    )
    plan = plan_reload(_parse(RUNNING), _parse(edited))
    assert set(plan.applied) == {
        "limits.connections_max_idle_ms",
        "listeners[INTERNAL].limits.max_frame_bytes",
    }


def test_the_embedded_broker_of_the_demo_is_no_upstream_change() -> None:
    without = RUNNING.replace(
        "  bootstrap_servers: ['127.0.0.1:9092']\n", "  embedded: true\n  connect_timeout_s: 10\n"
    )
    parsed = _parse(RUNNING)  # as kafkaguard run substitutes the embedded broker's address:
    running = replace(parsed, upstream=replace(parsed.upstream, embedded=True))
    assert plan_reload(running, _parse(without), embedded_upstream=True).restart_needed == ()
    assert plan_reload(running, _parse(without)).restart_needed == ("upstream.bootstrap_servers",)


# -- a proxy on a loop thread, reloading its file -----------------------------------------------


@dataclass
class Listener:
    name: str
    port: int = field(default_factory=free_port)
    base: int = field(default_factory=lambda: free_base([TANSU_NODE_ID]))
    extra: str = ""
    """More YAML lines of the listener, indented by four spaces."""

    def yaml(self) -> str:
        return (
            f"  - name: {self.name}\n    port: {self.port}\n"
            f"    broker_ports: {{base: {self.base}}}\n{self.extra}"
        )


def write_config(
    path: Path, tansu: TansuBroker, listeners: Sequence[Listener], body: str, upstream: str = ""
) -> Path:
    """The proxy's file: Tansu upstream (plus ``upstream`` lines), listeners, then ``body``."""
    path.write_text(
        f"upstream:\n  bootstrap_servers: ['{tansu.address}']\n{upstream}"
        f"listeners:\n{''.join(ls.yaml() for ls in listeners)}{body}",
        encoding="utf-8",
    )
    return path


def create_topic(tansu: TansuBroker, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique_name(prefix)
    admin = AdminClient({"bootstrap.servers": str(tansu.address), **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    return topic


def metadata_error(client: RawKafkaClient, topic: str) -> Any:
    """The topic's error code in a Metadata v12 answer (TOPIC_AUTHORIZATION_FAILED: denied)."""
    schema = codec.request_schema(3, 12)
    entry = codec.make_entity(codec.nested_type(schema, "topics"), name=topic)
    _, response = client.request(
        codec.make_entity(schema, topics=(entry,), allow_auto_topic_creation=False)
    )
    (answer,) = response.topics
    return answer.error_code


def reload(running: RunningProxy) -> Any:
    future = asyncio.run_coroutine_threadsafe(running.server.reload_config(), running.loop)
    return future.result(30)


@contextlib.contextmanager
def proxy_from(path: Path) -> Iterator[RunningProxy]:
    running = start_proxy_thread(load_config(path))
    try:
        yield running
    finally:
        stop_proxy_thread(running)


@pytest.mark.integration
def test_enforcement_switch_applies_to_connections_already_open(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    topic = create_topic(tansu, "mode")
    listener = Listener("PLAINTEXT")
    path = write_config(tmp_path / "c.yaml", tansu, [listener], "enforcement: enforce\n")
    with proxy_from(path) as running, RawKafkaClient("127.0.0.1", listener.port) as client:
        assert metadata_error(client, topic) == TOPIC_AUTHORIZATION_FAILED  # no ACLs at all

        write_config(path, tansu, [listener], "enforcement: log_only\n")
        plan = reload(running)
        assert plan is not None and plan.applied == ("enforcement",)
        assert metadata_error(client, topic) == codec.ErrorCode.none  # the same connection
        counters = running.server.audit.counters["PLAINTEXT"]
        assert counters.mode == "log_only" and counters.would_deny == 1  # audited as a dry run

        write_config(path, tansu, [listener], "enforcement: enforce\n")
        assert reload(running) is not None
        assert metadata_error(client, topic) == TOPIC_AUTHORIZATION_FAILED
        assert counters.mode == "enforce" and counters.would_deny == 1
        assert running.server.reloads == {"applied": 2, "rejected": 0}


@pytest.mark.integration
def test_naming_a_principal_for_the_internal_topics_applies_to_open_connections(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    topic = create_topic(tansu, "_kafkaguard-reload")
    listener = Listener("PLAINTEXT")
    granted = "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
    path = write_config(tmp_path / "c.yaml", tansu, [listener], granted)
    with proxy_from(path) as running, RawKafkaClient("127.0.0.1", listener.port) as client:
        assert metadata_error(client, topic) == TOPIC_AUTHORIZATION_FAILED  # a super user
        named = granted + "  internal_topics:\n    principals: ['User:ANONYMOUS']\n"
        write_config(path, tansu, [listener], named)
        plan = reload(running)
        assert plan is not None and plan.applied == ("authorizer.internal_topics.principals",)
        assert metadata_error(client, topic) == codec.ErrorCode.none


@pytest.mark.integration
def test_new_connections_get_the_new_limits_open_ones_keep_theirs(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    topic = create_topic(tansu, "idle")
    listener = Listener("PLAINTEXT")
    granted = "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
    path = write_config(tmp_path / "c.yaml", tansu, [listener], granted)
    with proxy_from(path) as running, RawKafkaClient("127.0.0.1", listener.port) as before:
        before.api_versions()
        write_config(path, tansu, [listener], granted + "limits:\n  connections_max_idle_ms: 300\n")
        plan = reload(running)
        assert plan is not None and plan.applied == ("limits.connections_max_idle_ms",)
        with RawKafkaClient("127.0.0.1", listener.port) as after:
            after.api_versions()
            started = time.monotonic()
            with pytest.raises((EOFError, ConnectionResetError)):
                after.read_frame()  # idle: closed by the sweep, now every 75 ms
            assert time.monotonic() - started < 2.0
        time.sleep(0.5)
        assert metadata_error(before, topic) == codec.ErrorCode.none  # admitted with 600 s
        assert running.server.listeners[0].counters["idle"] == 1


@pytest.mark.integration
def test_connection_creation_rate_is_reloaded(tansu: TansuBroker, tmp_path: Path) -> None:
    """KIP-612's per-address ``connection_creation_rate``, set and lifted by a reload: the
    next connection from the address is throttled (never answered, closed), the one it had
    open stays, another address is unaffected."""
    listener = Listener("PLAINTEXT")
    path = write_config(tmp_path / "c.yaml", tansu, [listener], "")
    quota = "limits:\n  connection_creation_rate_overrides: '127.0.0.2:0'\n"
    with (
        proxy_from(path) as running,
        RawKafkaClient("127.0.0.1", listener.port, source="127.0.0.2") as before,
    ):
        before.api_versions()
        write_config(path, tansu, [listener], quota)
        plan = reload(running)
        assert plan is not None and plan.applied == ("limits.connection_creation_rate_overrides",)
        with (
            RawKafkaClient("127.0.0.1", listener.port, source="127.0.0.2") as throttled,
            pytest.raises((EOFError, ConnectionResetError)),
        ):
            throttled.api_versions()  # held unread, then closed
        counters = running.server.listeners[0].counters
        assert counters["connection_creation_rate"] == 1
        refused = [
            sample
            for family in ProxyCollector(running.server, None).collect()
            if family.name == "kafkaguard_connections_refused"
            for sample in family.samples
            if sample.labels["reason"] == "connection_creation_rate"
        ]
        assert [s.value for s in refused] == [1]  # /metrics: refused, by reason
        before.api_versions()  # open before the reload: kept
        with RawKafkaClient("127.0.0.1", listener.port, source="127.0.0.3") as other:
            other.api_versions()
        write_config(path, tansu, [listener], "")
        plan = reload(running)
        assert plan is not None and plan.applied == ("limits.connection_creation_rate_overrides",)
        with RawKafkaClient("127.0.0.1", listener.port, source="127.0.0.2") as after:
            after.api_versions()
        assert counters["connection_creation_rate"] == 1


@pytest.mark.integration
def test_a_rejected_reload_applies_nothing(
    tansu: TansuBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: Any
) -> None:
    topic = create_topic(tansu, "reject")
    plaintext, extra = Listener("PLAINTEXT"), Listener("EXTRA")
    path = write_config(tmp_path / "c.yaml", tansu, [plaintext], "")
    granted = "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
    with proxy_from(path) as running, RawKafkaClient("127.0.0.1", plaintext.port) as client:
        # An invalid file: check-config's error, word for word.
        write_config(path, tansu, [plaintext], granted + "limits:\n  max_connections: many\n")
        assert main(["check-config", "--config", str(path)]) == 2
        expected = capsys.readouterr().err.strip().removeprefix("kafkaguard: ")
        assert expected.startswith("configuration error: ") and "max_connections" in expected
        with caplog.at_level(logging.ERROR, "kafkaguard.proxy"):
            assert reload(running) is None
        assert f"rejected, the running configuration stays: {expected}" in caplog.text

        # Valid, but the added listener's port is taken: the new super user is not applied.
        with socket.create_server(("127.0.0.1", extra.port)):
            write_config(path, tansu, [plaintext, extra], granted)
            caplog.clear()
            with caplog.at_level(logging.ERROR, "kafkaguard.proxy"):
                assert reload(running) is None
        assert (
            f"cannot open an added listener: listener EXTRA cannot bind 127.0.0.1:{extra.port} "
            "(bootstrap port): [Errno 98] Address already in use"
        ) in caplog.text
        assert metadata_error(client, topic) == TOPIC_AUTHORIZATION_FAILED
        assert [ls.config.name for ls in running.server.listeners] == ["PLAINTEXT"]
        assert running.server.reloads == {"applied": 0, "rejected": 2}

        # The port is free again: the same file applies whole.
        assert reload(running) is not None
        assert metadata_error(client, topic) == codec.ErrorCode.none
        with RawKafkaClient("127.0.0.1", extra.port) as other:
            assert metadata_error(other, topic) == codec.ErrorCode.none
        assert running.server.reloads == {"applied": 1, "rejected": 2}


@pytest.mark.integration
def test_a_removed_listener_is_drained_and_the_others_keep_their_connections(
    tansu: TansuBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = create_topic(tansu, "remove")
    kept, gone = Listener("KEPT"), Listener("GONE")
    granted = "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
    path = write_config(tmp_path / "c.yaml", tansu, [kept, gone], granted)
    with (
        proxy_from(path) as running,
        RawKafkaClient("127.0.0.1", kept.port) as stays,
        RawKafkaClient("127.0.0.1", gone.port) as leaves,
    ):
        assert metadata_error(stays, topic) == metadata_error(leaves, topic) == 0
        write_config(path, tansu, [kept], granted)
        with caplog.at_level(logging.INFO, "kafkaguard.proxy"):
            plan = reload(running)
            assert plan is not None and plan.applied == ("listeners[GONE] (removed)",)
            with pytest.raises((EOFError, ConnectionResetError)):
                leaves.read_frame()  # nothing in flight: closed at once
            deadline = time.monotonic() + 10
            while "listener GONE closed: 1 of 1 connections closed in time" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.05)
        with pytest.raises(ConnectionRefusedError):
            RawKafkaClient("127.0.0.1", gone.port)
        assert metadata_error(stays, topic) == codec.ErrorCode.none
        assert [ls.config.name for ls in running.server.listeners] == ["KEPT"]


# -- kafkaguard run, reloaded under load ---------------------------------------------------------


@dataclass
class ProxyProcess:
    process: subprocess.Popen[bytes]
    log_file: Path
    pid_file: Path

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, fragment: str, count: int = 1, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while self.log().count(fragment) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{fragment!r} not logged {count} times:\n{self.log()}")
            time.sleep(0.05)


def kafkaguard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkaguard", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def run_proxy(tmp_path: Path) -> Iterator[Any]:
    """``run_proxy(config)`` starts ``kafkaguard run --config config --pid-file ...`` (the
    production path: uvloop, signal handlers); killed at teardown if still running."""
    started: list[ProxyProcess] = []

    def start(config: Path) -> ProxyProcess:
        log_file, pid_file = tmp_path / "proxy.log", tmp_path / "proxy.pid"
        with log_file.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "kafkaguard", "run", "--config", str(config),
                 "--pid-file", str(pid_file)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        proxy = ProxyProcess(process, log_file, pid_file)
        started.append(proxy)
        proxy.wait_for_log("kafkaguard listener PLAINTEXT: bootstrap", timeout_s=30)
        deadline = time.monotonic() + 10
        while not pid_file.exists():
            assert time.monotonic() < deadline, "no pid file"
            time.sleep(0.05)
        return proxy

    try:
        yield start
    finally:
        for proxy in started:
            if proxy.process.poll() is None:
                proxy.process.kill()
                proxy.process.wait(10)


class LoadProducer:
    """A confluent-kafka producer (acks=all) producing continuously from a thread."""

    def __init__(self, bootstrap: str, topic: str, **config: Any) -> None:
        self.bootstrap, self.topic, self.config = bootstrap, topic, config
        self.delivered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-producer", daemon=True)
        self._unflushed = -1

    def __enter__(self) -> LoadProducer:
        self._thread.start()
        self.wait_for(100)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for(self, more: int, timeout_s: float = 20) -> None:
        """Until ``more`` records beyond those delivered now are delivered."""
        target, deadline = self.delivered + more, time.monotonic() + timeout_s
        while self.delivered < target:
            assert time.monotonic() < deadline, f"the producer stalled: {self.errors[:3]}"
            time.sleep(0.02)

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                **QUIET,
                **self.config,
            }
        )

        def delivered(err: Any, _message: Any) -> None:
            if err is None:
                self.delivered += 1
            else:
                self.errors.append(str(err))

        index = 0
        while not self._stop.is_set():
            producer.produce(self.topic, f"r{index}".encode(), on_delivery=delivered)
            producer.poll(0.002)
            index += 1
        self._unflushed = producer.flush(30)

    @property
    def unflushed(self) -> int:
        return self._unflushed


def produce_one(bootstrap: str, topic: str) -> Any:
    """One record through a fresh producer: the delivery error, None when delivered."""
    from confluent_kafka import Producer

    outcome: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "linger.ms": 0, **QUIET}
    )
    producer.produce(topic, b"one", on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def admitted_connections(port: int, attempts: int) -> int:
    """Open up to ``attempts`` connections and ask each ApiVersions; how many were answered
    before the first refused one (all are closed again)."""
    clients: list[RawKafkaClient] = []
    try:
        for _ in range(attempts):
            client = RawKafkaClient("127.0.0.1", port, timeout_s=5)
            clients.append(client)
            try:
                client.api_versions()
            except (EOFError, ConnectionResetError):
                return len(clients) - 1
        return len(clients)
    finally:
        for client in clients:
            client.close()


def reload_counts(admin_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.findall(r'kafkaguard_config_reloads_total\{result="(\w+)"\} (\S+)', text)
    return {result: float(count) for result, count in found}


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_reload_under_load_applies_new_settings_and_rejects_an_invalid_file(
    run_proxy: Any, tansu: TansuBroker, tmp_path: Path
) -> None:
    load_topic, other_topic = create_topic(tansu, "load"), create_topic(tansu, "other")
    (tmp_path / "acls.yaml").write_text(
        format_acl_text(
            [acl_binding(ResourceType.TOPIC, load_topic, "User:ANONYMOUS", AclOperation.ALL)]
        ),
        encoding="utf-8",
    )
    plaintext, extra, admin_port = Listener("PLAINTEXT"), Listener("EXTRA"), free_port()
    common = (
        "acl_store:\n  type: file\n  path: acls.yaml\n"
        f"admin:\n  port: {admin_port}\nshutdown_timeout_ms: 5000\n"
    )
    config = write_config(tmp_path / "config.yaml", tansu, [plaintext], common)
    proxy = run_proxy(config)
    bootstrap = f"127.0.0.1:{plaintext.port}"

    with LoadProducer(bootstrap, load_topic) as load:
        # Before: only the load topic is granted; no per-address limit.
        assert produce_one(bootstrap, other_topic).code() == TOPIC_AUTHORIZATION_FAILED
        assert admitted_connections(plaintext.port, 12) == 12

        # New super user, a per-address limit, an added listener, and a setting that needs a
        # restart; reloaded with `kafkaguard reload`, which checks the file first.
        write_config(
            config,
            tansu,
            [plaintext, extra],
            common + "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
            "limits:\n  max_connections_per_ip: 8\n",
            upstream="  connect_timeout_s: 7\n",
        )
        done = kafkaguard("reload", "--config", str(config), "--pid-file", str(proxy.pid_file))
        assert done.returncode == 0, done.stderr
        assert f"sent SIGHUP to process {proxy.process.pid}" in done.stdout
        proxy.wait_for_log("changed but needs a restart")  # logged last
        log = proxy.log()
        assert re.search(
            r"configuration reloaded from \S+: applied limits\.max_connections_per_ip, "
            r"listeners\[EXTRA\] \(added\) and authorizer\.super_users\n",
            log,
        )
        assert re.search(r"WARNING .*upstream\.connect_timeout_s changed but needs a restart", log)
        load.wait_for(100)

        assert produce_one(bootstrap, other_topic) is None  # the new super user
        assert produce_one(f"127.0.0.1:{extra.port}", other_topic) is None  # the added listener
        # The load producer's connections count: fewer than 8 more are admitted.
        assert admitted_connections(plaintext.port, 12) < 8
        proxy.wait_for_log("holds its max_connections_per_ip (8)")
        load.wait_for(100)

        # An invalid file: `kafkaguard reload` refuses it and signals nothing...
        config.write_text(
            config.read_text().replace("max_connections_per_ip: 8", "max_connections_per_ip: x"),
            encoding="utf-8",
        )
        check = kafkaguard("check-config", "--config", str(config))
        refused = kafkaguard("reload", "--config", str(config), "--pid-file", str(proxy.pid_file))
        assert check.returncode == refused.returncode == 2
        assert refused.stderr == check.stderr and "max_connections_per_ip" in check.stderr
        assert reload_counts(admin_port) == {"applied": 1.0, "rejected": 0.0}
        # ... and a SIGHUP is rejected by the proxy with the same error; the old config serves.
        os.kill(proxy.process.pid, signal.SIGHUP)
        proxy.wait_for_log("rejected, the running configuration stays")
        error = check.stderr.strip().removeprefix("kafkaguard: ")
        assert f"rejected, the running configuration stays: {error}" in proxy.log()
        assert reload_counts(admin_port) == {"applied": 1.0, "rejected": 1.0}
        assert produce_one(bootstrap, other_topic) is None
        assert produce_one(f"127.0.0.1:{extra.port}", other_topic) is None
        load.wait_for(100)

    assert load.errors == [] and load.unflushed == 0, load.errors[:5]
    print(f"reload under load: {load.delivered} records delivered, none failed")
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.wait(30) == 0
    assert not proxy.pid_file.exists()


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_sighup_switches_the_log_format(run_proxy: Any, tansu: TansuBroker, tmp_path: Path) -> None:
    listener = Listener("PLAINTEXT")
    config = write_config(tmp_path / "config.yaml", tansu, [listener], "")
    proxy = run_proxy(config)
    write_config(config, tansu, [listener], "logging:\n  format: json\n")
    proxy.process.send_signal(signal.SIGHUP)
    proxy.wait_for_log('"message":"configuration reloaded from')
    (line,) = [ln for ln in proxy.log().splitlines() if "configuration reloaded" in ln]
    document = json.loads(line)  # the line after the switch is already JSON
    assert document["level"] == "INFO" and document["logger"] == "kafkaguard.proxy"
    assert document["message"].endswith(": applied logging.format")
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.wait(30) == 0


def test_reload_refuses_a_process_that_is_not_kafkaguard(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "upstream: {embedded: true}\nlisteners:\n  - name: PLAINTEXT\n    port: 19092\n",
        encoding="utf-8",
    )
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        done = kafkaguard("reload", "--config", str(config), "--pid", str(sleeper.pid))
        assert done.returncode == 1 and "is not kafkaguard run" in done.stderr
        assert sleeper.poll() is None  # not signalled: SIGHUP would have ended it
        (tmp_path / "pid").write_text("none\n", encoding="ascii")
        done = kafkaguard("reload", "--config", str(config), "--pid-file", str(tmp_path / "pid"))
        assert done.returncode == 1 and "holds no process id" in done.stderr
    finally:
        sleeper.kill()
        sleeper.wait(10)


def served_serial(port: int, ca_file: Path) -> int:
    """The serial number of the certificate a new TLS connection to ``port`` is served."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_rotated_certificate_and_a_reload_under_load_drop_no_tls_client(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    """A producer keeps producing over TLS while the listener's certificate is replaced and
    the configuration reloaded (with a new super user): new handshakes get the new
    certificate, the producer's open connections and deliveries are untouched."""
    tooling.init_ca(tmp_path)
    tooling.issue_server(tmp_path, hosts=["localhost"], ips=["127.0.0.1"])
    topic = create_topic(tansu, "tls")
    secure = Listener(
        "SECURE",
        extra="    security_protocol: SSL\n"
        "    ssl: {cert_file: server.pem, key_file: server-key.pem}\n",
    )
    body = "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
    config = write_config(tmp_path / "config.yaml", tansu, [secure], body)
    tls_client = {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "ca.pem")}
    with proxy_from(config) as running:
        first = served_serial(secure.port, tmp_path / "ca.pem")
        with LoadProducer(f"127.0.0.1:{secure.port}", topic, **tls_client) as load:
            tooling.issue_server(tmp_path, hosts=["localhost"], ips=["127.0.0.1"], force=True)
            write_config(config, tansu, [secure], body + "logging:\n  level: DEBUG\n")
            applied = reload(running)
            load.wait_for(100)
            second = served_serial(secure.port, tmp_path / "ca.pem")
            assert second != first  # new handshakes get the new certificate
            load.wait_for(100)
        tls = running.server.listeners[0].tls
        assert tls is not None and tls.reloads == 1
    assert applied is not None and applied.applied == ("logging.level",)
    assert applied.restart_needed == ()  # the certificate files reload by themselves
    assert load.errors == [] and load.unflushed == 0, load.errors[:5]
