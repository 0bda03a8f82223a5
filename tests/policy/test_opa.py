"""The OPA authorizer (kafkaguard/policy/opa.py) against a real OPA server.

OPA runs the Rego v0 policy in the OPA Kafka plugin's style (loaded with ``--v0-compatible``)
and a Rego v1 one (tests/support/opa_policies/). Decisions, the fail-closed outcomes (OPA
unreachable, too slow, answering something but a boolean), the cache, the event loop's
pending lookups and what is audited are checked on what the authorizer answers and records.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.cli import main
from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason
from kafkaguard.policy.authorizer import (
    AclsNotManagedError,
    Action,
    ApiErrorCode,
    AuthorizationResult,
    DecisionPendingError,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import (
    AclBindingFilter,
    AclOperation,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.opa import OpaAuthorizer, OpaOptions, input_document
from tests.policy.test_explain import run_explain, write_config
from tests.support.opa import (
    V0_POLICY,
    V0_URL_PATH,
    V1_POLICY,
    V1_URL_PATH,
    OpaServer,
    running_opa,
)
from tests.support.ports import refusing_port

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED


def context(user: str, correlation_id: int = 7, groups: tuple[str, ...] = ()) -> RequestContext:
    return RequestContext(
        listener_name="SASL_PLAINTEXT",
        security_protocol=SecurityProtocol.SASL_PLAINTEXT,
        principal=KafkaPrincipal("User", user),
        client_address=ipaddress.ip_address("127.0.0.1"),
        api_key=0,
        api_version=11,
        client_id="orders-app",
        correlation_id=correlation_id,
        groups=tuple(KafkaPrincipal("Group", g) for g in groups),
    )


def write(topic: str) -> Action:
    return Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, topic))


def authorizer(
    url: str, events: list[DecisionEvent] | None = None, **options: Any
) -> OpaAuthorizer:
    config = AuthorizerConfig(
        class_path="kafkaguard.policy.opa:OpaAuthorizer", options={"url": url, **options}
    )
    listener = events.append if events is not None else None
    return OpaAuthorizer(config, decision_listener=listener)


@pytest.fixture(scope="module")
def opa_v0(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpaServer]:
    with running_opa(V0_POLICY, tmp_path_factory.mktemp("opa"), v0=True) as server:
        yield server


@pytest.fixture(scope="module")
def opa_v1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpaServer]:
    with running_opa(V1_POLICY, tmp_path_factory.mktemp("opa"), v0=False) as server:
        yield server


# -- the input document and the options ----------------------------------------------------


def test_input_document_is_the_plugins_with_groups() -> None:
    doc = input_document(context("alice-producer"), write("alice-orders"))
    assert doc == {
        "input": {
            "requestContext": {
                "clientAddress": "/127.0.0.1",
                "clientInformation": {"softwareName": "unknown", "softwareVersion": "unknown"},
                "header": {
                    "name": {
                        "clientId": "orders-app",
                        "correlationId": 7,
                        "requestApiKey": 0,
                        "requestApiVersion": 11,
                    },
                    "headerVersion": 2,
                },
                "listenerName": "SASL_PLAINTEXT",
                "principal": {"principalType": "User", "name": "alice-producer"},
                "groups": [],
                "securityProtocol": "SASL_PLAINTEXT",
            },
            "action": {
                "resourcePattern": {
                    "resourceType": "TOPIC",
                    "name": "alice-orders",
                    "patternType": "LITERAL",
                    "unknown": False,
                },
                "operation": "WRITE",
                "resourceReferenceCount": 1,
                "logIfAllowed": True,
                "logIfDenied": True,
            },
        }
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "url: the OPA decision URL is required"),
        ({"url": "ftp://x/allow"}, "url: the OPA decision URL is required"),
        ({"url": "http://o/a", "timeout": 5}, "unknown option(s) timeout"),
        ({"url": "http://o/a", "allow_on_error": "yes"}, "allow_on_error: a boolean"),
        ({"url": "http://o/a", "cache_maximum_size": 0}, "cache_maximum_size: an integer >= 1"),
        ({"url": "http://o/a", "timeout_ms": True}, "timeout_ms: an integer >= 1"),
        ({"url": "http://o/a", "super_users": "alice"}, "super_users: expected a string"),
    ],
)
def test_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OpaOptions.parse(options, frozenset())


def test_check_config_refuses_bad_options_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        [],
        authorizer_extra="  class: kafkaguard.policy.opa:OpaAuthorizer\n"
        "  options: {url: 'http://127.0.0.1:8181/v1/data/kafka/authz/allow', timeout: 3}\n",
    )
    assert main(["check-config", "--config", str(config)]) == 2
    assert f"{config}:13 authorizer.options: unknown option(s) timeout" in capsys.readouterr().err


def test_super_users_of_both_settings_count() -> None:
    options = OpaOptions.parse(
        {"url": "http://o/a", "super_users": ["User:ops"]}, frozenset({"User:root"})
    )
    assert options.super_users == {"User:ops", "User:root"}


# -- decisions from a real OPA ---------------------------------------------------------------


def test_v0_policy_decides_outside_an_event_loop(opa_v0: OpaServer) -> None:
    events: list[DecisionEvent] = []
    opa = authorizer(opa_v0.url(V0_URL_PATH), events)
    results = opa.authorize(context("alice-producer"), [write("alice-orders"), write("bob-orders")])
    assert results == [ALLOWED, DENIED]
    assert [e.reason for e in events] == [DecisionReason.OPA_ALLOW, DecisionReason.OPA_DENY]
    assert opa.authorize(context("alice-consumer"), [write("alice-orders")]) == [DENIED]
    assert opa.counters.lookups == {"allowed": 1, "denied": 2, "error": 0}


def test_v1_policy_reads_the_groups_field(opa_v1: OpaServer) -> None:
    opa = authorizer(opa_v1.url(V1_URL_PATH))
    assert opa.authorize(context("carol"), [write("shared-events")]) == [ALLOWED]
    assert opa.authorize(context("ext-dave"), [write("shared-events")]) == [DENIED]
    assert opa.authorize(context("carol"), [write("private")]) == [DENIED]


async def test_on_the_event_loop_a_miss_is_pending_then_answered_from_the_cache(
    opa_v0: OpaServer,
) -> None:
    events: list[DecisionEvent] = []
    opa = authorizer(opa_v0.url(V0_URL_PATH), events)
    ctx = context("alice-producer")
    probe = [write("alice-orders"), write("bob-orders")]
    with pytest.raises(DecisionPendingError) as pending:
        opa.authorize(ctx, probe)
    assert events == []  # nothing decided, nothing recorded
    await pending.value.ready
    assert opa.authorize(ctx, probe) == [ALLOWED, DENIED]
    assert opa.counters.lookups["allowed"] + opa.counters.lookups["denied"] == 2
    # The same request asked again (it was held) records nothing twice...
    assert opa.authorize(ctx, probe) == [ALLOWED, DENIED]
    assert len(events) == 2
    # ...and the next request is a cache hit, recorded, without asking OPA.
    assert opa.authorize(context("alice-producer", 8), probe) == [ALLOWED, DENIED]
    assert len(events) == 4
    assert opa.counters.lookups["allowed"] + opa.counters.lookups["denied"] == 2
    assert opa.cache.hits >= 2  # request 8; the held one was answered by its lookups
    await opa.close()


async def test_a_held_request_gets_its_answers_though_the_cache_evicted_them(
    opa_v0: OpaServer,
) -> None:
    opa = authorizer(opa_v0.url(V0_URL_PATH), cache_maximum_size=1)
    ctx = context("alice-producer")
    probe = [write("alice-orders"), write("bob-orders"), write("alice-more")]
    with pytest.raises(DecisionPendingError) as pending:
        opa.authorize(ctx, probe)
    await pending.value.ready
    assert len(opa.cache) == 1
    assert opa.authorize(ctx, probe) == [ALLOWED, DENIED, ALLOWED]  # not pending again
    await opa.close()


async def test_a_request_asking_twice_is_answered_though_the_cache_holds_one(
    opa_v0: OpaServer,
) -> None:
    """A handler that asks twice per request, held at the second call, asks the first again
    from its start: its answers are kept for the request, so it does not go round forever."""
    opa = authorizer(opa_v0.url(V0_URL_PATH), cache_maximum_size=1)
    ctx = context("alice-producer")
    first, second = [write("alice-a"), write("bob-b")], [write("alice-c"), write("alice-d")]
    rounds, results = 0, None
    while results is None and rounds < 5:
        rounds += 1
        try:
            results = opa.authorize(ctx, first) + opa.authorize(ctx, second)
        except DecisionPendingError as pending:
            await pending.ready
    assert (rounds, results) == (3, [ALLOWED, DENIED, ALLOWED, ALLOWED])
    await opa.close()


async def test_concurrent_misses_share_one_lookup(opa_v0: OpaServer) -> None:
    opa = authorizer(opa_v0.url(V0_URL_PATH))
    waits = []
    for correlation_id in range(5):
        with pytest.raises(DecisionPendingError) as pending:
            opa.authorize(context("alice-producer", correlation_id), [write("alice-x")])
        waits.append(pending.value.ready)
    await asyncio.gather(*waits)
    assert opa.counters.lookups == {"allowed": 1, "denied": 0, "error": 0}
    await opa.close()


def test_super_users_are_allowed_without_asking(opa_v0: OpaServer) -> None:
    events: list[DecisionEvent] = []
    opa = authorizer(opa_v0.url(V0_URL_PATH), events, super_users="User:bob-consumer")
    assert opa.authorize(context("bob-consumer"), [write("alice-orders")]) == [ALLOWED]
    assert events[0].reason is DecisionReason.SUPER_USER
    assert opa.counters.lookups == {"allowed": 0, "denied": 0, "error": 0}


def test_authorize_by_resource_type_asks_about_an_empty_prefixed_name(opa_v0: OpaServer) -> None:
    events: list[DecisionEvent] = []
    opa = authorizer(opa_v0.url(V0_URL_PATH), events)
    ctx = context("alice-producer")
    assert opa.authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC) is DENIED
    assert opa.authorize_by_resource_type(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC) is (
        ALLOWED
    )
    pattern = events[0].action.resource_pattern
    assert (pattern.name, pattern.pattern_type) == ("", PatternType.PREFIXED)


def test_authorized_operations_are_the_allowed_supported_ones(opa_v0: OpaServer) -> None:
    opa = authorizer(opa_v0.url(V0_URL_PATH))
    ops = opa.authorized_operations(
        context("alice-producer"), ResourcePattern(ResourceType.TOPIC, "alice-orders")
    )
    assert ops == {AclOperation.WRITE, AclOperation.DESCRIBE}


# -- fail closed --------------------------------------------------------------------------


def test_unreachable_opa_denies_unless_allow_on_error(caplog: pytest.LogCaptureFixture) -> None:
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}{V0_URL_PATH}"
        events: list[DecisionEvent] = []
        closed = authorizer(url, events)
        assert closed.authorize(context("alice-producer"), [write("alice-orders")]) == [DENIED]
        assert events[0].reason is DecisionReason.OPA_ERROR
        assert closed.counters.errors["unreachable"] == 1
        assert "OPA decision failed (unreachable" in caplog.text
        assert "denied" in caplog.text
        opened = authorizer(url, allow_on_error=True)
        assert opened.authorize(context("alice-producer"), [write("alice-orders")]) == [ALLOWED]


def test_a_super_user_group_admits_its_members_without_asking() -> None:
    with refusing_port() as port:  # a lookup would fail, and deny
        opa = authorizer(f"http://127.0.0.1:{port}{V0_URL_PATH}", super_users="Group:admins")
        assert opa.authorize(context("carol", groups=("eng", "admins")), [write("x")]) == [ALLOWED]
        assert opa.authorize(context("carol", groups=("eng",)), [write("x")]) == [DENIED]
        assert opa.authorize(context("admins"), [write("x")]) == [DENIED]  # a user, not a group
        assert opa.counters.lookups == {"allowed": 0, "denied": 0, "error": 2}


def test_reconfigure_applies_the_super_users_and_keeps_the_other_options() -> None:
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}{V0_URL_PATH}"
        events: list[DecisionEvent] = []
        opa = authorizer(url, events, timeout_ms=500)
        assert opa.authorize(context("alice-producer"), [write("x")]) == [DENIED]
        reloaded = {"url": "http://127.0.0.1:1/elsewhere", "super_users": "User:alice-producer"}
        opa.reconfigure(AuthorizerConfig(class_path="other:Class", options=reloaded))
        assert opa.authorize(context("alice-producer"), [write("x")]) == [ALLOWED]
        assert events[-1].reason is DecisionReason.SUPER_USER
        assert (opa.options.url, opa.options.timeout_ms) == (url, 500)
        kept = {"url": url, "timeout_ms": 500, "super_users": "User:alice-producer"}
        assert dict(opa.config.options) == kept
        assert opa.config.class_path == "kafkaguard.policy.opa:OpaAuthorizer"
        # Kafka's super.users (authorizer.super_users) is reloaded too; the option removed.
        opa.reconfigure(AuthorizerConfig(super_users=frozenset({"Group:ops"}), options={}))
        assert opa.authorize(context("alice-producer"), [write("x")]) == [DENIED]
        assert opa.authorize(context("bob", groups=("ops",)), [write("x")]) == [ALLOWED]
        assert "super_users" not in opa.config.options


def test_error_lines_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    with refusing_port() as port:
        opa = authorizer(f"http://127.0.0.1:{port}{V0_URL_PATH}")
        for i in range(5):
            opa.authorize(context("alice-producer"), [write(f"t{i}")])
    assert opa.counters.errors["unreachable"] == 5
    assert caplog.text.count("OPA decision failed") == 1


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/v1/data/kafka/authz", "not_boolean"),  # the package: an object
        ("/v1/data/kafka/authz/no_such_rule", "not_boolean"),  # undefined: no result
        ("/v1/no-such-api", "http_status"),
    ],
)
def test_anything_but_a_boolean_denies(opa_v0: OpaServer, path: str, reason: str) -> None:
    events: list[DecisionEvent] = []
    opa = authorizer(opa_v0.url(path), events)
    assert opa.authorize(context("alice-producer"), [write("alice-orders")]) == [DENIED]
    assert opa.counters.errors[reason] == 1
    assert events[0].reason is DecisionReason.OPA_ERROR


async def test_a_slow_opa_is_a_timeout_and_the_lookup_is_bounded() -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}{V0_URL_PATH}"
        opa = authorizer(url, timeout_ms=200)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(DecisionPendingError) as pending:
            opa.authorize(context("alice-producer"), [write("alice-orders")])
        await pending.value.ready
        assert loop.time() - started < 2.0
        assert opa.authorize(context("alice-producer"), [write("alice-orders")]) == [DENIED]
        assert opa.counters.errors["timeout"] == 1
        await opa.close()


async def test_opa_stopped_denies_and_restarted_allows(tmp_path: Path) -> None:
    server = OpaServer(V0_POLICY, tmp_path / "opa.log", v0=True)
    server.start()
    try:
        opa = authorizer(server.url(V0_URL_PATH), health_interval_ms=50)
        opa.start(["SASL_PLAINTEXT"])

        requests = iter(range(100, 200))

        async def decide(topic: str) -> AuthorizationResult:
            ctx = context("alice-producer", next(requests))
            try:
                return opa.authorize(ctx, [write(topic)])[0]
            except DecisionPendingError as pending:
                await pending.ready
                return opa.authorize(ctx, [write(topic)])[0]

        assert await decide("alice-1") is ALLOWED
        await _until(lambda: not list(opa.not_ready()))
        server.stop()
        assert await decide("alice-2") is DENIED
        await _until(lambda: bool(list(opa.not_ready())))
        assert "opa: http://127.0.0.1" in next(iter(opa.not_ready()))
        server.start()
        await asyncio.sleep(1.1)  # the failed lookup's outcome expires
        assert await decide("alice-2") is ALLOWED
        await _until(lambda: not list(opa.not_ready()))
        await opa.close()
    finally:
        server.stop()


async def _until(condition: Any, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# -- explained ------------------------------------------------------------------------------


def test_explain_asks_opa(
    opa_v0: OpaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = f"  options: {{url: '{opa_v0.url(V0_URL_PATH)}'}}\n"
    config = write_config(
        tmp_path, [], authorizer_extra="  class: kafkaguard.policy.opa:OpaAuthorizer\n" + options
    )
    assert main(run_explain(config, "User:alice-producer", "Write", "--topic", "alice-x")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ALLOWED: User:alice-producer WRITE Topic:LITERAL:alice-x ")
    assert out[1] == "Reason: OpaAllow: OPA's policy answered true → allowed"
    assert "Matching ACLs" not in "\n".join(out)
    assert main(run_explain(config, "User:bob-producer", "Write", "--topic", "alice-x")) == 1
    assert capsys.readouterr().out.splitlines()[1] == (
        "Reason: OpaDeny: OPA's policy answered false → denied"
    )
    assert main(run_explain(config, "User:admin", "Write", "--topic", "alice-x")) == 0
    assert "Reason: SuperUser" in capsys.readouterr().out


def test_explain_says_when_opa_could_not_be_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with refusing_port() as port:
        options = f"  options: {{url: 'http://127.0.0.1:{port}{V0_URL_PATH}'}}\n"
        config = write_config(
            tmp_path,
            [],
            authorizer_extra="  class: kafkaguard.policy.opa:OpaAuthorizer\n" + options,
        )
        assert main(run_explain(config, "User:alice-producer", "Write", "--topic", "a-x")) == 1
    assert capsys.readouterr().out.splitlines()[1] == (
        "Reason: OpaError: OPA could not be asked (the kafkaguard.opa log line says why) → denied"
    )


# -- ACLs are not managed -----------------------------------------------------------------


async def test_acl_apis_answer_security_disabled() -> None:
    opa = authorizer("http://127.0.0.1:1/v1/data/kafka/authz/allow")
    ctx = context("admin")
    with pytest.raises(AclsNotManagedError):
        opa.acls(AclBindingFilter.ANY)
    (created,) = await opa.create_acls(ctx, [_binding()])
    assert created.error is not None and created.error.code is ApiErrorCode.SECURITY_DISABLED
    (deleted,) = await opa.delete_acls(ctx, [AclBindingFilter.ANY])
    assert deleted.error is not None and deleted.error.code is ApiErrorCode.SECURITY_DISABLED
    await opa.close()


def _binding() -> Any:
    from kafkaguard.policy.model import AccessControlEntry, AclBinding, AclPermissionType

    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, "t"),
        AccessControlEntry("User:a", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
    )


def test_input_document_is_json() -> None:
    json.dumps(input_document(context("a"), write("b")))
