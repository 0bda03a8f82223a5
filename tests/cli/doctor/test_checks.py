"""The doctor's verdicts over gathered facts, without a network: each warning the issue names
is raised by the setting it names and by nothing safer, a check that could not run fails, and
the exit code follows failures and warnings."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.cli.doctor import facts as doctor_facts
from kafkaguard.cli.doctor.checks import (
    Finding,
    Status,
    advertised,
    evaluate,
    exit_code,
)
from kafkaguard.cli.doctor.facts import BootstrapProbe, Broker, BrokerProbe, Facts, StoreFacts
from kafkaguard.cli.doctor.report import render_text, report_json
from kafkaguard.config_tree import ConfigSection
from kafkaguard.proxy.config import HostPort, ProxyConfig, is_loopback, parse_config

BROKER = Broker(1, HostPort("10.0.0.5", 9092))
"""The one broker the facts' cluster advertises."""


def config(listener: str = "", authorizer: str = "") -> ProxyConfig:
    """A config of one listener ``L`` (PLAINTEXT on loopback unless ``listener`` says more)."""
    text = (
        "upstream: {bootstrap_servers: ['10.0.0.5:9092']}\n"
        "listeners:\n"
        "  - name: L\n"
        "    port: 9192\n"
        "    broker_ports: {base: 9300}\n"
        + "".join(f"    {line}\n" for line in listener.splitlines())
    )
    if authorizer:
        text += "authorizer:\n" + "".join(f"  {line}\n" for line in authorizer.splitlines())
    return parse_config(ConfigSection.from_text(text, "c.yaml"), Path("/etc/kafkaguard"))


def healthy(cfg: ProxyConfig, **changes: Any) -> Facts:
    """Facts where everything answered (one bootstrap server listing :data:`BROKER`), with
    ``changes`` made."""
    facts = Facts(
        Path("c.yaml"),
        cfg,
        bootstrap=(BootstrapProbe(HostPort("10.0.0.5", 9092), brokers=(BROKER,)),),
        broker_probes=(BrokerProbe(BROKER),),
        store=StoreFacts("file", "file /etc/kafkaguard/acls.yaml", count=3),
    )
    return replace(facts, **changes)


