"""OPA as the authorizer, end to end: confluent-kafka over SASL/PLAIN → kafkaguard with
``authorizer.class: kafkaguard.policy.opa:OpaAuthorizer`` → Tansu, decided by a real OPA
server running the Rego v0 policy in the OPA Kafka plugin's style
(tests/support/opa_policies/kafka_authz_v0.rego).

``alice-producer`` writes topics starting with ``alice-`` and ``bob-producer`` is refused
there (TOPIC_AUTHORIZATION_FAILED); with OPA stopped a decision not in the cache is refused
and ``/readyz`` names OPA; once it is back, the same produce succeeds. DescribeAcls answers
SECURITY_DISABLED: the OPA authorizer manages no ACLs. A configuration reload applies the
``super_users`` option.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.policy.config import AuthorizerConfig, PolicyConfig
from kafkaguard.policy.opa import OpaAuthorizer
from kafkaguard.proxy.app.metrics import ProxyCollector
from kafkaguard.tansu import TansuBroker
from tests.proxy.app.test_reload import Listener, proxy_from, reload, write_config
from tests.support.opa import V0_POLICY, V0_URL_PATH, OpaServer, build_wasm_bundle
from tests.support.proxy_fixture import RunningProxy, stop_proxy_thread, unique_name
from tests.support.sasl_proxy import start_sasl_proxy

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("kafka.admin")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.errors import SecurityDisabledError  # noqa: E402

pytestmark = pytest.mark.integration

PASSWORDS = {"alice-producer": "alice-secret", "bob-producer": "bob-secret"}


@dataclass
class OpaSetup:
    proxy: RunningProxy
    opa: OpaServer
    topics: tuple[str, str]


@pytest.fixture
def opa_setup(proxy: RunningProxy, tansu: TansuBroker, tmp_path: Path) -> Iterator[OpaSetup]:
    topics = (unique_name("alice"), unique_name("alice"))
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})  # the allow-all PLAINTEXT proxy
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(15)
    opa = OpaServer(V0_POLICY, tmp_path / "opa.log", v0=True)
    opa.start()
    authorizer = AuthorizerConfig(
        class_path="kafkaguard.policy.opa:OpaAuthorizer",
        options={
            "url": opa.url(V0_URL_PATH),
            "cache_expire_after_seconds": 1,
            "health_interval_ms": 100,
        },
    )
    running = start_sasl_proxy(
        tansu,
        tmp_path,
        [],
        mechanisms=("PLAIN",),
        policy=PolicyConfig(authorizer=authorizer),
        passwords=PASSWORDS,
    )
    try:
        yield OpaSetup(running, opa, topics)
    finally:
        stop_proxy_thread(running)
        opa.stop()
        for future in admin.delete_topics(list(topics)).values():
            future.result(15)


def _client(setup: OpaSetup, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": setup.proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        "message.timeout.ms": 10000,
        "enable.idempotence": False,
        "log_level": 0,
    }


def produce(setup: OpaSetup, user: str, topic: str) -> int | None:
    """One record, flushed: None when acknowledged, else the error code."""
    return deliver(Producer(_client(setup, user)), topic)


def _until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _metrics(setup: OpaSetup) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in ProxyCollector(setup.proxy.server, None).collect()
        for sample in family.samples
        if sample.name.startswith("kafkaguard_opa_")
    }


def test_produces_follow_the_policy(opa_setup: OpaSetup) -> None:
    own, _ = opa_setup.topics
    assert produce(opa_setup, "alice-producer", own) is None
    assert produce(opa_setup, "bob-producer", own) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    metrics = _metrics(opa_setup)
    assert metrics[("kafkaguard_opa_lookups_total", ("allowed",))] >= 2  # DESCRIBE, WRITE
    assert metrics[("kafkaguard_opa_lookups_total", ("denied",))] >= 1
    assert metrics[("kafkaguard_opa_errors_total", ("unreachable",))] == 0
    assert metrics[("kafkaguard_opa_cache_entries", ())] >= 3


def test_opa_stopped_denies_and_restarted_allows(opa_setup: OpaSetup) -> None:
    first, second = opa_setup.topics
    server = opa_setup.proxy.server
    assert produce(opa_setup, "alice-producer", first) is None
    _until(lambda: not list(server.not_ready()))
    opa_setup.opa.stop()
    _until(lambda: any(r.startswith("opa: ") for r in server.not_ready()))
    time.sleep(1.1)  # the cached decisions expire (cache_expire_after_seconds: 1)
    assert produce(opa_setup, "alice-producer", second) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    opa_setup.opa.start()
    _until(lambda: not list(server.not_ready()))
    time.sleep(1.1)  # the failed lookups' outcomes expire
    assert produce(opa_setup, "alice-producer", second) is None


def test_describe_acls_answers_security_disabled(opa_setup: OpaSetup) -> None:
    """With kafka-python, which raises the response's error (librdkafka's DescribeAcls shows
    a top-level error as an empty result)."""
    admin = kafka_admin.KafkaAdminClient(
        bootstrap_servers=opa_setup.proxy.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice-producer",
        sasl_plain_password=PASSWORDS["alice-producer"],
    )
    everything = kafka_admin.ACLFilter(
        principal=None,
        host="*",
        operation=kafka_admin.ACLOperation.ANY,
        permission_type=kafka_admin.ACLPermissionType.ANY,
        resource_pattern=kafka_admin.ResourcePatternFilter(
            kafka_admin.ResourceType.ANY, None, kafka_admin.ACLResourcePatternType.ANY
        ),
    )
    try:
        with pytest.raises(SecurityDisabledError, match="not managed by .*OpaAuthorizer"):
            admin.describe_acls(everything)
    finally:
        admin.close()


def test_a_reload_applies_the_super_users_option_to_open_connections(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    """SIGHUP's reload (``reload_config``) reaches the OPA authorizer's ``super_users``
    option: ``User:ANONYMOUS`` on PLAINTEXT, refused by the policy (it is no ``*-producer``),
    produces once the option names it; the url is kept."""
    topic = unique_name("anon")
    admin = AdminClient({"bootstrap.servers": str(tansu.address), "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    opa = OpaServer(V0_POLICY, tmp_path / "opa.log", v0=True)
    opa.start()
    listener = Listener("PLAINTEXT")

    def body(super_users: str) -> str:
        return (
            "authorizer:\n  class: kafkaguard.policy.opa:OpaAuthorizer\n  options:\n"
            f"    url: {opa.url(V0_URL_PATH)}\n    super_users: '{super_users}'\n"
        )

    path = write_config(tmp_path / "c.yaml", tansu, [listener], body("User:ops"))
    try:
        with proxy_from(path) as running:
            client = {
                "bootstrap.servers": f"127.0.0.1:{listener.port}",
                "message.timeout.ms": 10000,
                "enable.idempotence": False,
                "log_level": 0,
            }
            assert deliver(Producer(client), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
            write_config(path, tansu, [listener], body("User:ops;User:ANONYMOUS"))
            plan = reload(running)
            assert plan is not None
            assert (plan.applied, plan.restart_needed) == (("authorizer.options.super_users",), ())
            # A new producer: librdkafka keeps the refused topic in error and would not send.
            assert deliver(Producer(client), topic) is None
            authorizer = running.server.authorizer
            assert isinstance(authorizer, OpaAuthorizer)
            assert authorizer.options.url == opa.url(V0_URL_PATH)
            assert authorizer.counters.lookups["denied"] >= 1
    finally:
        opa.stop()
        admin.delete_topics([topic])[topic].result(15)


def deliver(producer: Any, topic: str) -> int | None:
    """One record through ``producer``, flushed: None when acknowledged, else the error."""
    outcome: list[int | None] = []

    def done(error: Any, _message: Any) -> None:
        outcome.append(None if error is None else error.code())

    producer.produce(topic, b"hello", on_delivery=done)
    producer.flush(15)
    assert outcome, "no delivery report within 15 s"
    return outcome[0]


def test_mode_wasm_produces_follow_the_policy_with_no_server(
    opa_setup: OpaSetup, tansu: TansuBroker, tmp_path: Path
) -> None:
    """The same policy compiled by ``opa build -t wasm`` and evaluated in the proxy: the same
    produces allowed and refused, with the OPA server stopped (nothing asks it)."""
    opa_setup.opa.stop()
    bundle = build_wasm_bundle(V0_POLICY, "kafka/authz/allow", tmp_path / "b.tar.gz", v0=True)
    authorizer = AuthorizerConfig(
        class_path="kafkaguard.policy.opa:OpaAuthorizer",
        options={"mode": "wasm", "bundle": str(bundle)},
    )
    (tmp_path / "wasm").mkdir()
    running = start_sasl_proxy(
        tansu,
        tmp_path / "wasm",
        [],
        mechanisms=("PLAIN",),
        policy=PolicyConfig(authorizer=authorizer),
        passwords=PASSWORDS,
    )
    try:
        setup = OpaSetup(running, opa_setup.opa, opa_setup.topics)
        own, _ = setup.topics
        assert produce(setup, "alice-producer", own) is None
        assert produce(setup, "bob-producer", own) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert list(running.server.not_ready()) == []
        metrics = _metrics(setup)
        assert metrics[("kafkaguard_opa_lookups_total", ("allowed",))] >= 2  # DESCRIBE, WRITE
        assert metrics[("kafkaguard_opa_lookups_total", ("denied",))] >= 1
        assert metrics[("kafkaguard_opa_lookups_total", ("error",))] == 0
    finally:
        stop_proxy_thread(running)
