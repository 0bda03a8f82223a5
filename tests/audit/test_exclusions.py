"""``audit.exclude``, ``audit.include`` routes and Kafka's logging flags: what is written, and
what is counted instead (docs/audit.md, "What is written")."""

from __future__ import annotations

import urllib.request
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.metadata.v12 import request as md_req
from prometheus_client.parser import text_string_to_metric_families

from kafkaguard.audit import AuditTrail
from kafkaguard.audit.config import AuditConfig, AuditRule, parse_audit_config
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import (
    AclOperation,
    PatternType,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import AdminConfig
from kafkaguard.tansu import TansuBroker
from tests.audit.test_writer import context, records, topic
from tests.support.proxy_fixture import (
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient

METADATA, FIND_COORDINATOR = 3, 10
ZERO_UUID = uuid.UUID(int=0)
NO_ACLS = PolicyConfig(authorizer=AuthorizerConfig(), acl_store=AclStoreConfig(type="memory"))


def parse(text: str) -> AuditConfig:
    return parse_audit_config(ConfigSection.from_text(text).section("audit"), Path("/x"))


def test_rules_parse_with_kafka_names() -> None:
    config = parse(
        """
audit:
  format: cloudevents
  exclude:
    - {principals: ["User:monitoring"], apis: [Metadata, FindCoordinator]}
    - {resource_types: [group], resource_name: "console-consumer-", pattern_type: PREFIXED}
  include:
    - {operations: [Write, IDEMPOTENT_WRITE], denied: false}
  kafka: {format: kafkaguard}
"""
    )
    assert (config.format, config.topic_format) == ("cloudevents", "kafkaguard")
    assert config.exclude == (
        AuditRule(principals=frozenset({"User:monitoring"}), apis=frozenset({3, 10})),
        AuditRule(
            resource_types=frozenset({ResourceType.GROUP}),
            resource_name="console-consumer-",
            pattern_type=PatternType.PREFIXED,
        ),
    )
    assert config.include == (
        AuditRule(
            operations=frozenset({AclOperation.WRITE, AclOperation.IDEMPOTENT_WRITE}),
            denied=False,
        ),
    )
    assert parse("audit: {}").topic_format == "kafkaguard"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("{apis: [Metdata]}", "unknown API 'Metdata'"),
        ("{operations: [Rread]}", "unknown AclOperation 'Rread'"),
        ("{principals: User:a}", "must be a list of strings"),
        ("{allowed: false}", "unknown key 'allowed'"),  # only routes choose results
        ("{}", "names nothing to match"),
        ("{resource_name: x, pattern_type: MATCH}", "must be one of LITERAL, PREFIXED"),
    ],
)
def test_bad_rules_name_their_place(rule: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse(f"audit:\n  exclude:\n    - {rule}\n")
    assert "audit.exclude[0]" in str(info.value)


async def _trail(tmp_path: Path, config: AuditConfig, *calls: tuple[str, object]) -> AuditTrail:
    trail = AuditTrail(config, {"A": "log_only"})
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=trail.on_decision)
    auth.load_snapshot([acl_binding(ResourceType.TOPIC, "ok", "User:bob", AclOperation.WRITE)])
    trail.start()
    try:
        for principal_api, action in calls:
            principal, _, api = principal_api.partition("/")
            ctx = context("A", api_key=int(api or 0), principal=principal)
            auth.authorize(ctx, [action])  # type: ignore[list-item]
    finally:
        await trail.close()
    return trail


CALLS = (
    ("User:bob", topic("ok")),  # allowed
    ("User:bob", topic("nope")),  # denied
    (f"User:monitoring/{METADATA}", topic("ok", AclOperation.DESCRIBE)),
    (f"User:bob/{METADATA}", topic("payments.eu", AclOperation.DESCRIBE)),
    ("User:bob", topic("payments.us")),
    ("User:bob", topic("quiet", log_if_denied=False)),  # all-topics filtering, KIP-430
)


def _written(tmp_path: Path) -> list[tuple[str, str, str]]:
    return sorted(
        (str(r["principal"]), str(r["resource_name"]), str(r["result"])) for r in records(tmp_path)
    )


async def test_exclusions_drop_and_count(tmp_path: Path) -> None:
    config = parse(
        f"""
audit:
  enabled: true
  dir: {tmp_path}
  allowed: individual
  exclude:
    - {{principals: ["User:monitoring"]}}
    - {{apis: [Metadata], resource_types: [TOPIC],
       resource_name: "payments.", pattern_type: PREFIXED}}
"""
    )
    trail = await _trail(tmp_path, config, *CALLS)
    assert _written(tmp_path) == [
        ("User:bob", "nope", "DENIED"),
        ("User:bob", "ok", "ALLOWED"),
        ("User:bob", "payments.us", "DENIED"),  # not Metadata: not excluded
    ]
    a = trail.counters["A"]
    assert (a.decisions, a.denied, a.would_deny, a.excluded, a.unlogged) == (3, 2, 2, 2, 1)


