"""``kafkaguard doctor`` against a real Tansu broker on loopback: it prints the broker
addresses the cluster advertises, fails on planted unsafe settings and on an unreachable
upstream (naming the server), ``--allow-warnings`` and ``--json`` behave as documented, and
the commands docs/doctor.md shows run as written. With the OPA authorizer, against a real OPA
(tests/support/opa.py) and one that is not there; a Kafka-topic store's topic settings on
Apache Kafka 4.3.1."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.cli import main
from kafkaguard.cli.serve import prepare_demo
from kafkaguard.policy.config import AclStoreConfig, kafka_topic_settings
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.base import AclStore
from kafkaguard.policy.stores.kafka_topic import KafkaTopicAclStore
from kafkaguard.policy.stores.zookeeper import ZooKeeperAclStore
from kafkaguard.proxy.config import BASE_RANGE_NODES, HostPort
from kafkaguard.tansu import NODE_ID, TansuBroker, free_port
from kafkaguard.topic_table import topic_cleanup_policy
from tests.support.kafka_broker import KafkaBroker
from tests.support.opa import (
    V0_POLICY,
    V0_URL_PATH,
    OpaServer,
    build_wasm_bundle,
    running_opa,
)
from tests.support.ports import refusing_port
from tests.support.proxy_fixture import RunningProxy, stop_proxy_thread
from tests.support.sasl_proxy import PASSWORDS, start_sasl_proxy
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

ALICE_READS_ORDERS = AclBinding(
    ResourcePattern(ResourceType.TOPIC, "orders"),
    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
)

DOCS = Path(__file__).resolve().parents[3] / "docs" / "doctor.md"

ACLS = """\
acls:
  - {principal: "User:alice", operation: READ, permission: ALLOW,
     resource_type: TOPIC, name: orders}
  - {principal: "User:alice", operation: DESCRIBE, permission: ALLOW,
     resource_type: TOPIC, name: orders}
"""


def _bootstrap_port() -> int:
    """A free port outside the node range (0..99) of ``broker_ports`` base 20000: one inside it
    makes doctor warn, as it should (``config_warnings``), and the test's run fail."""
    while (port := free_port()) in range(20000, 20000 + BASE_RANGE_NODES):
        pass
    return port


def write_config(
    directory: Path,
    servers: list[HostPort],
    *,
    listener: str = "",
    authorizer: str = "",
    acl_file: str = "acls.yaml",
) -> Path:
    """A configuration of one listener P on loopback in front of ``servers``, its ACLs in
    ``directory/acls.yaml``; ``listener`` and ``authorizer`` add keys (YAML lines)."""
    if not (directory / "acls.yaml").exists():
        (directory / "acls.yaml").write_text(ACLS, encoding="utf-8")
    text = (
        f"upstream:\n  bootstrap_servers: [{', '.join(repr(str(s)) for s in servers)}]\n"
        "  connect_timeout_s: 5\n"
        "listeners:\n"
        "  - name: P\n"
        f"    port: {_bootstrap_port()}\n"
        "    broker_ports: {base: 20000}\n"
        + "".join(f"    {line}\n" for line in listener.splitlines())
        + f"acl_store: {{type: file, path: {acl_file}}}\n"
    )
    if authorizer:
        text += "authorizer:\n" + "".join(f"  {line}\n" for line in authorizer.splitlines())
    path = directory / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def doctor(capsys: pytest.CaptureFixture[str], config: Path, *flags: str) -> tuple[int, str]:
    code = main(["doctor", "--config", str(config), *flags])
    return code, capsys.readouterr().out


@pytest.fixture
def down() -> Iterator[HostPort]:
    """A loopback server address that refuses connections (held for the test)."""
    with refusing_port() as port:
        yield HostPort("127.0.0.1", port)


