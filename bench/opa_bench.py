"""OPA authorizer benchmark (issue 37, item 5): a decision's latency cold and cached, REST
and in process (``mode: wasm``), and what a produce round trip pays with OPA.

Run: ``.venv/bin/python bench/opa_bench.py [--decisions 500] [--produces 500]``. Needs the OPA
binary of tests/support/opa.py (``python -m tests.support.opa`` builds it). Prints two tables;
figures go to bench/RESULTS.md under "## Issue 37: OPA as the authorizer".

1. Decisions, in process on an event loop, OPA on loopback with the Rego v0 policy of
   tests/support/opa_policies/: *cold* is a cache miss as the proxy meets it (``authorize``
   raises ``DecisionPendingError``, the lookup is awaited, ``authorize`` again answers from
   the cache), each for a new topic; *cached* is ``authorize`` answered from the cache; the
   same policy compiled by ``opa build -t wasm`` and evaluated in process (``mode: wasm``:
   a miss is evaluated inside ``authorize``), REST and wasm taking turns; the
   StandardAuthorizer over 3 ACLs is the reference.
2. Produce round trips: confluent-kafka over SASL/PLAIN → kafkaguard → Tansu, one record per
   round trip (produce, flush), acks=1, to two topics in turn, one producer per proxy, the
   four proxies in turns of 50 round trips: the StandardAuthorizer with four ACLs, OPA with
   its cache, OPA with a cache of one entry (each produce, to the other topic than the
   last, misses it and asks OPA), and ``mode: wasm`` with a cache of one entry.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafkaguard.policy.authorizer import (
    Action,
    DecisionPendingError,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import (
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.opa import OpaAuthorizer
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.tansu import TansuBroker
from tests.support.opa import V0_POLICY, V0_URL_PATH, OpaServer, build_wasm_bundle
from tests.support.proxy_fixture import stop_proxy_thread
from tests.support.sasl_proxy import start_sasl_proxy

USER = "alice-producer"
PASSWORDS = {USER: "alice-secret"}
CLASS = "kafkaguard.policy.opa:OpaAuthorizer"


def _context(i: int) -> RequestContext:
    return RequestContext(
        listener_name="SASL_PLAINTEXT",
        security_protocol=SecurityProtocol.SASL_PLAINTEXT,
        principal=KafkaPrincipal("User", USER),
        client_address=ipaddress.ip_address("127.0.0.1"),
        api_key=0,
        api_version=11,
        client_id="bench",
        correlation_id=i,
    )


def _write(topic: str) -> Action:
    return Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, topic))


def _us(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered) * 1e6:10.1f} {p99 * 1e6:10.1f}"


async def _cold(opa: OpaAuthorizer, i: int) -> float:
    """One decision not in the cache, as the proxy meets it (REST: pending, awaited, asked
    again; wasm: evaluated in ``authorize``)."""
    ctx, actions = _context(i), [_write(f"alice-{i}")]
    started = time.perf_counter()
    try:
        opa.authorize(ctx, actions)
    except DecisionPendingError as pending:
        await pending.ready
        opa.authorize(ctx, actions)
    return time.perf_counter() - started


def _cached(opa: OpaAuthorizer, i: int, n: int) -> float:
    ctx, actions = _context(n + i), [_write(f"alice-{i}")]
    started = time.perf_counter()
    opa.authorize(ctx, actions)
    return time.perf_counter() - started


async def decisions(url: str, bundle: Path, n: int) -> dict[str, list[float]]:
    """REST and wasm in turns (one decision each), so that load changes hit both alike."""
    rest = OpaAuthorizer(AuthorizerConfig(class_path=CLASS, options={"url": url}))
    wasm = OpaAuthorizer(
        AuthorizerConfig(class_path=CLASS, options={"mode": "wasm", "bundle": str(bundle)})
    )
    cold: list[float] = []
    cached: list[float] = []
    wasm_cold: list[float] = []
    wasm_cached: list[float] = []
    for i in range(n):
        cold.append(await _cold(rest, i))
        wasm_cold.append(await _cold(wasm, i))
    for i in range(n):
        cached.append(_cached(rest, i, n))
        wasm_cached.append(_cached(wasm, i, n))
    for opa in (rest, wasm):
        await opa.close()
    standard = StandardAuthorizer(AuthorizerConfig())
    standard.load_snapshot(
        acl_binding(ResourceType.TOPIC, f"alice-{i}", f"User:{USER}", AclOperation.WRITE)
        for i in range(3)
    )
    reference = []
    for i in range(n):
        ctx, actions = _context(i), [_write(f"alice-{i % 3}")]
        started = time.perf_counter()
        standard.authorize(ctx, actions)
        reference.append(time.perf_counter() - started)
    return {
        "OPA, cold (cache miss, lookup awaited)": cold,
        "OPA, cached": cached,
        "OPA wasm, cold (cache miss, evaluated)": wasm_cold,
        "OPA wasm, cached": wasm_cached,
        "StandardAuthorizer, 3 ACLs": reference,
    }


class _Client:
    """One producer to one proxy, warmed up (connections, metadata)."""

    def __init__(self, bootstrap: str, topics: tuple[str, str]) -> None:
        from confluent_kafka import Producer

        self.topics = topics
        self.errors: list[Any] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": USER,
                "sasl.password": PASSWORDS[USER],
                "enable.idempotence": False,
                "linger.ms": 0,
                "acks": 1,
            }
        )
        self.round_trips(20)

    def _done(self, error: Any, _message: Any) -> None:
        if error is not None:
            self.errors.append(error)

    def round_trips(self, n: int) -> list[float]:
        samples = []
        for i in range(n):
            started = time.perf_counter()
            self.producer.produce(self.topics[i % 2], b"x" * 100, on_delivery=self._done)
            self.producer.flush(10)
            samples.append(time.perf_counter() - started)
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} produces failed: {self.errors[0]}")
        return samples


def produces(
    url: str, bundle: Path, tansu: TansuBroker, directory: Path, n: int
) -> dict[str, list[float]]:
    topics = ("alice-bench-0", "alice-bench-1")
    acls = [
        acl_binding(ResourceType.TOPIC, topic, f"User:{USER}", op, AclPermissionType.ALLOW)
        for topic in topics
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    setups: dict[str, PolicyConfig | None] = {
        "StandardAuthorizer, 4 ACLs": None,
        "OPA, cached": PolicyConfig(
            authorizer=AuthorizerConfig(class_path=CLASS, options={"url": url})
        ),
        "OPA, cache of 1 (each produce asks OPA)": PolicyConfig(
            authorizer=AuthorizerConfig(
                class_path=CLASS, options={"url": url, "cache_maximum_size": 1}
            )
        ),
        "OPA wasm, cache of 1 (each produce evaluates)": PolicyConfig(
            authorizer=AuthorizerConfig(
                class_path=CLASS,
                options={"mode": "wasm", "bundle": str(bundle), "cache_maximum_size": 1},
            )
        ),
    }
    from confluent_kafka.admin import AdminClient, NewTopic

    upstream = AdminClient({"bootstrap.servers": f"{tansu.address.host}:{tansu.address.port}"})
    for future in upstream.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(15)
    proxies = []
    out: dict[str, list[float]] = {name: [] for name in setups}
    try:
        for i, policy in enumerate(setups.values()):
            where = directory / str(i)
            where.mkdir()
            proxies.append(
                start_sasl_proxy(
                    tansu,
                    where,
                    acls,
                    mechanisms=("PLAIN",),
                    policy=policy,
                    passwords=PASSWORDS,
                )
            )
        clients = [_Client(running.bootstrap, topics) for running in proxies]
        for _ in range(0, n, 50):  # in turns: a load that changes meanwhile hits each alike
            for name, client in zip(setups, clients, strict=True):
                out[name] += client.round_trips(50)
    finally:
        for running in proxies:
            stop_proxy_thread(running)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=500)
    parser.add_argument("--produces", type=int, default=500)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        opa = OpaServer(V0_POLICY, directory / "opa.log", v0=True)
        opa.start()
        tansu = TansuBroker()
        tansu.start()
        try:
            asyncio.run(tansu.wait_ready())
            url = opa.url(V0_URL_PATH)
            bundle = build_wasm_bundle(
                V0_POLICY, "kafka/authz/allow", directory / "bundle.tar.gz", v0=True
            )
            print(f"{'decision (authorize, one action)':45} {'median µs':>10} {'p99 µs':>10}")
            for name, samples in asyncio.run(decisions(url, bundle, args.decisions)).items():
                print(f"{name:45} {_us(samples)}")
            print(
                f"\n{'produce round trip (1 record, acks=1)':45} {'median µs':>10} {'p99 µs':>10}"
            )
            for name, samples in produces(url, bundle, tansu, directory, args.produces).items():
                print(f"{name:45} {_us(samples)}")
        finally:
            tansu.stop()
            opa.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
