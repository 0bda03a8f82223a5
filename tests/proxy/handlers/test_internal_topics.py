"""The proxy's internal topics (issue 26): refused to every principal not named, super users
included, through the authorizer's questions and the handlers' cluster-wide shortcuts."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import request as req15

from kafkaguard.proxy.handlers.support.base import Forward, Respond
from tests.proxy.handlers.test_fetch import fetch_by_id, parts
from tests.proxy.handlers.test_partitions import errors, ole
from tests.proxy.handlers.test_produce import broker_reply, produce
from tests.proxy.handlers.test_produce import errors as produce_errors
from tests.proxy.handlers.test_topics_admin import create, delete_by_name, delete_v6, results
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
ACLS = "_kafkaguard-acls"
SUPER = {"super_users": ALICE}


def test_produce_to_an_internal_topic_is_invalid_topic_for_a_super_user() -> None:
    h = HandlerHarness(**SUPER)
    body = produce("orders", ACLS)
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, body).topic_data] == ["orders"]
    response = h.complete(verdict, broker_reply("orders"))
    assert produce_errors(response) == [
        ("orders", 0, 0),
        ("orders", 1, 0),
        (ACLS, 0, 17),
        (ACLS, 1, 17),
    ]
    assert [c for c in h.checked() if c[2] == ACLS] == [("WRITE", "TOPIC", ACLS, "DENIED")]


def test_produce_by_a_named_principal_is_authorized_as_usual() -> None:
    h = HandlerHarness(**SUPER, internal_topic_principals=ALICE)
    verdict = h.send(produce(ACLS))
    assert isinstance(verdict, Forward) and verdict.request is None


def test_acls_on_an_internal_topic_change_nothing() -> None:
    h = HandlerHarness([acl(ALICE, "ALL", "TOPIC", "_kafkaguard-", pattern="PREFIXED")])
    verdict = h.send(produce(ACLS))
    assert isinstance(verdict, Respond)
    assert {code for _, _, code in produce_errors(verdict.response)} == {17}


COLLIDING = pytest.mark.parametrize("name", ["_kafkaguard-users", ".kafkaguard-users"])
"""An internal name, and one Kafka would refuse beside it (``Topic.unifyCollisionChars``):
forwarded, Kafka's 17 "collides with existing topic: _kafkaguard-users" would name it."""


@COLLIDING
def test_create_topics_on_the_cluster_does_not_create_an_internal_topic(name: str) -> None:
    h = HandlerHarness(**SUPER)
    body = create("fresh", name)
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, body).topics] == ["fresh"]


@COLLIDING
def test_create_topics_of_an_internal_name_alone_is_29(name: str) -> None:
    h = HandlerHarness([acl(ALICE, "CREATE", "CLUSTER", "kafka-cluster")])
    verdict = h.send(create(name))
    assert isinstance(verdict, Respond)
    assert results(verdict.response) == [(name, 29, "Authorization failed.")]


def test_delete_topics_with_delete_on_the_cluster_spares_internal_topics() -> None:
    h = HandlerHarness(**SUPER)
    verdict = h.send(delete_by_name(ACLS))
    assert isinstance(verdict, Respond)
    assert [(r.name, int(r.error_code)) for r in verdict.response.responses] == [(ACLS, 29)]


def test_delete_topics_by_id_of_an_internal_topic_is_29_without_its_name() -> None:
    topic_id = uuid.uuid4()
    h = HandlerHarness(**SUPER, topic_ids={topic_id: ACLS})
    verdict = h.send(delete_v6((None, topic_id)))
    assert isinstance(verdict, Respond)
    ((name, got_id, code),) = [
        (r.name, r.topic_id, int(r.error_code)) for r in verdict.response.responses
    ]
    assert (name, got_id, code) == (None, topic_id, 29)


