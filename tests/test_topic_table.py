"""The Kafka-topic table's pure parts (kafkaguard/topic_table.py): how a topic is created,
which existing topics are refused and why, names colliding as Kafka's do. Its behaviour on a
cluster is tests/kafka/test_kafka_topic_store.py."""

from __future__ import annotations

import time

import pytest

from kafkaguard.topic_table import (
    DEFAULT_DELETE_RETENTION_MS,
    TopicRefused,
    TopicSettings,
    TopicTable,
    _refuse_collision,
    creation_plan,
    unsafe_settings,
)

SAFE = {"cleanup.policy": "compact", "delete.retention.ms": str(DEFAULT_DELETE_RETENTION_MS)}


def test_a_topic_is_created_with_an_explicit_delete_retention() -> None:
    """Not the broker's log.cleaner.delete.retention.ms, which ALTER_CONFIGS on the cluster
    can lower."""
    replication, configs = creation_plan(TopicSettings("_kafkaguard-acls"), 5)
    assert replication == 3
    assert configs == {
        "cleanup.policy": "compact",
        "min.insync.replicas": "2",
        "delete.retention.ms": "604800000",
    }
    assert (
        creation_plan(TopicSettings("t", delete_retention_ms=5), 1)[1]["delete.retention.ms"] == "5"
    )
    overridden = TopicSettings("t", configs={"delete.retention.ms": "7"})
    assert creation_plan(overridden, 1)[1]["delete.retention.ms"] == "7"


@pytest.mark.parametrize(
    ("configs", "named"),
    [
        ({**SAFE, "cleanup.policy": "delete"}, "cleanup.policy=delete, not compact"),
        ({**SAFE, "cleanup.policy": "compact,delete"}, "cleanup.policy=compact,delete"),
        ({"delete.retention.ms": SAFE["delete.retention.ms"]}, "cleanup.policy=delete"),
        ({**SAFE, "delete.retention.ms": "86400000"}, "delete.retention.ms=86400000, below"),
        ({"cleanup.policy": "compact"}, "delete.retention.ms=86400000"),  # the broker default
    ],
)
def test_a_topic_that_could_lose_unread_records_is_refused_naming_the_setting(
    configs: dict[str, str], named: str
) -> None:
    reason = unsafe_settings(TopicSettings("_kafkaguard-acls"), configs)
    assert reason is not None and named in reason
    assert "kafka-configs.sh --alter --entity-type topics --entity-name _kafkaguard-acls" in reason


def test_a_topic_as_configured_is_accepted() -> None:
    assert unsafe_settings(TopicSettings("t"), SAFE) is None
    assert (
        unsafe_settings(TopicSettings("t"), {**SAFE, "delete.retention.ms": "999999999999"}) is None
    )
    low = TopicSettings("t", configs={"delete.retention.ms": "0"})  # a test cluster's choice
    assert unsafe_settings(low, {"cleanup.policy": "compact", "delete.retention.ms": "0"}) is None


def test_a_colliding_topic_is_named_with_the_fix() -> None:
    """Kafka refuses ``_kafkaguard-users`` beside ``.kafkaguard-users`` (``Topic.
    hasCollisionChars``): retrying could never create it."""
    _refuse_collision("_kafkaguard-users", ["orders", "_kafkaguard-users", "_kafkaguard_users"])
    with pytest.raises(TopicRefused, match=r"topic \.kafkaguard-users exists and collides") as info:
        _refuse_collision("_kafkaguard-users", ["orders", ".kafkaguard-users"])
    assert "kafka-topics.sh --delete --topic .kafkaguard-users" in str(info.value)


def test_a_store_that_has_not_read_to_the_end_for_max_lag_s_is_not_ready() -> None:
    """``/readyz``: the seconds since the last confirmed read to the end (also
    ``kafkaguard_store_lag_seconds``) past ``max_lag_s``; never before the first read."""
    table = TopicTable(
        {"bootstrap.servers": "127.0.0.1:1"},
        TopicSettings("_kafkaguard-acls", max_lag_s=5),
        client_id="test",
        on_change=lambda _: None,
    )
    assert table.lag_s() is None
    table.loaded, table.problem = True, None
    table._caught_up = time.monotonic() - 2
    assert list(table.not_ready()) == []
    table._caught_up = time.monotonic() - 12
    (reason,) = table.not_ready()
    assert "last read to the end 12 s ago (more than max_lag_s 5)" in reason
    table.settings = TopicSettings("_kafkaguard-acls", max_lag_s=0)  # 0: never
    assert list(table.not_ready()) == []
