"""The Kafka-topic ACL store (issue 26, docs/acl-store.md) on a three-broker Kafka 4.3.1
cluster: replication, concurrent writers, tombstones, compaction actually run, a topic that is
not compacted, a broker restart and a whole-cluster outage and return.

The cluster is started once for the module (three JVMs); each test uses its own topic. The
brokers check for cleanable logs every 500 ms so that a compaction happens within a test.
Each broker also has a listener reached through a relay (:class:`CountingRelay`) that a test
can cut: a store bootstrapped there is partitioned from the cluster while the others are not
(issue 35's outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AclBinding as CkAclBinding
from confluent_kafka.admin import (
    AclBindingFilter,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import AclOperation as AclOperation_
from confluent_kafka.admin import AclPermissionType as AclPermissionType_
from confluent_kafka.admin import ResourceType as ResourceType_

from kafkaguard.cli import main
from kafkaguard.cli.serve import check_config
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclOperation, ResourceType, acl_binding
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.policy.stores.kafka_topic import (
    KafkaTopicAclStore,
    binding_key,
    decode_binding,
    encode_binding,
)
from kafkaguard.proxy.app.metrics import ProxyCollector
from kafkaguard.proxy.config import AdminConfig, BrokerPorts, HostPort
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.config import SaslKafkaConfig, SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.proxy.sasl.kafka_credentials import (
    KafkaCredentialError,
    KafkaTopicCredentialStore,
    credential_key,
)
from kafkaguard.tansu import free_base
from kafkaguard.topic_table import TopicSettings
from tests.support.kafka_broker import (
    KafkaBroker,
    free_port,
    require_kafka,
    restart_broker,
    run_kafka_tool,
    start_kafka_cluster,
    stop_cluster,
)
from tests.support.prometheus import JOB, PrometheusServer
from tests.support.proxy_fixture import (
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.tcp_relay import CountingRelay

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

COMPACTING = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
    "min.compaction.lag.ms": "0",
}


@pytest.fixture(scope="module")
def relays() -> Iterator[list[CountingRelay]]:
    """One per broker, in node order, in front of its RELAYED listener."""
    made = [CountingRelay.on_port(HostPort("127.0.0.1", free_port()), free_port()) for _ in "123"]
    for relay in made:
        relay.start()
    yield made
    for relay in made:
        relay.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, relays: list[CountingRelay]
) -> Iterator[list[KafkaBroker]]:
    require_kafka()

    def relayed(node_id: int, props: dict[str, str]) -> dict[str, str]:
        relay = relays[node_id - 1]
        return props | {
            "listeners": f"{props['listeners']},RELAYED://127.0.0.1:{relay.target.port}",
            "advertised.listeners": (
                f"{props['advertised.listeners']},RELAYED://127.0.0.1:{relay.address.port}"
            ),
            "listener.security.protocol.map": (
                f"{props['listener.security.protocol.map']},RELAYED:PLAINTEXT"
            ),
        }

    brokers = start_kafka_cluster(
        tmp_path_factory.mktemp("acl-store-cluster"),
        extra_props={
            "log.cleaner.backoff.ms": "500",
            "log.cleaner.dedupe.buffer.size": "4194304",
            # a killed broker is fenced within 3 s, not 9 (the failover test)
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        },
        node_props=relayed,
    )
    try:
        yield brokers
    finally:
        stop_cluster(brokers)


def connection(cluster: list[KafkaBroker]) -> dict[str, Any]:
    return {"bootstrap.servers": ",".join(b.bootstrap for b in cluster if b.proc is not None)}


def store(cluster: list[KafkaBroker], topic: str, **configs: str) -> KafkaTopicAclStore:
    return KafkaTopicAclStore(
        connection(cluster), TopicSettings(topic, configs=configs, write_timeout_ms=5000)
    )


def topic_acls(n: int, prefix: str = "t") -> list[Any]:
    return [
        acl_binding(ResourceType.TOPIC, f"{prefix}{i}", f"User:u{i % 7}", AclOperation.READ)
        for i in range(n)
    ]


async def eventually(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def test_record_format_round_trips_and_keys_are_canonical() -> None:
    binding = acl_binding(ResourceType.GROUP, "g-ü", "User:a", AclOperation.READ, host="10.0.0.1")
    assert decode_binding(encode_binding(binding)) == binding
    assert (
        binding_key(binding)
        == (
            '{"resourceType":"GROUP","patternType":"LITERAL","name":"g-ü","principal":"User:a",'
            '"host":"10.0.0.1","operation":"READ","permissionType":"ALLOW"}'
        ).encode()
    )
    with pytest.raises(ValueError, match="unsupported version 2"):
        decode_binding(encode_binding(binding).replace(b'"version":1', b'"version":2'))


def test_topic_created_compacted_and_replicated(cluster: list[KafkaBroker]) -> None:
    topic = unique_name("_kafkaguard-acls")

    async def scenario() -> None:
        s = store(cluster, topic)
        await s.start()
        assert list(s.not_ready()) == []
        await s.close()

    run(scenario)
    admin = AdminClient(connection(cluster))
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert [len(p.replicas) for p in meta.partitions.values()] == [3]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.insync.replicas"].value == "2"


def test_a_topic_that_could_lose_unread_records_is_refused_at_start(
    cluster: list[KafkaBroker],
) -> None:
    """Not compacted (live records deleted by age), or deletions kept less than configured
    (``delete.retention.ms`` left at the broker's 24 h): the store does not start, and says
    which setting and how to fix it (issue 35)."""
    admin = AdminClient(connection(cluster))
    refused = {
        unique_name("_kafkaguard-acls"): ({"cleanup.policy": "delete"}, "cleanup.policy=delete"),
        unique_name("_kafkaguard-acls"): (
            {"cleanup.policy": "compact"},
            "delete.retention.ms=86400000, below the 604800000 configured",
        ),
    }
    for topic, (configs, _) in refused.items():
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(20)

    async def scenario() -> None:
        for topic, (_, reason) in refused.items():
            s = store(cluster, topic)
            with pytest.raises(AclStoreError, match=reason) as info:
                await asyncio.wait_for(s.start(), 30)
            assert "kafka-configs.sh --alter" in str(info.value)
            assert [r for r in s.not_ready() if reason in r]
            await s.close()

    run(scenario)


def test_a_colliding_squatter_topic_is_named_at_start(cluster: list[KafkaBroker]) -> None:
    """``.kafkaguard-acls-…`` made before the store topic: Kafka would refuse
    ``_kafkaguard-acls-…`` for ever (``Topic.hasCollisionChars``); the store says so at once."""
    topic = unique_name("_kafkaguard-acls")
    squatter = "." + topic[1:]
    admin = AdminClient(connection(cluster))
    admin.create_topics([NewTopic(squatter, 1, 1)])[squatter].result(20)

    async def scenario() -> None:
        s = store(cluster, topic)
        started = time.monotonic()
        with pytest.raises(AclStoreError, match=f"topic {squatter} exists and collides"):
            await asyncio.wait_for(s.start(), 30)
        assert time.monotonic() - started < 15  # one attempt, not retried
        await s.close()

    run(scenario)


def test_two_writers_at_once_lose_nothing_and_read_their_writes(
    cluster: list[KafkaBroker],
) -> None:
    topic = unique_name("_kafkaguard-acls")
    mine = {"a": topic_acls(40, "a"), "b": topic_acls(40, "b")}

    async def scenario() -> None:
        a, b = store(cluster, topic), store(cluster, topic)
        await asyncio.gather(a.start(), b.start())

        async def writer(s: KafkaTopicAclStore, bindings: list[Any]) -> None:
            for binding in bindings:
                await s.add([binding])
                assert binding in s.snapshot()  # read your writes, at once

        await asyncio.gather(writer(a, mine["a"]), writer(b, mine["b"]))
        everything = frozenset(mine["a"] + mine["b"])
        await eventually(lambda: a.snapshot() == everything and b.snapshot() == everything)
        doomed = mine["a"][:10]
        await b.remove(doomed)
        assert b.snapshot() == everything - frozenset(doomed)
        await eventually(lambda: a.snapshot() == everything - frozenset(doomed))
        await asyncio.gather(a.close(), b.close())

    run(scenario)


def count_records(cluster: list[KafkaBroker], topic: str, key: bytes | None = None) -> int:
    """Records in the log (values and tombstones), of ``key`` only if given."""
    consumer = Consumer(
        connection(cluster)
        | {"group.id": "counter", "enable.auto.commit": False, "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    count = 0
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition within 10 s"
            if message.error() is not None:
                return count
            count += key is None or message.key() == key
    finally:
        consumer.close()


def test_compaction_keeps_exactly_the_live_set(cluster: list[KafkaBroker]) -> None:
    topic = unique_name("_kafkaguard-acls")
    acls = topic_acls(120, "c")
    live = frozenset(acls[60:])

    async def scenario() -> None:
        s = store(cluster, topic, **COMPACTING)
        await s.start()
        for i in range(0, 120, 10):  # one segment per batch (segment.ms)
            await s.add(acls[i : i + 10])
            await asyncio.sleep(0.15)
        for i in range(0, 60, 10):
            await s.remove(acls[i : i + 10])
            await asyncio.sleep(0.15)
        assert s.snapshot() == live
        await s.close()

    run(scenario)
    written = 180
    deadline = time.monotonic() + 120
    while (remaining := count_records(cluster, topic)) >= written - 30:
        assert time.monotonic() < deadline, f"the log cleaner did not run ({remaining} records)"
        time.sleep(1)

    async def reload() -> None:
        fresh = store(cluster, topic, **COMPACTING)  # delete.retention.ms 0 is refused otherwise
        await fresh.start()
        assert fresh.snapshot() == live
        await fresh.close()

    run(reload)


def kafka_policy(topic: str, super_users: frozenset[str]) -> PolicyConfig:
    return PolicyConfig(
        authorizer=AuthorizerConfig(super_users=super_users),
        acl_store=AclStoreConfig(type="kafka", topic=topic),
    )


def start_proxy(cluster: list[KafkaBroker], policy: PolicyConfig) -> RunningProxy:
    return start_proxy_thread(
        proxy_config(
            HostPort("127.0.0.1", cluster[0].port),
            broker_ports=BrokerPorts(free_base(sorted({b.node_id for b in cluster})), {}),
            policy=policy,
        )
    )


def describe_acls(bootstrap: str) -> list[Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return list(admin.describe_acls(AclBindingFilter(
        ResourceType_.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation_.ANY, AclPermissionType_.ANY,
    )).result(10))  # fmt: skip


def topic_visible(bootstrap: str, name: str) -> bool:
    """Whether Metadata through the proxy shows ``name`` (DESCRIBE, implied by READ) or
    refuses it (TOPIC_AUTHORIZATION_FAILED)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(name, timeout=10)
    error = metadata.topics[name].error
    if error is None:
        return True
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    return False


def test_create_acls_through_one_proxy_enforced_by_the_other(cluster: list[KafkaBroker]) -> None:
    """``A`` lets every client administer ACLs (``User:ANONYMOUS`` is a super user there),
    ``B`` has no super user: what is created through ``A`` is what ``B`` enforces."""
    topic = unique_name("_kafkaguard-acls")
    orders = unique_name("orders")
    upstream_admin = AdminClient(connection(cluster))
    upstream_admin.create_topics([NewTopic(orders, 1, 1)])[orders].result(20)
    a = start_proxy(cluster, kafka_policy(topic, frozenset({"User:ANONYMOUS"})))
    b = start_proxy(cluster, kafka_policy(topic, frozenset()))
    try:
        assert list(a.server.not_ready()) == [] and list(b.server.not_ready()) == []
        lag = {
            s.labels["topic"]: s.value
            for family in ProxyCollector(a.server, None).collect()
            if family.name == "kafkaguard_store_lag_seconds"
            for s in family.samples
        }
        assert list(lag) == [topic] and 0 <= lag[topic] < 5
        assert not topic_visible(b.bootstrap, orders)
        grants = [
            CkAclBinding(
                ResourceType_.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                "User:ANONYMOUS", "*", AclOperation_.DESCRIBE, AclPermissionType_.ALLOW,
            ),
            CkAclBinding(
                ResourceType_.TOPIC, orders[:8], ResourcePatternType.PREFIXED,
                "User:ANONYMOUS", "*", AclOperation_.READ, AclPermissionType_.ALLOW,
            ),
        ]  # fmt: skip
        admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
        for future in admin_a.create_acls(grants).values():
            future.result(10)
        assert len(describe_acls(a.bootstrap)) == 2  # read your writes: as soon as answered
        deadline = time.monotonic() + 10
        while not topic_visible(b.bootstrap, orders):
            assert time.monotonic() < deadline, "B never enforced the ACL created on A"
            time.sleep(0.05)
        assert sorted(map(str, describe_acls(b.bootstrap))) == sorted(map(str, grants))
        doomed = AclBindingFilter(
            ResourceType_.TOPIC, orders[:8], ResourcePatternType.PREFIXED, None, None,
            AclOperation_.ANY, AclPermissionType_.ANY,
        )  # fmt: skip
        admin_a.delete_acls([doomed])[doomed].result(10)
        assert len(describe_acls(a.bootstrap)) == 1
        deadline = time.monotonic() + 10
        while topic_visible(b.bootstrap, orders):
            assert time.monotonic() < deadline, "B never applied the deletion made on A"
            time.sleep(0.05)
    finally:
        stop_proxy_thread(a)
        stop_proxy_thread(b)
    restarted = start_proxy(cluster, kafka_policy(topic, frozenset()))
    try:  # a proxy restart loses nothing
        assert sorted(map(str, describe_acls(restarted.bootstrap))) == [str(grants[0])]
    finally:
        stop_proxy_thread(restarted)


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LAG = "kafkaguard_store_lag_seconds"


def _rfc3339(text: str) -> float:
    """Prometheus's timestamps (nanoseconds, ``Z``) as epoch seconds."""
    micro = re.sub(r"(\.\d{1,6})\d*", r"\1", text).replace("Z", "+00:00")
    return datetime.fromisoformat(micro).timestamp()


def test_the_dashboard_and_the_alert_rules_see_the_store_lag(
    cluster: list[KafkaBroker], tmp_path: Path
) -> None:
    """Issue 35: deploy/'s store-lag panel and ``KafkaguardStoreLagging`` on a real
    Prometheus scraping a proxy on the Kafka-topic store (tests/proxy/app/test_prometheus.py's
    proxy has its ACLs in ZooKeeper, so no such series): the panel's query returns the store
    topic's lag for this instance, the alert's expression without its threshold returns it by
    (job, instance, topic), and the rule evaluates healthy and inactive (the store reads to
    the end every second)."""
    topic = unique_name("_kafkaguard-acls")
    (panel,) = [
        t["expr"]
        for p in json.loads((DEPLOY / "grafana" / "kafkaguard.json").read_text("utf-8"))["panels"]
        for t in p.get("targets", [])
        if LAG in t["expr"]
    ]
    alerts = DEPLOY / "prometheus" / "alerts.yml"
    (rule,) = [
        r
        for g in yaml.safe_load(alerts.read_text("utf-8"))["groups"]
        for r in g["rules"]
        if LAG in r["expr"]
    ]
    base = proxy_config(
        HostPort("127.0.0.1", cluster[0].port),
        broker_ports=BrokerPorts(free_base(sorted({b.node_id for b in cluster})), {}),
        policy=kafka_policy(topic, frozenset()),
    )
    proxy = start_proxy_thread(dataclasses.replace(base, admin=AdminConfig(port=0)))
    prometheus: PrometheusServer | None = None
    try:
        assert proxy.server.admin is not None
        instance = f"127.0.0.1:{proxy.server.admin.port}"
        prometheus = PrometheusServer(tmp_path / "prometheus", [instance], rule_files=[alerts])
        prometheus.start()
        deadline = time.monotonic() + 30
        while not (series := prometheus.query(panel.replace("$instance", instance))):
            assert time.monotonic() < deadline, f"no series for {panel}"
            time.sleep(0.2)
        assert [(s["metric"], 0 <= float(s["value"][1]) < 5) for s in series] == [
            ({"instance": instance, "topic": topic}, True)
        ]
        (lag,) = prometheus.query(rule["expr"].rpartition(">")[0])
        assert lag["metric"] == {"job": JOB, "instance": instance, "topic": topic}
        scraped = float(lag["value"][0])
        while True:  # until the rule has been evaluated on the scraped series
            (evaluated,) = [
                r for g in prometheus.api("rules")["groups"] for r in g["rules"]
                if r["name"] == rule["alert"]
            ]  # fmt: skip
            if _rfc3339(evaluated["lastEvaluation"]) > scraped:
                break
            assert time.monotonic() < deadline, "the rule was never evaluated"
            time.sleep(0.2)
        assert (evaluated["health"], evaluated["state"]) == ("ok", "inactive"), evaluated
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_proxy_thread(proxy)


def test_kafka_acls_tool_through_one_proxy_is_enforced_by_the_other(
    cluster: list[KafkaBroker],
) -> None:
    """The "done when" of issue 26: Kafka's own ``kafka-acls.sh --add`` (AclCommand) through
    one proxy, enforced by the other."""
    topic = unique_name("_kafkaguard-acls")
    payments = unique_name("payments")
    upstream_admin = AdminClient(connection(cluster))
    upstream_admin.create_topics([NewTopic(payments, 1, 1)])[payments].result(20)
    a = start_proxy(cluster, kafka_policy(topic, frozenset({"User:ANONYMOUS"})))
    b = start_proxy(cluster, kafka_policy(topic, frozenset()))
    try:
        assert not topic_visible(b.bootstrap, payments)
        result = run_kafka_tool(
            "org.apache.kafka.tools.AclCommand",
            "--bootstrap-server", a.bootstrap, "--add", "--allow-principal", "User:ANONYMOUS",
            "--operation", "Read", "--topic", payments,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"name={payments}, patternType=LITERAL" in result.stdout
        deadline = time.monotonic() + 10
        while not topic_visible(b.bootstrap, payments):
            assert time.monotonic() < deadline, "B never enforced the ACL kafka-acls added on A"
            time.sleep(0.05)
    finally:
        stop_proxy_thread(a)
        stop_proxy_thread(b)


def test_check_config_refuses_a_topic_that_is_not_compacted(
    cluster: list[KafkaBroker], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_name("_kafkaguard-acls")
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"upstream:\n  bootstrap_servers: [{cluster[0].bootstrap}]\n"
        "listeners:\n  - name: PLAIN\n    security_protocol: PLAINTEXT\n    port: 19092\n"
        f"acl_store:\n  type: kafka\n  topic: {topic}\n",
        encoding="utf-8",
    )
    assert check_config(config) == 0  # missing: created when the proxy starts
    admin = AdminClient(connection(cluster))
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "delete"})])[topic].result(
        20
    )
    assert check_config(config) == 2
    assert "cleanup.policy=delete, not compact" in capsys.readouterr().err


