"""Share-group APIs (KIP-932) authorization without sockets."""

from __future__ import annotations

from typing import Any

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers import share_groups, share_sessions
from kafkaguard.proxy.handlers.support.base import Forward, Respond
from tests.support.entities import item, req, resp
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"


def test_share_fetch_and_acknowledge_are_served_by_the_session_module() -> None:
    """The data path keeps per-connection share-session mirrors: ``share_sessions.py``."""
    assert {78, 79}.isdisjoint(h.api_key for h in share_groups.HANDLERS)
    assert {h.api_key for h in share_sessions.HANDLERS} == {78, 79}


def test_share_heartbeat() -> None:
    body = req(
        76, 1, group_id="s", member_id="m", member_epoch=0, subscribed_topic_names=("a", "b")
    )
    assert int(HandlerHarness([]).send(body).response.error_code) == 30  # type: ignore[union-attr]
    h = HandlerHarness([acl(ALICE, "READ", "GROUP", "s"), acl(ALICE, "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(body)
    assert isinstance(verdict, Respond) and int(verdict.response.error_code) == 29
    h2 = HandlerHarness([acl(ALICE, "READ", "GROUP", "s"), acl(ALICE, "DESCRIBE", "TOPIC", "*")])
    assert isinstance(h2.send(body), Forward)


def test_share_describe_assignment_topics() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "s")])
    verdict = h.send(req(77, 1, group_ids=("s",), include_authorized_operations=False))
    tp = item(
        77,
        1,
        "groups",
        "members",
        "assignment",
        "topic_partitions",
        topic_name="t",
        partitions=(0,),
    )
    assignment = item(77, 1, "groups", "members", "assignment", topic_partitions=(tp,))
    members = (item(77, 1, "groups", "members", member_id="m", assignment=assignment),)
    out = h.complete(
        verdict, resp(77, 1, groups=(item(77, 1, "groups", group_id="s", members=members),))
    )
    assert int(out.groups[0].error_code) == 29 and out.groups[0].members == ()


def offsets_request(*groups: tuple[str, tuple[str, ...] | None]) -> Any:
    schema = codec.request_schema(90, 1)
    g_type = codec.nested_type(schema, "groups")
    t_type = codec.nested_type(g_type, "topics")
    return req(
        90,
        1,
        groups=tuple(
            codec.make_entity(
                g_type,
                group_id=g,
                topics=None
                if ts is None
                else tuple(codec.make_entity(t_type, topic_name=t, partitions=(0,)) for t in ts),
            )
            for g, ts in groups
        ),
    )


def test_describe_share_group_offsets() -> None:
    h = HandlerHarness(
        [acl(ALICE, "DESCRIBE", "GROUP", "s"), acl(ALICE, "DESCRIBE", "TOPIC", "ok")]
    )
    verdict = h.send(offsets_request(("x", None), ("s", ("secret", "ok"))))
    assert isinstance(verdict, Forward)
    sent = h.forwarded_body(verdict, None)
    assert [(g.group_id, [t.topic_name for t in g.topics]) for g in sent.groups] == [("s", ["ok"])]
    part = item(90, 1, "groups", "topics", "partitions", partition_index=0, start_offset=7)
    reply = resp(
        90,
        1,
        groups=(
            item(
                90,
                1,
                "groups",
                group_id="s",
                topics=(item(90, 1, "groups", "topics", topic_name="ok", partitions=(part,)),),
            ),
        ),
    )
    out = h.complete(verdict, reply)
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [("x", 30), ("s", 0)]
    secret = out.groups[1].topics[0]
    assert (
        secret.topic_name,
        secret.partitions[0].start_offset,
        int(secret.partitions[0].error_code),
    ) == ("secret", -1, 29)


