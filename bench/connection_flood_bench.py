"""Connection flood: can one address lock everybody else out of a listener?

Usage (from the repository root, with the test extras installed)::

    .venv/bin/python bench/connection_flood_bench.py            # ~1 min
    .venv/bin/python bench/connection_flood_bench.py --flood 2000
    .venv/bin/python bench/connection_flood_bench.py --idle 10000  # memory per idle connection
    .venv/bin/python bench/connection_flood_bench.py --idle 10000 --kafkaguard-path /tmp/kg-old

Starts Tansu and kafkaguard (``python -m kafkaguard run``, its own process) twice, once per
configuration, both with ``max_connections: 500``:

* ``unlimited`` — no per-address limit and Kafka's default idle time (what main had);
* ``hardened`` — ``max_connections_per_ip: 100`` and ``connections_max_idle_ms: 3000``.

For each: a control client on 127.0.0.1 connects, sends one Metadata v1 and reads the answer,
``--probes`` times (quiet). Then an attacker on 127.0.0.2 opens ``--flood`` TCP connections
and sends nothing; the control client probes again while they are held, and once more after
the idle time has passed. Printed: probes answered and their connect-to-answer time (median),
attacker connections the proxy still holds open, the proxy's RSS, and how many lines it
logged. Loopback only; everything
started is stopped.

``--idle N``: what an idle client connection costs the proxy's memory. Per kind, a fresh proxy
process (Tansu upstream, the default limits but ``max_connections`` and
``authentication_timeout_ms``, raised to hold them all) is sent one Metadata v1,
its RSS read (``VmRSS``), then ``N`` connections are opened that send nothing, and once the
proxy holds them all (its open file descriptors counted in ``/proc``) and has been quiet for a
second, its RSS is read again: (after - before) / N is the figure. Kinds:

* ``plain`` — PLAINTEXT: each connection also costs its broker connection, opened at once (two
  file descriptors in the proxy, so at most (``RLIMIT_NOFILE`` - 64) / 2 of them: the count
  is lowered to that, and printed);
* ``sasl`` — SASL_PLAINTEXT: no broker connection before the client authenticates.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_bench import Env, _recv, wait_port

from kafkaguard.tansu import free_base, free_port

ATTACKER = "127.0.0.2"
CONTROL = "127.0.0.1"
CONFIGS = {
    "unlimited": "limits:\n  max_connections: 500\n",
    "hardened": (
        "limits:\n  max_connections: 500\n  max_connections_per_ip: 100\n"
        "  connections_max_idle_ms: 3000\n"
    ),
}
IDLE_WAIT_S = 4.5
"""After the flood: longer than the hardened idle time plus one sweep."""


def metadata_probe(port: int, timeout: float = 2.0) -> float | None:
    """Connect from 127.0.0.1, one Metadata v1 round trip; milliseconds, None if refused."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout, (CONTROL, 0)) as sock:
            client = b"flood-probe"
            body = struct.pack(">hhih", 3, 1, 1, len(client)) + client + struct.pack(">i", 0)
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _recv(sock, 4))[0]
            _recv(sock, size)
    except (OSError, ConnectionError):
        return None
    return (time.perf_counter() - start) * 1000


def probes(port: int, count: int) -> tuple[int, float]:
    samples = [metadata_probe(port) for _ in range(count)]
    answered = [s for s in samples if s is not None]
    return len(answered), statistics.median(answered) if answered else float("nan")


