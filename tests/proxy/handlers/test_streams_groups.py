"""StreamsGroupDescribe authorization (StreamsGroupHeartbeat: test_streams_heartbeat.py)."""

from __future__ import annotations

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.base import Forward
from tests.support.entities import item, req, resp
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"


def test_topology_topics_need_describe() -> None:
    h = HandlerHarness(
        [acl(ALICE, "DESCRIBE", "GROUP", "*"), acl(ALICE, "DESCRIBE", "TOPIC", "in")]
    )
    verdict = h.send(req(89, 0, group_ids=("ok", "leaky"), include_authorized_operations=False))
    assert isinstance(verdict, Forward) and verdict.request is None

    def group(group_id: str, changelog: str | None) -> object:
        schema = codec.response_schema(89, 0)
        sub_type = codec.nested_type(
            codec.nested_type(codec.nested_type(schema, "groups"), "topology"), "subtopologies"
        )
        changelogs = (
            ()
            if changelog is None
            else (
                codec.make_entity(
                    codec.nested_type(sub_type, "state_changelog_topics"), name=changelog
                ),
            )
        )
        sub = codec.make_entity(
            sub_type, subtopology_id="0", source_topics=("in",), state_changelog_topics=changelogs
        )
        topology = item(89, 0, "groups", "topology", epoch=1, subtopologies=(sub,))
        members = (item(89, 0, "groups", "members", member_id="m"),)
        return item(89, 0, "groups", group_id=group_id, topology=topology, members=members)

    out = h.complete(
        verdict, resp(89, 0, groups=(group("ok", None), group("leaky", "app-store-changelog")))
    )
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [("ok", 0), ("leaky", 29)]
    assert out.groups[1].topology is None and out.groups[1].members == ()
    assert ("DESCRIBE", "TOPIC", "app-store-changelog", "DENIED") in h.checked()