def test_follower_fetch_with_cluster_action_is_refused_internal_topics() -> None:
    internal, other = uuid.UUID(int=5), uuid.UUID(int=6)
    h = HandlerHarness(**SUPER, topic_ids={internal: ACLS, other: "orders"})
    body = fetch_by_id(req15, internal, other, replica_state=req15.ReplicaState(replica_id=3))
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    sent: Any = h.forwarded_body(verdict, body)
    assert [t.topic_id for t in sent.topics] == [other]


def test_follower_fetch_of_only_an_internal_topic_never_reaches_the_broker() -> None:
    internal = uuid.UUID(int=5)
    h = HandlerHarness(**SUPER, topic_ids={internal: "audit-trail"})
    h.guard.rules = type(h.guard.rules)(names=frozenset({"audit-trail"}))
    body = fetch_by_id(req15, internal, replica_state=req15.ReplicaState(replica_id=3))
    verdict = h.send(body)
    assert isinstance(verdict, Respond)
    assert parts(verdict.response) == [(internal, 0, ErrorCode.topic_authorization_failed)]


def test_offset_for_leader_epoch_with_cluster_action_is_refused_internal_topics() -> None:
    h = HandlerHarness(**SUPER)
    verdict = h.send(ole(ACLS))
    assert isinstance(verdict, Respond)
    assert errors(verdict.response, "topic", "partition") == [(ACLS, 0, 29)]


def test_cluster_wide_listings_do_not_show_internal_topics() -> None:
    from kafkaguard.protocol import codec
    from tests.proxy.handlers.test_cluster_admin import (
        describe_log_dirs,
        list_config_resources,
        list_partition_reassignments,
    )

    h = HandlerHarness(**SUPER)
    log_dirs = codec.response_schema(35, 4)
    dir_type = codec.nested_type(log_dirs, "results")
    topic_type = codec.nested_type(dir_type, "topics")
    broker: Any = codec.make_entity(
        log_dirs,
        results=(
            codec.make_entity(
                dir_type,
                log_dir="/d1",
                topics=tuple(codec.make_entity(topic_type, name=n) for n in ("a", ACLS)),
            ),
        ),
    )
    answer = h.complete(h.send(describe_log_dirs()), broker)
    assert [t.name for t in answer.results[0].topics] == ["a"]

    reassignments = codec.response_schema(46, 0)
    entry = codec.nested_type(reassignments, "topics")
    broker = codec.make_entity(
        reassignments, topics=tuple(codec.make_entity(entry, name=n) for n in (ACLS, "b"))
    )
    answer = h.complete(h.send(list_partition_reassignments()), broker)
    assert [t.name for t in answer.topics] == ["b"]

    resources = codec.response_schema(74, 1)
    entry = codec.nested_type(resources, "config_resources")
    listed = (("a", 2), (ACLS, 2), (ACLS, 16))  # a group may carry the name: kept
    broker = codec.make_entity(
        resources,
        config_resources=tuple(
            codec.make_entity(entry, resource_name=n, resource_type=t) for n, t in listed
        ),
    )
    answer = h.complete(h.send(list_config_resources()), broker)
    assert [(r.resource_name, r.resource_type) for r in answer.config_resources] == [
        ("a", 2),
        (ACLS, 16),
    ]


def _txn_batch(*transactions: tuple[str, tuple[str, ...]]) -> Any:
    from kio.schema.add_partitions_to_txn.v5 import request as ap5

    return ap5.AddPartitionsToTxnRequest(
        transactions=tuple(
            ap5.AddPartitionsToTxnTransaction(
                transactional_id=txn,
                producer_id=1,
                producer_epoch=0,
                verify_only=False,
                topics=tuple(ap5.AddPartitionsToTxnTopic(name=n, partitions=(0,)) for n in names),
            )
            for txn, names in transactions
        )
    )


