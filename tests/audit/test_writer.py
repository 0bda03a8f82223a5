"""The off-loop writer: files, rotation, partitions, aggregation, drops, draining, failures.

Decisions come from a real StandardAuthorizer (its decision listener); files are real files in
``tmp_path``. Only the clock of :class:`AuditFiles` is driven by hand, so rotation is tested
without waiting for hours.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kafkaguard.audit import AuditTrail
from kafkaguard.audit.config import AuditConfig, AuditKafkaConfig
from kafkaguard.audit.kafka_sink import AuditTopicSink
from kafkaguard.audit.writer import HOUR_GRACE_S, AuditFiles, AuditWriter
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import Action, RequestContext, SecurityProtocol
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import (
    AclOperation,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.tansu import free_port

T0 = 1795345140.0  # 2026-11-22T10:59:00Z, the start of a minute window
NAME = re.compile(r"audit-\d{8}T\d{6}-\d+-\d+\.jsonl")


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def records(directory: Path) -> list[dict[str, object]]:
    """Every record readers would see (``*.jsonl`` only), in file then line order."""
    out = []
    for path in sorted(directory.rglob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text().splitlines())
    return out


def context(
    listener: str = "PLAINTEXT", api_key: int = 0, principal: str = "User:bob"
) -> RequestContext:
    return RequestContext(
        listener_name=listener,
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal=KafkaPrincipal.parse(principal),
        client_address=ipaddress.ip_address("10.0.0.7"),
        api_key=api_key,
        api_version=3,
        client_id="c1",
        correlation_id=5,
    )


def topic(name: str, op: AclOperation = AclOperation.WRITE, **flags: bool) -> Action:
    return Action(op, ResourcePattern(ResourceType.TOPIC, name), 1, **flags)


def decisions(*actions: Action, ctx: RequestContext | None = None) -> list[DecisionEvent]:
    """A real authorizer's decisions: User:bob may WRITE topic 'ok', nothing else."""
    events: list[DecisionEvent] = []
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=events.append)
    auth.load_snapshot([acl_binding(ResourceType.TOPIC, "ok", "User:bob", AclOperation.WRITE)])
    auth.authorize(ctx or context(), list(actions))
    return events


# -- AuditFiles ----------------------------------------------------------------------------------


def test_partition_directories_names_and_inprogress_rename(tmp_path: Path) -> None:
    clock = Clock()
    files = AuditFiles(tmp_path, 1 << 20, 3600, clock=clock)
    files.write(T0 + 1, b'{"a":1}\n')
    files.flush()
    (open_file,) = tmp_path.rglob("*.inprogress")
    assert open_file.parent == tmp_path / "date=2026-11-22" / "hour=10"
    assert NAME.fullmatch(open_file.name.removesuffix(".inprogress"))
    assert open_file.name.startswith("audit-20261122T105900-")
    assert records(tmp_path) == []  # readers never see a file being written
    files.close()
    assert not list(tmp_path.rglob("*.inprogress"))
    assert records(tmp_path) == [{"a": 1}]


def test_rotation_by_size(tmp_path: Path) -> None:
    files = AuditFiles(tmp_path, 100, 3600, clock=Clock())
    line = b'{"n":"' + b"x" * 23 + b'"}\n'  # 32 bytes
    for _ in range(10):
        files.write(T0, line)
    files.close()
    sizes = [p.stat().st_size for p in files.completed]
    assert sizes == [128, 128, 64]  # closed by the first line reaching 100 bytes
    assert len({p.name for p in files.completed}) == 3
    assert len(records(tmp_path)) == 10


def test_rotation_by_age(tmp_path: Path) -> None:
    clock = Clock()
    files = AuditFiles(tmp_path, 1 << 20, 30, clock=clock)
    files.write(T0, b"{}\n")
    clock.now += 29
    files.tick(clock.now)
    assert files.completed == []
    clock.now += 1
    files.tick(clock.now)
    assert len(files.completed) == 1
    files.write(clock.now, b"{}\n")
    files.close()
    assert len(files.completed) == 2


