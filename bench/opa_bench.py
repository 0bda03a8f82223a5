"""OPA authorizer benchmark (issue 37, item 5): a decision's latency cold and cached, and what
a produce round trip pays with OPA.

Run: ``.venv/bin/python bench/opa_bench.py [--decisions 500] [--produces 500]``. Needs the OPA
binary of tests/support/opa.py (``python -m tests.support.opa`` builds it). Prints two tables;
figures go to bench/RESULTS.md under "## Issue 37: OPA as the authorizer".

1. Decisions, in process on an event loop, OPA on loopback with the Rego v0 policy of
   tests/support/opa_policies/: *cold* is a cache miss as the proxy meets it (``authorize``
   raises ``DecisionPendingError``, the lookup is awaited, ``authorize`` again answers from
   the cache), each for a new topic; *cached* is ``authorize`` answered from the cache; the
   StandardAuthorizer over 3 ACLs is the reference.
2. Produce round trips: confluent-kafka over SASL/PLAIN → kafkaguard → Tansu, one record per
   round trip (produce, flush), acks=1, the same producer throughout: the StandardAuthorizer
   with one ACL, OPA with its cache, and OPA with a cache of one entry (every decision asked).
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
from tests.support.opa import V0_POLICY, V0_URL_PATH, OpaServer
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


async def decisions(url: str, n: int) -> dict[str, list[float]]:
    opa = OpaAuthorizer(AuthorizerConfig(class_path=CLASS, options={"url": url}))
    cold, cached = [], []
    for i in range(n):
        ctx, actions = _context(i), [_write(f"alice-{i}")]
        started = time.perf_counter()
        try:
            opa.authorize(ctx, actions)
        except DecisionPendingError as pending:
            await pending.ready
            opa.authorize(ctx, actions)
        cold.append(time.perf_counter() - started)
    for i in range(n):
        ctx, actions = _context(n + i), [_write(f"alice-{i}")]
        started = time.perf_counter()
        opa.authorize(ctx, actions)
        cached.append(time.perf_counter() - started)
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
        "StandardAuthorizer, 3 ACLs": reference,
    }


def produce_round_trips(bootstrap: str, topic: str, n: int) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer(
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
    errors: list[Any] = []

    def done(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    for _ in range(20):  # connections, metadata
        producer.produce(topic, b"warm-up", on_delivery=done)
        producer.flush(10)
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        producer.produce(topic, b"x" * 100, on_delivery=done)
        producer.flush(10)
        samples.append(time.perf_counter() - started)
    if errors:
        raise RuntimeError(f"{len(errors)} produces failed: {errors[0]}")
    return samples


def produces(url: str, tansu: TansuBroker, directory: Path, n: int) -> dict[str, list[float]]:
    topic = "alice-bench"
    acl = acl_binding(
        ResourceType.TOPIC, topic, f"User:{USER}", AclOperation.WRITE, AclPermissionType.ALLOW
    )
    describe = acl_binding(
        ResourceType.TOPIC, topic, f"User:{USER}", AclOperation.DESCRIBE, AclPermissionType.ALLOW
    )
    setups: dict[str, PolicyConfig | None] = {
        "StandardAuthorizer, 2 ACLs": None,
        "OPA, cached": PolicyConfig(
            authorizer=AuthorizerConfig(class_path=CLASS, options={"url": url})
        ),
        "OPA, cache of 1 (every decision asked)": PolicyConfig(
            authorizer=AuthorizerConfig(
                class_path=CLASS, options={"url": url, "cache_maximum_size": 1}
            )
        ),
    }
    from confluent_kafka.admin import AdminClient, NewTopic

    upstream = AdminClient({"bootstrap.servers": f"{tansu.address.host}:{tansu.address.port}"})
    for future in upstream.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    out = {}
    for i, (name, policy) in enumerate(setups.items()):
        where = directory / str(i)
        where.mkdir()
        running = start_sasl_proxy(
            tansu,
            where,
            [acl, describe],
            mechanisms=("PLAIN",),
            policy=policy,
            passwords=PASSWORDS,
        )
        try:
            out[name] = produce_round_trips(running.bootstrap, topic, n)
        finally:
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
            print(f"{'decision (authorize, one action)':45} {'median µs':>10} {'p99 µs':>10}")
            for name, samples in asyncio.run(decisions(url, args.decisions)).items():
                print(f"{name:45} {_us(samples)}")
            print(
                f"\n{'produce round trip (1 record, acks=1)':45} {'median µs':>10} {'p99 µs':>10}"
            )
            for name, samples in produces(url, tansu, directory, args.produces).items():
                print(f"{name:45} {_us(samples)}")
        finally:
            tansu.stop()
            opa.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
