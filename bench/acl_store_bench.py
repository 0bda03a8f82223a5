"""Propagation of ACL changes through the Kafka-topic ACL store (issue 26, docs/acl-store.md).

Usage (from the repository root)::

    .venv/bin/python bench/acl_store_bench.py                 # 3 brokers, 1,000 changes
    .venv/bin/python bench/acl_store_bench.py --brokers 1 --changes 200   # quicker

Set-up: an Apache Kafka 4.3.1 cluster (``--brokers``, default 3: the topic is created with
replication 3 and ``min.insync.replicas`` 2, writes use ``acks=all``), and "two proxies with
two workers each": four processes, ``A0``, ``A1``, ``B0``, ``B1``, each running what a proxy
worker runs for its ACLs: a ``KafkaTopicAclStore`` feeding a ``StandardAuthorizer``.

``A0`` makes ``--changes`` changes one after another, each as CreateAcls does once the
request is decoded and authorized (``StandardAuthorizer.create_acls``: validation, then the
store's write, answered after ``acks=all``), granting ``User:bench`` READ on a new topic. The
time a change is answered is ``t_answer``. Every other process records, for every change, the
first time ``authorize()`` on its own authorizer returns ALLOWED for that READ (checked in its
snapshot listener, i.e. as soon as the swapped ACLs are in force): ``t_enforced``.
Propagation = ``t_enforced - t_answer`` (one clock: all processes run on this machine), so
3 × ``--changes`` samples; it is negative when another process enforces a change before A0
has its acknowledgement (the record is readable once replicated, before the ack's answer
travels back), so it is also given from the start of the write (``t_enforced - t_start``,
an upper bound); also printed: the write latency (``t_answer`` minus the start of
the call) and how A0 itself sees its writes (read your writes: 0 by construction).

What it does not include: the client's request and response over TCP to the proxy (the same
for every store), and the connection of a client to the other proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from kafkaguard.policy.stores.kafka_topic import KafkaTopicAclStore
from kafkaguard.topic_table import TopicSettings

PRINCIPAL = "User:bench"
CONTEXT = RequestContext(
    listener_name="PLAINTEXT",
    security_protocol=SecurityProtocol.PLAINTEXT,
    principal=KafkaPrincipal.parse(PRINCIPAL),
    client_address=ipaddress.ip_address("127.0.0.1"),
    api_key=0,
    api_version=12,
)


def topic(i: int) -> str:
    return f"bench-{i:05d}"


def worker(
    name: str, bootstrap: str, acl_topic: str, changes: int, ready: Any, go: Any, out: Any
) -> None:
    """One proxy worker's ACL machinery; ``A0`` also writes."""

    async def main() -> None:
        store = KafkaTopicAclStore(
            {"bootstrap.servers": bootstrap}, TopicSettings(acl_topic, write_timeout_ms=10_000)
        )
        authorizer = StandardAuthorizer(AuthorizerConfig(), store)
        seen: dict[int, float] = {}
        pending = set(range(changes))
        complete = asyncio.Event()

        def on_snapshot(_snapshot: Any) -> None:
            now = time.time()
            for i in sorted(pending):
                action = Action(AclOperation.READ, ResourcePattern(ResourceType.TOPIC, topic(i)))
                if authorizer.authorize(CONTEXT, [action])[0].name == "ALLOWED":
                    seen[i] = now
            pending.difference_update(seen)
            if not pending:
                complete.set()

        await asyncio.wait_for(authorizer.start(["PLAINTEXT"])["PLAINTEXT"], 120)
        store.subscribe(on_snapshot)  # after the authorizer's own listener: ACLs in force
        ready.put(name)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        answers: list[tuple[int, float, float]] = []
        if name == "A0":
            for i in range(changes):
                binding = acl_binding(ResourceType.TOPIC, topic(i), PRINCIPAL, AclOperation.READ)
                start = time.time()
                (result,) = await authorizer.create_acls(CONTEXT, [binding])
                assert result.error is None, result.error
                answers.append((i, start, time.time()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(complete.wait(), 60)
        out.put((name, answers, seen))
        await authorizer.close()

    asyncio.run(main())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--changes", type=int, default=1000)
    args = parser.parse_args()
    from tests.support.kafka_broker import start_kafka_cluster

    with tempfile.TemporaryDirectory() as tmp:
        brokers = start_kafka_cluster(Path(tmp), args.brokers)
        try:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            ctx = multiprocessing.get_context("spawn")
            ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
            acl_topic = f"_kafkaguard-acls-bench-{int(time.time())}"
            names = ["A0", "A1", "B0", "B1"]
            procs = [
                ctx.Process(
                    target=worker, args=(n, bootstrap, acl_topic, args.changes, ready, go, out)
                )
                for n in names
            ]
            for p in procs:
                p.start()
                ready.get(timeout=180)  # one at a time: A0 creates the topic
            go.set()
            results = {}
            for _ in procs:
                name, answers, seen = out.get(timeout=600)
                results[name] = (answers, seen)
            for p in procs:
                p.join(30)
        finally:
            for b in brokers:
                b.stop()
    answers = {i: (start, answered) for i, start, answered in results["A0"][0]}
    writes = [(answered - start) * 1000 for start, answered in answers.values()]
    lags: list[float] = []
    from_start: list[float] = []
    missing = 0
    for name in names[1:]:
        seen = results[name][1]
        for i, (start, answered) in answers.items():
            if i in seen:
                lags.append((seen[i] - answered) * 1000)
                from_start.append((seen[i] - start) * 1000)
            else:
                missing += 1
    print(f"brokers {args.brokers}, changes {args.changes}, samples {len(lags)}, missing {missing}")
    print(
        f"write (answered after acks=all): p50 {percentile(writes, 0.5):.1f} ms, "
        f"p99 {percentile(writes, 0.99):.1f} ms"
    )
    print(
        f"propagation to A1, B0, B1 (enforced - answered): p50 {percentile(lags, 0.5):.1f} ms, "
        f"p99 {percentile(lags, 0.99):.1f} ms, max {max(lags):.1f} ms, "
        f"mean {statistics.fmean(lags):.1f} ms"
    )
    print(
        f"propagation to A1, B0, B1 (enforced - write started): p50 "
        f"{percentile(from_start, 0.5):.1f} ms, p99 {percentile(from_start, 0.99):.1f} ms, "
        f"max {max(from_start):.1f} ms"
    )
    return 0 if missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