def test_hour_change_opens_a_new_partition_and_closes_the_old_after_the_grace(
    tmp_path: Path,
) -> None:
    clock = Clock(T0 + 59)  # 10:59:59
    files = AuditFiles(tmp_path, 1 << 20, 3600, clock=clock)
    files.write(clock.now, b'{"h":10}\n')
    clock.now = T0 + 61  # 11:00:01: a record of the new hour goes to a new directory
    files.write(clock.now, b'{"h":11}\n')
    files.write(T0 + 59.5, b'{"h":10,"late":true}\n')  # queued before the hour ended
    files.tick(clock.now)
    assert files.completed == []
    clock.now = T0 + 60 + HOUR_GRACE_S
    files.tick(clock.now)
    (closed,) = files.completed
    assert closed.parent.name == "hour=10"
    assert [json.loads(x) for x in closed.read_text().splitlines()] == [
        {"h": 10},
        {"h": 10, "late": True},
    ]
    files.close()
    assert files.completed[1].parent == tmp_path / "date=2026-11-22" / "hour=11"


# -- AuditWriter ---------------------------------------------------------------------------------


def config(tmp_path: Path, **changes: object) -> AuditConfig:
    return replace(AuditConfig(enabled=True, dir=tmp_path), **changes)  # type: ignore[arg-type]


def test_allowed_aggregated_per_window_denied_individual(tmp_path: Path) -> None:
    clock = Clock(T0 + 125)
    writer = AuditWriter(config(tmp_path), clock=clock)
    allowed = decisions(topic("ok"))[0]
    allowed_other_client = decisions(topic("ok"), ctx=context()._replace(client_id="c2"))[0]
    denied = decisions(topic("nope"))[0]
    for at in (T0 + 1, T0 + 2, T0 + 59.9):  # window [10:59, 11:00)
        assert writer.offer(at, allowed, "enforce")
    assert writer.offer(T0 + 3, allowed_other_client, "enforce")
    assert writer.offer(T0 + 61, allowed, "enforce")  # window [11:00, 11:01)
    for at in (T0 + 4, T0 + 5):
        assert writer.offer(at, denied, "enforce")
    assert writer.close()  # never started: drains synchronously
    got = records(tmp_path)
    aggregates = [r for r in got if r["kind"] == "aggregate"]
    assert sorted((r["time"], r["window_end"], r["client_id"], r["count"]) for r in aggregates) == [
        ("2026-11-22T10:59:00.000Z", "2026-11-22T11:00:00.000Z", "c1", 3),
        ("2026-11-22T10:59:00.000Z", "2026-11-22T11:00:00.000Z", "c2", 1),
        ("2026-11-22T11:00:00.000Z", "2026-11-22T11:01:00.000Z", "c1", 1),
    ]
    assert all(r["correlation_id"] is None and r["result"] == "ALLOWED" for r in aggregates)
    individual = [r for r in got if r["kind"] == "decision"]
    assert [(r["time"], r["count"], r["correlation_id"], r["result"]) for r in individual] == [
        ("2026-11-22T10:59:04.000Z", 1, 5, "DENIED"),
        ("2026-11-22T10:59:05.000Z", 1, 5, "DENIED"),
    ]
    # Each record sits in the partition of its own time.
    hour_of = {p.name: p.parent.name for p in tmp_path.rglob("*.jsonl")}
    assert sorted(set(hour_of.values())) == ["hour=10", "hour=11"]
    assert writer.records == 5 and writer.lost == 0


def test_identical_decisions_of_connections_with_other_groups_are_other_aggregates(
    tmp_path: Path,
) -> None:
    writer = AuditWriter(config(tmp_path), clock=Clock(T0 + 125))
    eng = (KafkaPrincipal("Group", "eng"),)
    plain = decisions(topic("ok"))[0]
    grouped = decisions(topic("ok"), ctx=context()._replace(groups=eng))[0]
    # Another connection of the same groups: an equal tuple, another object.
    again = decisions(topic("ok"), ctx=context()._replace(groups=(KafkaPrincipal("Group", "eng"),)))
    for event in (plain, grouped, again[0], plain):
        assert writer.offer(T0 + 1, event, "enforce")
    assert writer.close()
    assert sorted((r["groups"], r["count"]) for r in records(tmp_path)) == [  # type: ignore[type-var]
        ([], 2),
        (["Group:eng"], 2),
    ]


