"""Authentication storm: a well-behaved client's round trips while wrong passwords pour in.

Usage (from the repository root)::

    .venv/bin/python bench/auth_storm_bench.py                 # 3 rounds, ~1 min
    .venv/bin/python bench/auth_storm_bench.py --scenarios one-address --rounds 5
    .venv/bin/python bench/auth_storm_bench.py --kafkaguard-path /tmp/kg-old   # A/B a checkout
    .venv/bin/python bench/auth_storm_bench.py --profile-proxy /tmp/storm.prof
    .venv/bin/python bench/auth_storm_bench.py --connection-creation-rate 20  # KIP-612 quota

What runs where (loopback only, everything stopped at the end): an in-memory Tansu broker; the
proxy in its own process (this script with ``--serve-proxy``, uvloop) with one
SASL_PLAINTEXT listener, PLAIN only, its credentials file written by ``kafkaguard users add``
(PBKDF2, the default 100,000 iterations), ``User:alice`` a super user, the default
``failed_authentication_delay_ms`` (100) / ``max_failed_authentication_delay_ms`` (5000) and
``limits``; the attackers in another process (``--attack``); the measured client in this one.

The measured client authenticates once (PLAIN, from 127.0.0.1) and then sends Metadata v1 (no
topics) round trips back to back on that connection: p50/p99 round trip and round trips per
second. Each round measures a quiet phase and a storm phase (order alternating per round);
medians over rounds are printed, with storm/quiet ratios.

The storm: ``--connections`` (16) attacker connections, each as fast as it can: connect,
SaslHandshake, SaslAuthenticate with a wrong PLAIN password, hang up without waiting for the
answer, reconnect (waiting for the delayed answer is what a client that follows Kafka's
``connection.failed.authentication.delay.ms`` does; hanging up is what made the delay free).
Scenarios: ``one-address`` — every attacker connection from 127.0.0.2; ``fresh-addresses`` —
every attempt from a new loopback address (127.2.0.0 upwards), so no per-address window ever
applies and only the bounded authentication executor stands in the way; ``handshake-only`` —
the control: the same connection churn from 127.0.0.2 (connect, SaslHandshake, hang up) with no
SaslAuthenticate at all, i.e. what the storm costs that is not authentication.

Per storm phase the proxy's own counters are read (``--serve-proxy`` dumps them on SIGUSR1):
attempts (checks that began: one whose client hung up before it began is dropped uncounted),
hashes computed, throttled without a hash, refused with the queue full. A proxy from
``--kafkaguard-path`` that lacks them shows ``-``. Tansu's CPU share shows what the storm
costs the broker (nothing since the proxy connects upstream only after authentication).

``--connection-creation-rate N`` sets ``limits.connection_creation_rate`` (KIP-612's per-address
quota, Kafka's IP quota ``connection_creation_rate``): connections over it are held unread and
closed after their throttle time, counted as ``ip-throttled``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("KAFKAGUARD_PATH") or str(REPO))

from proxy_bench import cpu_seconds, wait_port  # noqa: E402 - this directory, as a script

from kafkaguard.protocol import codec  # noqa: E402
from kafkaguard.protocol.codec import ErrorCode  # noqa: E402
from kafkaguard.tansu import TansuBroker, free_port  # noqa: E402

PASSWORD = "alice-secret"
TANSU_NODE_ID = 111
"""The embedded Tansu's node id: ``base`` is chosen so that its proxy port is a free one."""
COUNTERS = ("attempts", "successes", "failures", "throttled", "refused_queue_full")
IP_THROTTLED = "connection_creation_rate"
"""The listener's counter of connections over their address's connection_creation_rate."""

# --------------------------------------------------------------------------------------------
# Kafka requests over a raw socket


def encode(api_key: int, version: int, correlation_id: int, **values: Any) -> bytes:
    body = codec.make_entity(codec.request_schema(api_key, version), **values)
    return codec.encode_request(body, correlation_id, "bench")


def sasl_plain(password: str) -> tuple[bytes, bytes]:
    """SaslHandshake v1 + SaslAuthenticate v2 request frames (PLAIN, user alice)."""
    return (
        encode(17, 1, 1, mechanism="PLAIN"),
        encode(36, 2, 2, auth_bytes=f"\0alice\0{password}".encode()),
    )


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv(sock, 4))[0]
    return struct.pack(">i", size) + _recv(sock, size)


