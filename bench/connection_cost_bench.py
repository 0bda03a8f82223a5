"""Connection set-up cost: proxy CPU per new connection, by listener kind.

Usage (from the repository root)::

    .venv/bin/python bench/connection_cost_bench.py                    # 3 rounds, ~1 min
    .venv/bin/python bench/connection_cost_bench.py --connections 2000 --rounds 5
    .venv/bin/python bench/connection_cost_bench.py --profile /tmp/conn-profile  # py-spy
    .venv/bin/python bench/connection_cost_bench.py --kafkaguard-path /tmp/kg-old  # A/B

What runs where (loopback only, everything stopped at the end): an in-memory Tansu broker;
the proxy in its own process (``python -m kafkaguard run``, uvloop) with one listener per
kind; the client in this process, one connection at a time (the proxy is never queued, so
its CPU time is set-up work, not contention).

Kinds (each connection: connect, the kind's handshake, ApiVersions v3, the kind's
authentication, one Metadata v1 with no topics, close — what a Kafka client does before its
first real request; every kind's Metadata is forwarded to the broker, so each connection also
costs the proxy its broker connection):

* ``plain`` — PLAINTEXT listener;
* ``tls`` — SSL listener, a full TLS 1.3 handshake (ECDSA P-256 certificate);
* ``tls-resumed`` — the same listener, the client offering the session ticket of its
  previous connection (Python ``ssl`` ``session=``, as a Kafka client's JSSE session cache
  does when it reconnects); the table shows how many were resumed;
* ``sasl-scram`` — SASL_SSL listener, full TLS handshake then SCRAM-SHA-512 (4096 iterations:
  the client's PBKDF2, the proxy's HMACs);
* ``mtls`` — SSL listener with ``client_auth: required``: the client certificate verified
  and mapped to a principal;
* ``mtls-resumed`` — the same, resuming (the ticket carries the verified client certificate,
  which is not verified again);
* ``sasl-plain-refused`` — an authentication storm's connection (``auth_storm_bench.py``,
  one address): SASL_PLAINTEXT, SaslHandshake PLAIN, SaslAuthenticate with a wrong password,
  hang up without waiting for the answer (after the first, refused from the address's failure
  window without a hash);
* ``ip-throttled`` — the same client over its address's ``connection_creation_rate`` (KIP-612;
  a listener whose quota for 127.0.0.1 is 0): accepted, never read, closed by the proxy after
  the throttle time (made in batches of 100 at once, since each is held 1 s).

Per kind and round: ``--connections`` connections; the proxy's CPU time (user + system, from
``/proc``) over them, minus its idle CPU over the same wall time, divided by the number:
µs of proxy CPU per connection. Medians over rounds are printed. ``--profile DIR`` then runs
each kind once more under ``py-spy record --native`` (attached to the proxy) and prints where
the samples fell by stage: accept, TLS handshake (OpenSSL), SASL, connection objects
(protocol, session, context, exchange), the broker connection, requests, logging, metrics,
close, event loop.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pstats
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("KAFKAGUARD_PATH") or str(REPO))
sys.path.insert(1, str(REPO))  # tests.support, for the SCRAM client

from auth_storm_bench import METADATA_V1, encode, recv_frame  # noqa: E402 - this directory
from proxy_bench import cpu_seconds, wait_port  # noqa: E402

from kafkaguard.certs import tooling  # noqa: E402
from kafkaguard.protocol import codec  # noqa: E402
from kafkaguard.protocol.codec import ErrorCode  # noqa: E402
from kafkaguard.tansu import TansuBroker, free_port  # noqa: E402
from tests.support.scram_client import ScramClient  # noqa: E402

KINDS = ("plain", "tls", "tls-resumed", "sasl-scram", "mtls", "mtls-resumed")
STORM_KINDS = ("sasl-plain-refused", "ip-throttled")
"""Kinds of the authentication storm's connections, on listeners of their own (their keys
are newer than some checkouts an A/B run may use, so they are there only when asked for)."""
PASSWORD = "bench-secret"
TANSU_NODE_ID = 111
API_VERSIONS = encode(18, 3, 1, client_software_name="bench", client_software_version="1")

STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("logging", ("logging/__init__.py", "log_limit.py", "log_format.py")),
    ("metrics, stats", ("core/stats.py", "app/metrics.py")),
    ("SASL", ("/proxy/sasl/", "handlers/sasl.py", "hmac.py", "base64.py")),
    (
        "TLS handshake",
        ("do_handshake", "_ssl.", "/ssl.py", "certs/tls.py", "principal", "sslproto.py"),
    ),
    ("accept + quotas", ("listener.py:_accept", "listener.py:_admit", "core/limits.py")),
    ("broker connection", ("_connect_upstream", "Upstream", "net/cluster.py")),
    (
        "connection objects",
        ("connection.py:__init__", "connection_made", "session.py", "core/context.py"),
    ),
    (
        "socket writes",
        ("connection.py:_send_client", "connection.py:send", "connection.py:broker_data"),
    ),
    ("close", ("close", "connection_lost", "_release", "discard")),
    ("codec, response rewrites", ("api_versions.py", "kio/", "codec.py", "dataclasses.py:replace")),
    ("other requests", ("exchange.py", "/handlers/", "/protocol/", "data_received")),
    ("event loop", ("asyncio/", "run_forever", "run_until_complete", "select")),
)
"""Stages of the proxy's Python time (cProfile, self time): the first stage one of whose
markers is in ``file:function`` names it."""
DSOS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OpenSSL", ("libssl", "libcrypto", "_ssl.")),
    ("uvloop", ("uvloop", "loop.cpython")),
    ("kernel", ("kernel", "[vdso]")),
    ("Python", ("python", ".cpython-", "libc.so", "libm.so")),
)
"""Where the proxy's CPU went by shared object (``perf``, sampling every thread): OpenSSL is
the TLS handshake and record layer, uvloop the event loop and its transports (accept,
TLS state machine), kernel the system calls (accept, connect, close, TCP), Python the
interpreter running the proxy's code (split by :data:`STAGES`)."""


