"""The dispatcher's version gate (``core/dispatch.handle_request``): what the proxy serves is
the handler's range ∩ kio ∩ the broker's, the broker's read as data from the cluster it
answered for (``UpstreamCluster.broker_versions``), and exactly what ApiVersions advertises
(``handlers.supported_versions``). An API the proxy answers itself is served whatever the
broker lists. Driven over the in-memory exchange with a real cluster and authorizer."""

from __future__ import annotations

from typing import Any

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers import REGISTRY, supported_versions
from tests.support.entities import item, req, resp
from tests.support.exchange_driver import Driver, request, split_frames, to_broker, to_client
from tests.support.handler_harness import acl

DESCRIBE_CLUSTER = 60
DESCRIBE_ACLS = 29


def broker_answer(ranges: dict[int, range]) -> Any:
    """A broker's ApiVersions v3 answer listing ``ranges``."""
    return resp(
        18,
        3,
        api_keys=tuple(
            item(18, 3, "api_keys", api_key=k, min_version=r.start, max_version=r.stop - 1)
            for k, r in sorted(ranges.items())
        ),
    )


def describe_cluster(version: int, correlation_id: int) -> bytes:
    return request(
        req(DESCRIBE_CLUSTER, version, include_cluster_authorized_operations=False),
        correlation_id,
    )


def test_a_version_the_broker_does_not_list_is_answered_unsupported_by_the_proxy() -> None:
    driver = Driver()
    driver.connect()
    driver.cluster.record_broker_api_versions(broker_answer({DESCRIBE_CLUSTER: range(0, 1)}))
    assert supported_versions(DESCRIBE_CLUSTER, driver.cluster.broker_versions) == range(0, 1)
    commands = driver.client(describe_cluster(1, 1))
    assert not to_broker(commands)
    (answer,) = split_frames(to_client(commands))
    assert codec.decode_response(answer, DESCRIBE_CLUSTER, 1).error_code == (
        ErrorCode.unsupported_version
    )
    assert to_broker(driver.client(describe_cluster(0, 2))), "v0 is served: forwarded"


def test_before_the_broker_answered_the_handler_and_kio_bound_the_versions() -> None:
    driver = Driver()
    driver.connect()
    assert driver.cluster.broker_versions is None
    newest = REGISTRY[DESCRIBE_CLUSTER].versions[-1]
    assert supported_versions(DESCRIBE_CLUSTER, None) == REGISTRY[DESCRIBE_CLUSTER].versions
    assert to_broker(driver.client(describe_cluster(newest, 1)))


def test_an_api_the_proxy_answers_itself_is_served_whatever_the_broker_lists() -> None:
    driver = Driver([acl("User:alice", "DESCRIBE", "CLUSTER", "kafka-cluster")])
    driver.connect()
    driver.cluster.record_broker_api_versions(broker_answer({DESCRIBE_CLUSTER: range(0, 1)}))
    assert REGISTRY[DESCRIBE_ACLS].answered_by_proxy
    versions = supported_versions(DESCRIBE_ACLS, driver.cluster.broker_versions)
    assert versions == REGISTRY[DESCRIBE_ACLS].versions
    any_code = ("resource_type_filter", "pattern_type_filter", "operation", "permission_type")
    no_name = ("resource_name_filter", "principal_filter", "host_filter")
    body = req(
        DESCRIBE_ACLS, versions[-1], **dict.fromkeys(any_code, 1), **dict.fromkeys(no_name)
    )  # every ACL: ANY (1) of each code, no name
    commands = driver.client(request(body, 1))
    assert not to_broker(commands)
    (answer,) = split_frames(to_client(commands))
    assert codec.decode_response(answer, DESCRIBE_ACLS, versions[-1]).error_code == ErrorCode.none
