"""Differential scenarios: KIP-848 regular-expression subscriptions (ConsumerGroupHeartbeat v1
``subscribedTopicRegex``).

Kafka's coordinator resolves the regex against its topics and keeps those the member may
DESCRIBE (``TopicRegexResolver``); kafkaguard resolves it itself and sends the broker behind it
topic names (``kafkaguard/proxy/handlers/support/regex_subscriptions.py``). Request by request the
answers must be Kafka's — including INVALID_REGULAR_EXPRESSION (128) and its message for a
regex RE2/J refuses — and a real consumer (confluent-kafka, ``group.protocol=consumer``) must be
assigned the same topics on both sides: the matching ones it may DESCRIBE, one created later
that matches, never one it may not DESCRIBE.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from tests.support.conformance.datapath import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    acl,
    call,
    compare,
    coordinator_ready,
    create_topics,
)
from tests.support.conformance.harness import Side, scenario_name

pytestmark = pytest.mark.kafka

INVALID = [
    "(",
    "a)",
    "[a",
    "a**",
    "a{1001}",
    "\\",
    "*",
    "(?=a)",
    "(?P<>a)",
    "\\8",
    "[z-a]",
    "a\\Cb",
    "(?P<n>a)(?P<n>b)",
    "{*",
    "{{1001}",
    "a*{1001}",
    "[\\é",
    "(\\C",
]
"""Regexes RE2/J refuses, one per kind of error, those RE2 alone would accept, and some whose
description depends on which error RE2/J meets first."""

REFRESH_DEADLINE_S = 60.0
"""Both sides pick up a new topic within a refresh (10 s) plus a heartbeat or two (5 s)."""


def heartbeat(
    side: Side,
    user: str,
    group: str,
    regex: str | None,
    names: tuple[str, ...] | None = None,
    member_id: str | None = None,
    epoch: int = 0,
) -> Any:
    return call(
        side,
        user,
        CONSUMER_GROUP_HEARTBEAT,
        1,
        group_id=group,
        member_id=member_id or str(uuid.uuid4()),
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=timedelta(seconds=10) if epoch == 0 else timedelta(milliseconds=-1),
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        server_assignor=None,
        topic_partitions=() if epoch == 0 else None,
    )


def test_regex_heartbeat_request_by_request(sides: list[Side]) -> None:
    """READ GROUP (30) and DESCRIBE on the names (29) come first; an invalid regex gets 128
    with RE2/J's description; a valid one joins. The member ids are generated per request,
    so each heartbeat is a new member, and each joined one leaves again."""
    p, g = scenario_name("rx-r"), scenario_name("rx-rg")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "DESCRIBE", "TOPIC", f"{p}-ok", pattern="PREFIXED"),
            ]
        )
        create_topics(side, f"{p}-ok", f"{p}-secret")
        coordinator_ready(side, g, 0)
    compare(sides, partial(heartbeat, user="bob", group=g, regex=f"{p}-.*"))
    compare(sides, partial(heartbeat, user="alice", group=g, regex="(", names=(f"{p}-secret",)))
    for regex in INVALID:
        compare(sides, partial(heartbeat, user="alice", group=g, regex=regex))

    def joined(side: Side) -> Any:
        response = heartbeat(side, "alice", g, f"{p}-.*")
        heartbeat(side, "alice", g, None, member_id=response.member_id, epoch=-1)
        return response.error_code, response.member_epoch > 0

    assert compare(sides, joined) == ["none", True]


def assigned_topics(consumer: Consumer) -> set[str]:
    return {tp.topic for tp in consumer.assignment()}


def poll_until(
    consumers: dict[str, Consumer],
    done: Callable[[set[str]], bool],
    never: set[str],
    what: str,
) -> dict[str, set[str]]:
    """Poll every side's consumer until ``done`` holds for each assignment; no assignment may
    ever hold a topic of ``never``."""
    deadline = time.monotonic() + REFRESH_DEADLINE_S
    while True:
        for consumer in consumers.values():
            consumer.poll(0.1)
        seen = {name: assigned_topics(c) for name, c in consumers.items()}
        for name, topics in seen.items():
            assert not topics & never, f"{name}: assigned a topic it may not DESCRIBE: {topics}"
        if all(done(topics) for topics in seen.values()):
            return seen
        assert time.monotonic() < deadline, f"{what}: {seen}"


def test_regex_consumer_gets_the_matching_topics_it_may_describe(sides: list[Side]) -> None:
    """confluent-kafka subscribed to ``^<prefix>-.*`` with ``group.protocol=consumer``: assigned
    exactly the matching topics alice may DESCRIBE (not one DESCRIBE-able topic the anchored
    regex does not match as a whole), then a matching topic created later; a matching topic
    she may not DESCRIBE — existing or created later — never. ConsumerGroupDescribe as alice
    shows the same assignments on both sides.

    deviation: ConsumerGroupDescribe shows the member's subscription as the broker behind
    kafkaguard holds it — the resolved topics as ``subscribedTopicNames`` and no regex — where
    Kafka shows the regex the client sent."""
    p, g = scenario_name("rx-c"), scenario_name("rx-cg")
    ok1, ok2, secret, other = f"{p}-ok-1", f"{p}-ok-2", f"{p}-secret", f"x{p}-ok"
    later_ok, later_secret = f"{p}-ok-3", f"{p}-secret-2"
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "READ", "TOPIC", f"{p}-ok", pattern="PREFIXED"),
                acl("User:alice", "READ", "TOPIC", other),
            ]
        )
        create_topics(side, ok1, ok2, secret, other)
        coordinator_ready(side, g, 0)
    consumers: dict[str, Consumer] = {}
    try:
        for side in sides:
            config = side.client_config("alice", **{"group.id": g, "group.protocol": "consumer"})
            consumers[side.name] = consumer = Consumer(config)
            consumer.subscribe([f"^{p}-.*"])
        never = {secret, later_secret}
        first = poll_until(consumers, lambda t: bool(t), never, "no assignment")
        assert first == {name: {ok1, ok2} for name in consumers}
        for side in sides:
            create_topics(side, later_secret)
            create_topics(side, later_ok)
        # later_secret was created first: once later_ok is assigned, a resolution that saw
        # both has run on each side.
        last = poll_until(consumers, lambda t: later_ok in t, never, "new topic not assigned")
        assert last == {name: {ok1, ok2, later_ok} for name in consumers}

        def described(side: Side) -> Any:
            response = call(
                side,
                "alice",
                CONSUMER_GROUP_DESCRIBE,
                1,
                group_ids=(g,),
                include_authorized_operations=False,
            )
            group = response.groups[0]
            return group.error_code, [
                sorted(tp.topic_name for tp in m.assignment.topic_partitions) for m in group.members
            ]

        assert compare(sides, described) == ["none", [sorted({ok1, ok2, later_ok})]]

        def subscription(side: Side) -> tuple[list[str], str | None]:
            response = call(
                side,
                "alice",
                CONSUMER_GROUP_DESCRIBE,
                1,
                group_ids=(g,),
                include_authorized_operations=False,
            )
            member = response.groups[0].members[0]
            return sorted(member.subscribed_topic_names), member.subscribed_topic_regex

        referee, guard = sides
        names, regex = subscription(referee)
        assert names == [] and regex is not None and f"^{p}-.*" in regex
        assert subscription(guard) == (sorted({ok1, ok2, later_ok}), "")
    finally:
        for consumer in consumers.values():
            with contextlib.suppress(KafkaException):
                consumer.close()
