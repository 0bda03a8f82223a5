"""A real Prometheus scraping the admin listener, and the deploy/ files checked against it.

One proxy in front of the session's Tansu, with three listeners: PLAINTEXT (enforcing),
SASL_PLAINTEXT (PLAIN) and SECURE (SSL, ``log_only``, ``connections_max_idle_ms`` 400), its
ACLs in ZooKeeper, its audit trail on, and ``admin:`` on a free port. Debian's ``prometheus``
scrapes it every second with deploy/prometheus/alerts.yml loaded. Known traffic goes through
(allowed and denied Produce and Fetch, a failed and a successful SASL login, a would-deny Fetch
and an idle close on SECURE), then the tests ask Prometheus's HTTP API what it scraped and
compare with that traffic; the dashboard's queries run on the same Prometheus, its metric
names are checked against the proxy's own /metrics, and promtool checks and unit-tests the
alert rules (deploy/prometheus/alerts_test.yml).
"""

from __future__ import annotations

import dataclasses
import json
import re
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from kio.schema.fetch.v12 import request as fetch12
from prometheus_client.parser import text_string_to_metric_families

from kafkaguard.certs import tooling
from kafkaguard.certs.tls import TlsConfig
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.stores.zookeeper import ZkAclClient
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import AdminConfig, BrokerPorts, LimitsConfig, ListenerConfig
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.handler_harness import acl
from tests.support.prometheus import JOB, PrometheusServer, require
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient, build_request
from tests.support.zookeeper import ZooKeeperServer, unique_chroot

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "kafkaguard.json"

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SECURE")
CERT_DAYS = 10
"""The SECURE listener's certificate: inside the 14-day alert, outside the 3-day one."""
IDLE_MS = 400
METRIC_NAME = re.compile(r"\b(?:kafkaguard|process)_[a-z_]+")
"""Names of the proxy's families and of prometheus_client's ProcessCollector (CPU, memory, fds)."""
KAFKA_TOPIC_STORE_FAMILIES = {"kafkaguard_store_lag_seconds"}
"""Families only a proxy on the Kafka-topic stores exposes; this one keeps its ACLs in
ZooKeeper. Their queries must still be valid PromQL here; the names and labels the dashboard
and the alerts use are checked against such a proxy in tests/kafka/test_kafka_topic_store.py."""


@dataclass
class Observed:
    proxy: RunningProxy
    prometheus: PrometheusServer
    allowed: str
    denied: str
    cert_not_after: float
    metrics_text: str
    """``/metrics`` read directly from the admin listener after the traffic."""


def _admin_get(proxy: RunningProxy, path: str) -> str:
    assert proxy.server.admin is not None
    url = f"http://127.0.0.1:{proxy.server.admin.port}{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text


def _listener(name: str, protocol: str, **settings: Any) -> ListenerConfig:
    return ListenerConfig(
        name=name,
        security_protocol=protocol,
        bind_host="127.0.0.1",
        port=free_port(),
        advertised_host="127.0.0.1",
        broker_ports=BrokerPorts(free_base([TANSU_NODE_ID]), {}),
        **settings,
    )