def test_a_safe_configuration_lists_the_advertised_brokers_and_exits_0(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = doctor(capsys, write_config(tmp_path, [tansu.address]))
    assert code == 0, out
    assert f"  node {NODE_ID}: {tansu.advertised}\n" in out
    assert "Clients must not be able to reach any of these addresses" in out
    assert f"[ ok ] {tansu.address}: answers the proxy" in out
    assert f"[ ok ] file {tmp_path / 'acls.yaml'}: 2 ACLs loaded" in out
    assert f"node {NODE_ID}: 127.0.0.1:{20000 + NODE_ID}" in out  # what listener P advertises
    assert out.rstrip().endswith("Result: nothing wrong found; exit 0")


def test_allow_everyone_if_no_acl_found_fails_unless_warnings_are_allowed(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, [tansu.address], authorizer="allow_everyone_if_no_acl_found: true"
    )
    code, out = doctor(capsys, config)
    assert code == 1
    assert "[WARN] P: allow_everyone_if_no_acl_found is true" in out
    assert doctor(capsys, config, "--allow-warnings")[0] == 0


def test_plaintext_on_every_address_is_a_finding_and_nothing_is_bound(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, [tansu.address], listener="bind_host: 0.0.0.0\nadvertised_host: 127.0.0.1"
    )
    port = int(re.findall(r"port: (\d+)", config.read_text(encoding="utf-8"))[0])
    with socket.create_server(("127.0.0.1", port)):  # the listener's port stays someone else's
        code, out = doctor(capsys, config)
    assert code == 1
    assert "[WARN] P: is PLAINTEXT (no TLS) on 0.0.0.0, not a loopback address" in out


def test_an_unreachable_bootstrap_server_fails_naming_it(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str], down: HostPort
) -> None:
    code, out = doctor(capsys, write_config(tmp_path, [tansu.address, down]), "--allow-warnings")
    assert code == 1  # a failure, not a warning
    assert f"[FAIL] {down}: " in out and "Connect call failed" in out
    assert f"[ ok ] {tansu.address}: answers the proxy" in out  # each server is tried


@pytest.fixture
def sasl_upstream(tansu: TansuBroker, tmp_path: Path) -> Iterator[RunningProxy]:
    """An upstream that wants SCRAM-SHA-512: a SASL_PLAINTEXT kafkaguard in front of Tansu."""
    (tmp_path / "upstream").mkdir()
    running = start_sasl_proxy(tansu, tmp_path / "upstream", [], mechanisms=("SCRAM-SHA-512",))
    try:
        yield running
    finally:
        stop_proxy_thread(running)


@pytest.mark.parametrize("refused", [False, True])
def test_the_upstream_is_asked_with_the_proxys_sasl_credentials(
    refused: bool,
    sasl_upstream: RunningProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    listener = sasl_upstream.server.listeners[0]
    server = HostPort(listener.config.advertised_host, listener.bootstrap_port)
    config = write_config(tmp_path, [server])
    password = "not-" + PASSWORDS["alice"] if refused else PASSWORDS["alice"]
    (tmp_path / "password").write_text(password + "\n", encoding="utf-8")
    text = config.read_text(encoding="utf-8").replace(
        "  connect_timeout_s: 5\n",
        "  connect_timeout_s: 5\n"
        "  sasl: {mechanism: SCRAM-SHA-512, username: alice, password_file: password}\n",
    )
    config.write_text(text, encoding="utf-8")
    code, out = doctor(capsys, config)
    assert "asked as the proxy asks it: no TLS, SASL SCRAM-SHA-512 as alice)" in out
    if refused:
        assert code == 1
        assert f"[FAIL] {server}: upstream {server} refused the proxy's SASL authentication" in out
    else:
        assert f"[ ok ] {server}: answers the proxy" in out
        assert f"[ ok ] {server}: lists 1 broker" in out


def test_no_reachable_upstream_lists_no_broker_and_says_none_could_be_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], down: HostPort
) -> None:
    code, out = doctor(capsys, write_config(tmp_path, [down]))
    assert code == 1
    assert f"[FAIL] {down}: " in out
    assert "[FAIL] no bootstrap server listed the cluster's brokers" in out


def test_the_embedded_demo_broker_cannot_be_checked_and_that_is_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = prepare_demo(tmp_path / "demo")
    code, out = doctor(capsys, config, "--allow-warnings")
    assert code == 1
    assert "[FAIL] upstream.embedded: the in-memory demo broker exists only inside" in out


def test_a_missing_acl_file_fails(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = doctor(capsys, write_config(tmp_path, [tansu.address], acl_file="missing.yaml"))
    assert code == 1
    assert re.search(r"\[FAIL\] file .*missing\.yaml: ", out)


def with_store(config: Path, store: str) -> Path:
    """``config`` with ``acl_store: STORE`` (YAML flow mapping) instead of its file store."""
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("acl_store: {type: file, path: acls.yaml}", f"acl_store: {store}"),
        encoding="utf-8",
    )
    return config