# --------------------------------------------------------------------------------------------
# The client: one connection of a kind


@dataclass
class Pki:
    ca: Path
    client_cert: Path
    client_key: Path
    server_cert: Path
    server_key: Path


@dataclass
class Kind:
    name: str
    port: int
    context: ssl.SSLContext | None = None
    scram: bool = False
    resume: bool = False
    refused_plain: bool = False
    throttled: bool = False
    session: ssl.SSLSession | None = None
    resumed: int = 0


_WRONG_PLAIN = (
    encode(17, 1, 1, mechanism="PLAIN"),
    encode(36, 2, 2, auth_bytes=b"\0alice\0wrong-password"),
)
THROTTLED_BATCH = 100


def connect_once(kind: Kind) -> None:
    raw = socket.create_connection(("127.0.0.1", kind.port), timeout=10)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if kind.refused_plain:
        with raw:
            raw.sendall(_WRONG_PLAIN[0])
            recv_frame(raw)
            raw.sendall(_WRONG_PLAIN[1])  # and hang up, as the storm's attackers do
        return
    sock: socket.socket = raw
    if kind.context is not None:
        sock = kind.context.wrap_socket(
            raw, server_hostname="localhost", session=kind.session if kind.resume else None
        )
    try:
        sock.sendall(API_VERSIONS)
        recv_frame(sock)
        if kind.scram:
            scram_sha512(sock)
        sock.sendall(METADATA_V1)
        recv_frame(sock)
        if isinstance(sock, ssl.SSLSocket) and kind.resume:
            kind.resumed += sock.session_reused
            kind.session = sock.session  # read after data: TLS 1.3 tickets follow the handshake
    finally:
        sock.close()


def make_connections(kind: Kind, count: int) -> None:
    if kind.throttled:
        for done in range(0, count, THROTTLED_BATCH):
            throttled_batch(kind, min(THROTTLED_BATCH, count - done))
    else:
        for _ in range(count):
            connect_once(kind)


def throttled_batch(kind: Kind, count: int) -> None:
    """``count`` connections at once, each sending ApiVersions, then each read until the proxy
    closes it (nothing is answered to a throttled connection)."""
    socks = [socket.create_connection(("127.0.0.1", kind.port), timeout=10) for _ in range(count)]
    try:
        for sock in socks:
            sock.sendall(API_VERSIONS)
        for sock in socks:
            with contextlib.suppress(ConnectionResetError):
                if sock.recv(4096):
                    raise RuntimeError("a throttled connection was answered")
    finally:
        for sock in socks:
            sock.close()


