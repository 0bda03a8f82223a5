"""Differential scenarios: DescribeCluster, KIP-430 authorized operations in Metadata, and the
APIs authorized by one operation on the cluster as a whole.

Kafka's behaviour followed: ``AuthHelper.computeDescribeClusterResponse`` (no check, DESCRIBE
CLUSTER only for the bitfield), ``KafkaApis.handleTopicMetadataRequest`` and
``AuthHelper.authorizeClusterOperation`` (31 for the whole request, shaped by the API's
``getErrorResponse``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.conformance.admin_steps import (
    ALICE,
    BOB,
    CLUSTER,
    DESCRIBE_CLUSTER,
    acl,
    call,
    ensure_topics,
    metadata,
    set_acls,
    step,
)
from tests.support.conformance.harness import Side, differential, scenario_name

pytestmark = pytest.mark.kafka

USERS = ("alice", "bob", "carol", "admin")


# -- DescribeCluster -----------------------------------------------------------------------------


def test_describe_cluster_authorized_operations(sides: list[Side]) -> None:
    """No check for DescribeCluster itself; the KIP-430 bitfield needs DESCRIBE CLUSTER (else
    0): alice has DESCRIBE + ALTER (384), bob only ALTER_CONFIGS (which does not imply
    DESCRIBE: 0), carol nothing, admin is a super user (every cluster operation)."""
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "CLUSTER", CLUSTER),
            acl(ALICE, "ALTER", "CLUSTER", CLUSTER),
            acl(BOB, "ALTER_CONFIGS", "CLUSTER", CLUSTER),
        ],
    )
    expected = {"alice": 384, "bob": 0, "carol": 0, "admin": 8096}
    for user in USERS:
        for version in (0, 2):
            for include in (False, True):

                def run(
                    side: Side, user: str = user, version: int = version, include: bool = include
                ) -> Any:
                    return call(
                        side,
                        user,
                        DESCRIBE_CLUSTER,
                        version,
                        include_cluster_authorized_operations=include,
                        include_fenced_brokers=False,
                        endpoint_type=1,
                    )

                answer = differential(sides, run)
                assert answer["error_code"] == "none"
                assert answer["cluster_authorized_operations"] == (
                    expected[user] if include else -(2**31)
                )

    # AdminClient.describe_cluster(include_authorized_operations=True): what a client shows.
    for user in ("alice", "carol"):

        def client(side: Side, user: str = user) -> Any:
            admin = side.admin(user)  # a destroyed client fails its futures: keep it
            result = admin.describe_cluster(include_authorized_operations=True).result(15)
            return sorted(op.name for op in result.authorized_operations or ())

        assert differential(sides, client) == (["ALTER", "DESCRIBE"] if user == "alice" else [])


def test_describe_cluster_endpoint_type_checked_first(sides: list[Side]) -> None:
    """A controller (2) or unknown (7) endpoint type is refused before anything else, for a
    principal without any ACL too (114 / 115 with Kafka's messages)."""
    set_acls(sides, [])
    for endpoint_type, code in ((2, "mismatched_endpoint_type"), (7, "unsupported_endpoint_type")):

        def run(side: Side, endpoint_type: int = endpoint_type) -> Any:
            return call(
                side,
                "carol",
                DESCRIBE_CLUSTER,
                2,
                include_cluster_authorized_operations=True,
                include_fenced_brokers=False,
                endpoint_type=endpoint_type,
            )

        assert differential(sides, run)["error_code"] == code


# -- Metadata KIP-430 ----------------------------------------------------------------------------


def test_metadata_authorized_operations(sides: list[Side]) -> None:
    """Metadata v8–v10 ``cluster_authorized_operations`` and v8+ ``topic_authorized_operations``
    for named and all-topics requests: bitfields only for describable topics, the sentinel for
    29 entries and when not requested."""
    readable, configured, hidden = (scenario_name(p) for p in ("ops-read", "ops-cfg", "ops-hid"))
    names = [readable, configured, hidden]
    for side in sides:
        ensure_topics(side, *names)
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "CLUSTER", CLUSTER),
            acl(ALICE, "READ", "TOPIC", readable),
            acl(ALICE, "ALTER_CONFIGS", "TOPIC", configured),
            acl(ALICE, "WRITE", "TOPIC", "ops-", pattern="PREFIXED"),
            acl(ALICE, "DELETE", "TOPIC", hidden, permission="DENY"),
            acl(BOB, "DESCRIBE_CONFIGS", "TOPIC", "*"),
            acl(BOB, "CREATE", "CLUSTER", CLUSTER),
        ],
    )
    for user in ("alice", "bob"):
        for version in (8, 10, 12, 13):
            for requested in (names, None):
                for include in (False, True):
                    differential(
                        sides,
                        step(
                            metadata,
                            user,
                            version,
                            requested,
                            cluster_ops=include,
                            topic_ops=include,
                            only=names,
                        ),
                    )


