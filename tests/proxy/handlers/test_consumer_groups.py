"""ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) authorization without sockets."""

from __future__ import annotations

from typing import Any

from kafkaguard.proxy.handlers.support.base import AskFirst, Forward, Respond
from tests.support.entities import MIN_OPS, item, req, resp
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
READ_G = acl(ALICE, "READ", "GROUP", "g")


def heartbeat(*topics: str) -> Any:
    return req(
        68, 0, group_id="g", member_id="m", member_epoch=0, subscribed_topic_names=topics or None
    )


def test_heartbeat_group_denied_then_topics_all_or_nothing() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "TOPIC", "*")])
    denied = h.send(heartbeat("a"))
    assert isinstance(denied, Respond) and int(denied.response.error_code) == 30
    assert h.checked() == [("READ", "GROUP", "g", "DENIED")]
    h = HandlerHarness([READ_G, acl(ALICE, "DESCRIBE", "TOPIC", "a")])
    partial = h.send(heartbeat("a", "b"))
    assert isinstance(partial, Respond)
    assert int(partial.response.error_code) == 29 and partial.response.error_message is None
    ok = h.send(heartbeat("a"))
    assert isinstance(ok, Forward) and ok.request is None
    no_topics = h.send(heartbeat())
    assert isinstance(no_topics, Forward)
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]


def test_heartbeat_v1_without_regex_is_enforced_like_v0() -> None:
    # librdkafka >= 2.10 speaks only v1 with group.protocol=consumer.
    h = HandlerHarness([READ_G, acl(ALICE, "DESCRIBE", "TOPIC", "a")])
    assert h.supported_versions(68) == range(0, 2)
    body = req(68, 1, group_id="g", member_id="m", member_epoch=0, subscribed_topic_names=("a",))
    ok = h.send(body)
    assert isinstance(ok, Forward) and ok.request is None
    denied = h.send(
        req(68, 1, group_id="g", member_id="m", member_epoch=0, subscribed_topic_names=("b",))
    )
    assert isinstance(denied, Respond) and int(denied.response.error_code) == 29
    # "" clears a regex subscription: nothing to resolve, forwarded.
    clear = h.send(
        req(68, 1, group_id="g", member_id="m", member_epoch=1, subscribed_topic_regex="")
    )
    assert isinstance(clear, Forward)


def test_heartbeat_regex_is_resolved_after_the_group_check() -> None:
    # The resolution itself: test_consumer_groups_regex.py.
    regex = req(68, 1, group_id="g", member_id="m", member_epoch=0, subscribed_topic_regex=".*")
    h = HandlerHarness([])
    denied = h.send(regex)
    assert isinstance(denied, Respond) and int(denied.response.error_code) == 30
    h = HandlerHarness([READ_G])
    verdict = h.send(regex)
    assert isinstance(verdict, AskFirst) and int(verdict.question.__api_key__) == 3
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]


def test_heartbeat_names_compared_as_a_set() -> None:
    # Kafka 4.3: authorizedTopics.size < subscribedTopicSet.size — a name listed twice passes.
    h = HandlerHarness([READ_G, acl(ALICE, "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(heartbeat("a", "a"))
    assert isinstance(verdict, Forward)
    assert [a.resource_reference_count for a, _ in h.checks] == [1, 1]


def member(*topics: str, target: tuple[str, ...] = ()) -> Any:
    def assignment(names: tuple[str, ...]) -> Any:
        return item(
            69,
            1,
            "groups",
            "members",
            "assignment",
            topic_partitions=tuple(
                item(
                    69,
                    1,
                    "groups",
                    "members",
                    "assignment",
                    "topic_partitions",
                    topic_name=t,
                    partitions=(0,),
                )
                for t in names
            ),
        )

    return item(
        69,
        1,
        "groups",
        "members",
        member_id="m",
        assignment=assignment(topics),
        target_assignment=assignment(target),
    )


def group_entry(group_id: str, *members: Any) -> Any:
    return item(
        69,
        1,
        "groups",
        group_id=group_id,
        group_state="Stable",
        members=members,
        authorized_operations=MIN_OPS,
    )


def test_describe_groups_denied_groups_and_assignment_topics() -> None:
    h = HandlerHarness(
        [
            acl(ALICE, "DESCRIBE", "GROUP", "g", pattern="PREFIXED"),
            acl(ALICE, "DESCRIBE", "TOPIC", "ok"),
        ]
    )
    verdict = h.send(req(69, 1, group_ids=("x", "g1", "g2"), include_authorized_operations=True))
    assert isinstance(verdict, Forward)
    assert h.forwarded_body(verdict, None).group_ids == ("g1", "g2")
    reply = resp(
        69,
        1,
        groups=(
            group_entry("g1", member("ok")),
            group_entry("g2", member("ok", target=("secret",))),
        ),
    )
    out = h.complete(verdict, reply)
    assert [(g.group_id, int(g.error_code), len(g.members)) for g in out.groups] == [
        ("x", 30, 0),
        ("g1", 0, 1),
        ("g2", 29, 0),
    ]
    assert out.groups[1].authorized_operations == 1 << 8  # DESCRIBE only
    assert out.groups[2].authorized_operations == MIN_OPS
    assert out.groups[2].error_message


def test_describe_all_allowed_keeps_broker_answer_and_all_denied_is_local() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "*"), acl(ALICE, "DESCRIBE", "TOPIC", "*")])
    verdict = h.send(req(69, 1, group_ids=("g",), include_authorized_operations=False))
    assert isinstance(verdict, Forward) and verdict.request is None
    reply = resp(69, 1, groups=(group_entry("g", member("t")),))
    assert h.complete(verdict, reply) is reply
    denied = HandlerHarness([]).send(
        req(69, 1, group_ids=("g",), include_authorized_operations=False)
    )
    assert isinstance(denied, Respond) and int(denied.response.groups[0].error_code) == 30


def test_describe_lists_denied_groups_first_then_the_coordinators_answer() -> None:
    # handleConsumerGroupDescribe: the 30 entries, one per denied occurrence, as it loops;
    # then the coordinator's results.
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "g", pattern="PREFIXED")])
    verdict = h.send(
        req(69, 1, group_ids=("g1", "x", "g2", "x"), include_authorized_operations=False)
    )
    out = h.complete(verdict, resp(69, 1, groups=(group_entry("g2"), group_entry("g1"))))
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [
        ("x", 30),
        ("x", 30),
        ("g2", 0),
        ("g1", 0),
    ]