def test_alter_and_delete_share_group_offsets() -> None:
    schema = codec.request_schema(91, 0)
    t_type = codec.nested_type(schema, "topics")
    p_type = codec.nested_type(t_type, "partitions")
    alter = req(
        91,
        0,
        group_id="s",
        topics=tuple(
            codec.make_entity(
                t_type,
                topic_name=t,
                partitions=(codec.make_entity(p_type, partition_index=0, start_offset=0),),
            )
            for t in ("secret", "ok")
        ),
    )
    denied = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "s")]).send(alter)
    assert isinstance(denied, Respond) and int(denied.response.error_code) == 30
    h = HandlerHarness([acl(ALICE, "READ", "GROUP", "s"), acl(ALICE, "READ", "TOPIC", "ok")])
    verdict = h.send(alter)
    assert [t.topic_name for t in h.forwarded_body(verdict, None).topics] == ["ok"]
    out = h.complete(verdict, resp(91, 0, responses=(item(91, 0, "responses", topic_name="ok"),)))
    assert [(t.topic_name, [int(p.error_code) for p in t.partitions]) for t in out.responses] == [
        ("secret", [29]),
        ("ok", []),
    ]

    d_type = codec.nested_type(codec.request_schema(92, 0), "topics")
    delete = req(
        92,
        0,
        group_id="s",
        topics=tuple(codec.make_entity(d_type, topic_name=t) for t in ("secret", "ok")),
    )
    assert int(h.send(delete).response.error_code) == 30  # type: ignore[union-attr]  # needs DELETE GROUP
    h2 = HandlerHarness([acl(ALICE, "DELETE", "GROUP", "s"), acl(ALICE, "READ", "TOPIC", "ok")])
    verdict = h2.send(delete)
    out = h2.complete(verdict, resp(92, 0, responses=(item(92, 0, "responses", topic_name="ok"),)))
    assert [(t.topic_name, int(t.error_code)) for t in out.responses] == [("secret", 29), ("ok", 0)]


# -- review regressions: duplicate groups, emptied lists, unrequested broker entries -----------


def share_group_reply(group_id: str, *topics: str) -> Any:
    part = item(90, 1, "groups", "topics", "partitions", partition_index=0, start_offset=7)
    return item(
        90,
        1,
        "groups",
        group_id=group_id,
        topics=tuple(
            item(90, 1, "groups", "topics", topic_name=t, partitions=(part,)) for t in topics
        ),
    )


def share_view(response: Any) -> list[tuple[str, int, list[tuple[str, int, int]]]]:
    return [
        (
            g.group_id,
            int(g.error_code),
            [
                (t.topic_name, int(t.partitions[0].error_code), t.partitions[0].start_offset)
                for t in g.topics
            ],
        )
        for g in response.groups
    ]


def test_describe_share_group_offsets_duplicate_group_keeps_each_entrys_filter() -> None:
    h = HandlerHarness(
        [acl(ALICE, "DESCRIBE", "GROUP", "s"), acl(ALICE, "DESCRIBE", "TOPIC", "ok")]
    )
    verdict = h.send(offsets_request(("s", None), ("s", ("secret",)), ("s", ("ok", "secret"))))
    assert isinstance(verdict, Forward)
    sent = h.forwarded_body(verdict, None)
    assert [(g.group_id, g.topics and [t.topic_name for t in g.topics]) for g in sent.groups] == [
        ("s", None),
        ("s", ["ok"]),
    ]
    reply = resp(
        90, 1, groups=(share_group_reply("s", "ok", "secret"), share_group_reply("s", "ok", "x"))
    )
    assert share_view(h.complete(verdict, reply)) == [
        ("s", 0, [("ok", 0, 7)]),
        ("s", 0, [("secret", 29, -1)]),
        ("s", 0, [("ok", 0, 7), ("secret", 29, -1)]),
    ]


def _share_change(api: int, *topics: str) -> Any:
    t_type = codec.nested_type(codec.request_schema(api, 0), "topics")
    if api == 92:
        entries = tuple(codec.make_entity(t_type, topic_name=t) for t in topics)
    else:
        p_type = codec.nested_type(t_type, "partitions")
        entries = tuple(
            codec.make_entity(
                t_type,
                topic_name=t,
                partitions=(codec.make_entity(p_type, partition_index=0, start_offset=0),),
            )
            for t in topics
        )
    return req(api, 0, group_id="s", topics=entries)


def test_share_offset_changes_never_forward_an_emptied_topic_list() -> None:
    h = HandlerHarness(
        [
            acl(ALICE, "READ", "GROUP", "s"),
            acl(ALICE, "DELETE", "GROUP", "s"),
            acl(ALICE, "READ", "TOPIC", "ok"),
        ]
    )
    for api in (91, 92):
        verdict = h.send(_share_change(api, "secret"))
        assert isinstance(verdict, Respond), api
        out = verdict.response
        assert int(out.error_code) == 0
        assert [t.topic_name for t in out.responses] == ["secret"]
        # the broker's extra entries (never sent) are dropped
        forwarded = h.send(_share_change(api, "secret", "ok"))
        reply = resp(
            api,
            0,
            responses=tuple(item(api, 0, "responses", topic_name=t) for t in ("ok", "other")),
        )
        merged = h.complete(forwarded, reply)
        assert [t.topic_name for t in merged.responses] == ["secret", "ok"], api