def test_open_window_at_close_ends_at_close_time(tmp_path: Path) -> None:
    clock = Clock(T0 + 10)
    writer = AuditWriter(config(tmp_path), clock=clock)
    writer.offer(T0 + 1, decisions(topic("ok"))[0], "enforce")
    writer.close()
    (record,) = records(tmp_path)
    assert (record["time"], record["window_end"]) == (
        "2026-11-22T10:59:00.000Z",
        "2026-11-22T10:59:10.000Z",
    )


def test_volume_modes_swap_and_off(tmp_path: Path) -> None:
    writer = AuditWriter(
        config(tmp_path, allowed="individual", denied="aggregate"), clock=Clock(T0 + 120)
    )
    allowed, denied = decisions(topic("ok"), topic("nope"))
    for _ in range(3):
        writer.offer(T0, allowed, "enforce")
        writer.offer(T0, denied, "enforce")
    writer.close()
    got = records(tmp_path)
    assert sorted((r["kind"], r["result"], r["count"]) for r in got) == [
        ("aggregate", "DENIED", 3),
        ("decision", "ALLOWED", 1),
        ("decision", "ALLOWED", 1),
        ("decision", "ALLOWED", 1),
    ]


class BlockingSink(AuditFiles):
    """A disk that hangs until released (the first write blocks)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, 1 << 20, 3600)
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, at: float, line: bytes) -> None:
        self.entered.set()
        assert self.release.wait(30)
        super().write(at, line)


async def test_full_queue_drops_and_counts_never_blocks_then_close_drains(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, queue_size=4)
    sink = BlockingSink(tmp_path)
    writer = AuditWriter(cfg, sink=sink, poll_interval_s=0.01)
    trail = AuditTrail(cfg, {"PLAINTEXT": "log_only"}, writer=writer)
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
    auth.load_snapshot([])
    trail.start()
    try:
        auth.authorize(context(), [topic("first")])
        assert sink.entered.wait(10)  # the writer thread is now stuck in the disk
        auth.authorize(context(), [topic(f"t{i}") for i in range(10)])
        counters = trail.counters["PLAINTEXT"]
        assert (counters.decisions, counters.denied, counters.would_deny) == (11, 11, 11)
        assert counters.dropped == 6  # 4 queued, 6 refused, none blocked
        assert writer.pending == 4
    finally:
        sink.release.set()
        await trail.close()
    names = [r["resource_name"] for r in records(tmp_path)]
    assert names == ["first", "t0", "t1", "t2", "t3"]
    assert all(r["would_deny"] for r in records(tmp_path))


def test_unwritable_directory_counts_lost_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    writer = AuditWriter(config(blocker / "audit", allowed="individual"), clock=Clock())
    for event in decisions(topic("ok"), topic("nope")):
        writer.offer(T0, event, "enforce")
    assert writer.close()
    assert (writer.records, writer.lost) == (0, 2)


async def test_unreachable_cluster_never_blocks_and_undelivered_records_count_as_lost(
    tmp_path: Path,
) -> None:
    """``sink: both`` with no broker listening: deciding stays as fast as ever, the files get
    every record, and each record the producer cannot deliver within delivery_timeout_ms is
    counted as lost, in decisions (real librdkafka, a closed loopback port)."""
    cfg = replace(
        config(tmp_path, allowed="individual"),
        sink="both",
        kafka=AuditKafkaConfig(delivery_timeout_ms=1500),
    )
    topic_sink = AuditTopicSink(
        cfg.kafka, {"bootstrap.servers": f"127.0.0.1:{free_port()}"}, create_timeout_s=1
    )
    writer = AuditWriter(cfg, topic=topic_sink, poll_interval_s=0.05)
    trail = AuditTrail(cfg, {"PLAINTEXT": "enforce"}, writer=writer)
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
    auth.load_snapshot([acl_binding(ResourceType.TOPIC, "ok", "User:bob", AclOperation.WRITE)])
    trail.start()
    try:
        began = time.monotonic()
        for index in range(50):
            auth.authorize(context(), [topic("ok"), topic(f"nope-{index}")])
        assert time.monotonic() - began < 1.0
        for _ in range(150):  # delivery_timeout_ms, then the next poll: well within 15 s
            if topic_sink.lost >= 100:
                break
            await asyncio.sleep(0.1)
    finally:
        await trail.close()
    assert (topic_sink.written, topic_sink.dropped, topic_sink.lost) == (0, 0, 100)
    assert (writer.records, writer.lost) == (100, 0)
    assert len(records(tmp_path)) == 100


# -- AuditTrail (the decision listener) ----------------------------------------------------------


async def test_trail_filters_unlogged_counts_per_listener_and_keeps_acl_admin_enforced(
    tmp_path: Path,
) -> None:
    trail = AuditTrail(config(tmp_path, allowed="individual"), {"A": "log_only", "B": "enforce"})
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
    auth.load_snapshot([acl_binding(ResourceType.TOPIC, "ok", "User:bob", AclOperation.WRITE)])
    trail.start()
    try:
        auth.authorize(context("A"), [topic("ok"), topic("nope")])
        auth.authorize(context("A"), [topic("quiet", log_if_denied=False)])  # KIP-430 style
        auth.authorized_operations(context("A"), ResourcePattern(ResourceType.TOPIC, "x"))
        auth.authorize(context("A", api_key=30), [topic("acl-admin")])  # CreateAcls
        auth.authorize(context("B"), [topic("nope")])
    finally:
        await trail.close()
    a, b = trail.counters["A"], trail.counters["B"]
    assert (a.decisions, a.denied, a.would_deny, a.dropped) == (3, 2, 1, 0)
    assert (b.decisions, b.denied, b.would_deny) == (1, 1, 0)
    got = {(r["listener"], r["resource_name"]): r for r in records(tmp_path)}
    assert set(got) == {("A", "ok"), ("A", "nope"), ("A", "acl-admin"), ("B", "nope")}
    assert (got["A", "nope"]["mode"], got["A", "nope"]["would_deny"]) == ("log_only", True)
    assert (got["A", "acl-admin"]["mode"], got["A", "acl-admin"]["would_deny"]) == (
        "enforce",
        False,
    )
    assert (got["B", "nope"]["mode"], got["B", "nope"]["would_deny"]) == ("enforce", False)


async def test_include_unlogged_and_counters_without_files(tmp_path: Path) -> None:
    trail = AuditTrail(
        config(tmp_path, include_unlogged=True, allowed="off", denied="off"), {"A": "log_only"}
    )
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
    auth.load_snapshot([])
    trail.start()
    try:
        auth.authorize(context("A"), [topic("quiet", log_if_denied=False)])
    finally:
        await trail.close()
    # audited (include_unlogged) and denied, but a check Kafka does not log refuses nothing
    counters = trail.counters["A"]
    assert (counters.decisions, counters.denied, counters.would_deny) == (1, 1, 0)
    assert records(tmp_path) == []


async def test_periodic_report_logs_changed_counters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trail = AuditTrail(AuditConfig(), {"A": "log_only"}, report_interval_s=0.05)
    assert trail.active and trail.writer is None  # log_only alone: counters, no files
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
    auth.load_snapshot([])
    caplog.set_level("INFO", logger="kafkaguard.audit")
    trail.start()
    try:
        auth.authorize(context("A"), [topic("nope")])
        for _ in range(100):
            if any("would-deny" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
    finally:
        await trail.close()
    lines = [r.getMessage() for r in caplog.records if "would-deny" in r.getMessage()]
    assert lines[0] == (
        "audit: listener A (log_only): 1 decisions, 1 denied, 1 would-deny, 0 dropped, "
        "0 unlogged, 0 excluded"
    )
    assert lines[-1].endswith("(totals at shutdown)")
