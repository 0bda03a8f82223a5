"""Transactions family (KafkaApis.handleInitProducerId/AddPartitionsToTxn/AddOffsetsToTxn/
EndTxn/TxnOffsetCommit/DescribeTransactions/ListTransactions) driven without sockets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.add_offsets_to_txn.v3 import request as ao_req
from kio.schema.add_partitions_to_txn.v3 import request as ap_req
from kio.schema.add_partitions_to_txn.v3 import response as ap_resp
from kio.schema.add_partitions_to_txn.v4 import request as ap4_req
from kio.schema.describe_transactions.v0 import request as dt_req
from kio.schema.describe_transactions.v0 import response as dt_resp
from kio.schema.end_txn.v3 import request as et_req
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as ip4_req
from kio.schema.init_producer_id.v6 import request as ip6_req
from kio.schema.list_transactions.v1 import request as lt_req
from kio.schema.list_transactions.v1 import response as lt_resp
from kio.schema.txn_offset_commit.v3 import request as toc_req
from kio.schema.txn_offset_commit.v3 import response as toc_resp

from kafkaguard.proxy.handlers.support.base import Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
WRITE_TX = acl(ALICE, "WRITE", "TRANSACTIONAL_ID", "tx")
DESCRIBE_TX = acl(ALICE, "DESCRIBE", "TRANSACTIONAL_ID", "tx")


def init_producer_id(txn: str | None, *, two_pc: bool = False) -> Any:
    if two_pc:
        return ip6_req.InitProducerIdRequest(
            transactional_id=txn, transaction_timeout=timedelta(seconds=60), enable2_pc=True
        )
    return ip4_req.InitProducerIdRequest(
        transactional_id=txn, transaction_timeout=timedelta(seconds=60)
    )


# -- InitProducerId ---------------------------------------------------------------------------


def test_init_producer_id_transactional_needs_write_on_the_transactional_id() -> None:
    h = HandlerHarness([])
    verdict = h.send(init_producer_id("tx"))
    assert isinstance(verdict, Respond)
    assert verdict.response.error_code == ErrorCode.transactional_id_authorization_failed
    assert (verdict.response.producer_id, verdict.response.producer_epoch) == (-1, -1)
    assert h.checked() == [("WRITE", "TRANSACTIONAL_ID", "tx", "DENIED")]
    h = HandlerHarness([WRITE_TX])
    verdict = h.send(init_producer_id("tx"))
    assert isinstance(verdict, Forward) and verdict.request is None


def test_init_producer_id_2pc_also_needs_two_phase_commit() -> None:
    h = HandlerHarness([WRITE_TX])
    verdict = h.send(init_producer_id("tx", two_pc=True))
    assert isinstance(verdict, Respond)
    assert verdict.response.error_code == ErrorCode.transactional_id_authorization_failed
    assert h.checked() == [
        ("WRITE", "TRANSACTIONAL_ID", "tx", "ALLOWED"),
        ("TWO_PHASE_COMMIT", "TRANSACTIONAL_ID", "tx", "DENIED"),
    ]
    h = HandlerHarness([WRITE_TX, acl(ALICE, "TWO_PHASE_COMMIT", "TRANSACTIONAL_ID", "tx")])
    assert isinstance(h.send(init_producer_id("tx", two_pc=True)), Forward)


def test_idempotent_init_producer_id_passes_with_write_on_any_topic() -> None:
    h = HandlerHarness([acl(ALICE, "WRITE", "TOPIC", "orders-", pattern="PREFIXED")])
    verdict = h.send(init_producer_id(None))
    assert isinstance(verdict, Forward) and verdict.request is None
    # The IDEMPOTENT_WRITE probe comes first and does not log its denial
    # (``KafkaApis.handleInitProducerIdRequest``, KIP-679).
    assert [(a.operation.name, a.log_if_denied) for a, _ in h.checks] == [
        ("IDEMPOTENT_WRITE", False)
    ]


def test_idempotent_init_producer_id_passes_with_idempotent_write() -> None:
    h = HandlerHarness([acl(ALICE, "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster")])
    assert isinstance(h.send(init_producer_id(None)), Forward)


def test_idempotent_init_producer_id_denied_is_cluster_authorization_failed() -> None:
    # READ on a topic is not WRITE; a DENY on the only allowed name dominates it.
    h = HandlerHarness(
        [
            acl(ALICE, "READ", "TOPIC", "orders"),
            acl(ALICE, "WRITE", "TOPIC", "x"),
            acl(ALICE, "WRITE", "TOPIC", "x", permission="DENY"),
        ]
    )
    verdict = h.send(init_producer_id(None))
    assert isinstance(verdict, Respond)
    assert verdict.response.error_code == ErrorCode.cluster_authorization_failed


# -- AddPartitionsToTxn -------------------------------------------------------------------------


def add_partitions(*topics: str) -> Any:
    return ap_req.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=tuple(
            ap_req.AddPartitionsToTxnTopic(name=t, partitions=(0, 1)) for t in topics
        ),
    )


def partition_codes(response: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.partition_index, int(p.partition_error_code))
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]


def test_add_partitions_all_allowed_is_forwarded_unchanged() -> None:
    h = HandlerHarness([WRITE_TX, acl(ALICE, "WRITE", "TOPIC", "a")])
    verdict = h.send(add_partitions("a"))
    assert isinstance(verdict, Forward) and verdict.request is None
    # Reference count = partitions of the topic (filterByAuthorized over partitions).
    assert [a.resource_reference_count for a, _ in h.checks] == [1, 2]


def probe_answer(*missing: tuple[str, int], code: int = 49) -> Any:
    """What a broker answers the proxy's probe: 3 on ``missing`` and 55 on the rest of the
    topics named, or (nothing missing) the coordinator's ``code`` on every partition."""
    names = dict.fromkeys(t for t, _ in missing) or {"a": None}
    return ap_resp.AddPartitionsToTxnResponse(
        throttle_time=timedelta(0),
        results_by_topic_v3_and_below=tuple(
            ap_resp.AddPartitionsToTxnTopicResult(
                name=t,
                results_by_partition=tuple(
                    ap_resp.AddPartitionsToTxnPartitionResult(
                        partition_index=i,
                        partition_error_code=ErrorCode(
                            3 if (t, i) in missing else (55 if missing else code)
                        ),
                    )
                    for i in (0, 1)
                ),
            )
            for t in names
        ),
    )


