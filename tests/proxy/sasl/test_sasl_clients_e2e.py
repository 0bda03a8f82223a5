"""SASL_PLAINTEXT end to end: real clients → kafkaguard (SASL terminated) → Tansu.

The principal the proxy authenticates is the one the authorizer sees: ``User:alice`` holds
WRITE on the topic and produces; ``User:bob`` authenticates fine but gets
TOPIC_AUTHORIZATION_FAILED. Wrong credentials fail with each client's authentication error.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.tansu import TansuBroker
from tests.support.jose_tokens import AUDIENCE, ISSUER
from tests.support.proxy_fixture import RunningProxy, stop_proxy_thread, unique_name
from tests.support.sasl_proxy import PASSWORDS, PROVIDER, start_sasl_proxy

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.integration


@dataclass
class SaslSetup:
    proxy: RunningProxy
    topic: str


def _acl(principal: str, op: AclOperation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


@pytest.fixture
def sasl_setup(proxy: RunningProxy, tansu: TansuBroker, tmp_path: Path) -> Iterator[SaslSetup]:
    topic = unique_name("sasl")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})  # the allow-all PLAINTEXT proxy
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    acls = [
        _acl("User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic),
        _acl("User:alice", AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster"),
    ]
    running = start_sasl_proxy(tansu, tmp_path, acls)
    try:
        yield SaslSetup(running, topic)
    finally:
        stop_proxy_thread(running)
        for future in admin.delete_topics([topic]).values():
            future.result(15)


def mint_token(sub: str, lifetime_s: int = 600) -> tuple[str, float]:
    exp = int(time.time()) + lifetime_s
    return PROVIDER.token(sub=sub, iss=ISSUER, aud=AUDIENCE, exp=exp), float(exp)


# -- confluent-kafka ---------------------------------------------------------------------------


def _confluent_config(setup: SaslSetup, mechanism: str, user: str, password: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": setup.proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "message.timeout.ms": 10000,
        "enable.idempotence": False,
    }
    if mechanism == "OAUTHBEARER":
        config["oauth_cb"] = lambda _cfg: mint_token(user)
    else:
        config["sasl.username"] = user
        config["sasl.password"] = password
    return config


def _confluent_produce(config: dict[str, Any], topic: str) -> tuple[list[Any], list[Any]]:
    """(delivery errors or None, client errors) after producing one record."""
    errors: list[Any] = []
    config = {**config, "error_cb": errors.append}
    producer = Producer(config)
    delivered: list[Any] = []
    producer.produce(topic, b"through sasl", on_delivery=lambda err, _msg: delivered.append(err))
    producer.flush(12)
    return delivered, errors


MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_principal_reaches_the_authorizer(
    sasl_setup: SaslSetup, mechanism: str
) -> None:
    ok, _ = _confluent_produce(
        _confluent_config(sasl_setup, mechanism, "alice", PASSWORDS["alice"]), sasl_setup.topic
    )
    assert ok == [None]
    denied, _ = _confluent_produce(
        _confluent_config(sasl_setup, mechanism, "bob", PASSWORDS["bob"]), sasl_setup.topic
    )
    assert len(denied) == 1 and denied[0] is not None
    assert denied[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_wrong_password(sasl_setup: SaslSetup, mechanism: str) -> None:
    config = _confluent_config(sasl_setup, mechanism, "alice", "wrong")
    config["message.timeout.ms"] = 3000
    delivered, errors = _confluent_produce(config, sasl_setup.topic)
    assert delivered and delivered[0] is not None  # never delivered
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_confluent_kafka_expired_token(sasl_setup: SaslSetup) -> None:
    config = _confluent_config(sasl_setup, "OAUTHBEARER", "alice", "")
    now = int(time.time())
    expired = PROVIDER.token(sub="alice", iss=ISSUER, aud=AUDIENCE, iat=now - 7200, exp=now - 3600)
    config["oauth_cb"] = lambda _cfg: (expired, time.time() + 600)  # the client believes it
    config["message.timeout.ms"] = 3000
    delivered, errors = _confluent_produce(config, sasl_setup.topic)
    assert delivered and delivered[0] is not None
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


# -- kafka-python --------------------------------------------------------------------------------


def _token_provider(sub: str) -> Any:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class TokenProvider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return mint_token(sub)[0]

    return TokenProvider()


def _kafka_python_producer(
    setup: SaslSetup, mechanism: str, user: str, password: str, **extra: Any
) -> Any:
    from kafka import KafkaProducer

    options: dict[str, Any] = {
        "bootstrap_servers": setup.proxy.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "request_timeout_ms": 10000,
        "max_block_ms": 10000,
        **extra,
    }
    if mechanism == "OAUTHBEARER":
        options["sasl_oauth_token_provider"] = _token_provider(user)
    else:
        options["sasl_plain_username"] = user
        options["sasl_plain_password"] = password
    return KafkaProducer(**options)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_principal_reaches_the_authorizer(
    sasl_setup: SaslSetup, mechanism: str
) -> None:
    from kafka.errors import TopicAuthorizationFailedError

    alice = _kafka_python_producer(sasl_setup, mechanism, "alice", PASSWORDS["alice"])
    try:
        metadata = alice.send(sasl_setup.topic, b"kafka-python via sasl").get(timeout=15)
        assert metadata.topic == sasl_setup.topic
    finally:
        alice.close(timeout=5)
    bob = _kafka_python_producer(sasl_setup, mechanism, "bob", PASSWORDS["bob"])
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.send(sasl_setup.topic, b"denied").get(timeout=15)
    finally:
        bob.close(timeout=5)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_wrong_password(
    sasl_setup: SaslSetup, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python 3 retries a failed bootstrap until ``bootstrap_timeout_ms``; each attempt
    fails with its SaslAuthenticationFailedError (error 58) and Kafka's message."""
    from kafka.errors import KafkaTimeoutError

    with pytest.raises(KafkaTimeoutError):
        _kafka_python_producer(
            sasl_setup, mechanism, "alice", "wrong", bootstrap_timeout_ms=2000
        ).close(timeout=2)
    failures = [r.getMessage() for r in caplog.records if "Error 58" in r.getMessage()]
    assert failures, [r.getMessage() for r in caplog.records]
    assert "SaslAuthenticationFailedError" in failures[0]
    assert "Authentication failed" in failures[0]