def by_check(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def test_a_safe_configuration_has_no_warning_and_exits_0() -> None:
    findings = evaluate(healthy(config()))
    assert {f.status for f in findings} == {Status.PASS}
    assert exit_code(findings, allow_warnings=False) == 0


def test_plaintext_on_a_wildcard_address_is_a_warning_naming_the_listener() -> None:
    cfg = config("bind_host: 0.0.0.0\nadvertised_host: proxy.example.com")
    (warning,) = by_check(evaluate(healthy(cfg)), "listener.no_tls")
    assert warning.status is Status.WARN and warning.subject == "L"
    assert "0.0.0.0" in warning.message and "PLAINTEXT" in warning.message


def test_sasl_plaintext_off_loopback_warns_that_credentials_travel_in_the_clear() -> None:
    cfg = config(
        "bind_host: 10.1.2.3\nsecurity_protocol: SASL_PLAINTEXT\n"
        "sasl: {enabled_mechanisms: [SCRAM-SHA-512], credentials_file: users.yaml}"
    )
    (warning,) = by_check(evaluate(healthy(cfg)), "listener.no_tls")
    assert "SASL credentials" in warning.message


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("proxy.example.com", False),  # a name is not resolved: it may reach anything
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_allow_everyone_is_a_warning_at_the_top_level() -> None:
    findings = evaluate(healthy(config(authorizer="allow_everyone_if_no_acl_found: true")))
    (warning,) = by_check(findings, "listener.allow_everyone")
    assert warning.subject == "L"
    assert "authorizer.allow_everyone_if_no_acl_found" in warning.message
    assert exit_code(findings, allow_warnings=False) == 1
    assert exit_code(findings, allow_warnings=True) == 0


def test_allow_everyone_on_one_listener_only_names_its_override() -> None:
    cfg = config(
        authorizer="extensions:\n  listeners:\n    L: {allow_everyone_if_no_acl_found: true}"
    )
    (warning,) = by_check(evaluate(healthy(cfg)), "listener.allow_everyone")
    assert "authorizer.extensions.listeners.L.allow_everyone_if_no_acl_found" in warning.message


def test_allow_everyone_overridden_everywhere_still_warns_about_the_top_level() -> None:
    cfg = config(
        authorizer="allow_everyone_if_no_acl_found: true\n"
        "extensions:\n  listeners:\n    L: {allow_everyone_if_no_acl_found: false}"
    )
    findings = evaluate(healthy(cfg))
    assert not by_check(findings, "listener.allow_everyone")
    (warning,) = by_check(findings, "authorizer.allow_everyone")
    assert "a listener added later inherits it" in warning.message


def test_super_users_on_a_plaintext_listener_warn() -> None:
    findings = evaluate(healthy(config(authorizer="super_users: User:admin")))
    (warning,) = by_check(findings, "listener.plaintext_super_users")
    assert "User:admin" in warning.message and "User:ANONYMOUS" in warning.message


def test_anonymous_as_super_user_says_every_client_is_one() -> None:
    findings = evaluate(healthy(config(authorizer="super_users: User:ANONYMOUS")))
    (warning,) = by_check(findings, "listener.plaintext_super_users")
    assert "all are super users" in warning.message


@pytest.mark.parametrize(
    ("client_auth", "warns"), [("none", True), ("requested", True), ("required", False)]
)
def test_anonymous_as_super_user_on_tls_warns_unless_certificates_are_required(
    client_auth: str, warns: bool
) -> None:
    cfg = config(
        "security_protocol: SSL\n"
        f"ssl: {{cert_file: s.pem, key_file: k.pem, ca_file: ca.pem, client_auth: {client_auth}}}",
        authorizer="super_users: User:ANONYMOUS;User:admin",
    )
    findings = evaluate(healthy(cfg))
    assert bool(by_check(findings, "listener.anonymous_super_user")) is warns
    assert not by_check(findings, "listener.plaintext_super_users")


def test_named_super_users_on_tls_do_not_warn() -> None:
    cfg = config(
        "security_protocol: SSL\nssl: {cert_file: s.pem, key_file: k.pem}",
        authorizer="super_users: User:admin",
    )
    assert {f.status for f in evaluate(healthy(cfg))} == {Status.PASS}


def test_super_users_removed_from_the_plaintext_listener_do_not_warn() -> None:
    cfg = config(
        authorizer="super_users: User:admin\nextensions:\n  listeners:\n    L: {super_users: ''}"
    )
    assert not by_check(evaluate(healthy(cfg)), "listener.plaintext_super_users")


def test_a_broker_advertising_the_proxys_own_address_warns() -> None:
    cfg = config("advertised_host: kafka.example.com")
    looping = Broker(1, HostPort("kafka.example.com", 9192))
    facts = healthy(
        cfg,
        bootstrap=(BootstrapProbe(HostPort("10.0.0.5", 9092), brokers=(looping,)),),
        broker_probes=(BrokerProbe(looping),),
    )
    (warning,) = by_check(evaluate(facts), "upstream.advertises_proxy")
    assert warning.subject == "node 1 at kafka.example.com:9192"
    assert "listener L's advertised bootstrap address" in warning.message


def test_a_broker_advertising_a_proxy_broker_port_warns() -> None:
    looping = Broker(1, HostPort("127.0.0.1", 9301))  # base 9300 + node 1, bound on loopback
    facts = healthy(
        config(), bootstrap=(BootstrapProbe(HostPort("10.0.0.5", 9092), brokers=(looping,)),)
    )
    (warning,) = by_check(evaluate(facts), "upstream.advertises_proxy")
    assert "address for node 1" in warning.message


def test_a_bootstrap_server_that_is_the_proxy_itself_warns() -> None:
    cfg = parse_config(
        ConfigSection.from_text(
            "upstream: {bootstrap_servers: ['127.0.0.1:9192']}\n"
            "listeners: [{name: L, port: 9192, broker_ports: {base: 9300}}]\n",
            "c.yaml",
        )
    )
    (warning,) = by_check(evaluate(healthy(cfg)), "upstream.loop")
    assert warning.subject == "127.0.0.1:9192"
    assert "listener L's advertised bootstrap address" in warning.message


def test_an_unreachable_bootstrap_server_fails_naming_it_and_its_error() -> None:
    down = BootstrapProbe(HostPort("10.9.9.9", 9092), error="no answer within 10 s")
    facts = healthy(config(), bootstrap=(*healthy(config()).bootstrap, down))
    failed = [f for f in evaluate(facts) if f.status is Status.FAIL]
    assert failed == [
        Finding(failed[0].section, "upstream.bootstrap", Status.FAIL, "10.9.9.9:9092", down.error)
    ]
    assert exit_code(failed, allow_warnings=True) == 1


def test_no_broker_listed_is_a_failure_not_an_empty_list() -> None:
    silent = BootstrapProbe(HostPort("10.0.0.5", 9092), metadata_error="closed")
    findings = evaluate(healthy(config(), bootstrap=(silent,), broker_probes=()))
    assert [f.check for f in findings if f.status is Status.FAIL] == [
        "upstream.metadata",
        "upstream.brokers",
    ]


def test_a_store_that_did_not_load_fails() -> None:
    store = StoreFacts("file", "file /x/acls.yaml", error="/x/acls.yaml: No such file")
    (finding,) = by_check(evaluate(healthy(config(), store=store)), "acl_store")
    assert finding.status is Status.FAIL and "No such file" in finding.message


def kafka_store(**settings: str) -> StoreFacts:
    """A Kafka-topic store whose topic ``acls`` has ``settings`` (``_`` for ``.``), judged by
    the store's own rule."""
    from kafkaguard.topic_table import TopicSettings, unsafe_settings

    configs = {key.replace("_", "."): value for key, value in settings.items()}
    topic = doctor_facts.TopicFacts(
        "acls",
        tuple((key, configs.get(key)) for key in doctor_facts.TOPIC_SETTINGS),
        unsafe_settings(TopicSettings("acls"), configs),
    )
    if topic.unsafe is not None:
        return StoreFacts("kafka", "kafka topic acls", error="refused", topic=topic)
    return StoreFacts("kafka", "kafka topic acls", count=2, topic=topic)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"cleanup_policy": "delete"}, "cleanup.policy=delete"),
        ({"cleanup_policy": "compact,delete", "retention_ms": "1000"}, "retention.ms=1000"),
        (
            {"cleanup_policy": "compact", "delete_retention_ms": "1000"},
            "delete.retention.ms=1000",
        ),
    ],
)
def test_a_store_topic_that_could_lose_unread_records_fails_naming_the_setting(
    settings: dict[str, str], named: str
) -> None:
    store = kafka_store(**settings)
    findings = evaluate(healthy(config(), store=store))
    (topic,) = by_check(findings, "acl_store.topic")
    assert (topic.status, topic.subject) == (Status.FAIL, "topic acls")
    assert named in topic.message and "kafka-configs.sh --alter" in topic.message
    assert [f.status for f in by_check(findings, "acl_store")] == [Status.FAIL]


