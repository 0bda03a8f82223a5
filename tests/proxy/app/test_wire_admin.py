"""kafkaguard's own DescribeAcls and Metadata reads (issue 38), against a SASL_PLAINTEXT proxy in
front of Tansu: the principal a request is made as, the SASL mechanisms, refusals named."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaguard.certs import tooling
from kafkaguard.policy.model import AclOperation
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.app import wire_admin
from kafkaguard.tansu import TansuBroker
from tests.support.policy import CLUSTER, acl
from tests.support.proxy_fixture import RunningProxy, stop_proxy_thread, unique_name
from tests.support.sasl_proxy import PASSWORDS, start_sasl_proxy

pytestmark = pytest.mark.timeout(60)

GRANTS = [
    acl("User:alice", AclOperation.DESCRIBE, name="kafka-cluster", rtype=CLUSTER),
    acl("User:bob", AclOperation.WRITE, name="orders"),
]


@pytest.fixture
def sasl_proxy(tansu: TansuBroker, tmp_path: Path) -> Iterator[RunningProxy]:
    running = start_sasl_proxy(tansu, tmp_path, GRANTS, mechanisms=("PLAIN", "SCRAM-SHA-512"))
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def settings(proxy: RunningProxy, user: str, mechanism: str, password: str = "") -> dict[str, str]:
    return {
        "bootstrap.servers": proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password or PASSWORDS[user],
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_describe_acls_as_a_sasl_user(sasl_proxy: RunningProxy, mechanism: str) -> None:
    found = asyncio.run(wire_admin.describe_acls(settings(sasl_proxy, "alice", mechanism)))
    assert found == frozenset(GRANTS)


def test_a_refusal_names_the_code_and_the_principal(sasl_proxy: RunningProxy) -> None:
    with pytest.raises(AclStoreError) as refused:
        asyncio.run(wire_admin.describe_acls(settings(sasl_proxy, "bob", "SCRAM-SHA-512")))
    text = str(refused.value)
    assert "CLUSTER_AUTHORIZATION_FAILED (31)" in text and "as User:bob" in text, text


def test_bad_credentials_are_an_error(sasl_proxy: RunningProxy) -> None:
    wrong = settings(sasl_proxy, "alice", "SCRAM-SHA-512", password="not-it")
    with pytest.raises(AclStoreError, match="refused SASL SCRAM-SHA-512 for 'alice'"):
        asyncio.run(wire_admin.describe_acls(wrong))


def test_topic_exists_asks_without_creating(sasl_proxy: RunningProxy, tansu: TansuBroker) -> None:
    absent = unique_name("absent")
    upstream = {"bootstrap.servers": tansu.address}
    assert asyncio.run(wire_admin.topic_exists(upstream, absent)) is False
    assert asyncio.run(wire_admin.topic_exists(upstream, absent)) is False  # not auto-created


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"bootstrap.servers": ""}, "no bootstrap server"),
        ({"bootstrap.servers": "nohost"}, "'nohost' is not host:port"),
        ({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL2"}, "not a Kafka security"),
        (
            {"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"},
            "sasl.mechanism '(none)'",
        ),
        (
            {
                "bootstrap.servers": "h:1",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
            },
            "needs sasl.username",
        ),
    ],
)
def test_settings_that_cannot_connect_are_named(given: dict[str, str], error: str) -> None:
    with pytest.raises(AclStoreError, match=re.escape(error)):
        wire_admin.WireConnection.from_settings(given)


def test_an_unreachable_server_is_an_error_not_an_empty_store() -> None:
    with pytest.raises(AclStoreError, match="DescribeAcls at 127.0.0.1:1 as User:ANONYMOUS"):
        asyncio.run(wire_admin.describe_acls({"bootstrap.servers": "127.0.0.1:1"}))


def test_a_client_certificate_names_the_principal_as_kafka_does(tmp_path: Path) -> None:
    tooling.init_ca(tmp_path)
    issued = tooling.issue_client(tmp_path, common_name="carol", organization="Other")
    connection = wire_admin.WireConnection.from_settings(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "security.protocol": "SSL",
            "ssl.ca.location": str(tmp_path / tooling.CA_CERT),
            "ssl.certificate.location": str(issued.cert_path),
            "ssl.key.location": str(issued.key_path),
        }
    )
    assert connection.principal == "User:CN=carol,O=Other"  # X500Principal.getName()
    assert connection.ssl_context is not None and connection.ssl_context.check_hostname
    with pytest.raises(AclStoreError, match="TLS settings"):
        wire_admin.WireConnection.from_settings(
            {"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.ca.location": "/nope"}
        )