def test_add_partitions_v4_with_cluster_action_never_adds_an_internal_partition() -> None:
    """KIP-890's inter-broker form: CLUSTER_ACTION authorizes every topic, so the proxy answers
    a transaction naming an internal topic itself (29 there, 55 on its other partitions) and
    forwards only the batch's other transactions (issue 35)."""
    from kafkaguard.protocol import codec

    h = HandlerHarness(**SUPER)
    body = _txn_batch(("t1", ("orders", ACLS)), ("t2", ("orders",)), ("t3", ("." + ACLS[1:],)))
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    sent: Any = h.forwarded_body(verdict, body)
    assert [t.transactional_id for t in sent.transactions] == ["t2"]
    schema = codec.response_schema(24, 5)
    result_type = codec.nested_type(schema, "results_by_transaction")
    topic_type = codec.nested_type(result_type, "topic_results")
    partition_type = codec.nested_type(topic_type, "results_by_partition")
    broker = codec.make_entity(
        schema,
        results_by_transaction=tuple(
            codec.make_entity(
                result_type,
                transactional_id=txn,
                topic_results=(
                    codec.make_entity(
                        topic_type,
                        name="orders",
                        results_by_partition=(
                            codec.make_entity(partition_type, partition_index=0),
                        ),
                    ),
                ),
            )
            for txn in ("t1", "t2")  # t1 was never sent: dropped
        ),
    )
    response = h.complete(verdict, broker)
    assert [
        (r.transactional_id, t.name, int(p.partition_error_code))
        for r in response.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    ] == [
        ("t1", "orders", 55),
        ("t1", ACLS, 29),
        ("t2", "orders", 0),
        ("t3", "." + ACLS[1:], 29),
    ]


def test_add_partitions_v4_of_internal_partitions_only_never_reaches_the_broker() -> None:
    h = HandlerHarness(**SUPER)
    verdict = h.send(_txn_batch(("t1", (ACLS,))))
    assert isinstance(verdict, Respond)
    ((result,),) = [verdict.response.results_by_transaction]
    assert [int(p.partition_error_code) for p in result.topic_results[0].results_by_partition] == [
        29
    ]
    named = HandlerHarness(**SUPER, internal_topic_principals=ALICE)
    forwarded = named.send(_txn_batch(("t1", (ACLS,))))
    assert isinstance(forwarded, Forward) and forwarded.request is None


# -- every API the proxy serves (issue 35) ----------------------------------------------------

INTERNAL_ID = uuid.UUID("5d2f4c1e-0000-4000-8000-00000000ac15")
"""The id every uuid of the sweep's requests carries; the simulated cluster knows it as
``_kafkaguard-acls``."""
READ_ONLY = {3: "Metadata by id", 35: "DescribeLogDirs", 46: "ListPartitionReassignments"}
"""The APIs that may forward an internal topic's name or id: they read, and their answers
hide it (docs/deviations.md). Any other API must not pass it on at all."""
TOPIC_ID_FIELDS = frozenset({"topic_id", "id_"})
"""kio's names of the uuid fields that hold a topic id (``id_``: AssignReplicasToDirs)."""


def _internal_paths(value: Any, path: str = "", *, denials: bool = True) -> list[str]:
    """Where ``value`` (a kio entity) names an internal topic: a topic name (kio's
    ``TopicName``, or a config resource's name with resource type TOPIC) the rule calls
    internal, or a topic id field holding :data:`INTERNAL_ID`. ``denials`` False: not in an
    entry with an error code (the proxy's refusal of what the client named)."""
    import dataclasses
    import typing

    from kio.schema.types import TopicName

    from kafkaguard.policy.internal_topics import InternalTopics
    from tests.support.handler_harness import non_null

    rules = InternalTopics()
    found: list[str] = []
    hints = typing.get_type_hints(type(value))
    topic_resource = getattr(value, "resource_type", None) == 2  # ConfigResource.Type.TOPIC
    if not denials and getattr(value, "error_code", 0):
        return found
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        hint, _ = non_null(hints[f.name])
        items = item if isinstance(item, tuple) else (item,)
        element = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else hint
        for i, one in enumerate(items):
            where = f"{path}{f.name}" + (f"[{i}]" if isinstance(item, tuple) else "")
            if dataclasses.is_dataclass(one) and not isinstance(one, type):
                found += _internal_paths(one, where + ".", denials=denials)
            elif isinstance(one, str) and (
                element is TopicName or (topic_resource and f.name == "resource_name")
            ):
                if rules.internal(one):
                    found.append(where)
            elif f.name in TOPIC_ID_FIELDS and one == INTERNAL_ID:
                found.append(where)
    return found