def authenticated_socket(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handshake, authenticate = sasl_plain(PASSWORD)
    sock.sendall(handshake)
    recv_frame(sock)
    sock.sendall(authenticate)
    answer: Any = codec.decode_response(recv_frame(sock), 36, 2)
    if answer.error_code != ErrorCode.none:
        raise RuntimeError(f"the measured client could not authenticate: {answer}")
    return sock


_METADATA_BODY = struct.pack(">hhih", 3, 1, 7, 5) + b"bench" + struct.pack(">i", 0)
METADATA_V1 = struct.pack(">i", len(_METADATA_BODY)) + _METADATA_BODY
"""Metadata v1, no topics (as ``proxy_bench.py``'s ``metadata-rtt``)."""


def round_trips(sock: socket.socket, seconds: float) -> tuple[list[float], float]:
    """Metadata round trips for ``seconds``: their times (ms) and the rate per second."""
    samples = []
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        sock.sendall(METADATA_V1)
        recv_frame(sock)
        samples.append((time.perf_counter() - now) * 1000)
    return samples, len(samples) / (time.perf_counter() - start)


# --------------------------------------------------------------------------------------------
# The attackers (``--attack``, own process)


def attack(port: int, connections: int, scenario: str) -> None:
    """Until SIGTERM: wrong passwords, hang up, reconnect. Prints what was sent as JSON."""
    handshake, authenticate = sasl_plain("wrong-password")
    sent = errors = 0
    fresh = 2 << 16  # 127.2.0.0 upwards (fresh-addresses)

    def source() -> str:
        nonlocal fresh
        if scenario != "fresh-addresses":
            return "127.0.0.2"
        fresh += 1
        return f"127.{(fresh >> 16) % 254 + 1}.{(fresh >> 8) & 255}.{fresh & 255}"

    async def one() -> None:
        nonlocal sent, errors
        while True:
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=(source(), 0)
                )
                writer.write(handshake)
                await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
                if scenario != "handshake-only":
                    writer.write(authenticate)
                    await writer.drain()
                sent += 1
                writer.close()
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                await asyncio.sleep(0.01)

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        tasks = [asyncio.create_task(one()) for _ in range(connections)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(main())
    print(json.dumps({"sent": sent, "errors": errors}), flush=True)


# --------------------------------------------------------------------------------------------
# The proxy (``--serve-proxy``, own process): kafkaguard run, plus its SASL counters on SIGUSR1


def serve_proxy(config_path: str, counters_path: str) -> None:
    import logging

    from kafkaguard.proxy.app.server import ProxyServer, install_event_loop_policy
    from kafkaguard.proxy.config import load_config

    config = load_config(Path(config_path))
    logging.basicConfig(level=config.log_level)
    install_event_loop_policy()

    def dump(server: ProxyServer) -> None:
        totals: dict[str, int | None] = dict.fromkeys((*COUNTERS, "hashes", IP_THROTTLED), 0)
        for listener in server.listeners:
            ip_throttled = listener.counters.get(IP_THROTTLED)
            totals[IP_THROTTLED] = None if ip_throttled is None else ip_throttled
            sasl = listener.sasl
            if sasl is None:
                continue
            for name in COUNTERS:
                value = getattr(sasl, name, None)
                totals[name] = None if value is None else (totals[name] or 0) + value
            executor = getattr(sasl, "executor", None)
            totals["hashes"] = None if executor is None else executor.started
        tmp = counters_path + ".tmp"
        Path(tmp).write_text(json.dumps(totals))
        os.replace(tmp, counters_path)

    async def main() -> None:
        server = ProxyServer(config)
        await server.start(probe_attempts=10)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, dump, server)
        loop.add_signal_handler(signal.SIGTERM, server.stop)
        loop.add_signal_handler(signal.SIGINT, server.stop)
        dump(server)
        await server.serve_forever_until_stopped()
        await server.close()

    asyncio.run(main())


# --------------------------------------------------------------------------------------------
# Driver


@dataclass
class Env:
    tmp: tempfile.TemporaryDirectory[str] = field(default_factory=tempfile.TemporaryDirectory)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    broker: TansuBroker | None = None

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
        self.processes.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.broker is not None:
            self.broker.stop()
        self.tmp.cleanup()