async def test_routes_choose_what_is_written(tmp_path: Path) -> None:
    config = parse(
        f"""
audit:
  enabled: true
  dir: {tmp_path}
  allowed: individual
  include:
    - {{resource_name: "payments.", pattern_type: PREFIXED, allowed: false}}
    - {{principals: ["User:bob"], operations: [WRITE]}}
"""
    )
    trail = await _trail(tmp_path, config, *CALLS)
    assert _written(tmp_path) == [
        ("User:bob", "nope", "DENIED"),
        ("User:bob", "ok", "ALLOWED"),
        ("User:bob", "payments.eu", "DENIED"),  # denied DESCRIBE: the first route writes it
        ("User:bob", "payments.us", "DENIED"),
    ]
    assert (trail.counters["A"].excluded, trail.counters["A"].unlogged) == (1, 1)


async def test_unlogged_decisions_are_counted_and_written_on_request(tmp_path: Path) -> None:
    base = AuditConfig(enabled=True, dir=tmp_path / "off", allowed="individual")
    trail = await _trail(tmp_path, base, *CALLS)
    assert "quiet" not in {r for _, r, _ in _written(tmp_path / "off")}
    assert trail.counters["A"].unlogged == 1
    on = AuditConfig(enabled=True, dir=tmp_path / "on", allowed="individual", include_unlogged=True)
    trail = await _trail(tmp_path, on, *CALLS)
    assert ("User:bob", "quiet", "DENIED") in _written(tmp_path / "on")
    assert trail.counters["A"].unlogged == 0


def test_wildcard_literal_matches_every_name() -> None:
    rule = AuditRule(resource_name="*")
    events: list[object] = []
    auth = StandardAuthorizer(AuthorizerConfig(), decision_listener=events.append)
    auth.load_snapshot([])
    auth.authorize(context(), [topic("anything")])
    assert rule.matches(events[0])  # type: ignore[arg-type]
    assert not AuditRule(resource_name="anything-else").matches(events[0])  # type: ignore[arg-type]


@pytest.mark.integration
def test_metrics_expose_what_the_trail_left_out(tansu: TansuBroker, tmp_path: Path) -> None:
    """A running proxy's ``/metrics``: audited, unlogged and excluded decisions per listener,
    equal to the trail's counters. No ACLs and no super user: every check is denied."""
    topic_name = unique_name("audited")
    with RawKafkaClient(tansu.address.host, tansu.address.port) as direct:
        _, created = direct.request(
            ct_req.CreateTopicsRequest(
                topics=(
                    ct_req.CreatableTopic(
                        name=topic_name,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=timedelta(seconds=30),
                validate_only=False,
            )
        )
    assert created.topics[0].error_code == ErrorCode.none
    audit = parse(
        f"""
audit:
  enabled: true
  dir: {tmp_path}
  exclude:
    - {{apis: [Metadata], resource_name: "excluded-", pattern_type: PREFIXED}}
"""
    )
    config = replace(
        proxy_config(tansu.address, policy=NO_ACLS), audit=audit, admin=AdminConfig(port=0)
    )
    running = start_proxy_thread(config)
    try:
        host, port = running.bootstrap.rsplit(":", 1)
        with RawKafkaClient(host, int(port)) as client:
            for names in ([topic_name], ["excluded-1", "excluded-2"], None):  # None: all
                topics = None
                if names is not None:
                    topics = tuple(
                        md_req.MetadataRequestTopic(topic_id=ZERO_UUID, name=n) for n in names
                    )
                client.request(
                    md_req.MetadataRequest(
                        topics=topics,
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    )
                )
        assert running.server.admin is not None
        url = f"http://127.0.0.1:{running.server.admin.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        counters = running.server.audit.counters["PLAINTEXT"]
    finally:
        stop_proxy_thread(running)
    exposed = {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "kafkaguard_audit_decisions"
        for sample in family.samples
        if sample.name == "kafkaguard_audit_decisions_total"
        and sample.labels["listener"] == "PLAINTEXT"
    }
    # The named topic's DESCRIBE is audited; the two excluded- names are excluded; the
    # all-topics request filters the created topic (and any other) silently: unlogged.
    assert (counters.decisions, counters.excluded) == (1, 2) and counters.unlogged >= 1
    assert exposed == {
        "audited": counters.decisions,
        "excluded": counters.excluded,
        "unlogged": counters.unlogged,
    }
