"""End to end: ACL administration and DescribeCluster through an *enforcing* proxy in front
of Tansu, with confluent-kafka's AdminClient (librdkafka) and, for Create/DescribeAcls, the
raw test client.

The PLAINTEXT client is ``User:ANONYMOUS``. ACLs live in a YAML file store, so CreateAcls and
DeleteAcls go through the production write path. ACL requests are answered by the proxy
itself (Tansu never sees them); DescribeCluster goes to Tansu, and the proxy fills the KIP-430
cluster operations and hides Tansu's address.
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
from kafkaguard.protocol import codec
from kafkaguard.tansu import TansuBroker
from tests.support.proxy_fixture import RunningProxy, StartEnforcingProxy, unique_name
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ANONYMOUS = "User:ANONYMOUS"


def cluster_acl(operation: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
        AccessControlEntry(ANONYMOUS, "*", AclOperation[operation], AclPermissionType.ALLOW),
    )


def admin_client(proxy: RunningProxy) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": proxy.bootstrap, "socket.timeout.ms": 10000})


def error_code(future: Any) -> int | None:
    from confluent_kafka import KafkaException

    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def ck_binding(name: str, principal: str, operation: str, pattern: str = "LITERAL") -> Any:
    from confluent_kafka.admin import AclBinding as CkAclBinding
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import AclPermissionType as CkPerm
    from confluent_kafka.admin import ResourcePatternType
    from confluent_kafka.admin import ResourceType as CkType

    return CkAclBinding(
        CkType.TOPIC,
        name,
        ResourcePatternType[pattern],
        principal,
        "*",
        CkOp[operation],
        CkPerm.ALLOW,
    )


def ck_filter(principal: str | None) -> Any:
    from confluent_kafka.admin import AclBindingFilter as CkAclBindingFilter
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import AclPermissionType as CkPerm
    from confluent_kafka.admin import ResourcePatternType
    from confluent_kafka.admin import ResourceType as CkType

    return CkAclBindingFilter(
        CkType.ANY, None, ResourcePatternType.ANY, principal, None, CkOp.ANY, CkPerm.ANY
    )


EVERYTHING = {  # a DescribeAcls filter matching every ACL (ANY everywhere)
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}


def raw_client(proxy: RunningProxy) -> RawKafkaClient:
    host, port = proxy.bootstrap.rsplit(":", 1)
    return RawKafkaClient(host, int(port))


def acl_request(api_key: int, client: RawKafkaClient, **values: Any) -> Any:
    """Send at the newest version the proxy advertises for ``api_key``."""
    version = client.api_versions()[api_key].stop - 1
    schema = codec.request_schema(api_key, version)
    if api_key == 30:
        creation = codec.nested_type(schema, "creations")
        values = {"creations": tuple(creation(**c) for c in values["creations"])}
    return client.request(schema(**values))[1]


def test_describe_cluster_and_acl_changes(
    enforcing_proxy: StartEnforcingProxy, tansu: TansuBroker
) -> None:
    """DescribeCluster (confluent-kafka) and Create/DescribeAcls at the wire level."""
    allowed = enforcing_proxy([cluster_acl("ALTER")])
    denied = enforcing_proxy([cluster_acl("DESCRIBE_CONFIGS")])
    assert allowed.acl_file is not None and denied.acl_file is not None
    acl_file, denied_file = allowed.acl_file, denied.acl_file

    admin = admin_client(allowed)  # kept referenced: a collected client cancels its futures
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=20)
    # ALTER implies DESCRIBE; the bitfield is the proxy's (Tansu has no authorizer).
    assert {op.name for op in cluster.authorized_operations} == {"ALTER", "DESCRIBE"}
    assert cluster.nodes
    assert all(node.port != tansu.address.port for node in cluster.nodes)
    other = admin_client(denied)
    cluster = other.describe_cluster(include_authorized_operations=True).result(timeout=20)
    assert not cluster.authorized_operations  # librdkafka shows 0 as None

    topic = unique_name("acl")
    creation = {
        "resource_type": 2,
        "resource_name": topic,
        "resource_pattern_type": 4,
        "principal": "User:bob",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    before = denied_file.read_text(encoding="utf-8")
    with raw_client(denied) as client:
        describe = codec.request_schema(60, 1)
        response = client.request(describe(include_cluster_authorized_operations=True))[1]
        assert response.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
        response = acl_request(30, client, creations=[creation])
        assert [r.error_code for r in response.results] == [31]
        assert acl_request(29, client, **EVERYTHING).error_code == 31
    assert denied_file.read_text(encoding="utf-8") == before

    with raw_client(allowed) as client:
        response = acl_request(30, client, creations=[creation, {**creation, "resource_name": ""}])
        assert [(r.error_code, r.error_message) for r in response.results] == [
            (0, ""),  # the schema default, as Kafka answers (tests/conformance/test_admin_acls)
            (42, "Invalid empty resource name"),
        ]
        assert topic in acl_file.read_text(encoding="utf-8")  # persisted by the store
        described = acl_request(29, client, **{**EVERYTHING, "principal_filter": "User:bob"})
        assert [(r.resource_name, r.pattern_type) for r in described.resources] == [(topic, 4)]


def test_acl_admin_with_confluent_kafka(enforcing_proxy: StartEnforcingProxy) -> None:
    proxy = enforcing_proxy([cluster_acl("ALTER")])
    acl_file = proxy.acl_file
    assert acl_file is not None
    admin = admin_client(proxy)
    topic = unique_name("acl")
    binding = ck_binding(topic, "User:bob", "READ", "PREFIXED")
    invalid = ck_binding("", "User:bob", "READ")
    created = admin.create_acls([binding, invalid])
    assert error_code(created[binding]) is None
    assert error_code(created[invalid]) == 42  # INVALID_REQUEST, per binding
    assert topic in acl_file.read_text(encoding="utf-8")

    by_bob = ck_filter("User:bob")
    described = admin.describe_acls(by_bob).result(timeout=20)
    assert [(b.name, b.operation.name) for b in described] == [(topic, "READ")]
    deleted = admin.delete_acls([by_bob])[by_bob].result(timeout=20)
    assert [(b.name, b.principal) for b in deleted] == [(topic, "User:bob")]
    assert admin.describe_acls(by_bob).result(timeout=20) == []
