"""Audit-trail cost: proxy throughput with ``audit.enabled`` false vs true (default settings).

Usage (from the repository root, with the test extras installed)::

    .venv/bin/python bench/audit_bench.py             # 6 rounds (~4 min)
    .venv/bin/python bench/audit_bench.py --quick     # 2 rounds, smaller runs (~1 min)
    .venv/bin/python bench/audit_bench.py --sinks --workloads produce-50  # file vs topic

One Tansu broker; one kafkaguard process at a time (``python -m kafkaguard run``, uvloop), so
the two configurations never compete for the 2 cores: every round starts the ``off`` proxy,
runs every workload, stops it, then the same with the ``on`` proxy (order alternating per
round). Both use the same least-privilege ACLs as ``proxy_bench.py --authz acls``; the ``on``
proxy adds ``audit: {enabled: true, dir: <tmp>}`` and nothing else, i.e. allowed decisions
aggregated per 60 s window, denials written one line each.

Workloads (confluent-kafka, from :mod:`proxy_bench`): ``produce-1k``, ``produce-100``,
``consume``, ``latency`` (allowed decisions: aggregated), plus ``denied-rtt``: raw-socket
Metadata v1 round trips naming one topic the client may not DESCRIBE, so every request is
a logged denial written as its own JSON line (the worst case for the writer). Medians over
rounds, on/off ratios, and the proxy process's CPU share are printed, with the number of
audit lines and dropped events of the ``on`` runs.

``--sinks`` (issue 16) compares the audit sinks instead: ``file`` (``audit.sink: file``) vs
``kafka`` (``audit.sink: kafka``: the proxy produces its records to ``_kafkaguard-audit`` on
the same Tansu), both with audit on, ``--audit-allowed`` choosing the volume of allowed
decisions (``individual``: one record per Produce request). Workload ``produce-50``: 50
confluent-kafka producers through the proxy at once (produce-1k's count of 100-byte
records, one record per request and one request in flight per producer, one process
driving them round-robin). Each run's
``kafkaguard_audit_events_total`` is scraped before the proxy stops, so drops and losses
are printed with the throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import proxy_bench as pb

from kafkaguard.tansu import free_port

TANSU_NODE_ID = 111
"""The embedded Tansu's node id: its proxy port is base + 111, so base is chosen from a free
port minus 111."""


def start_proxy(
    env: pb.Env,
    upstream: str,
    name: str,
    audit_dir: Path | None,
    sink: str = "file",
    allowed: str = "aggregate",
) -> pb.Side:
    """A kafkaguard process with the bench ACLs; ``audit_dir``: audit on, to ``sink``, and
    an admin listener (``/metrics``) on the port after the bootstrap port's base."""
    port = free_port()
    tmp = Path(env.tmp.name)
    (tmp / "acls.yaml").write_text(pb.ACLS)
    audit = (
        f"audit:\n  enabled: true\n  dir: {audit_dir}\n  sink: {sink}\n  allowed: {allowed}\n"
        f"admin:\n  port: {free_port()}\n"
        if audit_dir
        else ""
    )
    config = tmp / f"{name}.yaml"
    config.write_text(
        "listeners:\n  - name: PLAINTEXT\n    bind_host: 127.0.0.1\n"
        f"    port: {port}\n    broker_ports: {{base: {free_port() - TANSU_NODE_ID}}}\n"
        f"upstream:\n  bootstrap_servers: ['{upstream}']\n"
        "logging:\n  level: WARNING\n" + pb.AUTHZ_ACLS + audit
    )
    pid = env.spawn([sys.executable, "-m", "kafkaguard", "run", "--config", str(config)])
    pb.wait_port(port)
    return pb.Side(name, f"127.0.0.1:{port}", upstream, pid=pid)


