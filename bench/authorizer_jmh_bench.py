"""kafkaguard's authorizer against Kafka 4.3.1's ``StandardAuthorizer`` on Kafka's JMH dataset.

Run: ``.venv/bin/python bench/authorizer_jmh_bench.py [--sizes 100,10000,50000,200000]``
(needs Java >= 17 and the Kafka jars the tests resolve: ``tests/support/kafka_broker.py``).
Figures go to bench/RESULTS.md under "## Authorizer against Kafka's own". Not a timed test.

The dataset is Kafka's ``AuthorizerBenchmark``'s (``tests/support/jmh_acls.py``): per size,
resources × ``--acls`` principals' READ ACLs with ``--deny`` percent of DENY, the PREFIXED
host-specific ACLs and the ``*`` ACLs from ``resources / 10`` hosts. The same ACLs are loaded
into kafkaguard's ``StandardAuthorizer`` (``load_snapshot`` of the list: the set of bindings
and the index) and into Kafka's in one JVM (``tests/support/authorizer_referee.py``:
``loadSnapshot`` of a ``Map<Uuid, StandardAcl>``). Every size first compares the decisions of
both on ``--queries`` random queries plus ``--by-type-queries`` by-type ones
(``decision_queries``) and stops at the first difference. Then ``--rounds`` interleaved
rounds (the side that goes first alternates) time, per side: the load, ``authorize()`` of
the benchmark's query (``testAuthorizer``) and ``authorizeByResourceType`` of its query
(``testAuthorizeByResourceType``), each a loop of calls sized to ``--batch-seconds``. A round
with a cold JVM is run first and not recorded (``--warmup-rounds``). Each figure is the median
of the rounds; the ratio is kafkaguard / Kafka.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafkaguard.policy.model import AclBinding
from kafkaguard.policy.standard import StandardAuthorizer
from tests.support.authorizer_referee import KafkaAuthorizer, Query
from tests.support.jmh_acls import (
    AUTHORIZE_QUERY,
    BY_TYPE_QUERY,
    decision_queries,
    jmh_acls,
)

Figures = dict[str, float]


def python_calls(authorizer: StandardAuthorizer, query: Query) -> Callable[[int], float]:
    """A loop of ``calls`` kafkaguard calls of the query; returns its seconds."""
    context = query.context()
    actions = query.actions()
    clock = time.perf_counter

    if query.kind == "by_type":
        by_type = authorizer.authorize_by_resource_type
        op, rtype = query.operation, query.resource_type

        def loop(calls: int) -> float:
            start = clock()
            for _ in range(calls):
                by_type(context, op, rtype)
            return clock() - start

        return loop
    authorize = authorizer.authorize

    def loop_authorize(calls: int) -> float:
        start = clock()
        for _ in range(calls):
            authorize(context, actions)
        return clock() - start

    return loop_authorize


def per_call(loop: Callable[[int], float], budget: float) -> float:
    """Seconds per call of a loop sized to take about ``budget`` seconds."""
    calls, seconds = 1, loop(1)
    while seconds < budget / 10 and calls < 10_000_000:
        calls *= 10
        seconds = loop(calls)
    calls = max(calls, int(calls * budget / max(seconds, 1e-9)))
    return loop(calls) / calls


def python_load(acls: list[AclBinding]) -> tuple[StandardAuthorizer, float]:
    authorizer = StandardAuthorizer()
    gc.collect()
    start = time.perf_counter()
    authorizer.load_snapshot(acls)
    return authorizer, time.perf_counter() - start


def python_round(acls: list[AclBinding], budget: float) -> Figures:
    authorizer, load_s = python_load(acls)
    return {
        "load_s": load_s,
        "authorize_us": per_call(python_calls(authorizer, AUTHORIZE_QUERY), budget) * 1e6,
        "by_type_us": per_call(python_calls(authorizer, BY_TYPE_QUERY), budget) * 1e6,
    }


def kafka_round(kafka: KafkaAuthorizer, acls: list[AclBinding], budget: float) -> Figures:
    load_s = kafka.load(acls)
    figures = {"load_s": load_s}
    for key, query in (("authorize_us", AUTHORIZE_QUERY), ("by_type_us", BY_TYPE_QUERY)):
        figures[key] = per_call(lambda calls, q=query: kafka.time(q, calls)[0], budget) * 1e6
    return figures


def check_decisions(
    kafka: KafkaAuthorizer, acls: list[AclBinding], size: int, count: int, by_type: int | None
) -> int:
    """Both authorizers' decisions on the same queries; exits at the first difference."""
    authorizer, _ = python_load(acls)
    kafka.load(acls)
    queries = decision_queries(size, count, by_type=by_type)
    ours = [q.allowed_by(authorizer) for q in queries]
    theirs = kafka.decide(queries)
    differ = [(q, a, b) for q, a, b in zip(queries, ours, theirs, strict=True) if a != b]
    if differ:
        for query, a, b in differ[:10]:
            print(f"DIFFERENT: {query}: kafkaguard {a}, Kafka {b}", file=sys.stderr)
        sys.exit(f"{len(differ)} of {len(queries)} decisions differ from Kafka's at {size:,}")
    return len(queries)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,10000,50000,200000", help="resource counts")
    parser.add_argument("--acls", type=int, default=10, help="ACLs (principals) per resource")
    parser.add_argument("--deny", type=float, default=20.0, help="percentage of DENY ACLs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-rounds", type=int, default=1)
    parser.add_argument("--queries", type=int, default=20_000, help="authorize() compared")
    parser.add_argument(
        "--by-type-queries",
        type=int,
        default=30,
        help="authorizeByResourceType queries compared (of 360 combinations; each of Kafka's "
        "lists every ACL of the type: seconds at 2.4M ACLs)",
    )
    parser.add_argument("--batch-seconds", type=float, default=0.5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"Python {sys.version.split()[0]}; AuthorizerBenchmark dataset, {args.acls} ACLs per "
        f"resource, {args.deny:g}% DENY; medians of {args.rounds} interleaved round(s)"
    )
    rows = []
    with KafkaAuthorizer() as kafka:
        for size in sizes:
            acls = jmh_acls(size, args.acls, args.deny)
            checked = check_decisions(kafka, acls, size, args.queries, args.by_type_queries)
            sides: dict[str, list[Figures]] = {"kafkaguard": [], "kafka": []}
            for round_no in range(args.warmup_rounds + args.rounds):
                order = ["kafkaguard", "kafka"] if round_no % 2 else ["kafka", "kafkaguard"]
                for side in order:
                    if side == "kafka":
                        figures = kafka_round(kafka, acls, args.batch_seconds)
                    else:
                        figures = python_round(acls, args.batch_seconds)
                    if round_no >= args.warmup_rounds:
                        sides[side].append(figures)
            med = {
                side: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                for side, runs in sides.items()
            }
            rows.append((size, len(acls), checked, med))
            print(f"{size:,} resources: {len(acls):,} ACLs, {checked:,} decisions identical")
            for side, runs in sides.items():
                print(f"  {side}: " + "; ".join(str(r) for r in runs))
    print()
    print(
        "| resources | ACLs | decisions identical | authorize() µs kafkaguard / Kafka (ratio) "
        "| authorizeByResourceType µs (ratio) | load s (ratio) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for size, count, checked, med in rows:
        ours, theirs = med["kafkaguard"], med["kafka"]
        cells = [
            f"{ours[k]:.{d}f} / {theirs[k]:.{d}f} ({ours[k] / theirs[k]:.2f}×)"
            for k, d in (("authorize_us", 2), ("by_type_us", 2), ("load_s", 3))
        ]
        print(f"| {size:,} | {count:,} | {checked:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
