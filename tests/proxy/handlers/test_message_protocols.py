"""The handlers' ``Protocol``s name kio's fields (docs/design.md#typed-handlers).

The bodies a handler reads come from kio's decode, which the type checker sees untyped: a
``Protocol`` naming a field kio's classes do not have (a typo, a field of another API) would
pass ``mypy --strict`` and fail at run time. So each ``Protocol`` is walked against kio's
classes of the APIs it describes: every property it names, nested ``Protocol``s included, is a
field of the class at that place in at least one version the proxy serves (a field only some
versions have is read only there, as each ``Protocol``'s docstring says).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence

import pytest

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers import (
    REGISTRY,
    acls,
    api_versions,
    cluster_admin,
    configs,
    consumer_groups,
    delegation_tokens,
    fetch,
    groups,
    metadata,
    offsets,
    partitions,
    produce,
    sasl,
    share_groups,
    share_sessions,
    streams_groups,
    streams_heartbeat,
    topics_admin,
    transactions,
)
from kafkaguard.proxy.handlers.support import (
    addresses,
    group_gate,
    questions,
    regex_subscriptions,
)

REQUEST, RESPONSE = "request", "response"


# Holders of Protocols the handlers name only nested (an entry of a list whose holder a
# handler reads as generic, or not at all), so that the walk below reaches them.
class _Coordinators(typing.Protocol):
    @property
    def coordinators(self) -> Sequence[groups._Coordinator]: ...


class _ConsumerGroups(typing.Protocol):
    @property
    def groups(self) -> Sequence[consumer_groups._ConsumerGroup]: ...


class _ShareGroups(typing.Protocol):
    @property
    def groups(self) -> Sequence[share_groups._ShareGroup]: ...


class _StreamsGroups(typing.Protocol):
    @property
    def groups(self) -> Sequence[streams_groups._StreamsGroup]: ...


class _ShareOffsetsGroup(offsets.OffsetsGroup[share_groups._DescribedTopic], typing.Protocol):
    @property
    def topics(self) -> Sequence[share_groups._DescribedTopic]: ...


class _ShareOffsetsGroups(typing.Protocol):
    @property
    def groups(self) -> Sequence[_ShareOffsetsGroup]: ...


# (Protocol, the API keys whose messages it describes, request or response)
CASES: list[tuple[type, tuple[int, ...], str]] = [
    (produce.ProduceBody, (0,), REQUEST),
    (fetch.FetchBody, (1,), REQUEST),
    (fetch._FetchResponse, (1,), RESPONSE),
    (fetch._SessionAnswer, (1,), RESPONSE),
    (partitions._TopicsResponse, (2, 21, 23, 61), RESPONSE),
    (metadata.MetadataBody, (3,), REQUEST),
    (metadata._MetadataResponse, (3,), RESPONSE),
    (metadata.DescribeTopicPartitionsBody, (75,), REQUEST),
    (metadata._DescribeResponse, (75,), RESPONSE),
    (sasl._HandshakeBody, (17,), REQUEST),
    (sasl._AuthenticateBody, (36,), REQUEST),
    (api_versions._ApiVersionsResponse, (18,), RESPONSE),
    (topics_admin._TopicsBody, (19, 37), REQUEST),
    (topics_admin._CreateTopicsResponse, (19,), RESPONSE),
    (topics_admin._DeleteTopicsBody, (20,), REQUEST),
    (topics_admin._DeleteTopicsResponse, (20,), RESPONSE),
    (transactions._InitProducerIdBody, (22,), REQUEST),
    (transactions._AddPartitionsToTxnBody, (24,), REQUEST),
    (transactions._AddPartitionsToTxnResponse, (24,), RESPONSE),
    (transactions._TransactionBody, (25, 26), REQUEST),
    (transactions._TxnOffsetCommitBody, (28,), REQUEST),
    (transactions._DescribeTransactionsBody, (65,), REQUEST),
    (transactions._TransactionStates, (65, 66), RESPONSE),
    (acls._AclFilter, (29,), REQUEST),
    (acls._CreateAclsBody, (30,), REQUEST),
    (acls._DeleteAclsBody, (31,), REQUEST),
    (configs._ConfigsBody, (32,), REQUEST),
    (configs._DescribeConfigsResponse, (32,), RESPONSE),
    (configs._AlterConfigsBody, (33, 44), REQUEST),
    (configs._AlterConfigsResponse, (33, 44), RESPONSE),
    (cluster_admin._AlterReplicaLogDirsBody, (34,), REQUEST),
    (cluster_admin._AlterReplicaLogDirsResponse, (34,), RESPONSE),
    (cluster_admin._DescribeLogDirsResponse, (35,), RESPONSE),
    (cluster_admin._ElectLeadersBody, (43,), REQUEST),
    (cluster_admin._AlterPartitionReassignmentsBody, (45,), REQUEST),
    (cluster_admin._ListPartitionReassignmentsBody, (46,), REQUEST),
    (cluster_admin._NamedTopics, (46,), RESPONSE),
    (cluster_admin._AlterClientQuotasBody, (49,), REQUEST),
    (cluster_admin._DescribeUserScramCredentialsBody, (50,), REQUEST),
    (cluster_admin._AlterUserScramCredentialsBody, (51,), REQUEST),
    (cluster_admin._DescribeClusterBody, (60,), REQUEST),
    (cluster_admin._DescribeClusterResponse, (60,), RESPONSE),
    (cluster_admin._ListConfigResourcesResponse, (74,), RESPONSE),
    (delegation_tokens._CreateTokenBody, (38,), REQUEST),
    (regex_subscriptions.HeartbeatBody, (68,), REQUEST),
    (regex_subscriptions._Answer, (68,), RESPONSE),
    (share_sessions.ShareBody, (78, 79), REQUEST),
    (share_sessions.ShareFetchBody, (78,), REQUEST),
    (share_sessions._ShareResponse, (78, 79), RESPONSE),
    (addresses._FindCoordinatorResponse, (10,), RESPONSE),
    (group_gate.GroupBody, (8, 11, 12, 13, 14, 47, 68, 76, 88, 91, 92), REQUEST),
    (offsets._CommitBody, (8, 47), REQUEST),
    (offsets._CodedResponse, (47, 91, 92), RESPONSE),
    (offsets._OffsetFetchBody, (9,), REQUEST),
    (offsets.OffsetsBody, (9, 90), REQUEST),
    (offsets._GroupsResponse, (9, 90), RESPONSE),
    (offsets.TopicsBody, (91, 92), REQUEST),
    (groups._FindCoordinatorBody, (10,), REQUEST),
    (_Coordinators, (10,), RESPONSE),
    (groups._SyncGroupBody, (14,), REQUEST),
    (groups._DescribeGroupsBody, (15,), REQUEST),
    (groups._GroupsResponse, (15, 16), RESPONSE),
    (groups._DeleteGroupsBody, (42,), REQUEST),
    (groups._DeleteGroupsResponse, (42,), RESPONSE),
    (consumer_groups.SubscribedBody, (68, 76), REQUEST),
    (consumer_groups._DescribeBody, (69, 77, 89), REQUEST),
    (consumer_groups._DescribedResponse, (69, 77, 89), RESPONSE),
    (_ConsumerGroups, (69,), RESPONSE),
    (_ShareGroups, (77,), RESPONSE),
    (_StreamsGroups, (89,), RESPONSE),
    (_ShareOffsetsGroups, (90,), REQUEST),
    (share_groups._AlterBody, (91,), REQUEST),
    (streams_heartbeat.StreamsHeartbeatBody, (88,), REQUEST),
    (questions._MetadataAnswer, (3,), RESPONSE),
]


def _properties(protocol: type) -> dict[str, object]:
    """Each property ``protocol`` names (its bases' included) → its type."""
    found: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, property) and value.fget is not None:
                found[name] = typing.get_type_hints(value.fget)["return"]
    return found