def test_a_compacted_store_topic_with_enough_delete_retention_passes() -> None:
    store = kafka_store(cleanup_policy="compact", delete_retention_ms="604800000")
    findings = evaluate(healthy(config(), store=store))
    (topic,) = by_check(findings, "acl_store.topic")
    assert topic.status is Status.PASS
    assert topic.message.startswith(
        "cleanup.policy=compact, delete.retention.ms=604800000, retention.ms=(not given): "
    )
    assert exit_code(findings, allow_warnings=False) == 0


OPA_URL = "http://127.0.0.1:8181/v1/data/kafka/authz/allow"


def opa(**changes: Any) -> doctor_facts.OpaFacts:
    facts = doctor_facts.OpaFacts(
        url=OPA_URL,
        health_url="http://127.0.0.1:8181/health",
        health_error=None,
        probe="DESCRIBE on Topic:LITERAL:p by User:kafkaguard-doctor on L",
        decision=False,
        decision_error=None,
        allow_on_error=False,
    )
    return replace(facts, **changes)


def test_a_healthy_opa_answering_a_boolean_passes() -> None:
    findings = evaluate(healthy(config(), opa=opa()))
    assert [(f.check, f.status) for f in findings if f.check.startswith("opa.")] == [
        ("opa.health", Status.PASS),
        ("opa.decision", Status.PASS),
    ]
    assert "answers false for a probe" in by_check(findings, "opa.decision")[0].message
    assert exit_code(findings, allow_warnings=False) == 0


def test_an_unreachable_opa_fails_naming_the_url_and_the_error() -> None:
    error = "unreachable: ConnectionRefusedError: [Errno 111] Connection refused"
    findings = evaluate(healthy(config(), opa=opa(health_error=error, decision_error=error)))
    (health,) = by_check(findings, "opa.health")
    assert (health.status, health.subject) == (Status.FAIL, "http://127.0.0.1:8181/health")
    assert health.message.startswith(error)
    (decision,) = by_check(findings, "opa.decision")
    assert (decision.status, decision.subject) == (Status.FAIL, OPA_URL)
    assert error in decision.message and decision.message.endswith("would be denied")