def stop_proxy(env: pb.Env, side: pb.Side) -> None:
    proc = next(p for p in env.processes if p.pid == side.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    env.processes.remove(proc)


def denied_rtt(side: pb.Side, count: int) -> list[float]:
    """Metadata v1 for one topic the client may not DESCRIBE: one audited denial each."""
    host, port = side.bootstrap.rsplit(":", 1)
    topic = b"secret-audit-bench"
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        timer = pb.Timer(side)
        for corr in range(count + 10):
            client = b"bench"
            body = struct.pack(">hhih", 3, 1, corr, len(client)) + client
            body += struct.pack(">ih", 1, len(topic)) + topic
            start = time.perf_counter()
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", pb._recv(sock, 4))[0]
            pb._recv(sock, size)
            if corr >= 10:
                samples.append((time.perf_counter() - start) * 1000)
        timer.stop()
    return samples


def produce_50(side: pb.Side, count: int, producers: int = 50) -> float:
    """Messages per second of ``producers`` producers at once, ``count`` 100-byte records in
    all (connections and metadata set up, one record each, before the clock starts)."""
    topic = f"bench-p50-{os.urandom(4).hex()}"
    pb.create_topic(side.admin_bootstrap, topic)
    try:
        # One record per Produce request, one request in flight per producer: the proxy's
        # work per message is fixed (one request, one audited WRITE decision), so msg/s does
        # not drift with the batching a slower or faster side would otherwise get.
        one = {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1}
        clients = [pb.producer(side.bootstrap, **one) for _ in range(producers)]
        for client in clients:
            client.produce(topic, b"w")
        for client in clients:
            if client.flush(30) != 0:
                raise RuntimeError(f"{side.name}: warm-up message not delivered")
        payload = os.urandom(100)
        timer = pb.Timer(side)
        for index in range(count):
            client = clients[index % producers]
            while True:
                try:
                    client.produce(topic, payload)
                    break
                except BufferError:
                    client.poll(0.001)
        for client in clients:
            if client.flush(120) != 0:
                raise RuntimeError(f"{side.name}: messages left undelivered")
        return count / timer.stop()
    finally:
        pb.delete_topic(side.admin_bootstrap, topic)


def audit_metrics(config: Path) -> str:
    """``kafkaguard_audit_events_total`` samples of the proxy whose config is ``config``."""
    import re
    import urllib.request

    port = re.search(r"admin:\n  port: (\d+)", config.read_text())
    if port is None:
        return ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=10) as r:
        text = r.read().decode()
    return " ".join(
        line.split("{", 1)[1].replace('"', "").replace("} ", "=")
        for line in text.splitlines()
        if line.startswith("kafkaguard_audit_events_total{")
    )


def cpu_per_item(value: float | list[float]) -> float:
    """Proxy CPU µs per message (throughput runs) or per request (latency runs) of the last
    run: unlike wall-clock throughput, hardly moved by other processes on the machine."""
    share = pb.Timer.last_cpu_share
    if isinstance(value, float):
        return share / value * 1e6
    return share * sum(value) / 1000 / len(value) * 1e6


def audit_totals(directory: Path) -> tuple[int, int]:
    """(lines, decisions they stand for) in the finished files under ``directory``."""
    lines = decisions = 0
    for path in directory.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            lines += 1
            decisions += int(line.split('"count":', 1)[1].split(",", 1)[0])
    return lines, decisions


WORKLOADS = ("produce-1k", "produce-100", "consume", "latency", "denied-rtt", "produce-50")
DEFAULT_WORKLOADS = WORKLOADS[:-1]