# -- aiokafka -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka_principal_reaches_the_authorizer(sasl_setup: SaslSetup, mechanism: str) -> None:
    """aiokafka probes the proxy's ApiVersions before authenticating (answered by the proxy:
    no broker connection yet), then produces as alice; bob is refused by the authorizer."""
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.errors import TopicAuthorizationFailedError

    async def produce(user: str) -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=sasl_setup.proxy.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=PASSWORDS[user],
            request_timeout_ms=10000,
        )
        await producer.start()
        try:
            await producer.send_and_wait(sasl_setup.topic, b"aiokafka via sasl")
        finally:
            await producer.stop()

    asyncio.run(produce("alice"))
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(produce("bob"))


# -- kcat (docs/listeners.md's example) ------------------------------------------------------------


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("password,ok", [(PASSWORDS["alice"], True), ("wrong", False)])
def test_kcat_scram(sasl_setup: SaslSetup, password: str, ok: bool) -> None:
    kcat = shutil.which("kcat")
    assert kcat is not None
    done = subprocess.run(
        [
            kcat,
            "-b",
            sasl_setup.proxy.bootstrap,
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanism=SCRAM-SHA-512",
            "-X",
            "sasl.username=alice",
            "-X",
            f"sasl.password={password}",
            "-X",
            "message.timeout.ms=5000",
            "-P",
            "-t",
            sasl_setup.topic,
        ],
        input="hello from kcat\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if ok:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode != 0
        assert "Authentication failed" in done.stderr, done.stderr
