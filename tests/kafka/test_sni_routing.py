"""``routing: sni`` in front of a three-broker Apache Kafka 4.3.1 cluster, on ONE port: Kafka's
own console producer and consumer (SASL_SSL, PLAIN) bootstrap from ``bootstrap.kafka.test``
and reach each partition's leader as ``broker-N.kafka.test``. The names resolve to 127.0.0.1
only for those JVMs (``-Djdk.net.hosts.file``), and Java checks them against the proxy's
wildcard certificate (``ssl.endpoint.identification.algorithm=https``, Kafka's default).

A consumer that reached the wrong broker for a partition would get NOT_LEADER_OR_FOLLOWER and
no records: every partition's records arriving proves each name reached its node.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaguard.certs import tooling
from kafkaguard.policy.model import AclOperation, PatternType, ResourceType
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.proxy.config import load_config
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.credentials import write_users_file
from tests.support.kafka_broker import (
    KafkaBroker,
    free_port,
    require_kafka,
    run_kafka_tool,
    start_kafka_cluster,
    stop_cluster,
)
from tests.support.policy import acl
from tests.support.proxy_fixture import RunningProxy, start_proxy_thread, stop_proxy_thread
from tests.support.raw_client import RawKafkaClient, addresses, build_request

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

BOOTSTRAP = "bootstrap.kafka.test"
TOPIC, GROUP = "sni-orders", "sni-readers"
RECORDS = 30
TOOL_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[KafkaBroker]]:
    require_kafka()
    brokers = start_kafka_cluster(tmp_path_factory.mktemp("sni-cluster"), 3)
    try:
        yield brokers
    finally:
        stop_cluster(brokers)


@pytest.fixture(scope="module")
def proxy(
    cluster: list[KafkaBroker], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    directory = tmp_path_factory.mktemp("sni-proxy")
    tooling.init_ca(directory)
    tooling.issue_server(directory, hosts=["*.kafka.test"], ips=[])
    write_users_file(
        directory / "users.yaml",
        {"alice": {"PLAIN": plain.make_credential("alice-secret", iterations=4096).to_string()}},
    )
    acls = [  # "sni-": every topic and group of this module
        acl("User:alice", AclOperation.ALL, name="sni-", ptype=PatternType.PREFIXED),
        acl(
            "User:alice",
            AclOperation.READ,
            name="sni-",
            rtype=ResourceType.GROUP,
            ptype=PatternType.PREFIXED,
        ),
    ]
    (directory / "acls.yaml").write_text(format_acl_text(acls), encoding="utf-8")
    (directory / "config.yaml").write_text(
        f"""
upstream:
  bootstrap_servers: [{", ".join(b.bootstrap for b in cluster)}]
listeners:
  - name: EXTERNAL
    security_protocol: SASL_SSL
    port: {free_port()}
    routing: sni
    bootstrap_host: {BOOTSTRAP}
    advertised_host_pattern: broker-$(nodeId).kafka.test
    ssl: {{cert_file: server.pem, key_file: server-key.pem}}
    sasl: {{enabled_mechanisms: [PLAIN], credentials_file: users.yaml}}