def _nested_protocol(hint: object) -> type | None:
    """The ``Protocol`` a property's type names, through ``Sequence[...]`` and ``| None``."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        present = [a for a in args if a is not type(None)]
        return _nested_protocol(present[0]) if len(present) == 1 else None
    if origin is Sequence:
        return _nested_protocol(args[0])
    if isinstance(hint, type) and getattr(hint, "_is_protocol", False):
        return hint
    return None


def _schemas(api_keys: tuple[int, ...], direction: str) -> list[type]:
    load = codec.request_schema if direction == REQUEST else codec.response_schema
    return [load(key, v) for key in api_keys for v in REGISTRY[key].versions]


def _unknown(protocol: type, classes: list[type], path: str) -> list[str]:
    """The properties of ``protocol`` no class of ``classes`` has, walked into nested ones."""
    missing: list[str] = []
    for name, hint in _properties(protocol).items():
        having = [c for c in classes if name in c.__dataclass_fields__]
        if not having:
            missing.append(f"{path}{name}")
            continue
        nested = _nested_protocol(hint)
        if nested is not None and _properties(nested):
            inner = [codec.nested_type(c, name) for c in having]
            missing += _unknown(nested, list(dict.fromkeys(inner)), f"{path}{name}.")
    return missing


@pytest.mark.parametrize(
    ("protocol", "api_keys", "direction"),
    CASES,
    ids=[f"{p.__module__.rsplit('.', 1)[-1]}.{p.__name__}" for p, _, _ in CASES],
)
def test_every_field_a_protocol_names_is_kios(
    protocol: type, api_keys: tuple[int, ...], direction: str
) -> None:
    assert _unknown(protocol, _schemas(api_keys, direction), "") == []


class _MisnamedPartition(typing.Protocol):
    @property
    def partition_idx(self) -> int: ...


class _Topic(typing.Protocol):
    @property
    def partition_data(self) -> Sequence[_MisnamedPartition]: ...


class _MisnamedBody(typing.Protocol):
    @property
    def acks(self) -> int: ...
    @property
    def topic_data(self) -> Sequence[_Topic]: ...
    @property
    def transactional(self) -> str: ...


def test_a_misnamed_field_is_found() -> None:
    """The walk does find a field kio's classes lack, at any depth."""
    assert _unknown(_MisnamedBody, _schemas((0,), REQUEST), "") == [
        "topic_data.partition_data.partition_idx",
        "transactional",
    ]
