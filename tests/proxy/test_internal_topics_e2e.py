"""The proxy's internal topics end to end (issue 26): a super user behind kafkaguard, in front
of Tansu and of Apache Kafka 4.3.1, cannot produce to, fetch, list offsets of, see in
Metadata, describe or alter the configs of, delete, add partitions to or create the proxy's
topics (``_kafkaguard-*`` and the configured audit topic); a principal named in
``authorizer.internal_topics.principals`` can. The topics are made straight on the upstream,
as the proxy itself makes them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from kafkaguard.audit.config import AuditConfig, AuditKafkaConfig
from kafkaguard.policy.config import AuthorizerConfig, PolicyConfig
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import BrokerPorts, HostPort
from kafkaguard.tansu import free_base
from tests.support.conformance.datapath import (
    build,
    entities,
    ids_behind,
    produce_request,
    record_batch,
)
from tests.support.proxy_fixture import (
    ALLOW_ALL,
    TANSU_NODE_ID,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient, build_request

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.timeout(240)

TIMEOUT_S = 30
KAFKA_NODE_ID = 1
SUPER_USER = "User:ANONYMOUS"
"""Every PLAINTEXT client; ``ALLOW_ALL`` makes it a super user."""

StartProxy = Callable[..., RunningProxy]
"""``start(policy, enforcement="enforce")``."""


@dataclasses.dataclass
class Upstream:
    bootstrap: str
    node_id: int


@pytest.fixture(params=["tansu", pytest.param("kafka", marks=pytest.mark.kafka)])
def upstream(request: pytest.FixtureRequest) -> Upstream:
    if request.param == "tansu":
        tansu = request.getfixturevalue("tansu")
        return Upstream(f"{tansu.address.host}:{tansu.address.port}", TANSU_NODE_ID)
    kafka = request.getfixturevalue("kafka_upstream")
    return Upstream(kafka.bootstrap, KAFKA_NODE_ID)


@pytest.fixture
def audit_topic() -> str:
    return unique_name("audit-trail")


@pytest.fixture
def start(upstream: Upstream, audit_topic: str) -> Iterator[StartProxy]:
    """``start(policy)``: a proxy in front of ``upstream`` whose audit topic is ``audit_topic``."""
    started: list[RunningProxy] = []
    host, port = upstream.bootstrap.rsplit(":", 1)

    def run(policy: PolicyConfig, enforcement: str = "enforce") -> RunningProxy:
        config = proxy_config(
            HostPort(host, int(port)),
            broker_ports=BrokerPorts(free_base([upstream.node_id]), {}),
            policy=policy,
        )
        audit = AuditConfig(kafka=AuditKafkaConfig(topic=audit_topic))
        running = start_proxy_thread(
            dataclasses.replace(config, audit=audit, enforcement=enforcement)
        )
        started.append(running)
        return running

    try:
        yield run
    finally:
        for running in started:
            stop_proxy_thread(running)


@pytest.fixture
def internal(upstream: Upstream, audit_topic: str) -> dict[str, UUID]:
    """A ``_kafkaguard-*`` topic and the audit topic on the upstream, one record each; by id."""
    names = [unique_name("_kafkaguard-acls"), audit_topic]
    admin = AdminClient({"bootstrap.servers": upstream.bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(TIMEOUT_S)
    ids = ids_behind(upstream.bootstrap, *names)
    deadline = time.monotonic() + TIMEOUT_S
    pending = set(names)
    host, port = upstream.bootstrap.rsplit(":", 1)
    while pending:  # a new partition may answer NOT_LEADER for a moment
        with RawKafkaClient(host, int(port), timeout_s=TIMEOUT_S) as client:
            _, answer = client.request(
                produce_request(9, [(n, record_batch(b"secret")) for n in pending])
            )
        pending -= {t.name for t in answer.responses if t.partition_responses[0].error_code == 0}
        assert time.monotonic() < deadline, answer
        time.sleep(0.1 if pending else 0)
    return ids


def raw(proxy: RunningProxy) -> RawKafkaClient:
    host, port = proxy.bootstrap.rsplit(":", 1)
    return RawKafkaClient(host, int(port), timeout_s=TIMEOUT_S)


def metadata(client: RawKafkaClient, names: list[str] | None) -> dict[str, int]:
    mod = entities(3, 12)
    topics = (
        None
        if names is None
        else tuple(mod.MetadataRequestTopic(name=n, topic_id=UUID(int=0)) for n in names)
    )
    _, answer = client.request(
        build_request(
            3,
            12,
            topics=topics,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return {str(t.name): int(t.error_code) for t in answer.topics}


def produce_codes(client: RawKafkaClient, version: int, key: str | UUID) -> list[int]:
    _, answer = client.request(produce_request(version, [(key, record_batch(b"forged"))]))
    return [int(p.error_code) for t in answer.responses for p in t.partition_responses]


def fetch_codes(client: RawKafkaClient, version: int, key: str | UUID) -> list[tuple[int, bool]]:
    """(error code, whether records came) per partition answered."""
    mod = entities(1, version)
    field = "topic" if version < 13 else "topic_id"
    partition = build(mod.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    _, answer = client.request(
        build_request(
            1,
            version,
            replica_id=-1,
            replica_state=build(mod.ReplicaState, replica_id=-1)
            if hasattr(mod, "ReplicaState")
            else None,
            max_wait=timedelta(milliseconds=100),
            min_bytes=1,
            max_bytes=1 << 20,
            session_id=0,
            session_epoch=-1,
            topics=(mod.FetchTopic(**{field: key}, partitions=(partition,)),),
            forgotten_topics_data=(),
        )
    )
    return [(int(p.error_code), bool(p.records)) for t in answer.responses for p in t.partitions]


def list_offsets_codes(client: RawKafkaClient, name: str) -> list[int]:
    mod = entities(2, 7)
    _, answer = client.request(
        build_request(
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=(
                mod.ListOffsetsTopic(
                    name=name,
                    partitions=(
                        mod.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-1
                        ),
                    ),
                ),
            ),
        )
    )
    return [int(p.error_code) for t in answer.topics for p in t.partitions]


def add_partitions_v5_codes(client: RawKafkaClient, names: list[str]) -> list[int]:
    """AddPartitionsToTxn v5, one transaction adding partition 0 of each of ``names``."""
    mod = entities(24, 5)
    transaction = mod.AddPartitionsToTxnTransaction(
        transactional_id="txn",
        producer_id=1,
        producer_epoch=0,
        verify_only=False,
        topics=tuple(mod.AddPartitionsToTxnTopic(name=n, partitions=(0,)) for n in names),
    )
    _, answer = client.request(build_request(24, 5, transactions=(transaction,)))
    return [
        int(p.partition_error_code)
        for r in answer.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    ]


def admin_error(future: Any) -> str | None:
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        return str(exc.args[0].name())
    return None


def topic_resource(name: str) -> Any:
    return ConfigResource(ConfigResource.Type.TOPIC, name)


def test_a_super_user_cannot_touch_the_proxys_internal_topics(
    start: StartProxy, internal: dict[str, UUID], upstream: Upstream
) -> None:
    proxy = start(ALLOW_ALL)
    denied = ErrorCode.topic_authorization_failed
    with raw(proxy) as client:
        versions = client.api_versions()
        listed = metadata(client, None)
        assert not set(internal) & set(listed), listed  # all topics: not there at all
        assert metadata(client, list(internal)) == dict.fromkeys(internal, denied)
        for name, topic_id in internal.items():
            assert produce_codes(client, 9, name) == [ErrorCode.invalid_topic_exception]
            assert fetch_codes(client, 12, name) == [(denied, False)]
            if 13 in versions[1]:
                assert fetch_codes(client, 13, topic_id) == [(denied, False)]
            if 13 in versions[0]:
                assert produce_codes(client, 13, topic_id) == [ErrorCode.invalid_topic_exception]
            assert list_offsets_codes(client, name) == [denied]

    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    names = list(internal)
    auth = "TOPIC_AUTHORIZATION_FAILED"
    for name in names:
        (described,) = admin.describe_configs([topic_resource(name)]).values()
        assert admin_error(described) == auth
        entry = ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
        (altered,) = admin.incremental_alter_configs([resource]).values()
        assert admin_error(altered) == auth
    if 37 in versions:  # CreatePartitions (Tansu has none)
        for future in admin.create_partitions([NewPartitions(n, 3) for n in names]).values():
            assert admin_error(future) == auth
    for future in admin.delete_topics(names, operation_timeout=TIMEOUT_S).values():
        assert admin_error(future) == auth
    created = unique_name("_kafkaguard-users")
    for future in admin.create_topics([NewTopic(created, 1, 1)]).values():
        assert admin_error(future) == auth

    # Nothing reached the upstream: the topics are there, unchanged, and nothing was created.
    behind = AdminClient({"bootstrap.servers": upstream.bootstrap})
    topics = behind.list_topics(timeout=TIMEOUT_S).topics
    assert set(names) <= set(topics) and created not in topics
    assert all(len(topics[n].partitions) == 1 for n in names)


def test_no_transaction_and_no_colliding_name_reaches_the_internal_topics(
    start: StartProxy, internal: dict[str, UUID], upstream: Upstream
) -> None:
    """Issue 35: AddPartitionsToTxn v5 (KIP-890's inter-broker form; a super user has
    CLUSTER_ACTION) would have the coordinator write a control batch into the topic; a
    CreateTopics of ``.kafkaguard-acls-…`` would be answered "collides with existing topic:
    _kafkaguard-acls-…". Both are answered as the internal names are."""
    proxy = start(ALLOW_ALL)
    names = list(internal)
    with raw(proxy) as client:
        served = 5 in client.api_versions().get(24, ())
        assert served or upstream.node_id != KAFKA_NODE_ID  # Kafka 4.3.1 serves v5
        if served:
            assert add_partitions_v5_codes(client, names) == [29] * len(names)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    colliding = [NewTopic("." + names[0][1:], 1, 1)]
    for future in admin.create_topics(colliding, validate_only=True).values():
        assert admin_error(future) == "TOPIC_AUTHORIZATION_FAILED"


