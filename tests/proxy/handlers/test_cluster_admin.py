"""Whole-request CLUSTER checks and DescribeCluster, driven without sockets.

Every denied response is compared field by field with what the API's Kafka
``getErrorResponse`` builds, and encoded for the client's version to prove it is well formed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.base import Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
MIN_INT = -2147483648


def request(api_key: int, version: int, **values: Any) -> Any:
    return codec.request_schema(api_key, version)(**values)


def item(api_key: int, version: int, *path: str, **values: Any) -> Any:
    """An instance of the nested request entity reached by ``path``."""
    cls: Any = codec.request_schema(api_key, version)
    for name in path:
        cls = codec.nested_type(cls, name)
    return cls(**values)


def denied_response(h: HandlerHarness, body: Any) -> Any:
    verdict = h.send(body)
    assert isinstance(verdict, Respond), verdict
    codec.encode_response(verdict.response, 7)  # well formed for the client's version
    return verdict.response


# -- one request per API: (api key, version, operation, request) ----------------------------


def alter_replica_log_dirs(version: int = 2) -> Any:
    return request(
        34,
        version,
        dirs=(
            item(
                34,
                version,
                "dirs",
                path="/d1",
                topics=(item(34, version, "dirs", "topics", name="a", partitions=(0, 1)),),
            ),
            item(
                34,
                version,
                "dirs",
                path="/d2",
                topics=(
                    item(34, version, "dirs", "topics", name="b", partitions=(2,)),
                    item(34, version, "dirs", "topics", name="a", partitions=(3,)),
                ),
            ),
        ),
    )


def describe_log_dirs(version: int = 4) -> Any:
    return request(35, version, topics=None)


def elect_leaders(version: int = 2, topics: bool = True) -> Any:
    values: dict[str, Any] = {
        "timeout": timedelta(seconds=5),
        "topic_partitions": (
            (
                item(43, version, "topic_partitions", topic="a", partitions=(0, 1)),
                item(43, version, "topic_partitions", topic="b", partitions=(4,)),
            )
            if topics
            else None
        ),
    }
    if version >= 1:
        values["election_type"] = 0
    return request(43, version, **values)


def alter_partition_reassignments(version: int = 1) -> Any:
    values: dict[str, Any] = {
        "timeout": timedelta(seconds=5),
        "topics": (
            item(
                45,
                version,
                "topics",
                name="a",
                partitions=(
                    item(45, version, "topics", "partitions", partition_index=0, replicas=(1, 2)),
                    item(45, version, "topics", "partitions", partition_index=1, replicas=None),
                ),
            ),
        ),
    }
    if version >= 1:
        values["allow_replication_factor_change"] = True
    return request(45, version, **values)


def list_partition_reassignments(topics: bool = True) -> Any:
    return request(
        46,
        0,
        timeout=timedelta(seconds=5),
        topics=(item(46, 0, "topics", name="a", partition_indexes=(0, 2)),) if topics else None,
    )


def describe_client_quotas() -> Any:
    return request(
        48,
        1,
        components=(item(48, 1, "components", entity_type="user", match_type=0, match="bob"),),
        strict=False,
    )


def alter_client_quotas() -> Any:
    return request(
        49,
        1,
        entries=(
            item(
                49,
                1,
                "entries",
                entity=(
                    item(49, 1, "entries", "entity", entity_type="user", entity_name="bob"),
                    item(49, 1, "entries", "entity", entity_type="client-id", entity_name=None),
                ),
                ops=(
                    item(
                        49, 1, "entries", "ops", key="producer_byte_rate", value=1.0, remove=False
                    ),
                ),
            ),
        ),
        validate_only=False,
    )


def describe_user_scram_credentials(users: tuple[str, ...] | None = ("bob", "carol")) -> Any:
    return request(
        50,
        0,
        users=None if users is None else tuple(item(50, 0, "users", name=u) for u in users),
    )


def alter_user_scram_credentials() -> Any:
    return request(
        51,
        0,
        deletions=(
            item(51, 0, "deletions", name="zed", mechanism=1),
            item(51, 0, "deletions", name="bob", mechanism=2),
        ),
        upsertions=(
            item(
                51,
                0,
                "upsertions",
                name="bob",
                mechanism=1,
                iterations=4096,
                salt=b"s",
                salted_password=b"p",
            ),
        ),
    )


def update_features(version: int = 1) -> Any:
    key: dict[str, Any] = {"feature": "metadata.version", "max_version_level": 20}
    if version == 0:
        key["allow_downgrade"] = False
    else:
        key["upgrade_type"] = 1
    values: dict[str, Any] = {
        "timeout": timedelta(seconds=5),
        "feature_updates": (item(57, version, "feature_updates", **key),),
    }
    if version >= 1:
        values["validate_only"] = False
    return request(57, version, **values)


def unregister_broker() -> Any:
    return request(64, 0, broker_id=3)


def list_config_resources(version: int = 1) -> Any:
    return request(74, version, **({"resource_types": (2, 16)} if version >= 1 else {}))


CASES = [
    (34, "ALTER", alter_replica_log_dirs),
    (35, "DESCRIBE", describe_log_dirs),
    (43, "ALTER", elect_leaders),
    (45, "ALTER", alter_partition_reassignments),
    (46, "DESCRIBE", list_partition_reassignments),
    (48, "DESCRIBE_CONFIGS", describe_client_quotas),
    (49, "ALTER_CONFIGS", alter_client_quotas),
    (50, "DESCRIBE", describe_user_scram_credentials),
    (51, "ALTER", alter_user_scram_credentials),
    (57, "ALTER", update_features),
    (64, "ALTER", unregister_broker),
    (74, "DESCRIBE_CONFIGS", list_config_resources),
]
IDS = [codec.API_NAMES[key] for key, _, _ in CASES]
LISTING_EVERY_TOPIC = (35, 46, 74)


@pytest.mark.parametrize(("api_key", "operation", "build"), CASES, ids=IDS)
def test_allowed_is_forwarded_unchanged(api_key: int, operation: str, build: Any) -> None:
    h = HandlerHarness([acl(ALICE, operation, "CLUSTER", "kafka-cluster")])
    verdict = h.send(build())
    assert isinstance(verdict, Forward)
    assert verdict.request is None
    # Listings of every topic drop the proxy's own (tests/proxy/handlers/test_internal_topics.py)
    assert (verdict.rewrite is None) == (api_key not in LISTING_EVERY_TOPIC)
    assert h.checked() == [(operation, "CLUSTER", "kafka-cluster", "ALLOWED")]


@pytest.mark.parametrize(("api_key", "operation", "build"), CASES, ids=IDS)
def test_denied_is_answered_locally_with_31(api_key: int, operation: str, build: Any) -> None:
    # Another operation on the cluster and the same operation on a topic do not help.
    h = HandlerHarness(
        [
            acl(ALICE, "CLUSTER_ACTION", "CLUSTER", "kafka-cluster"),
            acl(ALICE, operation, "TOPIC", "*"),
            acl("User:bob", operation, "CLUSTER", "kafka-cluster"),
        ]
    )
    response = denied_response(h, build())
    assert h.checked() == [(operation, "CLUSTER", "kafka-cluster", "DENIED")]
    codes = _all_error_codes(response)
    assert codes and set(codes) == {ErrorCode.cluster_authorization_failed}


@pytest.mark.parametrize(("api_key", "operation", "build"), CASES, ids=IDS)
def test_deny_acl_wins_over_allow(api_key: int, operation: str, build: Any) -> None:
    h = HandlerHarness(
        [
            acl(ALICE, operation, "CLUSTER", "kafka-cluster"),
            acl(ALICE, operation, "CLUSTER", "kafka-cluster", permission="DENY"),
        ]
    )
    assert isinstance(h.send(build()), Respond)


def _all_error_codes(entity: Any) -> list[ErrorCode]:
    codes = []
    for name in entity.__dataclass_fields__:
        value = getattr(entity, name)
        if isinstance(value, ErrorCode):
            codes.append(value)
        elif isinstance(value, tuple):
            for element in value:
                if hasattr(element, "__dataclass_fields__"):
                    codes.extend(_all_error_codes(element))
    return codes


def test_describe_implied_by_alter() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER", "CLUSTER", "kafka-cluster")])
    for build in (describe_log_dirs, list_partition_reassignments):
        verdict = h.send(build())
        assert isinstance(verdict, Forward) and verdict.request is None


def test_super_user_passes() -> None:
    h = HandlerHarness(super_users="User:alice")
    assert h.send(unregister_broker()) == Forward()


# -- getErrorResponse shapes -------------------------------------------------------------------


def test_alter_replica_log_dirs_echoes_every_dir_topic() -> None:
    response = denied_response(HandlerHarness(), alter_replica_log_dirs())
    assert [
        (r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions])
        for r in response.results
    ] == [
        ("a", [(0, 31), (1, 31)]),
        ("b", [(2, 31)]),
        ("a", [(3, 31)]),
    ]


@pytest.mark.parametrize("version", [1, 2])
def test_describe_log_dirs_old_versions_get_an_empty_result(version: int) -> None:
    response = denied_response(HandlerHarness(), describe_log_dirs(version))
    assert response.results == ()
    assert not hasattr(response, "error_code")


@pytest.mark.parametrize("version", [3, 4])
def test_describe_log_dirs_top_level_error(version: int) -> None:
    response = denied_response(HandlerHarness(), describe_log_dirs(version))
    assert response.error_code == ErrorCode.cluster_authorization_failed
    assert response.results == ()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_every_partition(version: int) -> None:
    response = denied_response(HandlerHarness(), elect_leaders(version))
    assert [
        (r.topic, [(p.partition_id, p.error_code, p.error_message) for p in r.partition_result])
        for r in response.replica_election_results
    ] == [("a", [(0, 31, None), (1, 31, None)]), ("b", [(4, 31, None)])]
    assert getattr(response, "error_code", 31) == 31  # v1+ only


def test_elect_leaders_all_partitions_form() -> None:
    response = denied_response(HandlerHarness(), elect_leaders(topics=False))
    assert response.replica_election_results == ()
    assert response.error_code == 31


@pytest.mark.parametrize("version", [0, 1])
def test_alter_partition_reassignments(version: int) -> None:
    response = denied_response(HandlerHarness(), alter_partition_reassignments(version))
    assert response.error_code == 31 and response.error_message is None
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in response.responses
    ] == [("a", [(0, 31), (1, 31)])]


def test_list_partition_reassignments_echoes_partitions_without_replicas() -> None:
    response = denied_response(HandlerHarness(), list_partition_reassignments())
    assert response.error_code == 31
    [topic] = response.topics
    assert topic.name == "a"
    assert [(p.partition_index, p.replicas, p.adding_replicas) for p in topic.partitions] == [
        (0, (), ()),
        (2, (), ()),
    ]
    assert denied_response(HandlerHarness(), list_partition_reassignments(False)).topics == ()


def test_describe_client_quotas_null_entries() -> None:
    response = denied_response(HandlerHarness(), describe_client_quotas())
    assert response.error_code == 31 and response.entries is None


def test_alter_client_quotas_every_entry_with_errors_message() -> None:
    response = denied_response(HandlerHarness(), alter_client_quotas())
    [entry] = response.entries
    assert entry.error_code == 31
    assert entry.error_message == "Cluster authorization failed."
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [
        ("user", "bob"),
        ("client-id", None),
    ]


def test_describe_user_scram_credentials_one_nameless_row_per_user() -> None:
    response = denied_response(HandlerHarness(), describe_user_scram_credentials())
    assert response.error_code == 31
    assert [(r.user, r.error_code) for r in response.results] == [("", 31), ("", 31)]
    everyone = denied_response(HandlerHarness(), describe_user_scram_credentials(None))
    assert everyone.error_code == 31 and everyone.results == ()


def test_alter_user_scram_credentials_distinct_sorted_users() -> None:
    response = denied_response(HandlerHarness(), alter_user_scram_credentials())
    assert [(r.user, r.error_code) for r in response.results] == [("bob", 31), ("zed", 31)]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_update_features_top_level_only(version: int) -> None:
    response = denied_response(HandlerHarness(), update_features(version))
    assert response.error_code == 31
    assert getattr(response, "results", ()) == ()


def test_unregister_broker_and_list_config_resources() -> None:
    assert denied_response(HandlerHarness(), unregister_broker()).error_code == 31
    for version in (0, 1):
        response = denied_response(HandlerHarness(), list_config_resources(version))
        assert response.error_code == 31 and response.config_resources == ()


# -- DescribeCluster ---------------------------------------------------------------------------


def describe_cluster(version: int = 2, *, ops: bool = False, endpoint_type: int = 1) -> Any:
    values: dict[str, Any] = {"include_cluster_authorized_operations": ops}
    if version >= 1:
        values["endpoint_type"] = endpoint_type
    if version >= 2:
        values["include_fenced_brokers"] = False
    return request(60, version, **values)


def cluster_reply(version: int = 2, operations: int = 0x7FFF) -> Any:
    schema = codec.response_schema(60, version)
    broker_type = codec.nested_type(schema, "brokers")
    extra = {"is_fenced": False} if version >= 2 else {}
    return codec.make_entity(
        schema,
        cluster_id="c1",
        controller_id=1,
        brokers=(broker_type(broker_id=1, host="10.1.1.1", port=9092, rack=None, **extra),),
        cluster_authorized_operations=operations,
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_needs_no_acl_and_hides_addresses(version: int) -> None:
    h = HandlerHarness()
    verdict = h.send(describe_cluster(version))
    assert isinstance(verdict, Forward) and verdict.request is None
    assert h.checked() == []
    response = h.complete(verdict, cluster_reply(version))
    assert [(b.host, b.port) for b in response.brokers] == [("proxy.test", 30001)]
    # Not requested: the sentinel, whatever the broker (without an authorizer) wrote.
    assert response.cluster_authorized_operations == MIN_INT


def test_describe_cluster_operations_denied_is_zero() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER", "TOPIC", "*")])
    verdict = h.send(describe_cluster(ops=True))
    assert h.checked() == [("DESCRIBE", "CLUSTER", "kafka-cluster", "DENIED")]
    assert h.complete(verdict, cluster_reply()).cluster_authorized_operations == 0


def test_describe_cluster_operations_bitfield() -> None:
    h = HandlerHarness(
        [
            acl(ALICE, "DESCRIBE", "CLUSTER", "kafka-cluster"),
            acl(ALICE, "ALTER", "CLUSTER", "kafka-cluster"),
        ]
    )
    verdict = h.send(describe_cluster(ops=True))
    # The DESCRIBE check is logged; the KIP-430 probe follows it, unlogged.
    assert h.checked()[0] == ("DESCRIBE", "CLUSTER", "kafka-cluster", "ALLOWED")
    assert h.checks[0][0].log_if_denied
    assert h.complete(verdict, cluster_reply()).cluster_authorized_operations == 384


def test_describe_cluster_broker_error_left_alone() -> None:
    h = HandlerHarness()
    verdict = h.send(describe_cluster(ops=True))
    failed = codec.replace(cluster_reply(operations=MIN_INT), error_code=ErrorCode.not_controller)
    assert h.complete(verdict, failed).cluster_authorized_operations == MIN_INT


def test_describe_cluster_unchanged_response_is_the_same_object() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER", "TOPIC", "*")])
    verdict = h.send(describe_cluster(ops=True))
    reply = cluster_reply(operations=0)
    h.advertised[1] = ("10.1.1.1", 9092)
    reply = codec.replace(
        reply, brokers=(codec.replace(reply.brokers[0], host="proxy.test", port=30001),)
    )
    assert h.complete(verdict, reply) is reply


@pytest.mark.parametrize(
    ("endpoint_type", "code", "message"),
    [
        (
            2,
            ErrorCode.mismatched_endpoint_type,
            "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER",
        ),
        (0, ErrorCode.unsupported_endpoint_type, "Unsupported endpoint type 0"),
        (7, ErrorCode.unsupported_endpoint_type, "Unsupported endpoint type 7"),
    ],
)
def test_describe_cluster_endpoint_type_checked_first(
    endpoint_type: int, code: ErrorCode, message: str
) -> None:
    h = HandlerHarness(super_users="User:alice")
    verdict = h.send(describe_cluster(ops=True, endpoint_type=endpoint_type))
    assert isinstance(verdict, Respond)
    assert h.checked() == []
    response = verdict.response
    assert (response.error_code, response.error_message) == (code, message)
    assert response.brokers == () and response.controller_id == -1
    assert response.cluster_authorized_operations == MIN_INT
    codec.encode_response(response, 7)
