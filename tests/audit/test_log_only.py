"""Dry-run enforcement: real proxy in front of Tansu, real confluent-kafka clients, real files.

With no ACLs at all, a ``log_only`` listener lets produce and consume work while the audit
trail records every denial the proxy would have made; the same config in ``enforce`` denies.
ACL administration stays enforced in ``log_only``. The config keys are checked at the end.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.audit.config import AuditConfig
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBindingFilter
from kafkaguard.proxy.config import BrokerPorts, ProxyConfig, parse_config
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.proxy_fixture import (
    SESSION_TIMEOUT_MS,
    TANSU_NODE_ID,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

NO_ACLS = PolicyConfig(authorizer=AuthorizerConfig(), acl_store=AclStoreConfig(type="memory"))
QUIET = {"log_level": 3}


def guarded_config(tansu: TansuBroker, audit_dir: Path, enforcement: str) -> ProxyConfig:
    """One PLAINTEXT listener, no ACLs, no super users: everything is denied when enforced."""
    return replace(
        proxy_config(tansu.address, policy=NO_ACLS),
        enforcement=enforcement,
        audit=AuditConfig(enabled=True, dir=audit_dir),
    )


def audit_records(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def create_topic_directly(tansu: TansuBroker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": str(tansu.address), **QUIET})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)


def delete_topic_directly(tansu: TansuBroker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": str(tansu.address), **QUIET})
    admin.delete_topics([name])[name].result(15)


def produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    """Produce one record; the delivery error (None when delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 10000, **QUIET}
    )
    producer.produce(topic, b"hello", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def consume_one(bootstrap: str, topic: str, group: str) -> bytes:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            **QUIET,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        errors = []
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                consumer.commit(msg, asynchronous=False)
                return bytes(msg.value())
            if msg is not None:
                errors.append(msg.error())
        raise AssertionError(f"nothing consumed within 60 s; errors: {errors[-5:]}")
    finally:
        consumer.close()


def test_log_only_forwards_what_it_would_deny_and_audits_it(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    running = start_proxy_thread(guarded_config(tansu, tmp_path / "audit", "log_only"))
    topic, group = unique_name("dry"), unique_name("dry-g")
    try:
        admin = AdminClient({"bootstrap.servers": running.bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
        assert produce_one(running.bootstrap, topic) is None
        assert consume_one(running.bootstrap, topic, group) == b"hello"

        # ACL administration stays enforced: no ALTER on CLUSTER, nothing created.
        binding = AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
            AclOperation.ALL, AclPermissionType.ALLOW,
        )  # fmt: skip
        with pytest.raises(KafkaException) as refused:
            admin.create_acls([binding])[binding].result(15)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert running.server.authorizer.acls(AclBindingFilter.ANY) == []

        counters = running.server.audit.counters["PLAINTEXT"]
        assert counters.would_deny > 0 and counters.dropped == 0
        assert counters.denied == counters.would_deny + 1  # the CreateAcls denial
        admin.delete_topics([topic])[topic].result(15)
    finally:
        stop_proxy_thread(running)

    records = audit_records(tmp_path / "audit")
    would = {
        (r["operation"], r["resource_type"], r["resource_name"]) for r in records if r["would_deny"]
    }
    for expected in (
        ("CREATE", "TOPIC", topic),
        ("WRITE", "TOPIC", topic),
        ("READ", "TOPIC", topic),
        ("READ", "GROUP", group),
        ("DELETE", "TOPIC", topic),
    ):
        assert expected in would, expected
    for record in records:
        assert record["kind"] == "decision"  # nothing was allowed: no aggregates
        assert (record["result"], record["reason"], record["acl"]) == (
            "DENIED",
            "DefaultDeny",
            None,
        )
        assert record["principal"] == "User:ANONYMOUS" and record["client_host"] == "127.0.0.1"
        assert record["listener"] == "PLAINTEXT"
    (acl_admin,) = [r for r in records if r["api_name"] == "CreateAcls"]
    assert (acl_admin["mode"], acl_admin["would_deny"], acl_admin["operation"]) == (
        "enforce",
        False,
        "ALTER",
    )
    assert all(r["mode"] == "log_only" for r in records if r is not acl_admin)
    produce = [r for r in records if r["api_name"] == "Produce"]
    assert produce and all(r["correlation_id"] is not None for r in produce)


def test_the_same_config_enforced_denies(tansu: TansuBroker, tmp_path: Path) -> None:
    topic = unique_name("enf")
    create_topic_directly(tansu, topic)
    running = start_proxy_thread(guarded_config(tansu, tmp_path / "audit", "enforce"))
    try:
        error = produce_one(running.bootstrap, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        counters = running.server.audit.counters["PLAINTEXT"]
        assert counters.denied > 0 and counters.would_deny == 0
    finally:
        stop_proxy_thread(running)
        delete_topic_directly(tansu, topic)
    # The client stops at the Metadata denial (DESCRIBE): it never sends the Produce.
    denials = [r for r in audit_records(tmp_path / "audit") if r["resource_name"] == topic]
    assert {r["operation"] for r in denials} == {"DESCRIBE"}
    assert all(r["mode"] == "enforce" and not r["would_deny"] for r in denials)


def test_listener_override_global_log_only_one_listener_enforce(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    base = proxy_config(tansu.address, policy=NO_ACLS, name="DRY")
    (dry,) = base.listeners
    strict = replace(
        dry,
        name="STRICT",
        port=free_port(),
        broker_ports=BrokerPorts(free_base([TANSU_NODE_ID]), {}),
        enforcement="enforce",
    )
    config = replace(
        base,
        listeners=(dry, strict),
        enforcement="log_only",
        audit=AuditConfig(enabled=True, dir=tmp_path / "audit"),
    )
    topic = unique_name("ovr")
    create_topic_directly(tansu, topic)
    running = start_proxy_thread(config)
    try:
        assert produce_one(running.server.bootstrap("DRY"), topic) is None
        error = produce_one(running.server.bootstrap("STRICT"), topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        counters = running.server.audit.counters
        assert counters["DRY"].mode == "log_only" and counters["DRY"].would_deny > 0
        assert counters["STRICT"].mode == "enforce" and counters["STRICT"].would_deny == 0
        assert counters["STRICT"].denied > 0
    finally:
        stop_proxy_thread(running)
        delete_topic_directly(tansu, topic)
    modes = {(r["listener"], r["mode"]) for r in audit_records(tmp_path / "audit")}
    assert modes == {("DRY", "log_only"), ("STRICT", "enforce")}


# -- configuration -------------------------------------------------------------------------------

BASE = "upstream: {embedded: true}\nlisteners:\n  - name: A\n    port: 9999\n"


def parse(text: str) -> ProxyConfig:
    return parse_config(ConfigSection.from_text(text, "c.yaml"), Path("/etc/kafkaguard"))


def test_enforcement_and_audit_keys() -> None:
    default = parse(BASE)
    assert default.enforcement == "enforce" and default.audit == AuditConfig(
        dir=Path("/etc/kafkaguard/audit")
    )
    config = parse(
        "enforcement: log_only\nupstream: {embedded: true}\n"
        "listeners:\n  - name: A\n    port: 9999\n"
        "  - name: B\n    port: 9998\n    enforcement: enforce\n"
        "audit:\n  enabled: true\n  dir: /var/log/kg\n  max_file_bytes: 1000\n"
        "  max_file_seconds: 60\n  queue_size: 10\n  allowed: individual\n  denied: aggregate\n"
        "  aggregate_window_seconds: 5\n  include_unlogged: true\n"
    )
    assert [config.listener_enforcement(ls) for ls in config.listeners] == ["log_only", "enforce"]
    assert config.audit == AuditConfig(
        enabled=True,
        dir=Path("/var/log/kg"),
        max_file_bytes=1000,
        max_file_seconds=60.0,
        queue_size=10,
        allowed="individual",
        denied="aggregate",
        aggregate_window_seconds=5.0,
        include_unlogged=True,
    )


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("enforcement: dry\n", "c.yaml:1 enforcement: must be one of enforce, log_only"),
        ("audit:\n  allowed: some\n", "c.yaml:2 audit.allowed: must be one of"),
        ("audit:\n  queue_size: 0\n", "c.yaml:2 audit.queue_size: must be at least 1"),
        ("audit:\n  aggregate_window_seconds: 0\n", "c.yaml:2 audit.aggregate_window_seconds"),
        ("audit:\n  rotate: daily\n", "c.yaml:2 audit.rotate: unknown key"),
    ],
)
def test_bad_values_name_the_key(extra: str, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(extra + BASE)
    assert str(info.value).startswith(where)


def test_listener_enforcement_value_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"listeners\[0\]\.enforcement: must be one of"):
        parse("listeners:\n  - name: A\n    port: 9999\n    enforcement: dry\n")


def test_bare_off_is_off_not_a_boolean() -> None:
    config = parse(BASE + "audit:\n  allowed: off\n  denied: 'off'\n")
    assert (config.audit.allowed, config.audit.denied) == ("off", "off")
