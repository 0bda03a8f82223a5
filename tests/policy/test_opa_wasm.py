"""The OPA authorizer's ``mode: wasm`` (kafkaguard/policy/opa_wasm.py): the test policies
compiled by ``opa build -t wasm`` and evaluated in process decide every input as the REST mode
does against a real OPA server running the same policy (the reference); what the module cannot
decide is an error that denies; the options and the configuration's checks."""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.cli import main
from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason
from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import AclOperation, ResourcePattern, ResourceType
from kafkaguard.policy.opa import OpaAuthorizer, OpaOptions, input_document
from kafkaguard.policy.opa_wasm import WasmBundle, WasmEvalError, WasmPolicy, WasmPolicyError
from tests.policy.test_explain import write_config
from tests.policy.test_opa import context
from tests.support.opa import (
    V0_POLICY,
    V0_URL_PATH,
    V1_POLICY,
    V1_URL_PATH,
    OpaServer,
    build_wasm_bundle,
    require_opa,
    running_opa,
)

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
CLASS = "kafkaguard.policy.opa:OpaAuthorizer"
POLICIES = {
    "v0": (V0_POLICY, "kafka/authz/allow", V0_URL_PATH, True),
    "v1": (V1_POLICY, "kafkaguard/authz/allow", V1_URL_PATH, False),
}


def authorizer(events: list[DecisionEvent] | None = None, **options: Any) -> OpaAuthorizer:
    config = AuthorizerConfig(class_path=CLASS, options=options)
    return OpaAuthorizer(config, decision_listener=events.append if events is not None else None)


@pytest.fixture(scope="module", params=sorted(POLICIES))
def policy(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, OpaServer]]:
    """(the policy's wasm bundle, an OPA server running the same policy)."""
    source, entrypoint, _, v0 = POLICIES[request.param]
    directory = tmp_path_factory.mktemp(f"wasm-{request.param}")
    bundle = build_wasm_bundle(source, entrypoint, directory / "bundle.tar.gz", v0=v0)
    with running_opa(source, directory, v0=v0) as server:
        yield bundle, server


USERS = ("alice-producer", "alice-consumer", "bob-producer", "carol", "ext-dave")
GROUPS = ((), ("eng",), ("contractors",))
RESOURCES = (
    (ResourceType.TOPIC, "alice-orders"),
    (ResourceType.TOPIC, "bob-orders"),
    (ResourceType.TOPIC, "shared-events"),
    (ResourceType.TOPIC, "private"),
    (ResourceType.GROUP, "alice-app"),
    (ResourceType.CLUSTER, "kafka-cluster"),
)
OPERATIONS = (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE, AclOperation.CREATE)


def test_wasm_decides_every_input_as_the_rest_mode_does(
    policy: tuple[Path, OpaServer],
) -> None:
    bundle, server = policy
    entrypoint = next(e for p, e, _, _ in POLICIES.values() if server.policy == p)
    url_path = next(u for p, _, u, _ in POLICIES.values() if server.policy == p)
    wasm = authorizer(mode="wasm", bundle=str(bundle))
    rest = authorizer(url=server.url(url_path))
    asked = 0
    allowed = 0
    for user, groups, (kind, name), operation in itertools.product(
        USERS, GROUPS, RESOURCES, OPERATIONS
    ):
        ctx = context(user, groups=groups)
        action = [Action(operation, ResourcePattern(kind, name))]
        expected = rest.authorize(ctx, action)
        assert wasm.authorize(ctx, action) == expected, (user, groups, kind, name, operation)
        asked += 1
        allowed += expected == [ALLOWED]
    assert wasm.options.mode == "wasm" and wasm.counters.lookups["error"] == 0
    assert rest.counters.lookups["error"] == 0
    assert 0 < allowed < asked  # the policy allows some and denies others
    assert wasm.counters.lookups["allowed"] == allowed
    assert WasmPolicy(WasmBundle.read(bundle)).entrypoint == entrypoint


async def test_on_the_event_loop_a_miss_is_evaluated_at_once_and_cached(tmp_path: Path) -> None:
    bundle = build_wasm_bundle(V0_POLICY, "kafka/authz/allow", tmp_path / "b.tar.gz", v0=True)
    events: list[DecisionEvent] = []
    opa = authorizer(events, mode="wasm", bundle=str(bundle))
    opa.start(["SASL_SSL"])  # no health task: nothing to wait for, nothing to report
    write = [Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "alice-orders"))]
    assert opa.authorize(context("alice-producer"), write) == [ALLOWED]  # no DecisionPending
    assert opa.authorize(context("alice-producer"), write) == [ALLOWED]
    assert opa.authorize(context("bob-producer"), write) == [DENIED]
    assert (opa.cache.hits, opa.cache.misses) == (1, 2)
    assert [e.reason for e in events] == [
        DecisionReason.OPA_ALLOW,
        DecisionReason.OPA_ALLOW,
        DecisionReason.OPA_DENY,
    ]
    assert list(opa.not_ready()) == []
    await opa.close()


