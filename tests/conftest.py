"""Shared fixtures: a real Tansu broker and a kafkaguard proxy in front of it, on loopback;
ZooKeeper and Apache Kafka for the tests that need them.

Only fixtures live here; what they are built from (and what tests import) is in
``tests/support/``. Every process and server started here is stopped here.
"""

# ruff: noqa: E402 - the helpers are imported after their assert rewriting is registered

from __future__ import annotations

import pytest

# The helpers' asserts get pytest's introspection too; this must precede their first import.
pytest.register_assert_rewrite("tests.support")

import asyncio
import os

# A fresh `kafkaguard analyze` run by a test maps no class archive and writes none
# (kafkaguard/audit/spark/runtime/class_archive.py's ARCHIVE_ENV, not imported: it imports
# pyspark): what such a test prints must not depend on which test ran first. The archive's
# own tests (tests/audit/spark/runtime/test_class_archive.py) give their directory.
os.environ["KAFKAGUARD_SPARK_CLASS_ARCHIVE"] = "off"
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBinding
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.tansu import TansuBroker, free_base
from tests.support.authorizer_referee import KafkaAuthorizer
from tests.support.kafka_broker import (
    KafkaBroker,
    KafkaUnavailable,
    require_kafka,
    session_broker,
)
from tests.support.kafka_referee import JvmProgram, KafkaReferee
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    StartEnforcingProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
)
from tests.support.pure_python import OPTION as PURE_PYTHON_SELECTION
from tests.support.pure_python import selected as in_pure_python_selection
from tests.support.zookeeper import ZooKeeperFactory, ZooKeeperServer, missing_reason, unique_chroot

_Program = TypeVar("_Program", bound=JvmProgram)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        PURE_PYTHON_SELECTION,
        action="store_true",
        help="run only the tests of the pure-Python pass (tests/support/pure_python.py)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--pure-python-selection``, deselect (and count as deselected) every test outside
    the pure-Python pass of ``./dev test``."""
    if not config.getoption(PURE_PYTHON_SELECTION):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if in_pure_python_selection(item.path) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


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


# -- ZooKeeper (issue 6): Debian's zookeeper package, tests/support/zookeeper.py -----------------


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper for the session; tests isolate themselves with a unique chroot."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_factory(tmp_path: Path) -> Iterator[ZooKeeperFactory]:
    """``zookeeper_factory()`` starts a dedicated server (for tests that stop it)."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    started: list[ZooKeeperServer] = []

    def start() -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / f"zk-{len(started)}")
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def chroot() -> str:
    """A fresh chroot per test: tests share one ZooKeeper without seeing each other."""
    return unique_chroot()


@pytest.fixture
def raw_zk(zookeeper: ZooKeeperServer) -> Iterator[Any]:
    """A plain kazoo client: plays Kafka's own tools (kafka-acls.sh, kafka-configs.sh
    --zookeeper) writing znodes by hand."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect)
    client.start(10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


# -- Apache Kafka (issue 8): jars from tests/kafka/pom.xml, tests/support/kafka_broker.py -------


@pytest.fixture(scope="session")
def kafka_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """An unsecured Apache Kafka (PLAINTEXT, no authorizer): what kafkaguard protects."""
    yield from session_broker("upstream", tmp_path_factory.mktemp("kafka-upstream"))


@pytest.fixture(scope="session")
def kafka_referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka with StandardAuthorizer and SASL/PLAIN REFEREE_USERS: the reference
    behaviour. Tests that add ACLs delete them again (the broker lives for the session)."""
    yield from session_broker("referee", tmp_path_factory.mktemp("kafka-referee"))


def _kafka_program(start: Callable[[str], _Program], what: str) -> Iterator[_Program]:
    """A Java program on Kafka 4.3.1's classpath for the session, stopped at its end.
    Skipped without Java 17, javac or the jars, failed in CI."""
    classpath = require_kafka()
    try:
        program = start(classpath)
    except KafkaUnavailable as exc:  # no javac: as require_kafka, fail in CI, else skip
        if os.environ.get("CI"):
            pytest.fail(f"{what} unavailable in CI: {exc}", pytrace=False)
        pytest.skip(f"{what} unavailable: {exc}")
    with program:
        yield program


@pytest.fixture(scope="session")
def kafka_reader() -> Iterator[KafkaReferee]:
    """Kafka 4.3.1's own readers (and ``java.util.regex``) in one JVM for the session
    (``tests/support/kafka_referee.py``): no broker."""
    yield from _kafka_program(KafkaReferee, "Kafka's readers")


@pytest.fixture(scope="session")
def kafka_authorizer() -> Iterator[KafkaAuthorizer]:
    """Kafka 4.3.1's ``StandardAuthorizer`` in one JVM for the session
    (``tests/support/authorizer_referee.py``): no broker; each ``load`` replaces its ACLs."""
    yield from _kafka_program(KafkaAuthorizer, "Kafka's StandardAuthorizer")