def _fetch(client: RawKafkaClient, topic: str) -> int:
    """One Fetch v12 of partition 0 from offset 0; the partition's error code."""
    _, response = client.request(
        fetch12.FetchRequest(
            max_wait=timedelta(milliseconds=100),
            min_bytes=1,
            topics=(
                fetch12.FetchTopic(
                    topic=topic,
                    partitions=(
                        fetch12.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
    )
    (partition,) = [p for t in response.responses for p in t.partitions]
    return int(partition.error_code)


def _plain_login(proxy: RunningProxy, password: str) -> tuple[RawKafkaClient, int]:
    port = proxy.server.config.listeners[1].port
    client = RawKafkaClient("127.0.0.1", port, timeout_s=5)
    handshake = client.request(build_request(17, 1, mechanism="PLAIN"))[1]
    assert handshake.error_code == ErrorCode.none
    token = b"\0alice\0" + password.encode()
    answer = client.request(build_request(36, 2, auth_bytes=token))[1]
    return client, int(answer.error_code)


def _drive_traffic(proxy: RunningProxy, allowed: str, denied: str, ca: Path) -> None:
    # PLAINTEXT: three allowed Produce requests and one denied (one WRITE check each).
    delivered: list[bool] = []
    producer = Producer(
        {"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "message.send.max.retries": 0}
    )
    for topic in (allowed, allowed, allowed, denied):
        producer.produce(topic, b"v", on_delivery=lambda err, _msg: delivered.append(err is None))
        producer.flush(15)
    assert delivered == [True, True, True, False]
    del producer

    # PLAINTEXT: one allowed and one denied Fetch (one READ check each).
    with RawKafkaClient("127.0.0.1", proxy.server.config.listeners[0].port) as client:
        assert _fetch(client, allowed) == ErrorCode.none
        assert _fetch(client, denied) == ErrorCode.topic_authorization_failed

    # SASL_PLAINTEXT: a wrong password (the proxy closes the connection), then a good one.
    client, error = _plain_login(proxy, "wrong")
    with client:
        assert error == ErrorCode.sasl_authentication_failed
        with pytest.raises((EOFError, ConnectionResetError)):
            client.read_frame()
    client, error = _plain_login(proxy, "alice-secret")
    with client:
        assert error == ErrorCode.none

    # SECURE (log_only): a denied Fetch is let through (would-deny), then the connection idles
    # until the proxy closes it.
    context = ssl.create_default_context(cafile=str(ca))
    port = proxy.server.config.listeners[2].port
    client = RawKafkaClient("127.0.0.1", port, timeout_s=10)
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    with client:
        assert _fetch(client, denied) == ErrorCode.none
        started = time.monotonic()
        with pytest.raises((EOFError, ConnectionResetError, ssl.SSLError)):
            client.read_frame()
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9


@pytest.fixture(scope="module")
def observed(
    tansu: TansuBroker, zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    require("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    allowed, denied = unique_name("ok"), unique_name("secret")
    tansu_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{tansu.port}"})
    for future in tansu_admin.create_topics(
        [NewTopic(allowed, 1, 1), NewTopic(denied, 1, 1)]
    ).values():
        future.result(15)

    chroot = unique_chroot()
    seed = ZkAclClient(zookeeper.connect, chroot=chroot)
    seed.start()
    seed.write(
        [
            acl("User:ANONYMOUS", "WRITE", "TOPIC", allowed),
            acl("User:ANONYMOUS", "READ", "TOPIC", allowed),
            acl("User:ANONYMOUS", "DESCRIBE", "TOPIC", denied),
        ],
        [],
    )
    seed.stop()

    tooling.init_ca(tmp)
    server_cert = tooling.issue_server(tmp, hosts=["localhost"], ips=["127.0.0.1"], days=CERT_DAYS)
    not_after = x509.load_pem_x509_certificate(server_cert.cert_path.read_bytes())
    users = tmp / "users.yaml"
    write_users_file(
        users,
        {"alice": {"PLAIN": plain.make_credential("alice-secret", iterations=4096).to_string()}},
    )

    base = proxy_config(tansu.address)
    listeners = (
        base.listeners[0],
        _listener(
            "SASL_PLAINTEXT",
            "SASL_PLAINTEXT",
            sasl=SaslListenerConfig(
                enabled_mechanisms=("PLAIN",),
                credentials_file=users,
                failed_authentication_delay_ms=10,
                max_failed_authentication_delay_ms=50,
            ),
        ),
        _listener(
            "SECURE",
            "SSL",
            ssl=TlsConfig(cert_file=server_cert.cert_path, key_file=server_cert.key_path),
            enforcement="log_only",
            limits=LimitsConfig(connections_max_idle_ms=IDLE_MS),
        ),
    )
    assert len({ls.broker_ports.base for ls in listeners}) == 3, "node port bases collided"
    config = dataclasses.replace(
        base,
        listeners=listeners,
        policy=PolicyConfig(
            authorizer=AuthorizerConfig(),
            acl_store=AclStoreConfig(type="zookeeper", connect=zookeeper.connect, chroot=chroot),
        ),
        admin=AdminConfig(port=0),
        audit=dataclasses.replace(base.audit, enabled=True, dir=tmp / "audit"),
    )
    proxy = start_proxy_thread(config)
    prometheus: PrometheusServer | None = None
    try:
        assert proxy.server.admin is not None
        prometheus = PrometheusServer(
            tmp / "server", [f"127.0.0.1:{proxy.server.admin.port}"], rule_files=[ALERTS]
        )
        prometheus.start()
        prometheus.wait_until_scraping()  # a sample before the traffic: rate() has two
        _drive_traffic(proxy, allowed, denied, tmp / tooling.CA_CERT)
        done = time.time()
        prometheus.wait_for_scrape_after(done)
        yield Observed(
            proxy,
            prometheus,
            allowed,
            denied,
            not_after.not_valid_after_utc.timestamp(),
            _admin_get(proxy, "/metrics"),
        )
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_proxy_thread(proxy)
        for future in tansu_admin.delete_topics([allowed, denied]).values():
            future.result(15)


def test_prometheus_scrapes_what_the_traffic_did(observed: Observed) -> None:
    prom = observed.prometheus

    def total(selector: str) -> float:
        return prom.value(f"sum({selector})")

    counts = {
        # PLAINTEXT: Produce 3 allowed + 1 denied, Fetch 1 allowed + 1 denied.
        "produce requests": total('kafkaguard_requests_total{listener="PLAINTEXT",api="Produce"}'),
        "produce from broker": total(
            'kafkaguard_responses_total{listener="PLAINTEXT",api="Produce",source="broker"}'
        ),
        "produce from proxy": total(
            'kafkaguard_responses_total{listener="PLAINTEXT",api="Produce",source="proxy"}'
        ),
        "write allowed": total(
            'kafkaguard_authorization_decisions_total{listener="PLAINTEXT",operation="WRITE",'
            'resource_type="TOPIC",result="allowed"}'
        ),
        "write denied": total(
            'kafkaguard_authorization_decisions_total{listener="PLAINTEXT",operation="WRITE",'
            'resource_type="TOPIC",result="denied"}'
        ),
        "fetch requests": total('kafkaguard_requests_total{listener="PLAINTEXT",api="Fetch"}'),
        "read allowed": total(
            'kafkaguard_authorization_decisions_total{listener="PLAINTEXT",operation="READ",'
            'resource_type="TOPIC",result="allowed"}'
        ),
        "read denied": total(
            'kafkaguard_authorization_decisions_total{listener="PLAINTEXT",operation="READ",'
            'resource_type="TOPIC",result="denied"}'
        ),
        "produce latency count": total(
            'kafkaguard_request_latency_seconds_count{listener="PLAINTEXT",api="Produce"}'
        ),
        "produce upstream latency count": total(
            'kafkaguard_upstream_latency_seconds_count{listener="PLAINTEXT",api="Produce"}'
        ),
        # SASL_PLAINTEXT: one failed and one successful PLAIN login, two connections.
        "sasl failures": total(
            'kafkaguard_sasl_authentications_total{listener="SASL_PLAINTEXT",mechanism="PLAIN",'
            'outcome="failure"}'
        ),
        "sasl successes": total(
            'kafkaguard_sasl_authentications_total{listener="SASL_PLAINTEXT",mechanism="PLAIN",'
            'outcome="success"}'
        ),
        "sasl accepted": total('kafkaguard_connections_accepted_total{listener="SASL_PLAINTEXT"}'),
        "authentication_failed closes": total(
            'kafkaguard_connections_closed_total{listener="SASL_PLAINTEXT",'
            'reason="authentication_failed"}'
        ),
        # SECURE (log_only): one connection, one denied Fetch let through, closed idle.
        "secure accepted": total('kafkaguard_connections_accepted_total{listener="SECURE"}'),
        "secure fetch from broker": total(
            'kafkaguard_responses_total{listener="SECURE",api="Fetch",source="broker"}'
        ),
        "secure read denied": total(
            'kafkaguard_authorization_decisions_total{listener="SECURE",operation="READ",'
            'resource_type="TOPIC",result="denied"}'
        ),
        "would deny": total('kafkaguard_authorization_would_deny_total{listener="SECURE"}'),
        "idle closes": total(
            'kafkaguard_connections_closed_total{listener="SECURE",reason="idle"}'
        ),
        "secure open": total('kafkaguard_connections{listener="SECURE"}'),
        # Everywhere: nothing refused, nothing in flight, no upstream failure, no audit loss.
        "refused": total("kafkaguard_connections_refused_total"),
        "in flight": total("kafkaguard_inflight_requests"),
        "upstream connect errors": total("kafkaguard_upstream_connect_errors_total"),
        "audit dropped": total('kafkaguard_audit_events_total{outcome="dropped"}'),
        "audit failed": total('kafkaguard_audit_events_total{outcome="failed"}'),
        "acls": total("kafkaguard_acls"),
        "zookeeper connected": total("kafkaguard_zookeeper_connected"),
        "up": total(f'up{{job="{JOB}"}}'),
    }
    assert counts == {
        "produce requests": 4,
        "produce from broker": 3,
        "produce from proxy": 1,
        "write allowed": 3,
        "write denied": 1,
        "fetch requests": 2,
        "read allowed": 1,
        "read denied": 1,
        "produce latency count": 4,
        "produce upstream latency count": 3,
        "sasl failures": 1,
        "sasl successes": 1,
        "sasl accepted": 2,
        "authentication_failed closes": 1,
        "secure accepted": 1,
        "secure fetch from broker": 1,
        "secure read denied": 1,
        "would deny": 1,
        "idle closes": 1,
        "secure open": 0,
        "refused": 0,
        "in flight": 0,
        "upstream connect errors": 0,
        "audit dropped": 0,
        "audit failed": 0,
        "acls": 3,
        "zookeeper connected": 1,
        "up": 1,
    }

    # The broker answered one of the two PLAINTEXT Fetches, the proxy refused the other.
    fetch_sources = {
        s["metric"]["source"]: float(s["value"][1])
        for s in prom.query('kafkaguard_responses_total{listener="PLAINTEXT",api="Fetch"}')
    }
    assert fetch_sources == {"broker": 1, "proxy": 1}
    # Audit: at least the three denied checks above were written as records.
    assert total('kafkaguard_audit_events_total{outcome="written"}') >= 3
    assert total('kafkaguard_bytes_total{listener="PLAINTEXT",peer="client",direction="in"}') > 0
    assert total('kafkaguard_bytes_total{listener="PLAINTEXT",peer="broker",direction="out"}') > 0
    p99 = prom.value(
        "histogram_quantile(0.99, sum by (le) "
        '(kafkaguard_request_latency_seconds_bucket{listener="PLAINTEXT",api="Produce"}))'
    )
    assert 0 < p99 < 10

    (build,) = prom.query("kafkaguard_build_info")
    assert build["metric"]["version"] not in ("", "unknown")
    assert float(build["value"][1]) == 1

    # The certificate gauge: notAfter minus the scrape time, within the scrape's own latency.
    (expiry,) = prom.query('kafkaguard_certificate_expiry_seconds{listener="SECURE"}')
    scraped_at, seconds_left = float(expiry["value"][0]), float(expiry["value"][1])
    assert abs(observed.cert_not_after - scraped_at - seconds_left) < 5
    assert (CERT_DAYS - 1) * 86400 < seconds_left <= CERT_DAYS * 86400


def test_alert_rules_load_and_evaluate_on_the_real_series(observed: Observed) -> None:
    """alerts.yml in a Prometheus scraping the proxy: every rule evaluates without error, and
    the certificate alert (10 days left < 14) is pending for SECURE while nothing else is."""
    prom = observed.prometheus
    expected = {rule["alert"] for group in _alert_groups() for rule in group["rules"]}
    deadline = time.monotonic() + 20
    while True:  # until every rule has been evaluated and some alert is active
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        alerts = prom.api("alerts")["alerts"]
        evaluated = rules and not any(r["lastEvaluation"].startswith("0001") for r in rules)
        if (evaluated and alerts) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {r["name"] for r in rules} == expected
    assert [
        (r["name"], r["health"], r.get("lastError", "")) for r in rules if r["health"] != "ok"
    ] == []
    active = {(a["labels"]["alertname"], a["labels"].get("listener"), a["state"]) for a in alerts}
    assert active == {("KafkaguardCertificateExpiresSoon", "SECURE", "pending")}
    (cert_alert,) = alerts
    assert cert_alert["labels"]["severity"] == "warning"
    assert cert_alert["labels"]["job"] == JOB
    assert cert_alert["annotations"]["description"].startswith(
        f"The certificate served by listener SECURE of {cert_alert['labels']['instance']} "
        f"expires in {CERT_DAYS - 1}d 23h"
    )


def _alert_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return groups


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _exposed_names(text: str) -> tuple[set[str], set[str]]:
    """(every sample name /metrics declares, those it has samples of)."""
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_count", "_sum"],
        "info": ["_info"],
    }
    declared, sampled = set(), set()
    for family in text_string_to_metric_families(text):
        declared |= {family.name + s for s in suffixes.get(family.type, [""])}
        sampled |= {s.name for s in family.samples}
    return declared, sampled


def test_dashboard_and_alerts_use_only_metrics_the_proxy_exposes(observed: Observed) -> None:
    declared, sampled = _exposed_names(observed.metrics_text)
    assert sampled <= declared
    used = {n for e in _dashboard_exprs() for n in METRIC_NAME.findall(e)}
    used_by_alerts = {
        n for g in _alert_groups() for r in g["rules"] for n in METRIC_NAME.findall(r["expr"])
    }
    assert used - declared == KAFKA_TOPIC_STORE_FAMILIES
    assert used_by_alerts - declared == KAFKA_TOPIC_STORE_FAMILIES
    # All features are on: every name used has samples, and Prometheus stored every one.
    assert (used | used_by_alerts) - sampled == KAFKA_TOPIC_STORE_FAMILIES
    stored = set(observed.prometheus.api("label/__name__/values"))
    assert (used | used_by_alerts) - stored == KAFKA_TOPIC_STORE_FAMILIES


def test_every_dashboard_query_runs_on_prometheus(observed: Observed) -> None:
    """Each panel query, with the template variables set to this proxy's instance and
    listeners, is valid PromQL and returns series (a listener filter on a family without a
    listener label, or a wrong label value, would return none)."""
    prom = observed.prometheus
    assert observed.proxy.server.admin is not None
    instance = f"127.0.0.1:{observed.proxy.server.admin.port}"
    empty = []
    for expr in _dashboard_exprs():
        query = (
            expr.replace("$__rate_interval", "30s")
            .replace("$instance", instance)
            .replace("$listener", "|".join(LISTENERS))
        )
        assert "$" not in query, query
        answered = prom.query(query)  # raises on invalid PromQL
        if not answered and not KAFKA_TOPIC_STORE_FAMILIES & set(METRIC_NAME.findall(expr)):
            empty.append(expr)
    assert empty == []

    # The template variables' label_values() queries list this instance and its listeners.
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    values = {}
    for name in ("instance", "listener"):
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variables[name]["definition"])
        assert match, variables[name]["definition"]
        selector = match.group(1).replace("$instance", instance)
        values[name] = set(prom.api(f"label/{match.group(2)}/values", **{"match[]": selector}))
    assert values == {"instance": {instance}, "listener": set(LISTENERS)}


REQUIRED_FAMILIES = {
    "kafkaguard_build_info",
    "kafkaguard_requests_total",
    "kafkaguard_responses_total",
    "kafkaguard_authorization_decisions_total",
    "kafkaguard_authorization_would_deny_total",
    "kafkaguard_sasl_authentications_total",
    "kafkaguard_connections",
    "kafkaguard_connections_accepted_total",
    "kafkaguard_connections_closed_total",
    "kafkaguard_connections_refused_total",
    "kafkaguard_bytes_total",
    "kafkaguard_request_latency_seconds_bucket",
    "kafkaguard_upstream_latency_seconds_bucket",
    "kafkaguard_upstream_connect_errors_total",
    "kafkaguard_inflight_requests",
    "kafkaguard_audit_events_total",
    "kafkaguard_acls",
    "kafkaguard_acls_last_update_age_seconds",
    "kafkaguard_zookeeper_connected",
    "kafkaguard_certificate_expiry_seconds",
    "kafkaguard_config_reloads_total",
    "kafkaguard_audit_decisions_total",
    "kafkaguard_proxy_latency_seconds_bucket",
    "kafkaguard_store_lag_seconds",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_max_fds",
}


def test_dashboard_is_an_importable_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] == 39
    assert dashboard["uid"] == "kafkaguard"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("instance", "listener"):
        assert variables[name]["type"] == "query"
        assert variables[name]["multi"] and variables[name]["includeAll"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            if re.search(r"\b(rate|increase)\(", target["expr"]):
                assert "[$__rate_interval]" in target["expr"], target["expr"]
            if "listener" in target["expr"] or "$listener" in target["expr"]:
                assert 'listener=~"$listener"' in target["expr"], target["expr"]
    used = {n for e in _dashboard_exprs() for n in METRIC_NAME.findall(e)}
    assert REQUIRED_FAMILIES - used == set()
    # p50 and p99 of the three latency histograms (request, upstream, added by the proxy).
    quantiles = {
        (q, m)
        for e in _dashboard_exprs()
        for q, m in re.findall(r"histogram_quantile\((0\.\d+), .*?(kafkaguard_\w+_latency)", e)
    }
    assert quantiles == {
        (q, m)
        for q in ("0.5", "0.99")
        for m in (
            "kafkaguard_request_latency",
            "kafkaguard_upstream_latency",
            "kafkaguard_proxy_latency",
        )
    }


def test_promtool_checks_and_unit_tests_the_alert_rules() -> None:
    promtool = require("promtool")
    rules = sum(len(g["rules"]) for g in _alert_groups())
    check = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {rules} rules found" in check.stdout + check.stderr
    unit = subprocess.run(
        [promtool, "test", "rules", str(ALERTS_TEST)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ALERTS_TEST.parent,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tested = set(re.findall(r"alertname: (\w+)", ALERTS_TEST.read_text(encoding="utf-8")))
    assert tested == {r["alert"] for g in _alert_groups() for r in g["rules"]}