# -- APIs authorized by one operation on the cluster --------------------------------------------


def cluster_requests(topic: str) -> list[tuple[str, int, int, dict[str, Any]]]:
    """(name, api key, version, fields) of harmless requests to every API that one cluster
    operation authorizes: validate-only, or naming nothing that exists."""
    return [
        (
            "AlterReplicaLogDirs",
            34,
            2,
            {"dirs": [{"path": "/nowhere", "topics": [{"name": topic, "partitions": [0]}]}]},
        ),
        ("DescribeLogDirs", 35, 4, {"topics": [{"topic": topic, "partitions": [0]}]}),
        (
            "ElectLeaders",
            43,
            2,
            {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}]},
        ),
        (
            "AlterPartitionReassignments",
            45,
            0,
            {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "replicas": None}]}]},
        ),
        (
            "ListPartitionReassignments",
            46,
            0,
            {"topics": [{"name": topic, "partition_indexes": [0]}]},
        ),
        ("DescribeClientQuotas", 48, 1, {"components": [], "strict": False}),
        (
            "AlterClientQuotas",
            49,
            1,
            {
                "entries": [
                    {
                        "entity": [{"entity_type": "client-id", "entity_name": "c1"}],
                        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
                    }
                ],
                "validate_only": True,
            },
        ),
        ("DescribeUserScramCredentials", 50, 0, {"users": [{"name": "nobody"}]}),
        (
            "AlterUserScramCredentials",
            51,
            0,
            {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []},
        ),
        ("UpdateFeatures", 57, 1, {"feature_updates": [], "validate_only": True}),
        ("UnregisterBroker", 64, 0, {"broker_id": 99}),
        ("ListConfigResources", 74, 1, {"resource_types": [16]}),
    ]


def test_cluster_operation_apis(sides: list[Side]) -> None:
    """Every API one cluster operation authorizes as a whole (ALTER, DESCRIBE, ALTER_CONFIGS,
    DESCRIBE_CONFIGS): 31 without it, the broker's answer with it. DescribeLogDirs' paths
    are the brokers' own directories and are compared by count only."""
    topic = scenario_name("clop")
    for side in sides:
        ensure_topics(side, topic)
    set_acls(
        sides,
        [
            acl(ALICE, operation, "CLUSTER", CLUSTER)
            for operation in ("ALTER", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS")
        ],
    )
    for user in ("carol", "alice"):
        for name, api_key, version, fields in cluster_requests(topic):

            def run(
                side: Side,
                user: str = user,
                api_key: int = api_key,
                version: int = version,
                fields: dict[str, Any] = fields,
            ) -> Any:
                response = call(side, user, api_key, version, **fields)
                if api_key == 35:  # DescribeLogDirs: the broker's own paths and sizes
                    return (response.error_code, len(response.results))
                return response

            answer = differential(sides, run)
            denied = "cluster_authorization_failed" in repr(answer)
            assert denied == (user == "carol"), (name, answer)