def seed(store: AclStore) -> None:
    """One ACL written through ``store`` itself, as ``kafkaguard acls --add`` writes it."""

    async def write() -> None:
        try:
            await asyncio.wait_for(store.start(), 30)
            await store.add([ALICE_READS_ORDERS])
        finally:
            await store.close()

    asyncio.run(write())


def test_a_kafka_topic_store_without_its_topic_is_reported_and_not_created(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"doctor-acls-{uuid.uuid4().hex[:8]}"
    config = with_store(write_config(tmp_path, [tansu.address]), f"{{type: kafka, topic: {topic}}}")
    code, out = doctor(capsys, config)
    assert code == 0, out
    assert f"0 ACLs loaded (topic {topic} does not exist yet: the proxy creates it" in out
    assert topic_cleanup_policy({"bootstrap.servers": str(tansu.address)}, topic, 10.0) is None


def test_a_kafka_topic_store_is_read_and_counted(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"doctor-acls-{uuid.uuid4().hex[:8]}"
    seed(
        KafkaTopicAclStore(
            {"bootstrap.servers": str(tansu.address)},
            kafka_topic_settings(AclStoreConfig(type="kafka", topic=topic)),
        )
    )
    config = with_store(write_config(tmp_path, [tansu.address]), f"{{type: kafka, topic: {topic}}}")
    code, out = doctor(capsys, config)
    assert code == 0, out
    assert f"[ ok ] kafka topic {topic} on {tansu.address}: 1 ACL loaded\n" in out
    # The topic the store created: compacted, with the store's delete retention.
    assert f"[ ok ] topic {topic}: cleanup.policy=compact, delete.retention.ms=604800000, " in out


def test_a_zookeeper_store_is_read_and_counted(
    tansu: TansuBroker,
    zookeeper: ZooKeeperServer,
    chroot: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed(ZooKeeperAclStore(zookeeper.connect, chroot=chroot))
    config = with_store(
        write_config(tmp_path, [tansu.address]),
        f"{{type: zookeeper, connect: '{zookeeper.connect}', chroot: {chroot}}}",
    )
    code, out = doctor(capsys, config)
    assert code == 0, out
    assert re.search(rf"\[ ok \] zookeeper \S*{re.escape(chroot)}\S*: 1 ACL loaded\n", out), out


@pytest.fixture
def looping_broker() -> Iterator[tuple[TansuBroker, int]]:
    """A second Tansu that advertises a port the test's proxy listener then takes."""
    port = free_port()
    broker = TansuBroker(advertised=HostPort("127.0.0.1", port))
    broker.start()
    try:
        asyncio.run(broker.wait_ready())
        yield broker, port
    finally:
        broker.stop()


def test_a_broker_advertising_the_proxys_address_warns(
    looping_broker: tuple[TansuBroker, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker, port = looping_broker
    config = write_config(tmp_path, [broker.address])
    config.write_text(
        re.sub(r"port: \d+", f"port: {port}", config.read_text(encoding="utf-8"), count=1),
        encoding="utf-8",
    )
    code, out = doctor(capsys, config, "--allow-warnings")
    assert code == 1  # the proxy's own port answers nothing here: that broker fails too
    assert (
        f"[WARN] node {NODE_ID} at 127.0.0.1:{port}: advertises listener P's advertised "
        "bootstrap address"
    ) in out


def test_json_has_the_documented_shape(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str], down: HostPort
) -> None:
    config = write_config(tmp_path, [tansu.address, down], authorizer="super_users: User:admin")
    code, out = doctor(capsys, config, "--json")
    document: dict[str, Any] = json.loads(out)
    assert code == document["exit_code"] == 1
    assert set(document) == {
        "format_version",
        "config",
        "exit_code",
        "summary",
        "findings",
        "upstream",
        "listeners",
        "acl_store",
        "authorizer",
    }
    assert document["format_version"] == 1
    assert document["summary"] == {
        status: sum(f["status"] == status for f in document["findings"])
        for status in ("pass", "fail", "warn")
    }
    assert {(f["check"], f["status"], f["subject"]) for f in document["findings"]} >= {
        ("upstream.bootstrap", "pass", str(tansu.address)),
        ("upstream.bootstrap", "fail", str(down)),
        ("listener.plaintext_super_users", "warn", "P"),
    }
    upstream = document["upstream"]
    assert upstream["brokers"] == [
        {"node_id": NODE_ID, "address": str(tansu.advertised), "reachable": True, "error": None}
    ]
    assert [s["reachable"] for s in upstream["bootstrap_servers"]] == [True, False]
    (listener,) = document["listeners"]
    assert listener["advertised_brokers"] == [
        {"node_id": NODE_ID, "address": f"127.0.0.1:{20000 + NODE_ID}"}
    ]
    assert listener["super_users"] == ["User:admin"]
    assert listener["allow_everyone_if_no_acl_found"] is False
    assert document["acl_store"]["acl_count"] == 2
    assert document["authorizer"]["super_users"] == ["User:admin"]
    assert shape(document) == shape(documented_json())  # docs/doctor.md shows this shape


def shape(value: Any) -> Any:
    """The keys of every object, nested; a list of objects by its first one, any other list
    as ``[]``, every other value as None."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value and isinstance(value[0], dict) else []
    return None


def documented_json() -> Any:
    (block,) = re.findall(r"```json\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    return json.loads(block)


def test_an_invalid_configuration_is_a_failure_in_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("listeners:\n  - name: A\n    port: nope\n", encoding="utf-8")
    code, out = doctor(capsys, config, "--json", "--allow-warnings")
    document = json.loads(out)
    assert code == document["exit_code"] == 1
    assert [(f["check"], f["status"]) for f in document["findings"]] == [("config", "fail")]
    assert f"{config}:3 listeners[0].port" in document["findings"][0]["message"]


def documented_commands() -> list[list[str]]:
    """The ``kafkaguard doctor`` lines of docs/doctor.md's shell blocks."""
    blocks = re.findall(r"```sh\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("kafkaguard doctor")]


def test_the_documented_commands_run_as_written(
    tansu: TansuBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = documented_commands()
    assert len(commands) >= 3
    write_config(tmp_path, [tansu.address])
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert main(command[1:]) == 0, command
    capsys.readouterr()


# -- the OPA authorizer's server (tests/support/opa.py) ------------------------------------


@pytest.fixture(scope="module")
def opa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpaServer]:
    with running_opa(V0_POLICY, tmp_path_factory.mktemp("opa"), v0=True) as server:
        yield server


def opa_authorizer(url: str, *options: str) -> str:
    """The ``authorizer:`` lines of the OPA authorizer asking ``url``."""
    return "\n".join(
        ["class: kafkaguard.policy.opa:OpaAuthorizer", "options:", f"  url: {url}"]
        + [f"  {line}" for line in options]
    )


def test_a_healthy_opa_answering_the_decision_url_passes(
    tansu: TansuBroker, opa_server: OpaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = opa_server.url(V0_URL_PATH)
    config = write_config(tmp_path, [tansu.address], authorizer=opa_authorizer(url))
    code, out = doctor(capsys, config)
    assert code == 0, out
    assert f"  [ ok ] {opa_server.base}/health: answers 200\n" in out
    # The v0 policy allows every DESCRIBE: OPA's own answer, not a default.
    assert f"  [ ok ] {url}: answers true for a probe (DESCRIBE on Topic:LITERAL:" in out
    document = json.loads(doctor(capsys, config, "--json")[1])
    assert document["authorizer"]["opa"] == {
        "url": url,
        "health_url": f"{opa_server.base}/health",
        "healthy": True,
        "health_error": None,
        "decision": True,
        "decision_error": None,
        "allow_on_error": False,
    }


def test_a_decision_url_naming_no_boolean_rule_fails(
    tansu: TansuBroker, opa_server: OpaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = opa_server.url("/v1/data/kafka/authz")  # the package: an object, not a boolean
    code, out = doctor(
        capsys, write_config(tmp_path, [tansu.address], authorizer=opa_authorizer(url))
    )
    assert code == 1
    assert f"  [ ok ] {opa_server.base}/health: answers 200\n" in out
    assert re.search(
        rf"\[FAIL\] {re.escape(url)}: gives no boolean for a probe .*: not_boolean: result is "
        r"\{.*\}, not a boolean; every decision not in the cache would be denied\n",
        out,
    ), out


def test_an_unreachable_opa_fails_naming_the_url_and_allow_on_error_warns(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str], down: HostPort
) -> None:
    url = f"http://{down}{V0_URL_PATH}"
    authorizer = opa_authorizer(url, "allow_on_error: true", "timeout_ms: 2000")
    code, out = doctor(capsys, write_config(tmp_path, [tansu.address], authorizer=authorizer))
    assert code == 1
    assert re.search(
        rf"\[FAIL\] http://{down}/health: unreachable: ConnectionRefusedError: .*: /readyz "
        "would report OPA down\n",
        out,
    ), out
    assert re.search(
        rf"\[FAIL\] {re.escape(url)}: gives no boolean for a probe .*: unreachable: "
        r"ConnectionRefusedError: .*would be allowed \(allow_on_error\)\n",
        out,
    ), out
    assert "[WARN] authorizer.options.allow_on_error is true: " in out
    assert "(fail open)" in out


def test_mode_wasm_evaluates_the_probe_in_process_and_asks_no_server(
    tansu: TansuBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = build_wasm_bundle(V0_POLICY, "kafka/authz/allow", tmp_path / "b.tar.gz", v0=True)
    authorizer = "\n".join(
        ["class: kafkaguard.policy.opa:OpaAuthorizer", "options:", "  mode: wasm"]
        + [f"  bundle: {bundle.name}"]
    )
    config = write_config(tmp_path, [tansu.address], authorizer=authorizer)
    code, out = doctor(capsys, config)
    assert code == 0, out
    assert f"[ ok ] bundle {bundle} (mode wasm, entrypoint its only one): answers true" in out
    assert "/health" not in out
    document = json.loads(doctor(capsys, config, "--json")[1])
    opa = document["authorizer"]["opa"]
    assert opa["decision"] is True and opa["health_url"] is None
    assert opa["healthy"] is None  # no server was asked: no health claimed


# -- a Kafka-topic store's topic settings on Apache Kafka 4.3.1 (issue 35) -----------------


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("configs", "named"),
    [
        ({"cleanup.policy": "delete"}, "has cleanup.policy=delete, not compact"),
        (
            {"cleanup.policy": "compact,delete", "retention.ms": "3600000"},
            "has cleanup.policy=compact,delete, not compact",
        ),
        (
            {"cleanup.policy": "compact", "delete.retention.ms": "60000"},
            "has delete.retention.ms=60000, below the 604800000 configured",
        ),
        ({"cleanup.policy": "compact", "delete.retention.ms": "604800000"}, None),
    ],
)
def test_a_store_topic_that_could_lose_unread_records_fails_naming_the_setting(
    kafka_upstream: KafkaBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    configs: dict[str, str],
    named: str | None,
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"doctor-acls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({**kafka_upstream.admin_config(), "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    try:
        server = HostPort("127.0.0.1", kafka_upstream.port)
        config = with_store(write_config(tmp_path, [server]), f"{{type: kafka, topic: {topic}}}")
        code, out = doctor(capsys, config)
        document = json.loads(doctor(capsys, config, "--json")[1])
    finally:
        admin.delete_topics([topic])[topic].result(30)
    described = document["acl_store"]["topic"]
    assert described["name"] == topic
    assert described["configs"]["cleanup.policy"] == configs["cleanup.policy"]
    # As the broker has it: the topic's own, else the broker's default (-1 on the fixture's).
    retention = described["configs"]["retention.ms"]
    assert retention == configs.get("retention.ms", retention) and retention is not None
    if named is None:
        assert code == 0, out
        assert (
            f"[ ok ] topic {topic}: cleanup.policy=compact, delete.retention.ms=604800000, " in out
        )
        assert document["acl_store"]["acl_count"] == 0
        return
    assert code == 1
    assert f"[FAIL] topic {topic}: topic {topic} {named}" in out
    if "delete" in configs["cleanup.policy"]:
        assert f"; retention.ms={retention} applies\n" in out
    assert f"--entity-name {topic} --add-config" in out
    assert f"does not load: the proxy refuses topic {topic} at start (acl_store.topic)" in out
    assert described["error"].startswith(f"topic {topic} {named}")
