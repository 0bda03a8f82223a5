"""Group principals benchmark (issue 37, item 5): ``authorize()`` with groups against without.

Run: ``.venv/bin/python bench/groups_bench.py [--acls 1000 10000] [--samples 20000]``. Prints
one table per ACL count; figures go to bench/RESULTS.md under "## Issue 37: groups".

Workload (per ACL count, in one process, the StandardAuthorizer as the proxy runs it, audit
line off): ACLs on 5,000 users and 200 groups, half each, 60% LITERAL topic names, 30%
PREFIXED, 10% on the LITERAL ``*``, 1 DENY in 20. User ``u`` is in the groups ``(7u + j) mod
200`` for ``j < k``, so its 2 groups are among its 10. Each request is drawn from an ACL: a
user's ACL asked by that user, a group's ACL by a user whose first two groups include it,
for a name the ACL covers. The same requests (principal, action, host) are asked with ``k``
= 0, 2 and 10 groups per connection: only ``RequestContext.groups`` differs, so the columns
compare what the groups cost, not other work (with 0 groups a group's ACL does not apply).

Variants: *plain* (every ACL on host ``*``); *index.match alone* (the same requests asked of
``AclIndex.match`` with the group keys made beforehand: what ``authorize`` adds per group is
the difference); *host ACLs* (1 ACL in 10 on the clients' own host, so the index keeps
per-host views and each request looks its principal and every group up there); *cold
subjects* (the subject-view cache emptied before each block of 500, so a subject's first
request in a block merges its principals' views, as after an ACL change).

The machine this runs on is shared: the ``k`` columns are measured in interleaved blocks of
500 calls (0, 2, 10, 0, 2, 10, ...) so that a load change meanwhile hits each alike, and the
medians of all calls are reported. Compare within one run; the absolute values are the
machine's at that moment.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafkaguard.policy.acl_index import AclIndex
from kafkaguard.policy.authorizer import Action, RequestContext
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import AclBinding, KafkaPrincipal, ResourcePattern
from kafkaguard.policy.standard import StandardAuthorizer
from tests.support.policy import ALLOW, DENY, LITERAL, PREFIXED, TOPIC, Op, acl, ctx

OPS = (Op.READ, Op.WRITE, Op.DESCRIBE, Op.CREATE)
USERS = 5000
GROUPS = 200
GROUP_COUNTS = (0, 2, 10)
BLOCK = 500
CLIENT = "10.1.2.3"


def member_groups(user: int, k: int) -> tuple[str, ...]:
    return tuple(f"g{(7 * user + j) % GROUPS}" for j in range(k))


def make_acls(n: int, rng: random.Random, host_share: int) -> list[AclBinding]:
    """``n`` ACLs, half on users and half on groups; 1 in ``host_share`` on the client's own
    host (0: none)."""
    out = []
    for i in range(n):
        principal = f"User:u{rng.randrange(USERS)}" if i % 2 else f"Group:g{rng.randrange(GROUPS)}"
        op = rng.choice(OPS)
        perm = DENY if i % 20 == 0 else ALLOW
        host = CLIENT if host_share and i % host_share == 1 else "*"
        kind = i % 10
        if kind < 6:
            name, pattern = f"topic-{i}", LITERAL
        elif kind < 9:
            name, pattern = f"team-{i:08d}-{'x' * 24}"[: 4 + i % 21], PREFIXED
        else:
            name, pattern = "*", LITERAL
        out.append(acl(principal, op, perm, name, TOPIC, pattern, host))
    return out


def requests(
    acls: list[AclBinding], rng: random.Random, count: int
) -> list[tuple[int, KafkaPrincipal, Action]]:
    """(user number, principal, action) drawn from the ACLs (module docstring)."""
    out = []
    for _ in range(count):
        binding = rng.choice(acls)
        kind, _, who = binding.entry.principal.partition(":")
        if kind == "User":
            user = int(who[1:])
        else:  # a user whose first two groups include this one: 7u + j = g (mod 200)
            group = int(who[1:])
            user = ((group - rng.randrange(2)) * 143 % GROUPS) + GROUPS * rng.randrange(25)
        if binding.pattern.pattern_type is PREFIXED:
            name = binding.pattern.name + "-orders-eu-west-1"
        elif binding.pattern.name == "*":
            name = f"unrelated-topic-{rng.randrange(10**6)}"
        else:
            name = binding.pattern.name
        action = Action(binding.entry.operation, ResourcePattern(TOPIC, name))
        out.append((user, KafkaPrincipal("User", f"u{user}"), action))
    return out


def context(principal: KafkaPrincipal, groups: tuple[str, ...]) -> RequestContext:
    return ctx(principal.text, CLIENT, api_key=0, groups=groups)


Call = tuple[Callable[..., object], dict[int, list[tuple[object, ...]]]]
"""A function and, per group count, the argument tuples of its calls."""


def authorize_calls(
    authorizer: StandardAuthorizer, asks: list[tuple[int, KafkaPrincipal, Action]]
) -> Call:
    return authorizer.authorize, {
        k: [(context(p, member_groups(u, k)), [a]) for u, p, a in asks] for k in GROUP_COUNTS
    }


def match_calls(index: AclIndex, asks: list[tuple[int, KafkaPrincipal, Action]]) -> Call:
    """``AclIndex.match`` alone, with the group keys made beforehand: what ``authorize`` adds
    to it is the difference."""
    address = ipaddress.ip_address(CLIENT)
    return index.match, {
        k: [
            (
                p.text,
                CLIENT,
                address,
                a.operation,
                TOPIC,
                a.resource_pattern.name,
                False,
                tuple(f"Group:{g}" for g in member_groups(u, k)),
            )
            for u, p, a in asks
        ]
        for k in GROUP_COUNTS
    }


def measure(call: Call, before_block: Callable[[], None] | None = None) -> dict[int, list[int]]:
    """ns per call for each group count, in interleaved blocks."""
    function, streams = call
    for k in GROUP_COUNTS:  # warm-up: every subject's view made once
        for args in streams[k]:
            function(*args)
    timings: dict[int, list[int]] = {k: [] for k in GROUP_COUNTS}
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for start in range(0, len(streams[0]), BLOCK):
            for k in GROUP_COUNTS:
                if before_block is not None:
                    before_block()
                out = timings[k]
                for args in streams[k][start : start + BLOCK]:
                    t0 = clock()
                    function(*args)
                    out.append(clock() - t0)
    finally:
        gc.enable()
    return timings


def allowed_share(
    authorizer: StandardAuthorizer, asks: list[tuple[int, KafkaPrincipal, Action]], k: int
) -> float:
    allowed = sum(
        authorizer.authorize(context(p, member_groups(u, k)), [a])[0].name == "ALLOWED"
        for u, p, a in asks
    )
    return allowed / len(asks)


def run(n: int, samples: int, seed: int) -> None:
    print(f"\n{n:,} ACLs, {samples:,} requests per column")
    print(f"{'variant':<24}" + "".join(f"{f'{k} groups µs':>15}" for k in GROUP_COUNTS), end="")
    print(f"{'10 vs 0':>9}   allowed (0 / 2 / 10 groups)")
    variants = (
        ("plain", 0),
        ("index.match alone", 0),
        ("host ACLs", 10),
        ("cold subjects", 0),
    )
    for variant, host_share in variants:
        rng = random.Random(seed)
        acls = make_acls(n, rng, host_share)
        authorizer = StandardAuthorizer(AuthorizerConfig())
        authorizer.load_snapshot(acls)
        index: AclIndex = authorizer._index
        asks = requests(acls, rng, samples)
        reset = None
        if variant == "cold subjects":  # every subject's merged view made again, per block
            topics = index._types[TOPIC]

            def reset(topics: Any = topics) -> None:
                topics.subjects = {}

        call = match_calls(index, asks) if variant == "index.match alone" else None
        timings = measure(call or authorize_calls(authorizer, asks), reset)
        medians = {k: statistics.median(t) / 1000 for k, t in timings.items()}
        shares = " / ".join(f"{allowed_share(authorizer, asks, k):.0%}" for k in GROUP_COUNTS)
        cells = "".join(f"{medians[k]:>15.2f}" for k in GROUP_COUNTS)
        print(f"{variant:<24}{cells}{medians[10] / medians[0]:>8.2f}x   {shares}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=37)
    args = parser.parse_args(argv)
    for n in args.acls:
        run(n, args.samples, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
