"""Authorizer benchmark: authorize() latency vs ACL count, and load time (issue 3).

Run: ``.venv/bin/python bench/authorizer_bench.py [--max 1000000]``. Prints a table; figures go
to bench/RESULTS.md under "## Authorizer". Not a timed test: numbers depend on the machine.

Workload: ACLs are 60% LITERAL topic names, 30% PREFIXED (prefix lengths 4..24), 10% on the
LITERAL '*' wildcard, spread over 5,000 principals, with 1 DENY in 20. Each sample is one
``authorize(ctx, [action])`` call for a random (principal, topic) of which about a third hit a
literal ACL, a third a prefix, and the rest nothing but the wildcard/default path.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafkaguard.policy.acl_index import AclIndex
from kafkaguard.policy.authorizer import Action, RequestContext, SecurityProtocol
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.acl_file_format import format_acl_text, parse_acl_text

OPS = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]


def make_acls(n: int, rng: random.Random) -> list[AclBinding]:
    out = []
    for i in range(n):
        principal = f"User:u{rng.randrange(5000)}"
        op = rng.choice(OPS)
        perm = AclPermissionType.DENY if i % 20 == 0 else AclPermissionType.ALLOW
        kind = i % 10
        if kind < 6:
            out.append(acl_binding(ResourceType.TOPIC, f"topic-{i}", principal, op, perm))
        elif kind < 9:
            length = 4 + i % 21
            name = f"team-{i:08d}-{'x' * 24}"[:length]
            out.append(
                acl_binding(
                    ResourceType.TOPIC, name, principal, op, perm, pattern_type=PatternType.PREFIXED
                )
            )
        else:
            out.append(acl_binding(ResourceType.TOPIC, "*", principal, op, perm))
    return out


def requests(acls: list[AclBinding], rng: random.Random, count: int) -> list[tuple]:
    out = []
    for _ in range(count):
        b = rng.choice(acls)
        principal = KafkaPrincipal.parse(b.entry.principal)
        if b.pattern.pattern_type == PatternType.PREFIXED:
            name = b.pattern.name + "-orders-eu-west-1"
        elif b.pattern.name == "*":
            name = f"unrelated-topic-{rng.randrange(10**6)}"
        else:
            name = b.pattern.name
        ctx = RequestContext(
            listener_name="PLAINTEXT",
            security_protocol=SecurityProtocol.PLAINTEXT,
            principal=principal,
            client_address=ipaddress.ip_address("10.1.2.3"),
            api_key=1,
            api_version=12,
            client_id="bench",
            correlation_id=1,
        )
        action = Action(rng.choice(OPS), ResourcePattern(ResourceType.TOPIC, name))
        out.append((ctx, [action]))
    return out


def measure(n: int, samples: int, rng: random.Random) -> dict[str, float]:
    acls = make_acls(n, rng)
    gc.collect()
    t0 = time.perf_counter()
    index = AclIndex.build(acls)
    build_s = time.perf_counter() - t0
    auth = StandardAuthorizer(AuthorizerConfig())
    auth._index = index
    auth._ready = True
    reqs = requests(acls, rng, samples)
    for ctx, actions in reqs[:2000]:  # warm-up
        auth.authorize(ctx, actions)
    timings = []
    clock = time.perf_counter_ns
    for ctx, actions in reqs:
        start = clock()
        auth.authorize(ctx, actions)
        timings.append(clock() - start)
    timings.sort()
    t0 = time.perf_counter()
    index.updated([acl_binding(ResourceType.TOPIC, "new", "User:x", AclOperation.READ)], [])
    update_ms = (time.perf_counter() - t0) * 1000
    return {
        "acls": n,
        "build_s": build_s,
        "p50_us": timings[len(timings) // 2] / 1000,
        "p99_us": timings[int(len(timings) * 0.99)] / 1000,
        "mean_us": statistics.fmean(timings) / 1000,
        "update_ms": update_ms,
    }


def file_load(n: int, rng: random.Random) -> tuple[float, float]:
    acls = make_acls(n, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "acls.yaml"
        path.write_text(format_acl_text(acls))
        t0 = time.perf_counter()
        parsed = parse_acl_text(path.read_text(), str(path))
        parse_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        AclIndex.build(parsed)
        return parse_s, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per size; each figure is the median"
    )
    args = parser.parse_args()
    rng = random.Random(42)
    sizes = [n for n in (1_000, 10_000, 100_000, 300_000, 1_000_000) if n <= args.max]
    print(
        f"Python {sys.version.split()[0]}; one action per authorize() call, {args.samples} samples"
        f", median of {args.repeat} run(s) per size"
    )
    print(
        "| ACLs | index build (s) | authorize p50 (µs) | p99 (µs) | mean (µs) | 1-ACL update (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        runs = [measure(n, args.samples, rng) for _ in range(args.repeat)]
        r = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"| {n:,} | {r['build_s']:.2f} | {r['p50_us']:.2f} | {r['p99_us']:.2f} | "
            f"{r['mean_us']:.2f} | {r['update_ms']:.1f} |"
        )
    loads = sorted((file_load(100_000, rng) for _ in range(args.repeat)), key=sum)
    parse_s, build_s = loads[len(loads) // 2]
    print()
    print(
        f"FileAclStore load of 100,000 ACLs: YAML parse+validate {parse_s:.2f} s, "
        f"index build {build_s:.2f} s, total {parse_s + build_s:.2f} s"
    )


if __name__ == "__main__":
    main()