def test_add_partitions_is_all_or_nothing_with_55_on_authorized_partitions() -> None:
    h = HandlerHarness([WRITE_TX, acl(ALICE, "WRITE", "TOPIC", "a")])
    verdict = h.send(add_partitions("a", "b"))
    # Which authorized partitions exist only the broker knows: it gets a probe that cannot
    # touch any transaction (producer id/epoch -1) with the authorized partitions only.
    probe = h.forwarded_body(verdict, None)
    assert (probe.v3_and_below_producer_id, probe.v3_and_below_producer_epoch) == (-1, -1)
    assert probe.v3_and_below_transactional_id == "tx"
    assert [(t.name, t.partitions) for t in probe.v3_and_below_topics] == [("a", (0, 1))]
    # All exist: the coordinator refuses the probe's producer id; the client gets 55/29.
    assert partition_codes(h.complete(verdict, probe_answer())) == [
        ("a", 0, 55),
        ("a", 1, 55),
        ("b", 0, 29),
        ("b", 1, 29),
    ]


def test_add_partitions_missing_authorized_partitions_get_3_as_kafka_answers() -> None:
    h = HandlerHarness([WRITE_TX, acl(ALICE, "WRITE", "TOPIC", "a")])
    verdict = h.send(add_partitions("a", "b"))
    # KafkaApis: 29 for denied, 3 for authorized-but-missing, 55 for the rest.
    assert partition_codes(h.complete(verdict, probe_answer(("a", 1)))) == [
        ("a", 0, 55),
        ("a", 1, 3),
        ("b", 0, 29),
        ("b", 1, 29),
    ]


def test_add_partitions_probe_answer_is_only_read_for_its_3s() -> None:
    # Anything but 3 on the probe (a coordinator error) proves only that every authorized
    # partition exists; codes for partitions never sent are ignored.
    h = HandlerHarness([WRITE_TX, acl(ALICE, "WRITE", "TOPIC", "a")])
    verdict = h.send(add_partitions("a", "b"))
    expected = [("a", 0, 55), ("a", 1, 55), ("b", 0, 29), ("b", 1, 29)]
    assert partition_codes(h.complete(verdict, probe_answer(("b", 0), ("b", 1)))) == expected
    assert partition_codes(h.complete(verdict, probe_answer(code=51))) == expected


def test_add_partitions_with_nothing_authorized_is_answered_without_the_broker() -> None:
    h = HandlerHarness([WRITE_TX])
    verdict = h.send(add_partitions("a", "__consumer_offsets"))
    assert isinstance(verdict, Respond)
    assert {c for _, _, c in partition_codes(verdict.response)} == {29}