def still_open(socks: list[socket.socket]) -> int:
    """Attacker connections the proxy has not closed (no EOF, no reset)."""
    readable, _, _ = select.select(socks, [], [], 0.2) if socks else ([], [], [])
    closed = 0
    for sock in readable:
        try:
            if not sock.recv(1, socket.MSG_PEEK):
                closed += 1
        except OSError:
            closed += 1
    return len(socks) - closed


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_config(name: str, limits: str, flood: int, count: int) -> dict[str, object]:
    env = Env()
    socks: list[socket.socket] = []
    try:
        broker = env.start_broker()
        port = free_port()
        config = Path(env.tmp.name) / f"{name}.yaml"
        config.write_text(
            "listeners:\n  - name: PLAINTEXT\n    bind_host: 127.0.0.1\n"
            f"    port: {port}\n    broker_ports: {{base: {free_base()}}}\n"
            f"upstream:\n  bootstrap_servers: ['{broker.address}']\n"
            "logging:\n  level: WARNING\n"
            'authorizer:\n  super_users: "User:ANONYMOUS"\n' + limits
        )
        log_path = Path(env.tmp.name) / f"{name}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)],
                cwd=env.tmp.name,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                start_new_session=True,
            )
        env.processes.append(proc)
        pid = proc.pid
        wait_port(port)
        quiet = probes(port, count)
        start = time.perf_counter()
        for _ in range(flood):
            sock = socket.socket()
            sock.bind((ATTACKER, 0))
            try:
                sock.connect(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        flood_s = time.perf_counter() - start
        time.sleep(1.0)
        held = still_open(socks)
        during = probes(port, count)
        rss = rss_mb(pid)
        time.sleep(IDLE_WAIT_S)
        held_after_idle = still_open(socks)
        after = probes(port, count)
        return {
            "log_lines": sum(1 for _ in log_path.open("rb")),
            "config": name,
            "quiet": quiet,
            "flood_s": flood_s,
            "held": held,
            "during": during,
            "held_after_idle": held_after_idle,
            "after": after,
            "rss_mb": rss,
        }
    finally:
        for sock in socks:
            sock.close()
        env.close()


IDLE_LISTENERS = {
    "plain": "    security_protocol: PLAINTEXT\n",
    "sasl": (
        "    security_protocol: SASL_PLAINTEXT\n"
        "    sasl:\n      enabled_mechanisms: [PLAIN]\n      credentials_file: users.yaml\n"
    ),
}


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def idle_run(kind: str, count: int, path: str | None) -> tuple[int, float, float]:
    """(connections held, RSS MB before, RSS MB after) of a fresh proxy process (``path``:
    the kafkaguard checkout it runs, default this one)."""
    env = Env()
    socks: list[socket.socket] = []
    try:
        broker = env.start_broker()
        port = free_port()
        directory = Path(env.tmp.name)
        (directory / "users.yaml").write_text("users: {}\n")
        config = directory / f"idle-{kind}.yaml"
        config.write_text(
            f"listeners:\n  - name: {kind.upper()}\n    bind_host: 127.0.0.1\n"
            f"    port: {port}\n    broker_ports: {{base: {free_base()}}}\n"
            + IDLE_LISTENERS[kind]
            + f"upstream:\n  bootstrap_servers: ['{broker.address}']\n"
            "logging:\n  level: WARNING\n"
            'authorizer:\n  super_users: "User:ANONYMOUS"\n'
            f"limits:\n  max_connections: {count + 100}\n"
            # held unauthenticated (sasl) for as long as the run takes
            "  authentication_timeout_ms: 3600000\n"
        )
        variables = dict(os.environ)
        if path is not None:
            variables["PYTHONPATH"] = path + os.pathsep + variables.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)],
            cwd=directory,
            env=variables,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        env.processes.append(proc)
        wait_port(port)
        if kind == "plain":  # the first connection's Metadata: node ports bound, caches warm
            metadata_probe(port)
        time.sleep(1.0)
        base_fds, before = open_fds(proc.pid), rss_mb(proc.pid)
        per_connection = 2 if kind == "plain" else 1
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port), 5.0))
        deadline = time.monotonic() + 60
        while open_fds(proc.pid) < base_fds + per_connection * count:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(1.0)
        held = (open_fds(proc.pid) - base_fds) // per_connection
        return held, before, rss_mb(proc.pid)
    finally:
        for sock in socks:
            sock.close()
        env.close()


def idle(count: int, path: str | None) -> int:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    columns = ("connections", "RSS before", "RSS after", "per connection")
    print(f"{'kind':<6} {columns[0]:>11} {columns[1]:>11} {columns[2]:>10} {columns[3]:>15}")
    for kind in IDLE_LISTENERS:
        wanted = min(count, (limit - 64) // 2) if kind == "plain" else count
        held, before, after = idle_run(kind, wanted, path)
        print(
            f"{kind:<6} {held:>11,} {before:>8.1f} MB {after:>7.1f} MB "
            f"{(after - before) * 1024 * 1024 / max(held, 1) / 1000:>12.2f} kB"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=600, help="silent attacker connections")
    parser.add_argument("--probes", type=int, default=20, help="control probes per phase")
    parser.add_argument(
        "--idle", type=int, metavar="N", help="instead: proxy memory per idle connection, N held"
    )
    parser.add_argument(
        "--kafkaguard-path",
        metavar="DIR",
        help="--idle: the proxy from this checkout (an A/B against an older commit)",
    )
    args = parser.parse_args(argv)
    if args.idle:
        return idle(args.idle, args.kafkaguard_path)
    print(
        f"{'config':<10} {'probes answered (median ms)':>44}   attacker conns held   "
        "RSS MB  log lines\n"
        f"{'':<10} {'quiet':>14} {'flood':>14} {'after idle':>14}   {'flood':>7} {'idle':>7}"
    )
    for name, limits in CONFIGS.items():
        r = run_config(name, limits, args.flood, args.probes)

        def cell(result: object) -> str:
            answered, median = result  # type: ignore[misc]
            return f"{answered}/{args.probes} ({median:.1f})"

        print(
            f"{name:<10} {cell(r['quiet']):>14} {cell(r['during']):>14} {cell(r['after']):>14}"
            f"   {r['held']:>7} {r['held_after_idle']:>7}   {r['rss_mb']:>6.0f} {r['log_lines']:>9}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
