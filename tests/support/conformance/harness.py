"""Differential conformance harness: one scenario, two sides, the same answers.

* **referee** — Apache Kafka with its own ``StandardAuthorizer`` and a SASL_PLAINTEXT listener
  (``kafka_referee``, tests/support/kafka_broker.py).
* **kafkaguard** — the proxy, with a SASL_PLAINTEXT listener knowing the same PLAIN users, in
  front of an unsecured Apache Kafka (``kafka_upstream``).

Both sides get their ACLs the same way, through the Admin API as the super user ``User:admin``
(DeleteAcls everything, then CreateAcls), so a scenario states its ACLs once. Results are
compared after :func:`normalize`, which blanks what legitimately differs between two clusters
(cluster ids, ports, throttle times); everything else — error codes, which entries are present,
authorized-operation bitfields — must be identical, or be listed in docs/deviations.md.

The ``guard_proxy`` and ``sides`` fixtures (tests/conformance/conftest.py) are built from
:func:`guard_config` and :class:`Side`; scenario steps are in the sibling modules.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBinding
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import BrokerPorts, HostPort, ProxyConfig
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import free_base
from tests.support.kafka_broker import REFEREE_USERS, KafkaBroker
from tests.support.proxy_fixture import proxy_config
from tests.support.raw_client import RawKafkaClient, build_request

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import admin as ck_admin  # noqa: E402

SUPER_USER = "User:admin"
KAFKA_NODE_ID = 1


@dataclass
class Side:
    """One way of reaching "a secured Kafka": the referee itself, or kafkaguard."""

    name: str
    bootstrap: str

    def client_config(self, user: str, **extra: Any) -> dict[str, Any]:
        """confluent-kafka settings for ``user`` (SASL_PLAINTEXT, PLAIN) on this side."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": REFEREE_USERS[user],
            **extra,
        }

    def admin(self, user: str = "admin") -> ck_admin.AdminClient:
        return ck_admin.AdminClient(self.client_config(user))

    def raw(self, user: str) -> RawKafkaClient:
        """A raw protocol client authenticated as ``user`` (SaslHandshake v1, PLAIN, v2)."""
        host, port = self.bootstrap.rsplit(":", 1)
        client = RawKafkaClient(host, int(port), timeout_s=15)
        _, handshake = client.request(build_request(17, 1, mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.none, handshake
        token = f"\0{user}\0{REFEREE_USERS[user]}".encode()
        _, auth = client.request(build_request(36, 2, auth_bytes=token))
        assert auth.error_code == ErrorCode.none, auth
        return client

    def set_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Replace every ACL on this side with ``bindings`` through the Admin API."""
        admin = self.admin()
        match_all = ck_admin.AclBindingFilter(
            ck_admin.ResourceType.ANY,
            None,
            ck_admin.ResourcePatternType.ANY,
            None,
            None,
            ck_admin.AclOperation.ANY,
            ck_admin.AclPermissionType.ANY,
        )
        for future in admin.delete_acls([match_all]).values():
            future.result(15)
        wanted = [to_confluent(b) for b in bindings]
        if wanted:
            for future in admin.create_acls(wanted).values():
                future.result(15)
        # The referee applies ACL records from its metadata log asynchronously: wait until
        # DescribeAcls shows exactly the new set before the scenario runs.
        deadline = time.monotonic() + 15
        while True:
            current = admin.describe_acls(match_all).result(15)
            if len(current) == len(wanted):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: ACLs did not settle: {current}")
            time.sleep(0.05)
        time.sleep(0.2 if self.name == "referee" else 0)


def to_confluent(binding: AclBinding) -> ck_admin.AclBinding:
    p, e = binding.pattern, binding.entry
    # By wire code: confluent-kafka calls the CLUSTER resource type (4) BROKER.
    return ck_admin.AclBinding(
        ck_admin.ResourceType(int(p.resource_type)),
        p.name,
        ck_admin.ResourcePatternType(int(p.pattern_type)),
        e.principal,
        e.host,
        ck_admin.AclOperation(int(e.operation)),
        ck_admin.AclPermissionType(int(e.permission_type)),
    )


BLANKED = {
    "throttle_time_ms": 0,
    "cluster_id": "<cluster>",
    "host": "<host>",
    "port": 0,
    "session_id": 0,
    "member_id": "<member>",
    "producer_id": "<pid>",
    "leader_epoch": "<epoch>",
    "current_leader": "<leader>",
}
"""Response fields that differ between any two clusters, whatever the authorizer."""


def normalize(value: Any, blank: dict[str, Any] | None = None) -> Any:
    """A comparable plain-Python view of a decoded response (or any client result).

    kio entities and dataclasses become dicts, enums their names, UUIDs a placeholder unless
    zero, tuples lists; the fields named in ``blank`` (default :data:`BLANKED`) are replaced.
    """
    blank = BLANKED if blank is None else blank
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: (blank[f.name] if f.name in blank else normalize(getattr(value, f.name), blank))
            for f in dataclasses.fields(value)
        }
    if isinstance(value, dict):
        return {k: blank[k] if k in blank else normalize(v, blank) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v, blank) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, UUID):
        return str(value) if value.int == 0 else "<uuid>"
    return value


def differential(
    sides: Sequence[Side],
    run: Callable[[Side], Any],
    *,
    blank: dict[str, Any] | None = None,
    settle_s: float = 0.0,
) -> Any:
    """Run ``run`` on every side, assert the normalised results are equal, return the referee's.

    ``settle_s``: a read that follows a change may be run again while the sides differ, for at
    most this long: a KRaft broker applies a controller's change (a topic's configs) from its
    metadata log a moment later, on each cluster at its own pace. A real difference stays."""
    deadline = time.monotonic() + settle_s
    while True:
        results = {side.name: normalize(run(side), blank) for side in sides}
        if results["referee"] == results["kafkaguard"] or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    referee, guard = results["referee"], results["kafkaguard"]
    assert guard == referee, (
        f"kafkaguard differs from Kafka:\n  kafka:      {referee}\n  kafkaguard: {guard}"
    )
    return referee


def guard_config(upstream: KafkaBroker, tmp: Path) -> ProxyConfig:
    """kafkaguard with the referee's users and super user, in front of the upstream Kafka (the
    ``guard_proxy`` fixture, tests/conformance/conftest.py); its users file goes in ``tmp``."""
    users = tmp / "users.yaml"
    write_users_file(
        users,
        {
            name: {"PLAIN": plain.make_credential(password, iterations=4096).to_string()}
            for name, password in REFEREE_USERS.items()
        },
    )
    return proxy_config(
        HostPort("127.0.0.1", upstream.port),
        name="SASL_PLAINTEXT",
        security_protocol="SASL_PLAINTEXT",
        broker_ports=BrokerPorts(free_base([KAFKA_NODE_ID]), {}),
        sasl=SaslListenerConfig(enabled_mechanisms=("PLAIN",), credentials_file=users),
        policy=PolicyConfig(
            authorizer=AuthorizerConfig(super_users=frozenset({SUPER_USER})),
            acl_store=AclStoreConfig(type="memory"),
        ),
    )


def scenario_name(prefix: str) -> str:
    """A name unique to this test run, the same on both sides (each side is its own cluster)."""
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