def scram_sha512(sock: socket.socket) -> None:
    sock.sendall(encode(17, 1, 2, mechanism="SCRAM-SHA-512"))
    recv_frame(sock)
    client = ScramClient("sha512", "alice", PASSWORD, os.urandom(12).hex())
    sock.sendall(encode(36, 2, 3, auth_bytes=client.first()))
    first: Any = codec.decode_response(recv_frame(sock), 36, 2)
    sock.sendall(encode(36, 2, 4, auth_bytes=client.final(first.auth_bytes)))
    final: Any = codec.decode_response(recv_frame(sock), 36, 2)
    if final.error_code != ErrorCode.none or not client.verify(final.auth_bytes):
        raise RuntimeError(f"SCRAM failed: {final}")


# --------------------------------------------------------------------------------------------
# The proxy under cProfile (``--serve-profiled``): profiling on at SIGUSR1, off and dumped at
# SIGUSR2, so start-up (imports, config) stays out of the figures


def serve_profiled(config_path: str, stats_path: str) -> None:
    import cProfile

    from kafkaguard.cli import serve

    profiler = cProfile.Profile()

    def dump(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(stats_path)

    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, dump)
    sys.exit(serve.run(Path(config_path)))


# --------------------------------------------------------------------------------------------
# Driver


@dataclass
class Env:
    tmp: tempfile.TemporaryDirectory[str] = field(default_factory=tempfile.TemporaryDirectory)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    broker: TansuBroker | None = None

    @property
    def upstream(self) -> str:
        assert self.broker is not None
        return str(self.broker.address)

    @property
    def directory(self) -> Path:
        return Path(self.tmp.name)

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
        self.processes.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.broker is not None:
            self.broker.stop()
        self.tmp.cleanup()


def make_pki(directory: Path) -> Pki:
    tooling.init_ca(directory)
    server = tooling.issue_server(directory, hosts=["localhost"], ips=["127.0.0.1"])
    client = tooling.issue_client(directory, common_name="bench")
    return Pki(
        directory / tooling.CA_CERT,
        client.cert_path,
        client.key_path,
        server.cert_path,
        server.key_path,
    )


def start_proxy(
    env: Env,
    pki: Pki,
    kafkaguard_path: str | None,
    profile: Path | None = None,
    *,
    storm: bool = False,
) -> tuple[int, dict[str, int]]:
    """A proxy process (under cProfile, dumping to ``profile``, if given): (pid, port by
    listener kind)."""
    users = env.directory / "users.yaml"
    if not users.exists():
        subprocess.run(
            [sys.executable, "-m", "kafkaguard", "users", "add", "--file", str(users)]
            + ["--user", "alice", "--mechanism", "SCRAM-SHA-512", "--mechanism", "PLAIN"]
            + ["--password-stdin"],
            input=PASSWORD.encode(),
            check=True,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
        )
    names = ("plain", "tls", "sasl-scram", "mtls") + (STORM_KINDS if storm else ())
    ports = {name: free_port() for name in names}
    ssl_section = f"{{cert_file: '{pki.server_cert}', key_file: '{pki.server_key}'}}"
    mtls_section = (
        f"{{cert_file: '{pki.server_cert}', key_file: '{pki.server_key}', "
        f"ca_file: '{pki.ca}', client_auth: required}}"
    )

    def listener(name: str, protocol: str, extra: str = "") -> str:
        return (
            f"  - name: {name}\n    security_protocol: {protocol}\n    bind_host: 127.0.0.1\n"
            f"    advertised_host: 127.0.0.1\n    port: {ports[name.lower().replace('_', '-')]}\n"
            f"    broker_ports: {{base: {free_port() - TANSU_NODE_ID}}}\n{extra}"
        )

    config = env.directory / f"proxy-{len(env.processes)}.yaml"
    config.write_text(
        "listeners:\n"
        + listener("PLAIN", "PLAINTEXT")
        + listener("TLS", "SSL", f"    ssl: {ssl_section}\n")
        + listener(
            "SASL_SCRAM",
            "SASL_SSL",
            f"    ssl: {ssl_section}\n    sasl: {{enabled_mechanisms: [SCRAM-SHA-512], "
            "credentials_file: users.yaml}\n",
        )
        + listener("MTLS", "SSL", f"    ssl: {mtls_section}\n")
        + (
            listener(
                "SASL_PLAIN_REFUSED",
                "SASL_PLAINTEXT",
                "    sasl: {enabled_mechanisms: [PLAIN], credentials_file: users.yaml}\n",
            )
            + listener(
                "IP_THROTTLED",
                "PLAINTEXT",
                "    limits: {connection_creation_rate_overrides: '127.0.0.1:0'}\n",
            )
            if storm
            else ""
        )
        + f"upstream:\n  bootstrap_servers: ['{env.upstream}']\n"
        + "logging:\n  level: WARNING\n"
        + 'authorizer:\n  super_users: "User:alice"\n'
    )
    env_vars = dict(os.environ)
    if kafkaguard_path:
        env_vars["PYTHONPATH"] = kafkaguard_path + os.pathsep + env_vars.get("PYTHONPATH", "")
    argv = [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)]
    if profile is not None:
        argv = [sys.executable, __file__, "--serve-profiled", str(config), str(profile)]
    proc = env.spawn(argv, env=env_vars)
    for port in ports.values():
        wait_port(port)
    time.sleep(0.5)  # the listeners' own start-up work is done
    return proc.pid, ports