def test_add_partitions_internal_topics_are_never_authorized() -> None:
    h = HandlerHarness([WRITE_TX, acl(ALICE, "WRITE", "TOPIC", "*")])
    verdict = h.send(add_partitions("a", "__consumer_offsets", "__transaction_state"))
    response = h.complete(verdict, probe_answer())
    assert {t: c for t, _, c in partition_codes(response)} == {
        "a": 55,
        "__consumer_offsets": 29,
        "__transaction_state": 29,
    }
    # The internal topics are not even asked about.
    assert [n for _, _, n, _ in h.checked()] == ["tx", "a"]


def test_add_partitions_without_transactional_id_write_gets_53_everywhere() -> None:
    h = HandlerHarness([acl(ALICE, "WRITE", "TOPIC", "a")])
    verdict = h.send(add_partitions("a", "b"))
    assert isinstance(verdict, Respond)
    assert {c for _, _, c in partition_codes(verdict.response)} == {53}
    assert h.checked() == [("WRITE", "TRANSACTIONAL_ID", "tx", "DENIED")]


def test_add_partitions_v4_is_broker_to_broker_and_needs_cluster_action() -> None:
    body = ap4_req.AddPartitionsToTxnRequest(
        transactions=(
            ap4_req.AddPartitionsToTxnTransaction(
                transactional_id="tx", producer_id=1, producer_epoch=0, verify_only=True, topics=()
            ),
        )
    )
    h = HandlerHarness([WRITE_TX])
    verdict = h.send(body)
    assert isinstance(verdict, Respond)
    assert verdict.response.error_code == ErrorCode.cluster_authorization_failed
    assert verdict.response.results_by_transaction == ()
    h = HandlerHarness([acl(ALICE, "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")])
    assert isinstance(h.send(body), Forward)


# -- AddOffsetsToTxn / EndTxn -------------------------------------------------------------------


def add_offsets() -> Any:
    return ao_req.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g"
    )


def test_add_offsets_checks_transactional_id_then_group() -> None:
    h = HandlerHarness([])
    verdict = h.send(add_offsets())
    assert isinstance(verdict, Respond) and verdict.response.error_code == 53
    assert h.checked() == [("WRITE", "TRANSACTIONAL_ID", "tx", "DENIED")]
    h = HandlerHarness([WRITE_TX])
    verdict = h.send(add_offsets())
    assert isinstance(verdict, Respond) and verdict.response.error_code == 30
    h = HandlerHarness([WRITE_TX, acl(ALICE, "READ", "GROUP", "g")])
    verdict = h.send(add_offsets())
    assert isinstance(verdict, Forward) and verdict.request is None


def test_end_txn_needs_write_on_the_transactional_id() -> None:
    body = et_req.EndTxnRequest(
        transactional_id="tx", producer_id=1, producer_epoch=0, committed=True
    )
    verdict = HandlerHarness([DESCRIBE_TX]).send(body)
    assert isinstance(verdict, Respond) and verdict.response.error_code == 53
    assert isinstance(HandlerHarness([WRITE_TX]).send(body), Forward)


# -- TxnOffsetCommit -----------------------------------------------------------------------------


def txn_commit(*topics: str) -> Any:
    return toc_req.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=1,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=tuple(
            toc_req.TxnOffsetCommitRequestTopic(
                name=t,
                partitions=(
                    toc_req.TxnOffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=5,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    ),
                ),
            )
            for t in topics
        ),
    )


def commit_reply(*topics: str) -> Any:
    return toc_resp.TxnOffsetCommitResponse(
        throttle_time=timedelta(0),
        topics=tuple(
            toc_resp.TxnOffsetCommitResponseTopic(
                name=t,
                partitions=(
                    toc_resp.TxnOffsetCommitResponsePartition(
                        partition_index=0, error_code=ErrorCode.none
                    ),
                ),
            )
            for t in topics
        ),
    )


def commit_codes(response: Any) -> list[tuple[str, int]]:
    return [(t.name, int(p.error_code)) for t in response.topics for p in t.partitions]


READ_G = acl(ALICE, "READ", "GROUP", "g")