def micro(calls: int = 200_000, batch: int = 20_000, repeat: int = 3) -> None:
    """In-process cost of the decision hook, without network noise.

    ``authorize()`` of one action, no listener vs the audit trail at defaults (writer thread
    running, files in a tmp dir). Calls run in batches; between batches the loop waits until
    the writer has emptied the queue. Reported: process CPU per call (event loop and writer
    thread together: they share one GIL, so this is what a decision costs the proxy), best of
    ``repeat`` runs — process CPU time, unlike wall time, is not inflated by other processes.
    """
    import asyncio
    import ipaddress
    import tempfile

    from kafkaguard.audit import AuditTrail
    from kafkaguard.audit.config import AuditConfig
    from kafkaguard.policy.authorizer import Action, RequestContext, SecurityProtocol
    from kafkaguard.policy.config import AuthorizerConfig
    from kafkaguard.policy.model import (
        AclOperation,
        KafkaPrincipal,
        PatternType,
        ResourcePattern,
        ResourceType,
        acl_binding,
    )
    from kafkaguard.policy.standard import StandardAuthorizer

    context = RequestContext(
        listener_name="PLAINTEXT",
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal=KafkaPrincipal.ANONYMOUS,
        client_address=ipaddress.ip_address("127.0.0.1"),
        api_key=0,
        api_version=9,
        client_id="bench",
        correlation_id=1,
    )
    acl = acl_binding(
        ResourceType.TOPIC, "bench-", "User:ANONYMOUS", AclOperation.ALL,
        pattern_type=PatternType.PREFIXED,
    )  # fmt: skip
    allowed = [Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "bench-p-1"))]
    denied = [Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "secret"))]

    async def measure() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            trail = AuditTrail(AuditConfig(enabled=True, dir=Path(tmp)), {"PLAINTEXT": "enforce"})
            assert trail.writer is not None
            plain = StandardAuthorizer(AuthorizerConfig())
            hooked = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
            for auth in (plain, hooked):
                auth.load_snapshot([acl])
            trail.start()
            rows = (
                ("allowed, no audit", plain, allowed),
                ("allowed, audit on (aggregated)", hooked, allowed),
                ("denied, no audit", plain, denied),
                ("denied, audit on (one line each)", hooked, denied),
            )
            best: dict[str, float] = {}
            for _ in range(repeat):
                for label, auth, actions in rows:
                    cpu = time.process_time()
                    for _ in range(calls // batch):
                        for _ in range(batch):
                            auth.authorize(context, actions)
                        for _ in range(1000):  # until the writer has caught up (≤ 10 s)
                            if not trail.writer.pending:
                                break
                            await asyncio.sleep(0.01)
                    await asyncio.sleep(0.5)  # the aggregation/flush tick
                    per_call = (time.process_time() - cpu) / calls * 1e6
                    best[label] = min(best.get(label, per_call), per_call)
            for label, _, _ in rows:
                print(f"{label:<34} {best[label]:6.2f} µs process CPU per decision")
            await trail.close()
            print(f"audit lines written: {trail.writer.records:,}, dropped: "
                  f"{trail.counters['PLAINTEXT'].dropped}")  # fmt: skip

    asyncio.run(measure())


def run(args: argparse.Namespace) -> int:
    plan = pb.PLANS["quick" if args.quick else "full"]
    rounds = args.rounds or (2 if args.quick else 6)
    workloads = args.workloads.split(",") if args.workloads else list(DEFAULT_WORKLOADS)
    names = ("file", "kafka") if args.sinks else ("off", "on")
    env = pb.Env()
    began = time.monotonic()
    results: dict[tuple[str, str], list[float | list[float]]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    audit_root = Path(env.tmp.name) / "audit"
    try:
        tansu = env.start_broker()
        upstream = str(tansu.address)
        prefill = pb.Side("direct", upstream, upstream)
        if "consume" in workloads:
            pb.fill_topic(prefill, plan.consume, 1024)
        jobs: dict[str, Callable[[pb.Side], float | list[float]]] = {
            "produce-1k": lambda s: pb.produce_run(s, 1024, plan.produce_1k),
            "produce-100": lambda s: pb.produce_run(s, 100, plan.produce_100),
            "consume": lambda s: pb.consume_run(s, plan.consume),
            "latency": lambda s: pb.latency_run(s, plan.latency),
            "denied-rtt": lambda s: denied_rtt(s, plan.latency * 4),
            "produce-50": lambda s: produce_50(s, plan.produce_1k),
        }
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                audit_dir = audit_root / f"round-{r}-{name}" if name != "off" else None
                sink = name if args.sinks else "file"
                side = start_proxy(env, upstream, name, audit_dir, sink, args.audit_allowed)
                side.consume_topic = prefill.consume_topic
                try:
                    for workload in workloads:
                        value = jobs[workload](side)
                        results.setdefault((workload, name), []).append(value)
                        cpu.setdefault((workload, name), []).append(cpu_per_item(value))
                        shown = (
                            f"{value:,.0f} msg/s"
                            if isinstance(value, float)
                            else f"p50 {pb.percentile(value, 0.5):.3f} ms"
                        )
                        shown += f"  ({cpu[(workload, name)][-1]:.1f} µs proxy CPU each)"
                        print(f"round {r + 1}/{rounds} {workload:<12} audit {name:<5} {shown}")
                    if audit_dir is not None:
                        config = Path(env.tmp.name) / f"{name}.yaml"
                        print(f"round {r + 1}: {name} audit events: {audit_metrics(config)}")
                finally:
                    stop_proxy(env, side)
                if audit_dir is not None and name != "kafka":
                    lines, decisions = audit_totals(audit_dir)
                    print(f"round {r + 1}: {lines:,} audit lines for {decisions:,} decisions")
        print()
        report(results, cpu, workloads, rounds, names)
        print(f"\nwall time {time.monotonic() - began:.0f} s")
    finally:
        env.close()
    return 0


def report(
    results: dict[tuple[str, str], list[float | list[float]]],
    cpu: dict[tuple[str, str], list[float]],
    workloads: list[str],
    rounds: int,
    names: tuple[str, str] = ("off", "on"),
) -> None:
    a, b = names
    ratio = f"{b}/{a}"
    print(f"medians over {rounds} rounds")
    print(f"{'workload':<22}{'audit ' + a:>12}{'audit ' + b:>12}{ratio:>9}   proxy CPU µs per item")
    print(f"{'':<55}{a:>9}{b:>8}{ratio:>8}")
    for workload in workloads:
        c = {n: statistics.median(cpu[(workload, n)]) for n in names}
        tail = f"{c[a]:>9.1f}{c[b]:>8.1f}{c[b] / c[a]:>7.3f}x"
        if workload in ("latency", "denied-rtt"):
            for q, label in ((0.5, "p50 ms"), (0.99, "p99 ms")):
                v = {
                    n: statistics.median(pb.percentile(x, q) for x in results[(workload, n)])  # type: ignore[arg-type]
                    for n in names
                }
                line = f"{workload + ' ' + label:<22}{v[a]:>12.3f}{v[b]:>12.3f}"
                print(f"{line}{v[b] - v[a]:>+7.3f}ms{tail if q == 0.5 else ''}")
        else:
            v = {n: statistics.median(results[(workload, n)]) for n in names}  # type: ignore[arg-type]
            line = f"{workload + ' msg/s':<22}{v[a]:>12,.0f}{v[b]:>12,.0f}"
            print(f"{line}{v[b] / v[a]:>8.3f}x{tail}")


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="rounds (default 6, quick 2)")
    parser.add_argument("--quick", action="store_true", help="smaller runs (~1 min)")
    parser.add_argument("--workloads", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    parser.add_argument("--micro", action="store_true", help="in-process hook cost only")
    parser.add_argument(
        "--sinks", action="store_true", help="compare audit.sink file vs kafka (issue 16)"
    )
    parser.add_argument(
        "--audit-allowed",
        default="aggregate",
        choices=("aggregate", "individual"),
        help="audit.allowed of the proxies with audit on (default: aggregate, the default)",
    )
    args = parser.parse_args(argv)
    if args.micro:
        micro()
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