def test_an_entrypoint_that_is_no_boolean_denies(tmp_path: Path) -> None:
    bundle = build_wasm_bundle(V0_POLICY, "kafka/authz", tmp_path / "package.tar.gz", v0=True)
    opa = authorizer(mode="wasm", bundle=str(bundle), entrypoint="kafka/authz")
    write = [Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "alice-orders"))]
    assert opa.authorize(context("alice-producer"), write) == [DENIED]
    assert opa.counters.errors["not_boolean"] == 1
    opened = authorizer(
        mode="wasm", bundle=str(bundle), entrypoint="kafka/authz", allow_on_error=True
    )
    assert opened.authorize(context("bob-producer"), write) == [ALLOWED]


def test_a_client_sent_name_cannot_grow_the_module_memory_past_its_limit(tmp_path: Path) -> None:
    """A frame may be 100 MiB, and the input carries the names in it: an input too big for
    the memory limit, or an evaluation that would need more, is an error (which denies), the
    memory stays within the limit and the instance keeps deciding."""
    bundle = build_wasm_bundle(V0_POLICY, "kafka/authz/allow", tmp_path / "b.tar.gz", v0=True)
    limit = 8 * 1024 * 1024
    wasm = WasmPolicy(WasmBundle.read(bundle), max_memory_bytes=limit)

    def writes(topic: str) -> dict[str, Any]:
        return input_document(context("alice-producer"), write_action(topic))["input"]

    for size in (limit * 2, limit - 1024 * 1024):  # refused up front; trapping in the module
        with pytest.raises(WasmEvalError) as raised:
            wasm.decide(writes("x" * size))
        assert raised.value.reason == "wasm_trap"
        assert wasm.memory_bytes <= limit
    assert wasm.decide(writes("alice-orders")) is True


SLOW_POLICY = """package slow

import rego.v1

default allow := false

allow if {
	some i in numbers.range(1, 1500)
	some j in numbers.range(1, 1500)
	i * j == count(input.action.resourcePattern.name)
}
"""


def test_an_evaluation_past_timeout_ms_is_interrupted_and_denies(tmp_path: Path) -> None:
    """Evaluated on the event loop, a decision must not hold it past ``timeout_ms``: the
    module is interrupted (wasmtime's epoch deadline) and the decision is a ``timeout``
    error, as a REST lookup past it is."""
    policy = tmp_path / "slow.rego"
    policy.write_text(SLOW_POLICY, encoding="utf-8")
    bundle = build_wasm_bundle(policy, "slow/allow", tmp_path / "slow.tar.gz", v0=False)
    opa = authorizer(mode="wasm", bundle=str(bundle), timeout_ms=50)
    started = time.monotonic()
    assert opa.authorize(context("alice-producer"), [write_action("orders")]) == [DENIED]
    assert time.monotonic() - started < 0.3  # uninterrupted, it runs into the memory limit
    assert opa.counters.errors["timeout"] == 1


def write_action(topic: str) -> Action:
    return Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, topic))


def test_a_bundle_with_several_entrypoints_needs_one_named(tmp_path: Path) -> None:
    two = tmp_path / "two-entrypoints.tar.gz"
    subprocess.run(
        [str(require_opa()), "build", "-t", "wasm", "-e", "kafka/authz/allow"]
        + ["-e", "kafka/authz/role", "--v0-compatible", "-o", str(two), str(V0_POLICY)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with pytest.raises(WasmPolicyError, match="entrypoint: one of kafka/authz/allow, kafka/"):
        WasmPolicy(WasmBundle.read(two))
    assert WasmPolicy(WasmBundle.read(two), "kafka/authz/allow").entrypoint == "kafka/authz/allow"
    with pytest.raises(WasmPolicyError, match="no entrypoint 'kafka/x'"):
        WasmPolicy(WasmBundle.read(two), "kafka/x")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "grpc"}, "mode: one of rest, wasm"),
        ({"mode": "wasm"}, "bundle: mode wasm needs the opa build -t wasm bundle"),
        ({"url": "http://o:1/v1/data/a", "bundle": "b.tar.gz"}, "only with mode: wasm"),
        ({"mode": "wasm", "bundle": "b", "url": "http://o:1/a"}, "url: not with mode: wasm"),
    ],
)
def test_mode_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpaOptions.parse(options, frozenset())


def test_check_config_reads_the_bundle_relative_to_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_wasm_bundle(V0_POLICY, "kafka/authz/allow", tmp_path / "policy.tar.gz", v0=True)
    extra = f"  class: {CLASS}\n  options: {{mode: wasm, bundle: policy.tar.gz}}\n"
    config = write_config(tmp_path, [], authorizer_extra=extra)
    assert main(["check-config", "--config", str(config)]) == 0, capsys.readouterr().err
    (tmp_path / "policy.tar.gz").write_bytes(b"not a bundle")
    assert main(["check-config", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert f"{config}:" in error and "authorizer.options: bundle: " in error
    assert "not a readable bundle" in error
    # What the authorizer's start refuses, check-config refuses: an entrypoint not built.
    build_wasm_bundle(V0_POLICY, "kafka/authz/allow", tmp_path / "policy.tar.gz", v0=True)
    extra = f"  class: {CLASS}\n  options: {{mode: wasm, bundle: policy.tar.gz, entrypoint: a/b}}\n"
    config = write_config(tmp_path, [], authorizer_extra=extra)
    assert main(["check-config", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert f"{config}:" in error and "authorizer.options: bundle: " in error
    assert "no entrypoint 'a/b'" in error