def test_txn_offset_commit_group_denial_hides_every_topic() -> None:
    h = HandlerHarness([WRITE_TX, acl(ALICE, "READ", "TOPIC", "a")])
    verdict = h.send(txn_commit("a", "b"))
    assert isinstance(verdict, Respond)
    assert commit_codes(verdict.response) == [("a", 30), ("b", 30)]
    assert [c[:3] for c in h.checked()] == [
        ("WRITE", "TRANSACTIONAL_ID", "tx"),
        ("READ", "GROUP", "g"),
    ]


def test_txn_offset_commit_transactional_id_denial_is_53_everywhere() -> None:
    verdict = HandlerHarness([READ_G]).send(txn_commit("a"))
    assert isinstance(verdict, Respond)
    assert commit_codes(verdict.response) == [("a", 53)]


def test_txn_offset_commit_forwards_only_readable_topics_and_merges_in_kafkas_order() -> None:
    h = HandlerHarness([WRITE_TX, READ_G, acl(ALICE, "READ", "TOPIC", "b")])
    body = txn_commit("a", "b", "c")
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [t.name for t in h.forwarded_body(verdict, body).topics] == ["b"]
    response = h.complete(verdict, commit_reply("b"))
    # TxnOffsetCommitResponse.Builder: the rejected topics first, then the coordinator's.
    assert commit_codes(response) == [("a", 29), ("c", 29), ("b", 0)]


def test_txn_offset_commit_all_allowed_is_forwarded_unchanged() -> None:
    h = HandlerHarness([WRITE_TX, READ_G, acl(ALICE, "READ", "TOPIC", "a")])
    verdict = h.send(txn_commit("a"))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None


# -- DescribeTransactions / ListTransactions -------------------------------------------------------


def state(txn: str, *topics: str) -> Any:
    return dt_resp.TransactionState(
        error_code=ErrorCode.none,
        transactional_id=txn,
        transaction_state="Ongoing",
        transaction_timeout=timedelta(seconds=60),
        transaction_start_time=datetime.fromtimestamp(1, UTC),
        producer_id=7,
        producer_epoch=0,
        topics=tuple(dt_resp.TopicData(topic=t, partitions=(0,)) for t in topics),
    )


def test_describe_transactions_per_id_and_topics_filtered() -> None:
    h = HandlerHarness([DESCRIBE_TX, acl(ALICE, "DESCRIBE", "TOPIC", "visible")])
    body = dt_req.DescribeTransactionsRequest(transactional_ids=("secret", "tx"))
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert h.forwarded_body(verdict, body).transactional_ids == ("tx",)
    broker = dt_resp.DescribeTransactionsResponse(
        throttle_time=timedelta(0), transaction_states=(state("tx", "hidden", "visible"),)
    )
    response = h.complete(verdict, broker)
    assert [(s.transactional_id, int(s.error_code)) for s in response.transaction_states] == [
        ("secret", 53),
        ("tx", 0),
    ]
    assert [t.topic for t in response.transaction_states[1].topics] == ["visible"]


def test_describe_transactions_all_denied_is_answered_locally() -> None:
    h = HandlerHarness([])
    verdict = h.send(dt_req.DescribeTransactionsRequest(transactional_ids=("a", "b")))
    assert isinstance(verdict, Respond)
    assert [int(s.error_code) for s in verdict.response.transaction_states] == [53, 53]


def test_describe_transactions_nothing_to_hide_keeps_the_broker_bytes() -> None:
    h = HandlerHarness([DESCRIBE_TX, acl(ALICE, "DESCRIBE", "TOPIC", "t")])
    verdict = h.send(dt_req.DescribeTransactionsRequest(transactional_ids=("tx",)))
    assert isinstance(verdict, Forward) and verdict.request is None
    broker = dt_resp.DescribeTransactionsResponse(
        throttle_time=timedelta(0), transaction_states=(state("tx", "t"),)
    )
    assert h.complete(verdict, broker) is broker


def test_list_transactions_keeps_only_describable_ids() -> None:
    h = HandlerHarness([DESCRIBE_TX])
    verdict = h.send(lt_req.ListTransactionsRequest(state_filters=(), producer_id_filters=()))
    assert isinstance(verdict, Forward) and verdict.request is None
    broker = lt_resp.ListTransactionsResponse(
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        unknown_state_filters=(),
        transaction_states=tuple(
            lt_resp.TransactionState(transactional_id=t, producer_id=1, transaction_state="Ongoing")
            for t in ("other", "tx")
        ),
    )
    response = h.complete(verdict, broker)
    assert [s.transactional_id for s in response.transaction_states] == ["tx"]
    assert response.error_code == ErrorCode.none
