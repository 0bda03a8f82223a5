"""Classic group APIs (KafkaApis.handleFindCoordinator/JoinGroup/…/DeleteGroups) without sockets."""

from __future__ import annotations

from typing import Any

import pytest

from kafkaguard.proxy.handlers.support.base import Forward, Respond
from tests.support.entities import MIN_OPS, item, req, resp
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"

# -- FindCoordinator ---------------------------------------------------------------------------


def coordinator(key: str, node: int = 1) -> Any:
    return item(10, 4, "coordinators", key=key, node_id=node, host="broker", port=9092)


def test_find_coordinator_batched_strips_denied_keys_and_keeps_order() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "g2")])
    verdict = h.send(req(10, 4, key_type=0, coordinator_keys=("g1", "g2", "g3")))
    assert isinstance(verdict, Forward)
    assert h.forwarded_body(verdict, None).coordinator_keys == ("g2",)
    assert h.checked() == [
        ("DESCRIBE", "GROUP", "g1", "DENIED"),
        ("DESCRIBE", "GROUP", "g2", "ALLOWED"),
        ("DESCRIBE", "GROUP", "g3", "DENIED"),
    ]
    out = h.complete(verdict, resp(10, 4, coordinators=(coordinator("g2"),)))
    assert [(c.key, int(c.error_code), c.node_id, c.host, c.port) for c in out.coordinators] == [
        ("g1", 30, -1, "", -1),
        ("g2", 0, 1, "proxy.test", 30001),  # address still rewritten
        ("g3", 30, -1, "", -1),
    ]
    # Kafka sets no message on a v4+ per-key denial: the schema default "", not null.
    assert [c.error_message for c in out.coordinators if c.key != "g2"] == ["", ""]


def test_find_coordinator_allowed_forwards_original_bytes_and_rewrites_addresses() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "TRANSACTIONAL_ID", "tx")])
    verdict = h.send(req(10, 4, key_type=1, coordinator_keys=("tx",)))
    assert isinstance(verdict, Forward) and verdict.request is None
    out = h.complete(verdict, resp(10, 4, coordinators=(coordinator("tx"),)))
    assert out.coordinators[0].host == "proxy.test"


def test_find_coordinator_old_version_denied_is_a_whole_response() -> None:
    h = HandlerHarness([])
    verdict = h.send(req(10, 3, key="tx", key_type=1))
    assert isinstance(verdict, Respond)
    r = verdict.response
    assert (int(r.error_code), r.node_id, r.host, r.port) == (53, -1, "", -1)
    assert r.error_message == "Transactional Id authorization failed."
    v0 = h.send(req(10, 0, key="g"))
    assert isinstance(v0, Respond) and int(v0.response.error_code) == 30


def test_find_coordinator_all_denied_batched_is_answered_locally() -> None:
    h = HandlerHarness([])
    verdict = h.send(req(10, 4, key_type=0, coordinator_keys=("a", "b")))
    assert isinstance(verdict, Respond)
    assert [(c.key, int(c.error_code)) for c in verdict.response.coordinators] == [
        ("a", 30),
        ("b", 30),
    ]


def test_find_coordinator_share_key() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "*")])
    old = h.send(req(10, 5, key_type=2, coordinator_keys=("g:t:0",)))
    assert isinstance(old, Respond)
    assert [int(c.error_code) for c in old.response.coordinators] == [42]
    assert h.checked() == []
    denied = h.send(req(10, 6, key_type=2, coordinator_keys=("g:t:0", "g:t:1")))
    assert isinstance(denied, Respond)
    assert [int(c.error_code) for c in denied.response.coordinators] == [31, 31]
    assert h.checked() == [("CLUSTER_ACTION", "CLUSTER", "kafka-cluster", "DENIED")]
    h2 = HandlerHarness([acl(ALICE, "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")])
    assert isinstance(h2.send(req(10, 6, key_type=2, coordinator_keys=("g:t:0",))), Forward)


def test_find_coordinator_unknown_key_type_fails_whole_request() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "*")])
    verdict = h.send(req(10, 4, key_type=7, coordinator_keys=("x",)))
    assert isinstance(verdict, Respond)
    assert int(verdict.response.coordinators[0].error_code) == 42


# -- Join / Heartbeat / Leave / Sync -------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), [(11, 0), (11, 9), (12, 4), (13, 0), (13, 5), (14, 3)])
def test_group_member_apis_need_read_group(key: int, version: int) -> None:
    body = req(key, version, group_id="g")
    denied = HandlerHarness([]).send(body)
    assert isinstance(denied, Respond) and int(denied.response.error_code) == 30
    h = HandlerHarness([acl(ALICE, "READ", "GROUP", "g")])
    allowed = h.send(body)
    assert isinstance(allowed, Forward) and allowed.request is None
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]


def test_join_group_error_response_shape() -> None:
    r = HandlerHarness([]).send(req(11, 9, group_id="g"))
    assert isinstance(r, Respond)
    assert (r.response.generation_id, r.response.protocol_name, r.response.member_id) == (
        -1,
        None,
        "",
    )


