"""Configs (ConfigHelper.handleDescribeConfigsRequest, ConfigAdminManager.preprocess +
ControllerApis.authorizeAlterResource) driven without sockets."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from kio.schema.alter_configs.v1 import request as ac_req
from kio.schema.describe_configs.v4 import request as dc_req
from kio.schema.describe_configs.v4 import response as dc_resp
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac_req
from kio.schema.incremental_alter_configs.v1 import response as iac_resp

from kafkaguard.proxy.handlers.support.base import AskFirst, Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def describe(*resources: tuple[int, str]) -> Any:
    return dc_req.DescribeConfigsRequest(
        resources=tuple(
            dc_req.DescribeConfigsResource(
                resource_type=t, resource_name=n, configuration_keys=None
            )
            for t, n in resources
        ),
        include_synonyms=False,
        include_documentation=False,
    )


def described(*resources: tuple[int, str]) -> Any:
    return dc_resp.DescribeConfigsResponse(
        throttle_time=timedelta(0),
        results=tuple(
            dc_resp.DescribeConfigsResult(
                error_code=ErrorCode.none,
                error_message=None,
                resource_type=t,
                resource_name=n,
                configs=(),
            )
            for t, n in resources
        ),
    )


def codes(results: Any) -> list[tuple[int, str, int]]:
    return [(int(r.resource_type), r.resource_name, int(r.error_code)) for r in results]


def test_describe_configs_per_resource_type_codes_in_order() -> None:
    h = HandlerHarness(
        [
            acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", "t1"),
            acl(ALICE, "DESCRIBE_CONFIGS", "GROUP", "g1"),
        ]
    )
    body = describe((BROKER, "1"), (TOPIC, "t1"), (TOPIC, "t2"), (GROUP, "g1"), (GROUP, "g2"))
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [r.resource_name for r in h.forwarded_body(verdict, body).resources] == ["t1", "g1"]
    response = h.complete(verdict, described((TOPIC, "t1"), (GROUP, "g1")))
    assert codes(response.results) == [
        (BROKER, "1", 31),
        (TOPIC, "t1", 0),
        (TOPIC, "t2", 29),
        (GROUP, "g1", 0),
        (GROUP, "g2", 30),
    ]
    assert response.results[2].error_message == "Topic authorization failed."
    assert h.checked()[0] == ("DESCRIBE_CONFIGS", "CLUSTER", "kafka-cluster", "DENIED")


def test_describe_configs_broker_logger_and_client_metrics_need_the_cluster() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE_CONFIGS", "CLUSTER", "kafka-cluster")])
    verdict = h.send(describe((BROKER_LOGGER, "1"), (CLIENT_METRICS, "m")))
    assert isinstance(verdict, Forward) and verdict.request is None
    verdict = HandlerHarness([]).send(describe((BROKER_LOGGER, "1"), (CLIENT_METRICS, "m")))
    assert isinstance(verdict, Respond)
    assert codes(verdict.response.results) == [(BROKER_LOGGER, "1", 31), (CLIENT_METRICS, "m", 31)]


def test_describe_configs_unknown_type_fails_the_whole_request() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", "*")])
    verdict = h.send(describe((TOPIC, "t"), (99, "x"), (TOPIC, "u")))
    assert isinstance(verdict, Respond)
    assert codes(verdict.response.results) == [(TOPIC, "t", 42), (99, "x", 42), (TOPIC, "u", 42)]
    # Checks before the bad resource were made (Kafka's partition stops at the exception).
    assert [n for _, _, n, _ in h.checked()] == ["t"]


def incremental(*resources: tuple[int, str, tuple[tuple[str, int, str | None], ...]]) -> Any:
    return iac_req.IncrementalAlterConfigsRequest(
        resources=tuple(
            iac_req.AlterConfigsResource(
                resource_type=t,
                resource_name=n,
                configs=tuple(
                    iac_req.AlterableConfig(name=k, config_operation=op, value=v)
                    for k, op, v in configs
                ),
            )
            for t, n, configs in resources
        ),
        validate_only=False,
    )


def altered(*resources: tuple[int, str]) -> Any:
    return iac_resp.IncrementalAlterConfigsResponse(
        throttle_time=timedelta(0),
        responses=tuple(
            iac_resp.AlterConfigsResourceResponse(
                error_code=ErrorCode.none, error_message=None, resource_type=t, resource_name=n
            )
            for t, n in resources
        ),
    )


SET = (("retention.ms", 0, "1"),)


def test_incremental_alter_configs_per_resource() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER_CONFIGS", "TOPIC", "t1")])
    body = incremental(
        (TOPIC, "t1", SET), (TOPIC, "t2", SET), (GROUP, "g", SET), (CLIENT_METRICS, "m", SET)
    )
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [r.resource_name for r in h.forwarded_body(verdict, body).resources] == ["t1"]
    response = h.complete(verdict, altered((TOPIC, "t1")))
    assert codes(response.responses) == [
        (TOPIC, "t1", 0),
        (TOPIC, "t2", 29),
        (GROUP, "g", 30),
        (CLIENT_METRICS, "m", 31),
    ]
    assert response.responses[3].error_message == "Cluster authorization failed."


def test_incremental_alter_configs_prechecks_come_before_authorization() -> None:
    h = HandlerHarness([])
    verdict = h.send(
        incremental(
            (TOPIC, "dup", SET),
            (TOPIC, "keys", (("a", 0, "1"), ("a", 0, "2"))),
            (TOPIC, "null", (("a", 0, None), ("b", 1, None))),
            (TOPIC, "dup", SET),
            (64, "x", SET),
        )
    )
    assert isinstance(verdict, Respond)
    got = [
        (r.resource_name, int(r.error_code), r.error_message) for r in verdict.response.responses
    ]
    assert got == [
        ("dup", 42, "Each resource must appear at most once."),
        ("dup", 42, "Each resource must appear at most once."),
        ("keys", 42, "Error due to duplicate config keys"),
        ("null", 42, "Null value not supported for : a"),
        ("x", 42, "Unknown resource type 64"),
    ]
    assert h.checked() == []


def test_incremental_broker_logger_is_authorized_during_preprocessing() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER_CONFIGS", "TOPIC", "t")])
    body = incremental((TOPIC, "t", SET), (BROKER_LOGGER, "1", (("kafka", 0, "DEBUG"),)))
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    response = h.complete(verdict, altered((TOPIC, "t")))
    assert codes(response.responses) == [(TOPIC, "t", 0), (BROKER_LOGGER, "1", 31)]
    # The logger's cluster check happens in the broker's pre-processing, before the topic's.
    assert [t for _, t, _, _ in h.checked()] == ["CLUSTER", "TOPIC"]
    h = HandlerHarness([acl(ALICE, "ALTER_CONFIGS", "CLUSTER", "kafka-cluster")])
    verdict = h.send(incremental((BROKER_LOGGER, "1", (("kafka", 0, "DEBUG"),))))
    assert isinstance(verdict, Forward) and verdict.request is None


def test_legacy_alter_configs_rejects_broker_logger_and_null_values() -> None:
    body = ac_req.AlterConfigsRequest(
        resources=(
            ac_req.AlterConfigsResource(
                resource_type=BROKER_LOGGER,
                resource_name="1",
                configs=(ac_req.AlterableConfig(name="kafka", value="DEBUG"),),
            ),
            ac_req.AlterConfigsResource(
                resource_type=TOPIC,
                resource_name="t",
                configs=(ac_req.AlterableConfig(name="a", value=None),),
            ),
            ac_req.AlterConfigsResource(
                resource_type=BROKER,
                resource_name="",
                configs=(ac_req.AlterableConfig(name="a", value="1"),),
            ),
        ),
        validate_only=False,
    )
    h = HandlerHarness([acl(ALICE, "ALTER_CONFIGS", "CLUSTER", "kafka-cluster")])
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    assert [r.resource_type for r in h.forwarded_body(verdict, body).resources] == [BROKER]
    response = h.complete(verdict, altered_legacy((BROKER, "")))
    assert [(int(r.resource_type), int(r.error_code)) for r in response.responses] == [
        (BROKER_LOGGER, 42),
        (TOPIC, 42),
        (BROKER, 0),
    ]
    assert h.checked() == [("ALTER_CONFIGS", "CLUSTER", "kafka-cluster", "ALLOWED")]


def altered_legacy(*resources: tuple[int, str]) -> Any:
    from kio.schema.alter_configs.v1 import response as ac_resp

    return ac_resp.AlterConfigsResponse(
        throttle_time=timedelta(0),
        responses=tuple(
            ac_resp.AlterConfigsResourceResponse(
                error_code=ErrorCode.none, error_message=None, resource_type=t, resource_name=n
            )
            for t, n in resources
        ),
    )


def test_alter_configs_all_allowed_forwards_original_bytes() -> None:
    h = HandlerHarness([acl(ALICE, "ALTER_CONFIGS", "TOPIC", "*")])
    verdict = h.send(incremental((TOPIC, "a", SET), (TOPIC, "b", SET)))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None


# -- review regression: broker addresses never reach the client ---------------------------------


def broker_config(name: str, value: str | None, *synonyms: tuple[str, str]) -> Any:
    return dc_resp.DescribeConfigsResourceResult(
        name=name,
        value=value,
        read_only=False,
        config_source=4,
        is_sensitive=False,
        synonyms=tuple(
            dc_resp.DescribeConfigsSynonym(name=n, value=v, source=4) for n, v in synonyms
        ),
        config_type=2,
        documentation=None,
    )


def with_configs(response: Any, index: int, *configs: Any) -> Any:
    results = list(response.results)
    results[index] = replace(results[index], configs=configs)
    return replace(response, results=tuple(results))


def test_describe_configs_hides_broker_addresses_as_sensitive() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE_CONFIGS", "CLUSTER", "kafka-cluster")])
    verdict = h.send(describe((BROKER, "1")))
    assert isinstance(verdict, Forward) and verdict.request is None
    addresses = [
        ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
        ("advertised.listeners", "PLAINTEXT://kafka-1.internal:9092"),
        ("controller.quorum.voters", "1@kafka-1.internal:9093"),
        ("controller.quorum.bootstrap.servers", "kafka-1.internal:9093"),
        ("remote.log.metadata.common.client.bootstrap.servers", "kafka-1.internal:9092"),
        ("early.start.listeners", "CONTROLLER"),
        ("zookeeper.connect", "zk.internal:2181"),
    ]
    reply = with_configs(
        described((BROKER, "1")),
        0,
        *(broker_config(n, v, (n, v)) for n, v in addresses),
        broker_config("log.retention.hours", "168", ("log.retention.hours", "168")),
    )
    out = h.complete(verdict, reply)
    shown = [
        (c.name, c.value, c.is_sensitive, [s.value for s in c.synonyms])
        for c in out.results[0].configs
    ]
    assert shown == [(n, None, True, [None]) for n, _ in addresses] + [
        ("log.retention.hours", "168", False, ["168"])
    ]
    assert "internal" not in repr(out)
    # nothing to hide: the broker's own bytes
    plain = with_configs(described((BROKER, "1")), 0, broker_config("num.io.threads", "8"))
    assert h.complete(verdict, plain) is plain


def test_describe_configs_hides_broker_addresses_next_to_denied_resources() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE_CONFIGS", "CLUSTER", "kafka-cluster")])
    verdict = h.send(describe((TOPIC, "secret"), (BROKER, "")))
    assert isinstance(verdict, Forward)
    reply = with_configs(
        described((BROKER, "")), 0, broker_config("listeners", "PLAINTEXT://10.0.0.5:9092")
    )
    out = h.complete(verdict, reply)
    assert codes(out.results) == [(TOPIC, "secret", 29), (BROKER, "", 0)]
    assert [(c.name, c.value) for c in out.results[1].configs] == [("listeners", None)]


def test_describe_configs_without_broker_resources_is_not_decoded() -> None:
    h = HandlerHarness(
        [
            acl(ALICE, "DESCRIBE_CONFIGS", "CLUSTER", "kafka-cluster"),
            acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", "t"),
        ]
    )
    for resources in (((TOPIC, "t"),), ((BROKER_LOGGER, "1"), (TOPIC, "t"))):
        verdict = h.send(describe(*resources))
        assert isinstance(verdict, Forward) and verdict.rewrite is None


def test_incremental_broker_logger_denial_has_no_message() -> None:
    # RuntimeLoggerManager throws ClusterAuthorizationException with the default message,
    # which ApiError.fromThrowable drops (the referee answers null).
    verdict = HandlerHarness([]).send(incremental((BROKER_LOGGER, "1", (("kafka", 0, "INFO"),))))
    assert isinstance(verdict, Respond)
    (result,) = verdict.response.responses
    assert (int(result.error_code), result.error_message) == (31, None)


def broker_failed(name: str, code: ErrorCode, message: str) -> Any:
    return iac_resp.IncrementalAlterConfigsResponse(
        throttle_time=timedelta(0),
        responses=(
            iac_resp.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=BROKER, resource_name=name
            ),
        ),
    )


def test_denied_broker_resource_is_validated_by_the_broker_first() -> None:
    # ConfigAdminManager.preprocess validates BROKER resources before the controller
    # authorizes them: the proxy forwards them validate-only and keeps only the broker's 42.
    h = HandlerHarness([])
    body = incremental((BROKER, "7", SET))
    verdict = h.send(body)
    assert isinstance(verdict, Forward)
    forwarded = h.forwarded_body(verdict, body)
    assert forwarded.validate_only is True
    assert [r.resource_name for r in forwarded.resources] == ["7"]
    message = "Unexpected broker id, expected 1, but received 7"
    response = h.complete(verdict, broker_failed("7", ErrorCode.invalid_request, message))
    (result,) = response.responses
    assert (int(result.error_code), result.error_message) == (42, message)
    # Valid for the broker (or rejected by anything after preprocessing): the 31 it deserves.
    for code, text in ((ErrorCode.none, None), (ErrorCode.invalid_config, "ELR")):
        verdict = h.send(body)
        response = h.complete(verdict, broker_failed("7", code, text or ""))
        (result,) = response.responses
        assert (int(result.error_code), result.error_message) == (
            31,
            "Cluster authorization failed.",
        )


def test_denied_broker_address_config_is_never_sent_for_validation() -> None:
    # A broker's message about an invalid listener may quote its real listeners (Kafka 3.x's
    # DynamicListenerConfig did): a principal without ALTER_CONFIGS gets the 31, unforwarded.
    h = HandlerHarness([])
    for name in ("advertised.listeners", "listener.name.x.listeners", "listeners"):
        body = incremental((BROKER, "1", ((name, 0, "PLAINTEXT://evil:1"),)))
        verdict = h.send(body)
        assert isinstance(verdict, Respond), name
        assert codes(verdict.response.responses) == [(BROKER, "1", 31)]


def test_denied_broker_resource_next_to_applied_changes_is_validated_first() -> None:
    # One request cannot both apply the topic change and only validate the BROKER resource:
    # the BROKER resource is validated in a question of its own, then the change forwarded.
    h = HandlerHarness([acl(ALICE, "ALTER_CONFIGS", "TOPIC", "t")])
    body = incremental((TOPIC, "t", SET), (BROKER, "1", SET))
    asked = h.send(body)
    assert isinstance(asked, AskFirst)
    question: Any = asked.question
    assert question.validate_only is True
    assert [r.resource_name for r in question.resources] == ["1"]
    valid = altered((BROKER, "1"))
    invalid = replace(
        valid,
        responses=tuple(
            replace(r, error_code=ErrorCode.invalid_request, error_message="bad value")
            for r in valid.responses
        ),
    )
    for answer, broker_code in ((valid, 31), (invalid, 42), (altered(), 31)):
        verdict = h.answer(asked, answer)
        assert isinstance(verdict, Forward)
        forwarded = h.forwarded_body(verdict, body)
        assert forwarded.validate_only is False
        assert [r.resource_name for r in forwarded.resources] == ["t"]
        response = h.complete(verdict, altered((TOPIC, "t")))
        assert codes(response.responses) == [(TOPIC, "t", 0), (BROKER, "1", broker_code)]
    # The same request validate-only: the broker validates both.
    verdict = h.send(replace(body, validate_only=True))
    assert isinstance(verdict, Forward)
    forwarded = h.forwarded_body(verdict, replace(body, validate_only=True))
    assert [r.resource_name for r in forwarded.resources] == ["t", "1"]
    response = h.complete(verdict, altered((TOPIC, "t"), (BROKER, "1")))
    assert codes(response.responses) == [(TOPIC, "t", 0), (BROKER, "1", 31)]