def start_proxy(
    env: Env,
    upstream: str,
    kafkaguard_path: str | None,
    profile: str | None,
    connection_creation_rate: int | None = None,
) -> tuple[int, int, str]:
    """The proxy process: (pid, bootstrap port, counters file)."""
    directory = Path(env.tmp.name)
    users = directory / "users.yaml"
    subprocess.run(
        [sys.executable, "-m", "kafkaguard", "users", "add", "--file", str(users)]
        + ["--user", "alice", "--mechanism", "PLAIN", "--password-stdin"],
        input=PASSWORD.encode(),
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    port = free_port()
    config = directory / "proxy.yaml"
    config.write_text(
        "listeners:\n"
        "  - name: SASL_PLAINTEXT\n"
        "    security_protocol: SASL_PLAINTEXT\n"
        "    bind_host: 127.0.0.1\n"
        f"    port: {port}\n"
        f"    broker_ports: {{base: {free_port() - TANSU_NODE_ID}}}\n"
        "    sasl:\n"
        "      enabled_mechanisms: [PLAIN]\n"
        "      credentials_file: users.yaml\n"
        f"upstream:\n  bootstrap_servers: ['{upstream}']\n"
        "logging:\n  level: ERROR\n"
        'authorizer:\n  super_users: "User:alice"\n'
        + (
            f"limits:\n  connection_creation_rate: {connection_creation_rate}\n"
            if connection_creation_rate is not None
            else ""
        )
    )
    counters = str(directory / "counters.json")
    env_vars = dict(os.environ)
    if kafkaguard_path:
        env_vars["KAFKAGUARD_PATH"] = kafkaguard_path
        env_vars["PYTHONPATH"] = kafkaguard_path + os.pathsep + env_vars.get("PYTHONPATH", "")
    argv = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else [])
    proc = env.spawn(argv + [__file__, "--serve-proxy", str(config), counters], env=env_vars)
    wait_port(port)
    return proc.pid, port, counters


def read_counters(pid: int, path: str) -> dict[str, int | None]:
    before = os.stat(path).st_mtime_ns if os.path.exists(path) else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while os.stat(path).st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.01)
    return json.loads(Path(path).read_text())  # type: ignore[no-any-return]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Phase:
    p50: float
    p99: float
    rate: float
    cpu: float
    counts: dict[str, int | None] = field(default_factory=dict)
    sent: int = 0
    other_cpu: dict[str, float] = field(default_factory=dict)
    """CPU share of Tansu and the attackers' process (1.0 = one core busy)."""


def run(args: argparse.Namespace) -> int:
    env = Env()
    began = time.monotonic()
    try:
        env.broker = TansuBroker()
        env.broker.start()
        asyncio.run(env.broker.wait_ready())
        assert env.broker.process is not None
        tansu_pid = env.broker.process.pid
        pid, port, counters_path = start_proxy(
            env,
            str(env.broker.address),
            args.kafkaguard_path,
            args.profile_proxy,
            args.connection_creation_rate,
        )
        sock = authenticated_socket(port)
        round_trips(sock, 0.5)  # warm-up
        results: dict[tuple[str, str], list[Phase]] = {}
        for scenario in args.scenarios.split(","):
            for r in range(args.rounds):
                order = ["quiet", "storm"] if r % 2 == 0 else ["storm", "quiet"]
                for phase in order:
                    attacker = None
                    if phase == "storm":
                        attacker = env.spawn(
                            [sys.executable, __file__, "--attack", str(port)]
                            + [str(args.connections), scenario],
                            stdout=subprocess.PIPE,
                        )
                        time.sleep(0.5)  # the storm is on
                    before = read_counters(pid, counters_path)
                    pids = {"proxy": pid, "tansu": tansu_pid}
                    if attacker is not None:
                        pids["attackers"] = attacker.pid
                    cpu = {name: cpu_seconds(p) for name, p in pids.items()}
                    start = time.perf_counter()
                    samples, rate = round_trips(sock, args.seconds)
                    elapsed = time.perf_counter() - start
                    shares = {n: (cpu_seconds(p) - cpu[n]) / elapsed for n, p in pids.items()}
                    after = read_counters(pid, counters_path)
                    share = shares["proxy"]
                    result = Phase(percentile(samples, 0.5), percentile(samples, 0.99), rate, share)
                    result.other_cpu = {n: v for n, v in shares.items() if n != "proxy"}
                    result.counts = {
                        k: None if v is None else v - (before[k] or 0) for k, v in after.items()
                    }
                    if attacker is not None:
                        attacker.send_signal(signal.SIGTERM)
                        out, _ = attacker.communicate(timeout=15)
                        # Nothing printed: SIGTERM came before its handler was installed
                        # (a slow start on a loaded machine); its attempts are then unknown.
                        lines = out.decode().strip().splitlines()
                        result.sent = json.loads(lines[-1])["sent"] if lines else 0
                    results.setdefault((scenario, phase), []).append(result)
                    shown = (
                        f"p50 {result.p50:.2f} ms p99 {result.p99:.2f} ms "
                        f"max {max(samples):.0f} ms {rate:,.0f} rt/s, CPU proxy {share:.0%}"
                    )
                    shown += "".join(f" {n} {v:.0%}" for n, v in result.other_cpu.items())
                    if phase == "storm":
                        shown += "  " + counts_text(result)
                    print(f"{scenario:<15} round {r + 1}/{args.rounds} {phase:<5} {shown}")
        report(results, args)
        sock.close()
        print(f"\nwall time {time.monotonic() - began:.0f} s")
    finally:
        env.close()
    return 0