def test_sync_group_v5_protocol_fields_are_checked_before_authorization() -> None:
    h = HandlerHarness([])
    verdict = h.send(req(14, 5, group_id="g", protocol_type=None, protocol_name="range"))
    assert isinstance(verdict, Respond) and int(verdict.response.error_code) == 23
    assert h.checked() == []
    verdict = h.send(req(14, 5, group_id="g", protocol_type="consumer", protocol_name="range"))
    assert isinstance(verdict, Respond) and int(verdict.response.error_code) == 30


# -- DescribeGroups ------------------------------------------------------------------------------


def described(group_id: str, version: int = 5, ops: int = MIN_OPS) -> Any:
    return item(
        15, version, "groups", group_id=group_id, group_state="Stable", authorized_operations=ops
    )


def test_describe_groups_partial_with_authorized_operations() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "b"), acl(ALICE, "DELETE", "GROUP", "b")])
    verdict = h.send(req(15, 5, groups=("a", "b"), include_authorized_operations=True))
    assert isinstance(verdict, Forward)
    assert h.forwarded_body(verdict, None).groups == ("b",)
    out = h.complete(verdict, resp(15, 5, groups=(described("b", ops=12345),)))
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [("a", 30), ("b", 0)]
    assert out.groups[0].authorized_operations == MIN_OPS
    assert out.groups[1].authorized_operations == (1 << 8) | (1 << 6)  # DESCRIBE, DELETE


def test_describe_groups_denied_first_then_the_coordinators_order() -> None:
    # handleDescribeGroupsRequest adds each denied group while it loops, then the
    # coordinator's results (ordered by coordinator shard, not by the request).
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "b"), acl(ALICE, "DESCRIBE", "GROUP", "c")])
    verdict = h.send(req(15, 5, groups=("b", "a", "c"), include_authorized_operations=False))
    out = h.complete(verdict, resp(15, 5, groups=(described("c"), described("b"))))
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [
        ("a", 30),
        ("c", 0),
        ("b", 0),
    ]


def test_describe_groups_allowed_without_operations_is_zero_copy() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "*")])
    verdict = h.send(req(15, 5, groups=("a",), include_authorized_operations=False))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None


def test_describe_groups_all_denied_local_answer() -> None:
    verdict = HandlerHarness([]).send(
        req(15, 6, groups=("a",), include_authorized_operations=False)
    )
    assert isinstance(verdict, Respond)
    g = verdict.response.groups[0]
    assert (g.group_id, int(g.error_code), g.group_state, g.error_message) == (
        "a",
        30,
        "",
        "Group authorization failed.",
    )


# -- ListGroups ----------------------------------------------------------------------------------


def listed(*ids: str) -> Any:
    return resp(16, 4, groups=tuple(item(16, 4, "groups", group_id=g) for g in ids))


def test_list_groups_with_describe_cluster_lists_everything() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "CLUSTER", "kafka-cluster")])
    verdict = h.send(req(16, 4))
    assert isinstance(verdict, Forward) and verdict.rewrite is None


def test_list_groups_filters_by_describe_group_and_never_errors() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "GROUP", "mine", pattern="PREFIXED")])
    verdict = h.send(req(16, 4))
    out = h.complete(verdict, listed("other", "mine-1", "mine-2"))
    assert [g.group_id for g in out.groups] == ["mine-1", "mine-2"]
    assert int(out.error_code) == 0
    assert all(not a.log_if_denied for a, _ in h.checks)
    empty = HandlerHarness([]).complete(HandlerHarness([]).send(req(16, 4)), listed("x"))
    assert empty.groups == ()


# -- DeleteGroups --------------------------------------------------------------------------------


def test_delete_groups_distinct_and_partial() -> None:
    h = HandlerHarness([acl(ALICE, "DELETE", "GROUP", "b")])
    verdict = h.send(req(42, 2, groups_names=("a", "b", "a")))
    assert isinstance(verdict, Forward)
    assert h.forwarded_body(verdict, None).groups_names == ("b",)
    assert [c[2] for c in h.checked()] == ["a", "b"]
    assert [a.resource_reference_count for a, _ in h.checks] == [1, 1]
    out = h.complete(verdict, resp(42, 2, results=(item(42, 2, "results", group_id="b"),)))
    # Kafka appends the unauthorized groups after the coordinator's results.
    assert [(r.group_id, int(r.error_code)) for r in out.results] == [("b", 0), ("a", 30)]


def test_delete_groups_all_denied_and_all_allowed() -> None:
    denied = HandlerHarness([]).send(req(42, 2, groups_names=("a",)))
    assert isinstance(denied, Respond) and int(denied.response.results[0].error_code) == 30
    allowed = HandlerHarness([acl(ALICE, "DELETE", "GROUP", "*")]).send(
        req(42, 2, groups_names=("a",))
    )
    assert isinstance(allowed, Forward) and allowed.request is None