acl_store: {{type: file, path: acls.yaml}}
""",
        encoding="utf-8",
    )
    running = start_proxy_thread(load_config(directory / "config.yaml"))
    running.extra["dir"] = directory
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def _port(proxy: RunningProxy) -> int:
    return int(proxy.bootstrap.rsplit(":", 1)[1])


def _client_files(proxy: RunningProxy, tmp_path: Path) -> tuple[Path, list[str]]:
    """The clients' properties (SASL_SSL as alice, the CA as a PEM trust store) and the JVM
    flag that makes the made-up names resolve to the proxy."""
    directory: Path = proxy.extra["dir"]
    hosts = tmp_path / "hosts"
    names = " ".join([BOOTSTRAP, *(f"broker-{n}.kafka.test" for n in (1, 2, 3))])
    hosts.write_text(f"127.0.0.1 {names}\n", encoding="utf-8")
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={directory / 'ca.pem'}\n",
        encoding="utf-8",
    )
    return properties, [f"-Djdk.net.hosts.file={hosts}"]


def test_metadata_advertises_one_name_per_broker_on_the_one_port(
    cluster: list[KafkaBroker], proxy: RunningProxy
) -> None:
    context = ssl.create_default_context(cafile=proxy.extra["dir"] / "ca.pem")
    with RawKafkaClient("127.0.0.1", _port(proxy), tls=context, server_name=BOOTSTRAP) as client:
        # SASL first: the listener answers nothing else before authentication.
        client.request(build_request(17, 1, mechanism="PLAIN"))
        client.request(build_request(36, 0, auth_bytes=b"\x00alice\x00alice-secret"))
        _, metadata = client.request(
            build_request(
                3,
                12,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    found = {(host, port) for _, host, port in addresses(metadata)}
    assert found == {(f"broker-{b.node_id}.kafka.test", _port(proxy)) for b in cluster}


def _create_topic(cluster: list[KafkaBroker], name: str) -> None:
    """``name`` with one partition per broker: partition p is led by broker p + 1."""
    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    leaders = [[b.node_id] for b in cluster]
    topic = NewTopic(name, len(leaders), replica_assignment=leaders)
    admin.create_topics([topic])[name].result(30)


def test_console_clients_reach_every_leader_through_one_port(
    cluster: list[KafkaBroker], proxy: RunningProxy, tmp_path: Path
) -> None:
    _create_topic(cluster, TOPIC)
    properties, jvm_args = _client_files(proxy, tmp_path)
    bootstrap = f"{BOOTSTRAP}:{_port(proxy)}"
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(RECORDS))
    produced = run_kafka_tool(
        "org.apache.kafka.tools.ConsoleProducer",
        *("--bootstrap-server", bootstrap, "--topic", TOPIC),
        *("--producer.config", str(properties)),
        *("--property", "parse.key=true", "--property", "key.separator=:"),
        input=lines,
        timeout=TOOL_TIMEOUT_S,
        jvm_args=jvm_args,
    )
    assert produced.returncode == 0, produced.stderr[-3000:]
    consumed = run_kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        *("--bootstrap-server", bootstrap, "--topic", TOPIC, "--group", GROUP),
        *("--consumer.config", str(properties), "--from-beginning"),
        *("--max-messages", str(RECORDS), "--timeout-ms", "60000"),
        *("--property", "print.partition=true"),
        timeout=TOOL_TIMEOUT_S,
        jvm_args=jvm_args,
    )
    assert consumed.returncode == 0, consumed.stderr[-3000:]
    records = re.findall(r"Partition:(\d+)\s+(value-\d+)", consumed.stdout)
    assert sorted(value for _, value in records) == sorted(f"value-{i}" for i in range(RECORDS))
    by_partition = Counter(int(partition) for partition, _ in records)
    assert set(by_partition) == {0, 1, 2}, by_partition  # each leader served its partition
    assert "127.0.0.1:" not in consumed.stderr + produced.stderr  # no broker address shown


CONFLUENT_CLIENT = """
import json, sys
from collections import Counter
from confluent_kafka import Consumer, Producer
config = json.loads(sys.argv[1])
topic, group, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
producer = Producer(config)
for i in range(count):
    producer.produce(topic, key=f"key-{i}", value=f"value-{i}")
assert producer.flush(60) == 0, "undelivered records"
consumer = Consumer(config | {"group.id": group, "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
seen = Counter()
for _ in range(600):
    message = consumer.poll(0.1)
    if message is not None and message.error() is None:
        seen[message.partition()] += 1
    if sum(seen.values()) >= count:
        break
consumer.close()
print(json.dumps(seen))
"""


def test_confluent_kafka_through_one_port(
    cluster: list[KafkaBroker], proxy: RunningProxy, tmp_path: Path
) -> None:
    """librdkafka resolves names with the system resolver: the client runs in a mount
    namespace of its own (``unshare -m``) whose /etc/hosts names the proxy."""
    hosts = tmp_path / "hosts"
    names = " ".join([BOOTSTRAP, *(f"broker-{n}.kafka.test" for n in (1, 2, 3))])
    hosts.write_text(f"127.0.0.1 localhost {names}\n", encoding="utf-8")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {hosts} /etc/hosts"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:  # a capability of the machine, not an install step
        pytest.skip(f"no private mount namespace here (unshare -m): {probe.stderr.strip()}")
    config = {
        "bootstrap.servers": f"{BOOTSTRAP}:{_port(proxy)}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "ssl.ca.location": str(proxy.extra["dir"] / "ca.pem"),
    }
    topic = f"{TOPIC}-confluent"
    _create_topic(cluster, topic)
    script = tmp_path / "client.py"
    script.write_text(CONFLUENT_CLIENT, encoding="utf-8")
    command = [sys.executable, str(script), json.dumps(config), topic, f"{GROUP}-c", "30"]
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", f'mount --bind {hosts} /etc/hosts && exec "$@"', "sh"]
        + command,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    by_partition = {int(p): n for p, n in json.loads(result.stdout).items()}
    assert set(by_partition) == {0, 1, 2}, by_partition  # every leader, by its name