def start_scram_proxy(cluster: list[KafkaBroker], tmp_path: Path, topic: str) -> RunningProxy:
    """SASL_PLAINTEXT with PLAIN ``admin`` (a super user, from the credentials file) and SCRAM
    users from the Kafka topic ``topic``."""
    credentials = tmp_path / "users.yaml"
    admin = {"PLAIN": plain.make_credential("admin-secret", iterations=4096).to_string()}
    write_users_file(credentials, {"admin": admin})
    sasl = SaslListenerConfig(
        enabled_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        credentials_file=credentials,
        scram_credentials="kafka",
        kafka=SaslKafkaConfig(topic=topic),
        failed_authentication_delay_ms=0,
    )
    return start_proxy_thread(
        proxy_config(
            HostPort("127.0.0.1", cluster[0].port),
            broker_ports=BrokerPorts(free_base(sorted({b.node_id for b in cluster})), {}),
            name="SASL_PLAINTEXT",
            security_protocol="SASL_PLAINTEXT",
            sasl=sasl,
            policy=PolicyConfig(authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"}))),
        )
    )


def sasl_client(bootstrap: str, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def logs_in(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    admin = AdminClient(sasl_client(bootstrap, mechanism, user, password) | {"log_level": 0})
    try:
        admin.list_topics(timeout=5)
    except KafkaException as exc:
        assert exc.args[0].code() in (
            KafkaError._AUTHENTICATION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT
        ), exc  # fmt: skip
        return False
    return True


def test_scram_user_created_through_one_proxy_logs_in_through_the_other(
    cluster: list[KafkaBroker], tmp_path: Path
) -> None:
    topic = unique_name("_kafkaguard-users")
    a = start_scram_proxy(cluster, tmp_path, topic)
    b = start_scram_proxy(cluster, tmp_path, topic)
    try:
        assert list(b.server.not_ready()) == []
        assert not logs_in(b.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret")
        admin_a = AdminClient(sasl_client(a.bootstrap, "PLAIN", "admin", "admin-secret"))
        upsert = UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret"
        )
        too_few = UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"bob-secret"
        )
        futures = admin_a.alter_user_scram_credentials([upsert, too_few])
        futures["alice"].result(10)
        with pytest.raises(KafkaException, match="Too few iterations"):
            futures["bob"].result(10)
        described = admin_a.describe_user_scram_credentials(["alice"])["alice"].result(10)
        info = described.scram_credential_infos
        assert [(i.mechanism, i.iterations) for i in info] == [(ScramMechanism.SCRAM_SHA_256, 4096)]
        deadline = time.monotonic() + 10
        while not logs_in(b.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret"):
            assert time.monotonic() < deadline, "B never accepted the user created through A"
            time.sleep(0.1)
        assert not logs_in(b.bootstrap, "SCRAM-SHA-256", "alice", "wrong")
        assert not logs_in(b.bootstrap, "SCRAM-SHA-512", "alice", "alice-secret")
    finally:
        stop_proxy_thread(a)
        stop_proxy_thread(b)
    records = count_records(cluster, topic)
    assert records == 1  # one (user, mechanism) record, salted hashes only
    cluster[2].stop()
    restart_broker(cluster[2])
    restarted = start_scram_proxy(cluster, tmp_path, topic)
    try:  # a broker restart and a proxy restart lose nothing
        assert logs_in(restarted.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret")
        admin = AdminClient(sasl_client(restarted.bootstrap, "PLAIN", "admin", "admin-secret"))
        deletion = UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)
        admin.alter_user_scram_credentials([deletion])["alice"].result(10)
        assert not logs_in(restarted.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret")
    finally:
        stop_proxy_thread(restarted)


def test_migrations_both_ways_are_idempotent(
    cluster: list[KafkaBroker], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acl_topic, users_topic = unique_name("_kafkaguard-acls"), unique_name("_kafkaguard-users")
    acls = topic_acls(5, "m")
    acl_file = tmp_path / "acls.yaml"
    acl_file.write_text(format_acl_text(acls), encoding="utf-8")
    users_file = tmp_path / "users.yaml"
    alice = scram.make_credential("SCRAM-SHA-512", "alice-secret", iterations=4096)
    write_users_file(users_file, {"alice": {"SCRAM-SHA-512": alice.to_kafka_string()}})
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"upstream:\n  bootstrap_servers: [{cluster[0].bootstrap}]\n"
        "listeners:\n  - name: S\n    security_protocol: SASL_PLAINTEXT\n    port: 19092\n"
        "    sasl:\n      enabled_mechanisms: [SCRAM-SHA-512]\n"
        f"      scram_credentials: kafka\n      kafka: {{topic: {users_topic}}}\n"
        f"acl_store:\n  type: kafka\n  topic: {acl_topic}\n",
        encoding="utf-8",
    )
    to_kafka = ["acls", "migrate", "--from", "file", "--to", "kafka", "--config", str(config)]
    assert main([*to_kafka, "--acl-file", str(acl_file)]) == 0
    assert "(5 new, 0 already present)" in capsys.readouterr().out
    assert main([*to_kafka, "--acl-file", str(acl_file)]) == 0
    assert "(0 new, 5 already present)" in capsys.readouterr().out
    back = tmp_path / "back.yaml"
    from_kafka = ["acls", "migrate", "--from", "kafka", "--to", "file", "--config", str(config)]
    assert main([*from_kafka, "--acl-file", str(back)]) == 0
    assert read_acl_file(back)[0] == frozenset(acls)

    users = ["users", "migrate", "--from", "file", "--to", "kafka", "--config", str(config)]
    assert main([*users, "--file", str(users_file)]) == 0
    assert "(1 new, 0 already present)" in capsys.readouterr().out
    assert main([*users, "--file", str(users_file)]) == 0
    assert "(0 new, 1 already present)" in capsys.readouterr().out
    assert main(["users", "list", "--config", str(config)]) == 0
    assert capsys.readouterr().out == "alice: SCRAM-SHA-512\n"
    assert main(["users", "remove", "--config", str(config), "--user", "alice"]) == 0
    assert main(["users", "list", "--config", str(config)]) == 0
    assert capsys.readouterr().out == ""


def test_acls_apply_and_edit_the_kafka_store(
    cluster: list[KafkaBroker], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``acls apply --config`` (a Strimzi file) and ``acls --add/--remove/--list --config``
    reach a ``kafka`` store with the config's upstream; applying the same file again changes
    nothing, and the topic then holds exactly the file's ACLs."""
    acl_topic = unique_name("_kafkaguard-acls")
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"upstream:\n  bootstrap_servers: [{cluster[0].bootstrap}]\n"
        "listeners:\n  - name: P\n    port: 19092\n"
        f"acl_store:\n  type: kafka\n  topic: {acl_topic}\n",
        encoding="utf-8",
    )
    users = tmp_path / "users.yaml"
    users.write_text(
        "apiVersion: kafka.strimzi.io/v1\nkind: KafkaUser\nmetadata: {name: alice}\n"
        "spec:\n  authorization:\n    type: simple\n    acls:\n"
        "      - resource: {type: topic, name: orders, patternType: literal}\n"
        "        operations: [Read, Describe]\n",
        encoding="utf-8",
    )
    apply = ["acls", "apply", "-f", str(users), "--config", str(config)]
    assert main(apply) == 0
    assert capsys.readouterr().out.count("+ ") == 2
    assert main(apply) == 0
    assert "+ " not in capsys.readouterr().out
    # kafka-acls.sh's --add/--remove/--list edit the same store through --config.
    edit = ["acls", "--config", str(config), "--topic", "orders", "--operation", "Write"]
    assert main([*edit, "--add", "--allow-principal", "User:bob"]) == 0
    assert main(["acls", "--config", str(config), "--list", "--topic", "orders"]) == 0
    assert "principal=User:bob" in capsys.readouterr().out
    assert main([*edit, "--remove", "--allow-principal", "User:bob", "--force"]) == 0

    async def scenario() -> None:
        reader = store(cluster, acl_topic)
        await reader.start()
        try:
            assert {
                (b.entry.principal, b.entry.operation, b.pattern.name) for b in reader.snapshot()
            } == {
                ("User:alice", AclOperation.READ, "orders"),
                ("User:alice", AclOperation.DESCRIBE, "orders"),
            }
        finally:
            await reader.close()

    run(scenario)


def test_a_store_partitioned_while_deletions_were_compacted_away_converges(
    cluster: list[KafkaBroker], relays: list[CountingRelay]
) -> None:
    """Issue 35: a store cut off from the cluster (through the relays) while another deletes
    an ACL and a SCRAM user and the log cleaner removes both the records and their tombstones
    (``delete.retention.ms`` 0 on these topics) no longer holds either once it is back: it
    reads its topics again from the beginning and swaps the fresh state in."""
    acl_topic, user_topic = unique_name("_kafkaguard-acls"), unique_name("_kafkaguard-users")
    relayed = {"bootstrap.servers": ",".join(str(r.address) for r in relays)}
    revoked, kept = topic_acls(2, "outage")
    credential = scram.make_credential("SCRAM-SHA-256", "s3cret")

    def users(conn: dict[str, Any]) -> KafkaTopicCredentialStore:
        return KafkaTopicCredentialStore(
            conn, TopicSettings(user_topic, configs=COMPACTING, write_timeout_ms=5000)
        )

    def acls(conn: dict[str, Any]) -> KafkaTopicAclStore:
        return KafkaTopicAclStore(
            conn, TopicSettings(acl_topic, configs=COMPACTING, write_timeout_ms=5000)
        )

    async def scenario() -> None:
        writer_acls, writer_users = acls(connection(cluster)), users(connection(cluster))
        away_acls, away_users = acls(relayed), users(relayed)
        for s in (writer_acls, writer_users, away_acls, away_users):
            await s.start()
        await writer_acls.add([revoked, kept])
        await writer_users.alter([("gone", "SCRAM-SHA-256", credential)], [])
        await eventually(lambda: revoked in away_acls.snapshot(), 10)
        await eventually(lambda: away_users.scram_credential("gone", "SCRAM-SHA-256") is not None)
        for relay in relays:
            relay.cut()
        await eventually(lambda: not away_acls.reachable and not away_users.table.reachable, 20)
        await writer_acls.remove([revoked])
        await writer_users.alter([], [("gone", "SCRAM-SHA-256")])
        filler = topic_acls(40, "filler")
        deadline = time.monotonic() + 90
        while await asyncio.to_thread(
            lambda: (
                count_records(cluster, acl_topic, binding_key(revoked))
                + count_records(cluster, user_topic, credential_key("gone", "SCRAM-SHA-256"))
            )
        ):  # new segments (segment.ms) for the cleaner, until both keys are gone from the logs
            assert time.monotonic() < deadline, "the log cleaner did not remove the tombstones"
            await writer_acls.add(filler[:1])
            await writer_acls.remove(filler[:1])
            await writer_users.alter([("filler", "SCRAM-SHA-256", credential)], [])
            await writer_users.alter([], [("filler", "SCRAM-SHA-256")])
            await asyncio.sleep(0.3)
        assert revoked in away_acls.snapshot()  # kept in force while away, by design
        assert (away_acls.table.lag_s() or 0.0) >= 1.0  # and the lag says how long
        for relay in relays:
            relay.restore()
        await eventually(lambda: away_acls.snapshot() == writer_acls.snapshot(), 30)
        await eventually(lambda: away_users.scram_credential("gone", "SCRAM-SHA-256") is None, 30)
        assert away_acls.snapshot() == frozenset({kept})
        assert away_acls.table.rereads >= 1 and list(away_acls.not_ready()) == []
        assert (away_acls.table.lag_s() or 0.0) < 5
        for s in (writer_acls, writer_users, away_acls, away_users):
            await s.close()

    run(scenario)


@dataclasses.dataclass
class AclStream:
    """A stream of ACL creations through alternating stores, every third deleted again
    through the other, and what became of each binding."""

    stores: list[KafkaTopicAclStore]
    acked: set[Any] = dataclasses.field(default_factory=set)
    """The bindings in force by the acknowledged changes."""
    unknown: set[Any] = dataclasses.field(default_factory=set)
    """Bindings of a change refused as "may or may not have been applied"."""
    tried: set[Any] = dataclasses.field(default_factory=set)
    """Every binding a store may hold: written, or being written."""
    violations: list[str] = dataclasses.field(default_factory=list)

    async def change(self, i: int, binding: Any) -> None:
        self.tried.add(binding)
        try:
            await self.stores[i % 2].add([binding])
        except AclStoreError as exc:
            if "may or may not" in str(exc):
                self.unknown.add(binding)
            else:  # refused at once: it must never appear
                self.tried.discard(binding)
            return
        self.acked.add(binding)
        if i % 3 == 0:
            other = self.stores[(i + 1) % 2]
            try:  # DeleteAcls matches the proxy's snapshot: once the binding reached it
                await eventually(lambda: binding in other.snapshot(), 10)
                await other.remove([binding])
            except (AclStoreError, AssertionError):
                self.unknown.add(binding)
                return
            self.acked.discard(binding)

    def check_enforcement(self) -> None:
        """No store grants what no change ever tried to create."""
        for n, s in enumerate(self.stores):
            extra = s.snapshot() - self.tried
            if extra:
                self.violations.append(f"store {n} holds bindings never written: {extra}")

    def converged(self, store: KafkaTopicAclStore) -> bool:
        return store.snapshot() - self.unknown == self.acked - self.unknown

    def difference(self, store: KafkaTopicAclStore) -> tuple[set[Any], set[Any]]:
        """(held but not acknowledged, acknowledged but not held), unknown ones aside."""
        held = store.snapshot() - self.unknown
        return set(held - self.acked), set(self.acked - self.unknown - held)


async def deleted_user(store: KafkaTopicCredentialStore, user: str) -> bool:
    """Whether the deletion of ``user`` was acknowledged (refused while the leader moves)."""
    try:
        await store.alter([], [(user, "SCRAM-SHA-256")])
    except KafkaCredentialError:
        return False
    return True


def led_by_node_2(cluster: list[KafkaBroker], *topics: str) -> None:
    """The store's topics as it creates them (replication 3, ``min.insync.replicas`` 2),
    node 2 their leader: node 1 is the only controller, which must stay up."""
    admin = AdminClient(connection(cluster))
    configs = {
        "cleanup.policy": "compact",
        "min.insync.replicas": "2",
        "delete.retention.ms": "604800000",
    }
    new = [
        NewTopic(t, num_partitions=1, replica_assignment=[[2, 3, 1]], config=configs)
        for t in topics
    ]
    for future in admin.create_topics(new).values():
        future.result(20)


async def fail_over(
    stream: AclStream,
    bindings: list[Any],
    leader: KafkaBroker,
    users: KafkaTopicCredentialStore,
    user: str,
) -> bool:
    """The stream of changes; the leader killed at the 15th, restarted at the 40th; ``user``
    deleted as soon as a deletion is acknowledged after the kill. Whether it was."""
    user_deleted = False
    for i, binding in enumerate(bindings):
        if i == 15:
            leader.kill()
        if i == 40:
            await asyncio.to_thread(restart_broker, leader)
        await stream.change(i, binding)
        if i >= 15 and not user_deleted:
            user_deleted = await deleted_user(users, user)
        stream.check_enforcement()
    return user_deleted


def all_in_sync(cluster: list[KafkaBroker], topic: str, timeout_s: float = 60.0) -> None:
    """Until every replica of ``topic`` is in sync. A broker stopped while another one,
    restarted by an earlier test, is still catching up leaves fewer than min.insync.replicas in
    the ISR, and an acks=all write then waits out its time-out: not what a test of one broker
    down means."""
    admin = AdminClient(connection(cluster))
    deadline = time.monotonic() + timeout_s
    while True:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        if partitions and all(sorted(p.isrs) == sorted(p.replicas) for p in partitions):
            return
        assert time.monotonic() < deadline, f"{topic}: {[(p.replicas, p.isrs) for p in partitions]}"
        time.sleep(0.2)


def test_failover_of_the_store_leader_loses_no_acknowledged_change(
    cluster: list[KafkaBroker],
) -> None:
    """Issue 35: while two stores (two proxies' views) write a stream of ACL creations and
    deletions, the leader of the store partition is killed (SIGKILL) and later restarted.
    Afterwards, once the restarted broker is back in both topics' ISR (waited for, bounded),
    both, and a third started fresh, hold exactly the acknowledged changes (a
    write refused as "may or may not have been applied" leaves only its own binding
    unknown); at every moment no store holds a binding whose creation was refused outright
    or never tried; a SCRAM user deleted during the failover is gone from every store."""
    acl_topic, user_topic = unique_name("_kafkaguard-acls"), unique_name("_kafkaguard-users")
    led_by_node_2(cluster, acl_topic, user_topic)
    bindings = topic_acls(60, "failover")
    credential = scram.make_credential("SCRAM-SHA-256", "s3cret")

    def acl_store() -> KafkaTopicAclStore:
        return KafkaTopicAclStore(
            connection(cluster), TopicSettings(acl_topic, write_timeout_ms=4000)
        )

    def user_store() -> KafkaTopicCredentialStore:
        return KafkaTopicCredentialStore(
            connection(cluster), TopicSettings(user_topic, write_timeout_ms=4000)
        )

    async def scenario() -> None:
        stream = AclStream([acl_store(), acl_store()])
        users = [user_store(), user_store()]
        for s in (*stream.stores, *users):
            await s.start()
        await users[0].alter([("leaving", "SCRAM-SHA-256", credential)], [])
        leader = next(b for b in cluster if b.node_id == 2)
        assert await fail_over(stream, bindings, leader, users[1], "leaving")
        assert len(stream.acked) > 20, "too few changes were acknowledged to prove anything"
        for topic in (acl_topic, user_topic):  # the restarted leader caught up: whole again
            await asyncio.to_thread(all_in_sync, cluster, topic, 90.0)
        fresh, fresh_users = acl_store(), user_store()
        await fresh.start()
        await fresh_users.start()
        for n, s in enumerate((*stream.stores, fresh)):
            with contextlib.suppress(AssertionError):
                await eventually(lambda s=s: stream.converged(s), 30)
            extra, missing = stream.difference(s)
            assert not extra and not missing, f"store {n}: {extra=} {missing=} {stream}"
        for u in (*users, fresh_users):
            assert u.scram_credential("leaving", "SCRAM-SHA-256") is None
        assert stream.violations == []
        for s in (*stream.stores, *users, fresh, fresh_users):
            await s.close()

    run(scenario)
    (restarted,) = [b for b in cluster if b.node_id == 2]
    assert restarted.proc is not None
    with pytest.raises(subprocess.TimeoutExpired):  # it outlives the test's event loop
        restarted.proc.wait(2)


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[list[KafkaBroker]]:
    """A three-broker cluster of the test's own: it stops every broker, which the module's
    other tests must not see."""
    require_kafka()
    brokers = start_kafka_cluster(tmp_path / "cluster")
    try:
        yield brokers
    finally:
        stop_cluster(brokers)


def test_broker_restart_then_whole_cluster_outage_and_return(
    own_cluster: list[KafkaBroker],
) -> None:
    """Every broker stopped and started again, on a cluster of its own."""
    cluster = own_cluster
    topic = unique_name("_kafkaguard-acls")
    acls = topic_acls(30, "r")

    async def scenario() -> None:
        s = store(cluster, topic)
        await s.start()
        await s.add(acls[:10])
        await asyncio.to_thread(all_in_sync, cluster, topic)
        cluster[2].stop()
        await s.add(acls[10:20])  # two of three replicas: min.insync.replicas holds
        await asyncio.to_thread(restart_broker, cluster[2])
        await asyncio.to_thread(all_in_sync, cluster, topic)
        cluster[1].stop()
        fresh = store(cluster, topic)
        await fresh.start()
        assert fresh.snapshot() == frozenset(acls[:20])
        await fresh.close()
        await asyncio.to_thread(restart_broker, cluster[1])

        for broker in reversed(cluster):  # the controller (node 1) last: no shutdown waits on it
            await asyncio.to_thread(broker.stop)
        await eventually(lambda: not s.reachable, 20)
        assert s.snapshot() == frozenset(acls[:20])  # the ACLs in force are kept
        started = time.monotonic()
        with pytest.raises(AclStoreError, match="unreachable"):
            await s.add(acls[20:])
        assert time.monotonic() - started < 3.0  # refused at once, not after a timeout
        assert [r for r in s.not_ready() if "unreachable" in r]
        for broker in cluster:
            await asyncio.to_thread(restart_broker, broker)
        await eventually(lambda: s.reachable, 60)
        deadline = time.monotonic() + 60
        while True:  # resumes without a restart (leaders may still move for a moment)
            try:
                await s.add(acls[20:])
                break
            except AclStoreError:
                assert time.monotonic() < deadline, "writes never resumed"
                await asyncio.sleep(0.5)
        assert s.snapshot() == frozenset(acls)
        await s.close()

    run(scenario)


def test_unreachable_at_start_waits_and_says_why(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = KafkaTopicAclStore(
            {"bootstrap.servers": "127.0.0.1:1"}, TopicSettings("t", write_timeout_ms=1000)
        )
        task = asyncio.create_task(s.start())
        await asyncio.sleep(3)
        assert not task.done()
        reasons = list(s.not_ready())
        assert any("first full read not complete" in r for r in reasons), reasons
        assert any("cannot read the topic" in r for r in reasons), reasons
        await s.close()
        task.cancel()

    run(scenario)
