"""OffsetCommit / OffsetFetch / OffsetDelete authorization driven without sockets."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.base import Forward, Respond
from kafkaguard.proxy.handlers.support.responses import BrokerMismatch
from tests.support.entities import item, req, resp
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
READ_G = acl(ALICE, "READ", "GROUP", "g")
DESCRIBE_G = acl(ALICE, "DESCRIBE", "GROUP", "g")


def nested(schema: type[Any], *path: str, **values: Any) -> Any:
    t = schema
    for name in path:
        t = codec.nested_type(t, name)
    return codec.make_entity(t, **values)


# -- OffsetCommit --------------------------------------------------------------------------------


def commit(version: int, *topics: Any) -> Any:
    schema = codec.request_schema(8, version)
    key = "topic_id" if version >= 10 else "name"
    return req(
        8,
        version,
        group_id="g",
        member_id="m",
        topics=tuple(
            nested(
                schema,
                "topics",
                **{key: t},
                partitions=tuple(
                    nested(schema, "topics", "partitions", partition_index=i, committed_offset=5)
                    for i in (0, 1)
                ),
            )
            for t in topics
        ),
    )


def commit_reply(version: int, *topics: Any) -> Any:
    key = "topic_id" if version >= 10 else "name"
    return resp(
        8,
        version,
        topics=tuple(
            item(
                8,
                version,
                "topics",
                **{key: t},
                partitions=(item(8, version, "topics", "partitions", partition_index=0),),
            )
            for t in topics
        ),
    )


def commit_errors(response: Any) -> list[tuple[Any, int, int]]:
    return [
        (getattr(t, "name", None) or t.topic_id, p.partition_index, int(p.error_code))
        for t in response.topics
        for p in t.partitions
    ]


def test_offset_commit_group_denied_fails_every_partition_before_topic_checks() -> None:
    h = HandlerHarness([acl(ALICE, "READ", "TOPIC", "*")])
    verdict = h.send(commit(9, "a", "b"))
    assert isinstance(verdict, Respond)
    assert {code for *_, code in commit_errors(verdict.response)} == {30}
    assert len(commit_errors(verdict.response)) == 4
    assert h.checked() == [("READ", "GROUP", "g", "DENIED")]


def test_offset_commit_partial_topics() -> None:
    h = HandlerHarness([READ_G, acl(ALICE, "READ", "TOPIC", "ok")])
    verdict = h.send(commit(9, "secret", "ok"))
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["ok"]
    out = h.complete(verdict, commit_reply(9, "ok"))
    assert commit_errors(out) == [("secret", 0, 29), ("secret", 1, 29), ("ok", 0, 0)]
    assert h.checked() == [
        ("READ", "GROUP", "g", "ALLOWED"),
        ("READ", "TOPIC", "secret", "DENIED"),
        ("READ", "TOPIC", "ok", "ALLOWED"),
    ]


def test_offset_commit_all_allowed_is_forwarded_unchanged_and_all_denied_is_local() -> None:
    h = HandlerHarness([READ_G, acl(ALICE, "READ", "TOPIC", "ok")])
    allowed = h.send(commit(9, "ok"))
    assert isinstance(allowed, Forward) and allowed.request is None and allowed.rewrite is None
    denied = h.send(commit(9, "secret"))
    assert isinstance(denied, Respond)
    assert commit_errors(denied.response) == [("secret", 0, 29), ("secret", 1, 29)]


def test_offset_commit_v10_topic_ids() -> None:
    known, unknown, hidden = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    h = HandlerHarness(
        [READ_G, acl(ALICE, "READ", "TOPIC", "ok")], topic_ids={known: "ok", hidden: "secret"}
    )
    cluster = {known: "ok", hidden: "secret"}  # the broker does not know `unknown` either
    verdict = h.answer_metadata(h.send(commit(10, unknown, hidden, known)), cluster)
    assert isinstance(verdict, Forward)
    assert [t.topic_id for t in h.forwarded_body(verdict, None).topics] == [known]
    out = h.complete(verdict, commit_reply(10, known))
    assert [(t, c) for t, _, c in commit_errors(out)] == [
        (unknown, 100),
        (unknown, 100),
        (hidden, 29),
        (hidden, 29),
        (known, 0),
    ]


# -- OffsetFetch ---------------------------------------------------------------------------------


def fetch_v7(topics: tuple[str, ...] | None) -> Any:
    schema = codec.request_schema(9, 7)
    return req(
        9,
        7,
        group_id="g",
        topics=None
        if topics is None
        else tuple(nested(schema, "topics", name=t, partition_indexes=(0,)) for t in topics),
    )


def fetch_reply_v7(*topics: str, error: int = 0) -> Any:
    return resp(
        9,
        7,
        error_code=codec.ErrorCode(error),
        topics=tuple(
            item(
                9,
                7,
                "topics",
                name=t,
                partitions=(
                    item(9, 7, "topics", "partitions", partition_index=0, committed_offset=42),
                ),
            )
            for t in topics
        ),
    )


def test_offset_fetch_v7_group_denied_is_top_level() -> None:
    h = HandlerHarness([])
    verdict = h.send(fetch_v7(("a",)))
    assert isinstance(verdict, Respond)
    assert int(verdict.response.error_code) == 30 and verdict.response.topics == ()


def test_offset_fetch_v1_group_denied_on_every_partition() -> None:
    schema = codec.request_schema(9, 1)
    body = req(
        9, 1, group_id="g", topics=(nested(schema, "topics", name="a", partition_indexes=(0, 1)),)
    )
    verdict = HandlerHarness([]).send(body)
    assert isinstance(verdict, Respond)
    parts = verdict.response.topics[0].partitions
    assert [(p.partition_index, p.committed_offset, int(p.error_code)) for p in parts] == [
        (0, -1, 30),
        (1, -1, 30),
    ]


def test_offset_fetch_explicit_topics_get_29_with_minus_one() -> None:
    h = HandlerHarness([DESCRIBE_G, acl(ALICE, "DESCRIBE", "TOPIC", "ok")])
    verdict = h.send(fetch_v7(("secret", "ok")))
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["ok"]
    out = h.complete(verdict, fetch_reply_v7("ok"))
    # fetchOffsetsForGroup: the coordinator's topics, then the error topics
    assert out.topics[0].partitions[0].committed_offset == 42
    last = out.topics[1].partitions[0]
    assert (out.topics[1].name, last.committed_offset, last.metadata, int(last.error_code)) == (
        "secret",
        -1,
        "",
        29,
    )
    # a coordinator error is returned as the broker gave it, nothing merged in
    failed = h.complete(verdict, fetch_reply_v7(error=16))
    assert int(failed.error_code) == 16 and failed.topics == ()


def test_offset_fetch_all_topics_filters_silently() -> None:
    h = HandlerHarness([DESCRIBE_G, acl(ALICE, "DESCRIBE", "TOPIC", "ok")])
    verdict = h.send(fetch_v7(None))
    assert isinstance(verdict, Forward) and verdict.request is None
    out = h.complete(verdict, fetch_reply_v7("secret", "ok"))
    assert [t.name for t in out.topics] == ["ok"]


def test_offset_fetch_batched_groups() -> None:
    schema = codec.request_schema(9, 8)
    body = req(
        9,
        8,
        groups=(
            nested(schema, "groups", group_id="denied", topics=None),
            nested(
                schema,
                "groups",
                group_id="g",
                topics=(
                    nested(schema, "groups", "topics", name="secret", partition_indexes=(0,)),
                    nested(schema, "groups", "topics", name="ok", partition_indexes=(0,)),
                ),
            ),
            nested(schema, "groups", group_id="all", topics=None),
        ),
    )
    h = HandlerHarness(
        [DESCRIBE_G, acl(ALICE, "DESCRIBE", "GROUP", "all"), acl(ALICE, "DESCRIBE", "TOPIC", "ok")]
    )
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    sent = h.forwarded_body(verdict, None)
    assert [(g.group_id, g.topics and [t.name for t in g.topics]) for g in sent.groups] == [
        ("g", ["ok"]),
        ("all", None),
    ]

    def group_reply(group_id: str, *topics: str) -> Any:
        return item(
            9,
            8,
            "groups",
            group_id=group_id,
            topics=tuple(
                item(
                    9,
                    8,
                    "groups",
                    "topics",
                    name=t,
                    partitions=(item(9, 8, "groups", "topics", "partitions", partition_index=0),),
                )
                for t in topics
            ),
        )

    out = h.complete(
        verdict, resp(9, 8, groups=(group_reply("g", "ok"), group_reply("all", "ok", "secret")))
    )
    assert [(g.group_id, int(g.error_code), [t.name for t in g.topics]) for g in out.groups] == [
        ("denied", 30, []),
        ("g", 0, ["ok", "secret"]),
        ("all", 0, ["ok"]),
    ]
    assert int(out.groups[1].topics[1].partitions[0].error_code) == 29


def test_offset_fetch_batched_all_denied_is_local() -> None:
    schema = codec.request_schema(9, 9)
    verdict = HandlerHarness([]).send(
        req(9, 9, groups=(nested(schema, "groups", group_id="x", topics=None),))
    )
    assert isinstance(verdict, Respond)
    assert int(verdict.response.groups[0].error_code) == 30


# -- OffsetDelete --------------------------------------------------------------------------------


def delete(*topics: str) -> Any:
    schema = codec.request_schema(47, 0)
    return req(
        47,
        0,
        group_id="g",
        topics=tuple(
            nested(
                schema,
                "topics",
                name=t,
                partitions=(nested(schema, "topics", "partitions", partition_index=0),),
            )
            for t in topics
        ),
    )


def test_offset_delete_needs_delete_group_then_read_topic() -> None:
    denied = HandlerHarness([READ_G]).send(delete("a"))
    assert isinstance(denied, Respond) and int(denied.response.error_code) == 30
    h = HandlerHarness([acl(ALICE, "DELETE", "GROUP", "g"), acl(ALICE, "READ", "TOPIC", "ok")])
    verdict = h.send(delete("secret", "ok"))
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["ok"]
    reply = resp(
        47,
        0,
        topics=(
            item(
                47,
                0,
                "topics",
                name="ok",
                partitions=(item(47, 0, "topics", "partitions", partition_index=0),),
            ),
        ),
    )
    out = h.complete(verdict, reply)
    assert [(t.name, int(t.partitions[0].error_code)) for t in out.topics] == [
        ("secret", 29),
        ("ok", 0),
    ]
    # a top-level coordinator error replaces the per-topic results
    group_error = h.complete(verdict, resp(47, 0, error_code=codec.ErrorCode(69)))
    assert int(group_error.error_code) == 69 and group_error.topics == ()


def test_offset_delete_never_forwards_an_emptied_topic_list() -> None:
    # Kafka still asks the coordinator (a group-level error replaces the 29s). The proxy sends
    # a probe instead of an emptied list (which a broker could read as "every topic"): one
    # topic named "" — which cannot exist — with no partitions.
    h = HandlerHarness([acl(ALICE, "DELETE", "GROUP", "g"), acl(ALICE, "READ", "TOPIC", "ok")])
    only_denied = h.send(delete("secret", "secret"))
    probe = h.forwarded_body(only_denied, None)
    assert [(t.name, t.partitions) for t in probe.topics] == [("", ())]
    reply = resp(47, 0, topics=(item(47, 0, "topics", name="", partitions=()),))
    out = h.complete(only_denied, reply)
    assert int(out.error_code) == 0
    assert [(t.name, [int(p.error_code) for p in t.partitions]) for t in out.topics] == [
        ("secret", [29, 29])
    ]
    missing_group = h.complete(only_denied, resp(47, 0, error_code=codec.ErrorCode(69)))
    assert int(missing_group.error_code) == 69 and missing_group.topics == ()


def test_offset_delete_drops_broker_entries_it_did_not_send() -> None:
    h = HandlerHarness([acl(ALICE, "DELETE", "GROUP", "g"), acl(ALICE, "READ", "TOPIC", "ok")])
    verdict = h.send(delete("secret", "ok"))
    assert isinstance(verdict, Forward)
    reply = resp(
        47,
        0,
        topics=tuple(
            item(
                47,
                0,
                "topics",
                name=name,
                partitions=(item(47, 0, "topics", "partitions", partition_index=0),),
            )
            for name in ("ok", "secret", "other", "ok")
        ),
    )
    out = h.complete(verdict, reply)
    assert [(t.name, int(t.partitions[0].error_code)) for t in out.topics] == [
        ("secret", 29),
        ("ok", 0),
    ]


# -- review regressions: duplicate groups, emptied lists, unrequested broker entries -----------


def batched(version: int, *groups: tuple[str, tuple[str, ...] | None]) -> Any:
    schema = codec.request_schema(9, version)
    return req(
        9,
        version,
        groups=tuple(
            nested(
                schema,
                "groups",
                group_id=g,
                topics=None
                if ts is None
                else tuple(
                    nested(schema, "groups", "topics", name=t, partition_indexes=(0,)) for t in ts
                ),
            )
            for g, ts in groups
        ),
    )


def group_reply(group_id: str, *topics: str, error: int = 0) -> Any:
    return item(
        9,
        8,
        "groups",
        group_id=group_id,
        error_code=codec.ErrorCode(error),
        topics=tuple(
            item(
                9,
                8,
                "groups",
                "topics",
                name=t,
                partitions=(
                    item(
                        9,
                        8,
                        "groups",
                        "topics",
                        "partitions",
                        partition_index=0,
                        committed_offset=1,
                    ),
                ),
            )
            for t in topics
        ),
    )


def group_view(response: Any) -> list[tuple[str, int, list[tuple[str, int]]]]:
    return [
        (
            g.group_id,
            int(g.error_code),
            [(t.name, int(t.partitions[0].error_code)) for t in g.topics],
        )
        for g in response.groups
    ]


SEE_OK = [DESCRIBE_G, acl(ALICE, "DESCRIBE", "TOPIC", "ok")]


def test_offset_fetch_duplicate_group_keeps_each_entrys_filter() -> None:
    # g twice: all topics (filtered), then an explicit denied topic (answered by the proxy)
    h = HandlerHarness(SEE_OK)
    verdict = h.send(batched(8, ("g", None), ("g", ("secret",))))
    assert isinstance(verdict, Forward)
    sent = h.forwarded_body(verdict, None)
    assert [(g.group_id, g.topics) for g in sent.groups] == [("g", None), ("g", ())]
    reply = resp(9, 8, groups=(group_reply("g", "ok", "secret"), group_reply("g", "ok")))
    out = h.complete(verdict, reply)
    assert group_view(out) == [("g", 0, [("ok", 0)]), ("g", 0, [("secret", 29)])]


def test_offset_fetch_duplicate_group_both_forwarded_each_filtered() -> None:
    h = HandlerHarness(SEE_OK)
    verdict = h.send(batched(8, ("g", ("ok", "secret")), ("g", None)))
    assert isinstance(verdict, Forward)
    sent = h.forwarded_body(verdict, None)
    assert [(g.group_id, g.topics and [t.name for t in g.topics]) for g in sent.groups] == [
        ("g", ["ok"]),
        ("g", None),
    ]
    reply = resp(9, 8, groups=(group_reply("g", "ok", "secret"), group_reply("g", "secret", "ok")))
    assert group_view(h.complete(verdict, reply)) == [
        ("g", 0, [("ok", 0), ("secret", 29)]),
        ("g", 0, [("ok", 0)]),
    ]


def test_offset_fetch_broker_groups_must_line_up_with_the_request() -> None:
    h = HandlerHarness(SEE_OK)
    verdict = h.send(batched(8, ("g", None), ("g", ("ok",))))
    assert isinstance(verdict, Forward)
    for groups in (
        (group_reply("g", "secret"),),  # one answer for two entries
        (group_reply("g"), group_reply("g"), group_reply("g", "secret")),  # one too many
        (group_reply("g"), group_reply("h", "secret")),  # a group never sent
    ):
        with pytest.raises(BrokerMismatch):
            h.complete(verdict, resp(9, 8, groups=groups))
    # a group-level error keeps its code and loses any topics
    out = h.complete(verdict, resp(9, 8, groups=(group_reply("g", "secret", error=16),) * 2))
    assert group_view(out) == [("g", 16, []), ("g", 16, [])]


def test_offset_fetch_batched_group_with_every_topic_denied_still_asks_the_coordinator() -> None:
    # fetchOffsetsForGroup calls the coordinator with the authorized topics even when there
    # are none: its group-level error replaces the 29s. An empty list asks for no topic, and
    # nothing the broker answers for it gets through.
    h = HandlerHarness(SEE_OK + [acl(ALICE, "DESCRIBE", "GROUP", "h")])
    verdict = h.send(batched(8, ("g", ("secret",)), ("h", ("ok",))))
    assert isinstance(verdict, Forward)
    sent = h.forwarded_body(verdict, None)
    assert [(g.group_id, [t.name for t in g.topics]) for g in sent.groups] == [
        ("g", []),
        ("h", ["ok"]),
    ]
    reply = resp(9, 8, groups=(group_reply("g", "secret"), group_reply("h", "ok", "secret")))
    out = h.complete(verdict, reply)
    assert group_view(out) == [("g", 0, [("secret", 29)]), ("h", 0, [("ok", 0)])]
    reply = resp(9, 8, groups=(group_reply("g", error=16), group_reply("h", "ok")))
    assert group_view(h.complete(verdict, reply)) == [("g", 16, []), ("h", 0, [("ok", 0)])]


def test_offset_fetch_empty_lists_are_sent_as_they_are_and_answered_empty() -> None:
    h = HandlerHarness(SEE_OK)
    verdict = h.send(batched(8, ("g", ())))
    assert isinstance(verdict, Forward) and verdict.request is None
    out = h.complete(verdict, resp(9, 8, groups=(group_reply("g", "ok", "secret"),)))
    assert group_view(out) == [("g", 0, [])]
    v7 = h.send(fetch_v7(()))
    assert isinstance(v7, Forward) and v7.request is None
    assert h.complete(v7, fetch_reply_v7("ok", "secret")).topics == ()


def test_offset_fetch_v7_every_topic_denied_still_asks_the_coordinator() -> None:
    h = HandlerHarness(SEE_OK)
    verdict = h.send(fetch_v7(("secret",)))
    assert h.forwarded_body(verdict, None).topics == ()
    out = h.complete(verdict, fetch_reply_v7("secret"))
    assert int(out.error_code) == 0
    assert [(t.name, int(t.partitions[0].error_code)) for t in out.topics] == [("secret", 29)]
    assert int(h.complete(verdict, fetch_reply_v7(error=16)).error_code) == 16


def test_offset_fetch_v7_drops_broker_topics_it_did_not_send() -> None:
    h = HandlerHarness(SEE_OK)
    verdict = h.send(fetch_v7(("secret", "ok")))
    out = h.complete(verdict, fetch_reply_v7("ok", "secret", "other"))
    assert [(t.name, int(t.partitions[0].error_code)) for t in out.topics] == [
        ("ok", 0),
        ("secret", 29),
    ]
    assert out.topics[1].partitions[0].committed_offset == -1