def test_allow_on_error_is_a_warning_that_opa_fails_open() -> None:
    findings = evaluate(healthy(config(), opa=opa(allow_on_error=True)))
    (warning,) = by_check(findings, "opa.allow_on_error")
    assert warning.status is Status.WARN and "fail open" in warning.message
    assert exit_code(findings, allow_warnings=False) == 1
    assert exit_code(findings, allow_warnings=True) == 0
    failing = evaluate(healthy(config(), opa=opa(allow_on_error=True, decision_error="x")))
    assert by_check(failing, "opa.decision")[0].message.endswith("allowed (allow_on_error)")


def test_a_node_without_a_port_fails() -> None:
    cfg = parse_config(  # the explicit map leaves node 1, the cluster's broker, out
        ConfigSection.from_text(
            "upstream: {bootstrap_servers: ['10.0.0.5:9092']}\n"
            "listeners: [{name: L, port: 9192, broker_ports: {map: {0: 9300}}}]\n",
            "c.yaml",
        )
    )
    (failure,) = by_check(evaluate(healthy(cfg)), "listener.broker_port")
    assert failure.status is Status.FAIL and "node 1" in failure.message


def test_an_unloadable_configuration_fails_and_nothing_else_claims_to_pass() -> None:
    facts = Facts(Path("c.yaml"), None, config_error="c.yaml:3 listeners[0].port: bad")
    findings = evaluate(facts)
    assert [(f.check, f.status) for f in findings] == [("config", Status.FAIL)]
    document = report_json(facts, findings, allow_warnings=True)
    assert document["exit_code"] == 1 and document["listeners"] is None


def test_sni_listeners_advertise_their_pattern() -> None:
    cfg = parse_config(
        ConfigSection.from_text(
            "upstream: {bootstrap_servers: ['10.0.0.5:9092']}\n"
            "listeners:\n  - {name: S, security_protocol: SSL, port: 9094, routing: sni,\n"
            "     bootstrap_host: kafka.example.com,\n"
            "     advertised_host_pattern: 'b-$(nodeId).kafka.example.com',\n"
            "     ssl: {cert_file: s.pem, key_file: k.pem}}\n",
            "c.yaml",
        ),
        Path("/etc/kafkaguard"),
    )
    view = advertised(cfg.listeners[0], (BROKER,))
    assert view.bootstrap == HostPort("kafka.example.com", 9094)
    assert view.nodes == ((1, HostPort("b-1.kafka.example.com", 9094)),)


def test_the_text_lists_the_advertised_brokers_and_says_clients_must_not_reach_them() -> None:
    facts = healthy(config())
    text = "\n".join(render_text(facts, evaluate(facts), allow_warnings=False))
    assert "  node 1: 10.0.0.5:9092\n" in text
    assert "Clients must not be able to reach any of these addresses" in text
    assert text.endswith("Result: nothing wrong found; exit 0")


def test_the_documented_example_is_what_doctor_prints_for_it() -> None:
    """docs/doctor.md's example checklist, rendered from the facts it describes."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "doctor.md"
    (example,) = re.findall(r"```text\n(.*?)```", docs.read_text(encoding="utf-8"), re.DOTALL)
    cfg = parse_config(
        ConfigSection.from_text(
            "upstream: {bootstrap_servers: ['10.0.0.5:9092', '10.0.0.6:9092']}\n"
            "listeners:\n  - {name: PLAIN, bind_host: 0.0.0.0, port: 9192,\n"
            "     advertised_host: proxy.example.com, broker_ports: {base: 9300}}\n"
            "acl_store: {type: file, path: /etc/kafkaguard/acls.yaml}\n",
            "config.yaml",
        ),
        Path("/etc/kafkaguard"),
    )
    facts = healthy(
        cfg,
        config_path=Path("config.yaml"),
        bootstrap=(
            BootstrapProbe(HostPort("10.0.0.5", 9092), brokers=(BROKER,)),
            BootstrapProbe(HostPort("10.0.0.6", 9092), error="no answer within 10 s"),
        ),
        store=StoreFacts("file", "file /etc/kafkaguard/acls.yaml", count=12),
    )
    assert render_text(facts, evaluate(facts), allow_warnings=False) == example.splitlines()