def kinds(ports: dict[str, int], pki: Pki) -> dict[str, Kind]:
    def client_context(with_cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(pki.ca))
        if with_cert:
            context.load_cert_chain(pki.client_cert, pki.client_key)
        return context

    return {
        "plain": Kind("plain", ports["plain"]),
        "tls": Kind("tls", ports["tls"], client_context(False)),
        "tls-resumed": Kind("tls-resumed", ports["tls"], client_context(False), resume=True),
        "sasl-scram": Kind("sasl-scram", ports["sasl-scram"], client_context(False), scram=True),
        "mtls": Kind("mtls", ports["mtls"], client_context(True)),
        "mtls-resumed": Kind("mtls-resumed", ports["mtls"], client_context(True), resume=True),
        **(
            {
                "sasl-plain-refused": Kind(
                    "sasl-plain-refused", ports["sasl-plain-refused"], refused_plain=True
                ),
                "ip-throttled": Kind("ip-throttled", ports["ip-throttled"], throttled=True),
            }
            if "ip-throttled" in ports
            else {}
        ),
    }


def idle_cpu_rate(pid: int, seconds: float = 1.0) -> float:
    """The proxy's CPU seconds per wall second with no client (its timers, sweeps)."""
    before, start = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.perf_counter() - start)


def measure(pid: int, kind: Kind, count: int, idle: float) -> tuple[float, float]:
    """(µs of proxy CPU per connection, ms of client wall time per connection)."""
    if kind.resume and kind.session is None:
        connect_once(kind)  # the first ticket
    kind.resumed = 0
    before, start = cpu_seconds(pid), time.perf_counter()
    make_connections(kind, count)
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(pid) - before - idle * elapsed
    return cpu / count * 1e6, elapsed / count * 1e3


