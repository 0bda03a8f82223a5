"""End to end: topic administration, configs and transactions through an *enforcing* proxy
in front of Tansu, with confluent-kafka (librdkafka) as the client.

The PLAINTEXT client is ``User:ANONYMOUS``; its ACLs come from a YAML file store, so the
proxy runs exactly as configured in production. Each test asserts what a Kafka broker with
an authorizer would answer: allowed items succeed for real on Tansu, denied ones fail with
the error librdkafka raises for that code, per item in mixed requests.
"""

from __future__ import annotations

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
from tests.support.proxy_fixture import RunningProxy, StartEnforcingProxy, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ANONYMOUS = "User:ANONYMOUS"


def allow(operation: str, resource_type: str, name: str, pattern: str = "LITERAL") -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType[resource_type], name, PatternType[pattern]),
        AccessControlEntry(ANONYMOUS, "*", AclOperation[operation], AclPermissionType.ALLOW),
    )


def _error_code(future: Any) -> int | None:
    from confluent_kafka import KafkaException

    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


@pytest.fixture
def prefix() -> str:
    return unique_name("ok")


@pytest.fixture
def admin_proxy(enforcing_proxy: StartEnforcingProxy, prefix: str) -> RunningProxy:
    return enforcing_proxy(
        allow(op, "TOPIC", prefix, "PREFIXED")
        for op in ("CREATE", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS")
    )


def test_mixed_create_describe_configs_delete_topics(
    admin_proxy: RunningProxy, tansu: TansuBroker, prefix: str
) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    from confluent_kafka.admin import ResourceType as CKResourceType

    admin = AdminClient({"bootstrap.servers": admin_proxy.bootstrap, "log_level": 3})
    mine, theirs = f"{prefix}-a", unique_name("nope")

    created = admin.create_topics(
        [
            NewTopic(t, num_partitions=1, replication_factor=1, config={"retention.ms": "3600123"})
            for t in (mine, theirs)
        ],
        request_timeout=15,
    )
    assert _error_code(created[mine]) is None
    assert _error_code(created[theirs]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The denied name never reached Tansu; the allowed one exists there.
    direct = AdminClient({"bootstrap.servers": f"{tansu.address.host}:{tansu.address.port}"})
    topics = direct.list_topics(timeout=10).topics
    assert mine in topics and theirs not in topics

    described = admin.describe_configs(
        [ConfigResource(CKResourceType.TOPIC, t) for t in (mine, theirs)], request_timeout=15
    )
    by_name = {resource.name: future for resource, future in described.items()}
    assert by_name[mine].result(timeout=20)["retention.ms"].value == "3600123"
    assert _error_code(by_name[theirs]) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    deleted = admin.delete_topics([mine, theirs], request_timeout=15)
    assert _error_code(deleted[mine]) is None
    assert _error_code(deleted[theirs]) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_transactional_producer_needs_write_on_its_transactional_id(
    tansu: TansuBroker, enforcing_proxy: StartEnforcingProxy
) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, allowed_tx, denied_tx = unique_name("txt"), unique_name("tx"), unique_name("tx")
    direct = AdminClient({"bootstrap.servers": f"{tansu.address.host}:{tansu.address.port}"})
    direct.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=20
    )
    acls = [
        allow("WRITE", "TOPIC", topic),
        allow("DESCRIBE", "TOPIC", topic),
        allow("WRITE", "TRANSACTIONAL_ID", allowed_tx),
        allow("DESCRIBE", "TRANSACTIONAL_ID", allowed_tx),
        # DESCRIBE lets FindCoordinator through, so InitProducerId itself is what fails.
        allow("DESCRIBE", "TRANSACTIONAL_ID", denied_tx),
    ]
    running = enforcing_proxy(acls)
    denied = Producer(
        {"bootstrap.servers": running.bootstrap, "transactional.id": denied_tx, "log_level": 0}
    )
    with pytest.raises(KafkaException) as excinfo:
        denied.init_transactions(20)
    assert excinfo.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    producer = Producer(
        {"bootstrap.servers": running.bootstrap, "transactional.id": allowed_tx, "log_level": 3}
    )
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(20)