def _sent_to_the_broker(h: HandlerHarness, verdict: Any, body: Any, depth: int = 0) -> list[str]:
    """The internal-topic positions of what the verdict sends the broker on the client's
    behalf (the proxy's own Metadata questions are answered, never passed on)."""
    from kafkaguard.proxy.handlers.support.base import AskFirst

    if isinstance(verdict, Forward):
        named = _internal_paths(h.forwarded_body(verdict, body))
        if not named:
            return []
        if int(body.__api_key__) not in READ_ONLY:
            return [f"forwards {named}"]
        shown = _shown(verdict, int(body.__api_key__), int(body.__version__))
        return [f"forwards {named}, shows {shown}"] if shown else []
    if isinstance(verdict, AskFirst) and depth < 3:
        question: Any = verdict.question
        cluster = {INTERNAL_ID: ACLS}
        then = (
            h.answer_metadata(verdict, cluster)
            if int(question.__api_key__) == 3
            else h.answer(verdict, _empty_answer(question))
        )
        return _sent_to_the_broker(h, then, body, depth + 1)
    return []


def _shown(verdict: Forward, api_key: int, version: int) -> list[str]:
    """Where the client's answer names an internal topic (but in a refusal) when the broker
    answers every topic entry of it with ``_kafkaguard-acls``, by name and id."""
    from kafkaguard.protocol import codec
    from kafkaguard.protocol.errors import ProtocolError
    from tests.support.handler_harness import filled_entity

    if verdict.rewrite is None and verdict.transform is None:
        return ["the broker's answer, untouched"]
    answer = filled_entity(
        codec.response_schema(api_key, version), topic_id=INTERNAL_ID, topic=ACLS
    )
    try:
        response = HandlerHarness.complete(verdict, answer)
    except ProtocolError:  # BrokerMismatch: the connection closes, nothing is shown
        return []
    return _internal_paths(response, denials=False)


def _empty_answer(question: Any) -> Any:
    from kafkaguard.protocol import codec

    return codec.make_entity(codec.response_schema(question.__api_key__, question.__version__))


def test_every_api_naming_an_internal_topic_is_refused_or_stripped() -> None:
    """Every API key the proxy serves, every version it serves, a request naming
    ``_kafkaguard-acls`` by name and by id in every position kio types as a topic, sent by a
    super user: what reaches the broker names no internal topic, or (read-only listings:
    Metadata by id, DescribeLogDirs, ListPartitionReassignments) the answer hides it even
    when the broker names it everywhere. A handler added later, or one that forgets the
    rule, fails here."""
    from kafkaguard.protocol import codec
    from kafkaguard.proxy.handlers import REGISTRY
    from tests.support.handler_harness import filled_entity

    failures: list[str] = []
    for api_key, handler in sorted(REGISTRY.items()):
        for version in codec.codec_versions(api_key):
            if version not in handler.versions:
                continue
            schema = codec.request_schema(api_key, version)
            body = filled_entity(schema, topic_id=INTERNAL_ID, topic=ACLS)
            if not _internal_paths(body):
                continue  # names no topic
            h = HandlerHarness(**SUPER, topic_ids={INTERNAL_ID: ACLS})
            try:
                verdict = h.send(body)
            except Exception as exc:  # noqa: BLE001 - the decoder refused: the connection closes
                failures.append(f"{codec.API_NAMES[api_key]} v{version}: raised {exc!r}")
                continue
            failures += [
                f"{codec.API_NAMES[api_key]} v{version}: {problem}"
                for problem in _sent_to_the_broker(h, verdict, body)
            ]
    assert not failures, "\n".join(failures)