def test_a_principal_named_for_the_internal_topics_may_use_them(
    start: StartProxy, internal: dict[str, UUID]
) -> None:
    policy = PolicyConfig(
        authorizer=dataclasses.replace(
            ALLOW_ALL.authorizer, internal_topic_principals=frozenset({SUPER_USER})
        )
    )
    proxy = start(policy)
    with raw(proxy) as client:
        assert metadata(client, list(internal)) == dict.fromkeys(internal, ErrorCode.none)
        for name in internal:
            assert produce_codes(client, 9, name) == [ErrorCode.none]
            assert fetch_codes(client, 12, name) == [(ErrorCode.none, True)]
            assert list_offsets_codes(client, name) == [ErrorCode.none]


def test_log_only_enforcement_still_refuses_the_internal_topics(
    start: StartProxy, internal: dict[str, UUID]
) -> None:
    """``enforcement: log_only`` handles denied requests as if allowed, but this rule is not a
    policy being tried out: the proxy's topics stay refused."""
    proxy = start(PolicyConfig(), "log_only")  # no ACLs, no super user
    ordinary = unique_name("ordinary")
    with raw(proxy) as client:
        assert metadata(client, list(internal)) == dict.fromkeys(
            internal, ErrorCode.topic_authorization_failed
        )
        for name in internal:
            assert produce_codes(client, 9, name) == [ErrorCode.invalid_topic_exception]
            assert list_offsets_codes(client, name) == [ErrorCode.topic_authorization_failed]
        # another topic is not refused (a missing one: the broker's own answer)
        assert metadata(client, [ordinary])[ordinary] != ErrorCode.topic_authorization_failed


def test_the_setting_is_read_from_the_authorizer_section() -> None:
    from kafkaguard.config_tree import ConfigSection
    from kafkaguard.policy.config import parse_authorizer_config

    text = "internal_topics:\n  principals: [User:kafkaguard-ops, User:backup]\n"
    section = ConfigSection.from_text(text)
    assert parse_authorizer_config(section) == AuthorizerConfig(
        internal_topic_principals=frozenset({"User:kafkaguard-ops", "User:backup"})
    )