def counts_text(phase: Phase) -> str:
    c = phase.counts

    def show(key: str) -> str:
        value = c.get(key)
        return "-" if value is None else f"{value:,}"

    return (
        f"[attempts sent {phase.sent:,}; proxy: attempts {show('attempts')}, "
        f"hashes {show('hashes')}, throttled {show('throttled')}, "
        f"queue-full {show('refused_queue_full')}, ip-throttled {show(IP_THROTTLED)}]"
    )


def report(results: dict[tuple[str, str], list[Phase]], args: argparse.Namespace) -> None:
    print(
        f"\nmedians over {args.rounds} rounds, {args.seconds:.0f} s per phase, "
        f"{args.connections} attacker connections"
    )
    print(
        f"{'scenario':<16}{'phase':<7}{'p50 ms':>9}{'p99 ms':>9}{'rt/s':>9}{'CPU':>6}"
        f"{'p99 x':>8}{'rt/s x':>8}   storm counts (per phase, medians)"
    )
    for scenario in args.scenarios.split(","):
        quiet = results[(scenario, "quiet")]
        q99 = statistics.median(p.p99 for p in quiet)
        qrate = statistics.median(p.rate for p in quiet)
        for phase in ("quiet", "storm"):
            runs = results[(scenario, phase)]
            p50 = statistics.median(p.p50 for p in runs)
            p99 = statistics.median(p.p99 for p in runs)
            rate = statistics.median(p.rate for p in runs)
            cpu = statistics.median(p.cpu for p in runs)
            line = (
                f"{scenario:<16}{phase:<7}{p50:>9.2f}{p99:>9.2f}{rate:>9,.0f}{cpu:>6.0%}"
                f"{p99 / q99:>8.2f}{rate / qrate:>8.2f}"
            )
            if phase == "storm":
                line += "   " + counts_text(median_counts(runs))
            print(line)


def median_counts(runs: list[Phase]) -> Phase:
    merged = Phase(0, 0, 0, 0, sent=int(statistics.median(p.sent for p in runs)))
    for key in runs[0].counts:
        values = [p.counts[key] for p in runs]
        known = [v for v in values if v is not None]
        merged.counts[key] = int(statistics.median(known)) if len(known) == len(values) else None
    return merged


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=4.0, help="per phase (default 4)")
    parser.add_argument("--connections", type=int, default=16, help="attacker connections")
    parser.add_argument(
        "--scenarios",
        default="one-address,fresh-addresses",
        help="comma-separated: one-address, fresh-addresses, handshake-only",
    )
    parser.add_argument("--kafkaguard-path", metavar="DIR", help="run the proxy from DIR")
    parser.add_argument(
        "--connection-creation-rate",
        type=int,
        metavar="N",
        help="limits.connection_creation_rate of the proxy (KIP-612, per address)",
    )
    parser.add_argument("--profile-proxy", metavar="FILE", help="run the proxy under cProfile")
    parser.add_argument(
        "--serve-proxy", nargs=2, metavar=("CONFIG", "COUNTERS"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--attack", nargs=3, metavar=("PORT", "CONNS", "SCENARIO"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve_proxy:
        serve_proxy(*args.serve_proxy)
        return 0
    if args.attack:
        attack(int(args.attack[0]), int(args.attack[1]), args.attack[2])
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
