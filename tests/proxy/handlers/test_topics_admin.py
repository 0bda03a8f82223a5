"""Topic administration (ControllerApis.createTopics/deleteTopics/createPartitions)
driven without sockets."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, cast

from kio.schema.create_partitions.v3 import request as cp_req
from kio.schema.create_partitions.v3 import response as cp_resp
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.delete_topics.v4 import request as dt4_req
from kio.schema.delete_topics.v4 import response as dt4_resp
from kio.schema.delete_topics.v6 import request as dt_req
from kio.schema.delete_topics.v6 import response as dt_resp
from kio.schema.errors import ErrorCode

from kafkaguard.proxy.handlers.support.base import FORWARD, AskFirst, Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
CREATE_CLUSTER = acl(ALICE, "CREATE", "CLUSTER", "kafka-cluster")

# -- CreateTopics --------------------------------------------------------------------------------


def create(*names: str) -> Any:
    return ct_req.CreateTopicsRequest(
        topics=tuple(
            ct_req.CreatableTopic(
                name=n, num_partitions=3, replication_factor=1, assignments=(), configs=()
            )
            for n in names
        ),
        timeout=timedelta(seconds=30),
        validate_only=False,
    )


def created(*names: str) -> Any:
    return ct_resp.CreateTopicsResponse(
        throttle_time=timedelta(0),
        topics=tuple(
            ct_resp.CreatableTopicResult(
                name=n,
                topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, n),
                error_code=ErrorCode.none,
                error_message=None,
                num_partitions=3,
                replication_factor=1,
                configs=(
                    ct_resp.CreatableTopicConfigs(
                        name="retention.ms", value="1", read_only=False, is_sensitive=False
                    ),
                ),
            )
            for n in names
        ),
    )


def results(response: Any) -> list[tuple[str, int, str | None]]:
    return [(t.name, int(t.error_code), t.error_message) for t in response.topics]


def test_create_topics_with_create_on_cluster_is_forwarded_and_ids_learned() -> None:
    h = HandlerHarness([CREATE_CLUSTER, acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", "*")])
    verdict = h.send(create("a", "b"))
    assert isinstance(verdict, Forward) and verdict.request is None
    assert h.checked()[0] == ("CREATE", "CLUSTER", "kafka-cluster", "ALLOWED")
    assert h.checks[0][0].log_if_denied is False
    broker = created("a", "b")
    assert h.complete(verdict, broker) is broker
    assert h.topic_names[uuid.uuid5(uuid.NAMESPACE_DNS, "a")] == "a"


def test_create_topics_per_topic_denial_is_29_authorization_failed_in_order() -> None:
    h = HandlerHarness(
        [acl(ALICE, "CREATE", "TOPIC", "b"), acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", "b")]
    )
    body = create("a", "b", "c")
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, body).topics] == ["b"]
    response = h.complete(verdict, created("b"))
    assert results(response) == [
        ("a", 29, "Authorization failed."),
        ("b", 0, None),
        ("c", 29, "Authorization failed."),
    ]
    assert response.topics[0].topic_id is None  # zero uuid
    assert response.topics[0].configs == ()
    # CREATE CLUSTER, then CREATE per topic, then DESCRIBE_CONFIGS (quiet) per topic.
    assert [(op, t) for op, t, _, _ in h.checked()] == [("CREATE", "CLUSTER")] + [
        ("CREATE", "TOPIC")
    ] * 3 + [("DESCRIBE_CONFIGS", "TOPIC")] * 3
    assert [a.log_if_denied for a, _ in h.checks][-3:] == [False] * 3


def test_create_topics_without_describe_configs_hides_the_configs() -> None:
    h = HandlerHarness([CREATE_CLUSTER])
    verdict = h.send(create("a"))
    assert isinstance(verdict, Forward) and verdict.request is None
    (result,) = h.complete(verdict, created("a")).topics
    assert result.error_code == ErrorCode.none
    assert result.topic_id == uuid.uuid5(uuid.NAMESPACE_DNS, "a")
    assert result.topic_config_error_code == 29
    assert (result.num_partitions, result.replication_factor, result.configs) == (-1, -1, ())


def test_create_topics_all_denied_never_reaches_the_broker() -> None:
    h = HandlerHarness([])
    verdict = h.send(create("existing"))
    assert isinstance(verdict, Respond)
    # 29, never 36 TOPIC_ALREADY_EXISTS: existence is not checked for unauthorized names.
    assert results(verdict.response) == [("existing", 29, "Authorization failed.")]


def test_create_topics_duplicates_and_cluster_metadata_are_42_before_authorization() -> None:
    h = HandlerHarness([CREATE_CLUSTER])
    body = create("d", "ok", "d", "__cluster_metadata")
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, body).topics] == ["ok"]
    response = h.complete(verdict, created("ok"))
    assert [(n, c) for n, c, _ in results(response)] == [
        ("d", 42),
        ("ok", 0),
        ("__cluster_metadata", 42),
    ]
    assert response.topics[0].error_message == "Duplicate topic name."
    assert {n for _, _, n, _ in h.checked()} == {"kafka-cluster", "ok"}


# -- DeleteTopics ------------------------------------------------------------------------------

A_ID = uuid.uuid4()
SECRET_ID = uuid.uuid4()


def delete_by_name(*names: str) -> Any:
    return dt4_req.DeleteTopicsRequest(topic_names=names, timeout=timedelta(seconds=30))


def deleted_v4(*names: str) -> Any:
    return dt4_resp.DeleteTopicsResponse(
        throttle_time=timedelta(0),
        responses=tuple(
            dt4_resp.DeletableTopicResult(name=n, error_code=ErrorCode.none) for n in names
        ),
    )


def test_delete_topics_by_name_partial() -> None:
    h = HandlerHarness(
        [
            acl(ALICE, "DESCRIBE", "TOPIC", "a"),
            acl(ALICE, "DELETE", "TOPIC", "a"),
            acl(ALICE, "DESCRIBE", "TOPIC", "b"),
        ]
    )
    body = delete_by_name("hidden", "a", "b")
    asked = h.send(body)
    # DESCRIBE without DELETE: the controller checks existence between the two checks.
    assert isinstance(asked, AskFirst)
    assert [t.name for t in cast(Any, asked.question).topics] == ["b"]
    assert h.checked()[0] == ("DELETE", "CLUSTER", "kafka-cluster", "DENIED")
    assert [op for op, _, _, _ in h.checked()[1:]] == ["DESCRIBE"] * 3 + ["DELETE"] * 3
    for cluster, b_code in (({uuid.uuid4(): "a", uuid.uuid4(): "b"}, 29), ({}, 3)):
        verdict = h.answer_metadata(asked, cluster)
        assert isinstance(verdict, Forward)
        assert h.forwarded_body(verdict, body).topic_names == ("a",)
        response = h.complete(verdict, deleted_v4("a"))
        assert [(r.name, int(r.error_code)) for r in response.responses] == [
            ("hidden", 29),
            ("a", 0),
            ("b", b_code),
        ]
    assert len(h.checked()) == 7  # authorized once, whatever the answer


def test_delete_topics_delete_on_cluster_authorizes_everything() -> None:
    h = HandlerHarness([acl(ALICE, "DELETE", "CLUSTER", "kafka-cluster")])
    verdict = h.send(delete_by_name("a", "b"))
    assert isinstance(verdict, Forward) and verdict.request is None
    assert len(h.checked()) == 1


def test_delete_topics_all_denied_and_duplicates() -> None:
    h = HandlerHarness([])
    verdict = h.send(delete_by_name("x", "x", "y"))
    assert isinstance(verdict, Respond)
    assert [(r.name, int(r.error_code)) for r in verdict.response.responses] == [
        ("x", 42),
        ("y", 29),
    ]
    assert [n for _, _, n, _ in h.checked()] == ["kafka-cluster", "y", "y"]


def delete_v6(*items: tuple[str | None, uuid.UUID | None]) -> Any:
    return dt_req.DeleteTopicsRequest(
        topics=tuple(dt_req.DeleteTopicState(name=n, topic_id=i) for n, i in items),
        timeout=timedelta(seconds=30),
    )


def test_delete_topics_by_id() -> None:
    unknown = uuid.uuid4()
    h = HandlerHarness(
        [
            acl(ALICE, "DELETE", "TOPIC", "a"),
            acl(ALICE, "DESCRIBE", "TOPIC", "shown"),
        ],
        topic_ids={A_ID: "a", SECRET_ID: "secret", uuid.UUID(int=5): "shown"},
    )
    body = delete_v6(
        (None, unknown), (None, SECRET_ID), (None, A_ID), (None, uuid.UUID(int=5)), ("n", A_ID)
    )
    cluster = {A_ID: "a", SECRET_ID: "secret", uuid.UUID(int=5): "shown"}
    verdict = h.answer_metadata(h.send(body), cluster)  # the broker does not know `unknown`
    assert isinstance(verdict, Forward)
    assert [t.topic_id for t in h.forwarded_body(verdict, body).topics] == [A_ID]
    broker = dt_resp.DeleteTopicsResponse(
        throttle_time=timedelta(0),
        responses=(
            dt_resp.DeletableTopicResult(
                name="a", topic_id=A_ID, error_code=ErrorCode.none, error_message=None
            ),
        ),
    )
    response = h.complete(verdict, broker)
    assert [(r.name, r.topic_id, int(r.error_code)) for r in response.responses] == [
        (None, unknown, 100),  # never forwarded
        (None, SECRET_ID, 29),  # name withheld without DESCRIBE
        ("a", A_ID, 0),
        ("shown", uuid.UUID(int=5), 29),  # DESCRIBE but no DELETE: the name is shown
        ("n", A_ID, 42),  # name and id in one entry
    ]


def test_delete_topics_by_unseen_id_with_delete_on_cluster_is_forwarded() -> None:
    # DELETE on the cluster authorizes every topic, so the name behind an id the proxy never
    # saw is not needed: the broker resolves the id (or answers 100) as Kafka's controller.
    unseen = uuid.uuid4()
    h = HandlerHarness([acl(ALICE, "DELETE", "CLUSTER", "kafka-cluster")])
    verdict = h.answer_metadata(h.send(delete_v6((None, unseen), ("n", A_ID))), {})
    assert isinstance(verdict, Forward)
    assert [t.topic_id for t in verdict.request.topics] == [unseen]
    broker = dt_resp.DeleteTopicsResponse(
        throttle_time=timedelta(0),
        responses=(
            dt_resp.DeletableTopicResult(
                name="x", topic_id=unseen, error_code=ErrorCode.none, error_message=None
            ),
        ),
    )
    response = h.complete(verdict, broker)
    assert [(r.name, int(r.error_code)) for r in response.responses] == [("x", 0), ("n", 42)]


def test_delete_topics_by_an_id_the_proxy_never_saw_is_resolved_by_the_broker() -> None:
    unseen = uuid.uuid4()
    h = HandlerHarness([acl(ALICE, "DELETE", "TOPIC", "t"), acl(ALICE, "DESCRIBE", "TOPIC", "u")])
    body = delete_v6((None, unseen))
    verdict = h.answer_metadata(h.send(body), {unseen: "t"})
    assert verdict == FORWARD and h.checked() == [
        ("DELETE", "CLUSTER", "kafka-cluster", "DENIED"),
        ("DESCRIBE", "TOPIC", "t", "ALLOWED"),
        ("DELETE", "TOPIC", "t", "ALLOWED"),
    ]


# -- CreatePartitions ----------------------------------------------------------------------------


def create_partitions(*names: str) -> Any:
    return cp_req.CreatePartitionsRequest(
        topics=tuple(
            cp_req.CreatePartitionsTopic(name=n, count=4, assignments=None) for n in names
        ),
        timeout=timedelta(seconds=30),
        validate_only=False,
    )


def test_create_partitions_per_topic_with_duplicates() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER", "TOPIC", "a")])
    body = create_partitions("a", "b", "d", "d")
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, body).topics] == ["a"]
    broker = cp_resp.CreatePartitionsResponse(
        throttle_time=timedelta(0),
        results=(
            cp_resp.CreatePartitionsTopicResult(
                name="a", error_code=ErrorCode.none, error_message=None
            ),
        ),
    )
    response = h.complete(verdict, broker)
    assert [(r.name, int(r.error_code), r.error_message) for r in response.results] == [
        ("a", 0, None),
        ("b", 29, None),
        ("d", 42, "Duplicate topic name."),
    ]
    assert [n for _, _, n, _ in h.checked()] == ["a", "b"]


def test_create_partitions_allowed_and_all_denied() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER", "TOPIC", "*")])
    verdict = h.send(create_partitions("a"))
    assert isinstance(verdict, Forward) and verdict.request is None
    verdict = HandlerHarness([]).send(create_partitions("a"))
    assert isinstance(verdict, Respond)
    assert [int(r.error_code) for r in verdict.response.results] == [29]