def perf_by_dso(pid: int, kind: Kind, count: int, out: Path) -> dict[str, float]:
    """Shares of the proxy's CPU samples by :data:`DSOS` while ``count`` connections of
    ``kind`` are made (``perf record -e cpu-clock``: no hardware counters needed)."""
    data = out / f"{kind.name}.perf.data"
    perf = subprocess.Popen(
        ["perf", "record", "-e", "cpu-clock", "-F", "2000", "-o", str(data), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached
    make_connections(kind, count)
    perf.send_signal(signal.SIGINT)
    perf.wait(timeout=60)
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--sort", "dso", "--stdio"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares: collections.Counter[str] = collections.Counter()
    for line in report.splitlines():
        percent, _, dso = line.strip().partition("%")
        with contextlib.suppress(ValueError):
            value = float(percent)
            shares[next((n for n, marks in DSOS if any(m in dso for m in marks)), "other")] += value
    return dict(shares)


def python_stages(stats_file: Path) -> dict[str, float]:
    """Shares of the proxy's Python self time by :data:`STAGES` (a cProfile dump)."""
    stats: Any = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    totals: collections.Counter[str] = collections.Counter()
    for (filename, _, function), (_, _, tottime, _, _) in stats.items():
        key = f"{filename}:{function}"
        stage = next((s for s, marks in STAGES if any(m in key for m in marks)), "other")
        totals[stage] += tottime
    total = sum(totals.values()) or 1.0
    return {stage: t / total for stage, t in totals.most_common()}


def profile(env: Env, args: argparse.Namespace, pid: int, ports: dict[str, int], pki: Pki) -> None:
    """``--profile``: perf by shared object on the running proxy, then cProfile by stage on a
    proxy started under it, per kind."""
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    names = args.kinds.split(",")
    print(f"\nwhere the proxy's CPU went, by shared object (perf; data in {out})")
    for name in names:
        shares = perf_by_dso(pid, kinds(ports, pki)[name], args.connections, out)
        print(
            f"{name:<20}"
            + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]))
        )
    print("\nthe Python part, by stage (cProfile self time; the proxy under cProfile)")
    for name in names:
        stats_file = out / f"{name}.pstats"
        profiled, profiled_ports = start_proxy(
            env, pki, args.kafkaguard_path, stats_file, storm=name in STORM_KINDS
        )
        kind = kinds(profiled_ports, pki)[name]
        make_connections(kind, 20)  # warm-up
        os.kill(profiled, signal.SIGUSR1)
        make_connections(kind, args.connections)
        os.kill(profiled, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not stats_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        os.killpg(profiled, signal.SIGTERM)
        shares = python_stages(stats_file)
        print(f"{name:<20}" + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))


def run(args: argparse.Namespace) -> int:
    env = Env()
    began = time.monotonic()
    try:
        env.broker = TansuBroker()
        env.broker.start()
        import asyncio

        asyncio.run(env.broker.wait_ready())
        pki = make_pki(env.directory / "pki")
        storm = any(name in STORM_KINDS for name in args.kinds.split(","))
        pid, ports = start_proxy(env, pki, args.kafkaguard_path, storm=storm)
        table = kinds(ports, pki)
        selected = [table[name] for name in args.kinds.split(",")]
        for kind in selected:  # warm-up: imports, caches
            make_connections(kind, 20)
        results: dict[str, list[tuple[float, float]]] = {k.name: [] for k in selected}
        resumed: dict[str, list[float]] = {k.name: [] for k in selected}
        for r in range(args.rounds):
            idle = idle_cpu_rate(pid)
            order = selected if r % 2 == 0 else list(reversed(selected))
            for kind in order:
                us, ms = measure(pid, kind, args.connections, idle)
                results[kind.name].append((us, ms))
                resumed[kind.name].append(kind.resumed / args.connections)
                print(
                    f"round {r + 1}/{args.rounds} {kind.name:<12} {us:>7.0f} µs proxy CPU/conn, "
                    f"{ms:.2f} ms client wall/conn"
                    + (f", resumed {kind.resumed}/{args.connections}" if kind.resume else "")
                    + f"  (proxy idle {idle * 1e3:.1f} ms/s)"
                )
        print(f"\nmedians over {args.rounds} rounds of {args.connections} connections")
        print(f"{'kind':<20}{'µs CPU/conn':>12}{'ms wall/conn':>14}{'resumed':>9}")
        for kind in selected:
            us = statistics.median(u for u, _ in results[kind.name])
            ms = statistics.median(m for _, m in results[kind.name])
            share = f"{statistics.median(resumed[kind.name]):.0%}" if kind.resume else "-"
            print(f"{kind.name:<20}{us:>12.0f}{ms:>14.2f}{share:>9}")
        if args.profile:
            profile(env, args, pid, ports, pki)
        print(f"\nwall time {time.monotonic() - began:.0f} s")
    finally:
        env.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000, help="per kind and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="comma-separated: " + ", ".join(KINDS + STORM_KINDS),
    )
    parser.add_argument("--kafkaguard-path", metavar="DIR", help="run the proxy from DIR")
    parser.add_argument("--profile", metavar="DIR", help="also profile each kind (perf, cProfile)")
    parser.add_argument(
        "--serve-profiled", nargs=2, metavar=("CONFIG", "PSTATS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve_profiled:
        serve_profiled(*args.serve_profiled)
    if args.profile and shutil.which("perf") is None:
        parser.error("--profile needs perf on PATH")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
