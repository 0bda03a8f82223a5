"""SCRAM credentials from ZooKeeper in Kafka's format (``/config/users/<name>``), against a real
ZooKeeper (Debian's package) and, end to end, confluent-kafka → kafkaguard → Tansu.

The user znodes and change notifications are written by hand with kazoo exactly as
``kafka-configs.sh --zookeeper … --alter --add-config 'SCRAM-SHA-512=[password=…]'`` writes
them (golden JSON), and with ``kafkaguard users … --zookeeper-connect``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import AuthorizerConfig, PolicyConfig
from kafkaguard.proxy.app import users_cli
from kafkaguard.proxy.sasl import scram
from kafkaguard.proxy.sasl.config import SaslListenerConfig, SaslZooKeeperConfig, parse_sasl_config
from kafkaguard.proxy.sasl.scram import ScramCredential
from kafkaguard.proxy.sasl.stores import build_credential_store
from kafkaguard.proxy.sasl.zookeeper_credentials import (
    ZkUserConfigClient,
    ZooKeeperCredentialError,
    ZooKeeperCredentialStore,
    decode_change,
    decode_user_config,
    desanitize,
    encode_change,
    encode_user_config,
    sanitize,
)
from kafkaguard.tansu import TansuBroker, free_port
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
)
from tests.support.zookeeper import ZooKeeperFactory, ZooKeeperServer

pytestmark = pytest.mark.timeout(90)

# PostgreSQL's documented SCRAM-SHA-256 example (password "pencil", RFC 7677's salt) gives the
# same stored/server keys: an independent check of the derivation and of Kafka's string form.
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
GOLDEN_256 = (
    "salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
    "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096"
)
GOLDEN_512 = (
    "salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=6AAub3065EYRmyFpM2RNwqK+eGnrkYuEWbXn19LsEmBqzu8QaCX"
    "Nc1FwpnX9NhH2hK/60dzj9DoO5DvVkOHbvg==,server_key=jZHbYjC1aHh0/hKbxyBuGFjDrgjgKTT1esA7awWiKcRZ"
    "0o/0b1yWEebBeSVkkCFewf91nLDfKF24mvD5nmE6rA==,iterations=4096"
)
# ConfigEntityZNode.encode as Jackson writes it (one line, "version" first).
GOLDEN_ZNODE = (
    '{"version":1,"config":{"SCRAM-SHA-256":"'
    + GOLDEN_256
    + '","SCRAM-SHA-512":"'
    + GOLDEN_512
    + '"}}'
).encode()
GOLDEN_CHANGE = b'{"version":2,"entity_path":"users/alice"}'


# -- formats (no ZooKeeper) ------------------------------------------------------------------


def test_kafka_formats() -> None:
    creds = {
        m: scram.make_credential(m, "pencil", salt=SALT).to_kafka_string() for m in scram.MECHANISMS
    }
    assert creds == {"SCRAM-SHA-256": GOLDEN_256, "SCRAM-SHA-512": GOLDEN_512}
    assert encode_user_config({"SCRAM-SHA-512": GOLDEN_512, "SCRAM-SHA-256": GOLDEN_256}) == (
        GOLDEN_ZNODE
    )
    assert decode_user_config(GOLDEN_ZNODE, "x") == creds
    assert encode_change("alice") == GOLDEN_CHANGE
    assert decode_change(GOLDEN_CHANGE) == "alice"
    assert decode_change(b'{"version":1,"entity_type":"users","entity_name":"bob"}') == "bob"
    assert decode_change(b'{"version":2,"entity_path":"topics/t"}') is None
    assert decode_change(b'{"version":2,"entity_path":"users/a/clients/c"}') is None  # quota
    with pytest.raises(ValueError):
        decode_change(b'{"version":3,"entity_path":"users/alice"}')


@pytest.mark.parametrize(
    "name,node",
    [
        ("alice", "alice"),
        ("a b", "a%20b"),  # URLEncoder's '+' → %20
        ("a*b", "a%2Ab"),
        ("a~b", "a%7Eb"),  # Java encodes '~', Python's quote() would not
        ("User:CN=x,O=y", "User%3ACN%3Dx%2CO%3Dy"),
        ("jürgen@EXAMPLE.COM", "j%C3%BCrgen%40EXAMPLE.COM"),
        ("a-b_c.d", "a-b_c.d"),
    ],
)
def test_sanitize_like_kafka(name: str, node: str) -> None:
    assert sanitize(name) == node
    assert desanitize(node) == name


def _section(data: dict[str, Any]) -> ConfigSection:
    return ConfigSection.from_text(json.dumps(data), "<test>")


def test_config() -> None:
    cfg = parse_sasl_config(
        _section(
            {
                "enabled_mechanisms": ["SCRAM-SHA-512"],
                "scram_credentials": "zookeeper",
                "zookeeper": {"connect": "127.0.0.1:2181", "chroot": "/kafka"},
            }
        )
    )
    assert cfg.credentials_file is None  # SCRAM only: no file needed
    assert cfg.zookeeper == SaslZooKeeperConfig(connect="127.0.0.1:2181", chroot="/kafka")
    with pytest.raises(ConfigError, match="zookeeper"):  # the section is required
        parse_sasl_config(_section({"scram_credentials": "zookeeper"}))
    with pytest.raises(ConfigError, match="credentials_file"):  # PLAIN still needs the file
        parse_sasl_config(
            _section(
                {
                    "enabled_mechanisms": ["SCRAM-SHA-512", "PLAIN"],
                    "scram_credentials": "zookeeper",
                    "zookeeper": {"connect": "127.0.0.1:2181"},
                }
            )
        )
    with pytest.raises(ConfigError, match="only for scram_credentials"):
        parse_sasl_config(_section({"credentials_file": "u.yaml", "zookeeper": {"connect": "h:1"}}))


# -- against ZooKeeper ------------------------------------------------------------------------


def kafka_configs_write(zk: Any, chroot: str, user: str, data: bytes) -> None:
    """What ``AdminZkClient.changeUserOrUserClientIdConfig`` does: set or create the user's
    config znode, then a sequential ``/config/changes/config_change_`` notification."""
    path = f"{chroot}/config/users/{sanitize(user)}"
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, makepath=True)
    zk.create(
        f"{chroot}/config/changes/config_change_", encode_change(user), sequence=True, makepath=True
    )


def kafka_znode(user_password: str, mechanism: str = "SCRAM-SHA-512", **extra: str) -> bytes:
    cred = scram.make_credential(mechanism, user_password).to_kafka_string()
    return encode_user_config({mechanism: cred, **extra})


def users_cmd(monkeypatch: pytest.MonkeyPatch, password: str | None, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    users_cli.add_arguments(parser)
    args = parser.parse_args(list(argv))
    if password is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    return users_cli.run(args)


# Changes apply within milliseconds (printed by the end-to-end test); the bound is 2 s rather
# than the 1 s target so that a loaded 2-core CI machine does not make the suite flaky.
PROPAGATION_BOUND_S = 2.0


async def eventually(check: Callable[[], bool], timeout_s: float = PROPAGATION_BOUND_S) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


def _matches(store: ZooKeeperCredentialStore, user: str, password: str, mech: str) -> bool:
    cred = store.scram_credential(user, mech)
    if cred is None:
        return False
    again = scram.make_credential(mech, password, iterations=cred.iterations, salt=cred.salt)
    return again == cred


async def test_store_reads_kafka_layout_live(
    zookeeper: ZooKeeperServer, raw_zk: Any, chroot: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the store starts: a user written the way Kafka's tooling writes it, plus a quota
    # and a client-id quota entity that must be ignored.
    raw_zk.create(f"{chroot}/config/users/alice", GOLDEN_ZNODE, makepath=True)
    raw_zk.create(
        f"{chroot}/config/users/alice/clients/c1",
        b'{"version":1,"config":{"producer_byte_rate":"1024"}}',
        makepath=True,
    )
    store = ZooKeeperCredentialStore(zookeeper.connect, chroot=chroot)
    await store.start()
    try:
        assert _matches(store, "alice", "pencil", "SCRAM-SHA-256")
        assert _matches(store, "alice", "pencil", "SCRAM-SHA-512")
        assert store.plain_credential("alice") is None

        # A new user with a name that needs sanitizing, through Kafka-style writes.
        name = "User:CN=bob,O=x"
        await asyncio.to_thread(kafka_configs_write, raw_zk, chroot, name, kafka_znode("b1"))
        took = await eventually(lambda: _matches(store, name, "b1", "SCRAM-SHA-512"))
        print(f"new user visible after {took * 1000:.1f} ms")

        # kafkaguard's CLI changes alice's SCRAM-SHA-512 and keeps her other configs.
        raw_zk.set(
            f"{chroot}/config/users/alice",
            encode_user_config(
                {**decode_user_config(GOLDEN_ZNODE, "x"), "producer_byte_rate": "1048576"}
            ),
        )
        rc = await asyncio.to_thread(
            users_cmd,
            monkeypatch,
            "new-pw",
            "add",
            "--zookeeper-connect",
            zookeeper.connect + chroot,
            "--user",
            "alice",
            "--password-stdin",
        )
        assert rc == 0
        await eventually(lambda: _matches(store, "alice", "new-pw", "SCRAM-SHA-512"))
        assert _matches(store, "alice", "pencil", "SCRAM-SHA-256")  # untouched mechanism
        data, _ = raw_zk.get(f"{chroot}/config/users/alice")
        doc = json.loads(data)
        assert list(doc) == ["version", "config"] and doc["version"] == 1
        assert doc["config"]["producer_byte_rate"] == "1048576"  # quota kept
        assert doc["config"]["SCRAM-SHA-256"] == GOLDEN_256
        changes = raw_zk.get_children(f"{chroot}/config/changes")
        notes = [raw_zk.get(f"{chroot}/config/changes/{c}")[0] for c in changes]
        assert GOLDEN_CHANGE in notes  # what a Kafka broker would process

        # A user znode deleted by hand (no notification): the children watch sees it.
        raw_zk.delete(f"{chroot}/config/users/{sanitize(name)}")
        await eventually(lambda: store.scram_credential(name, "SCRAM-SHA-512") is None)

        # An invalid credential only disables that user's mechanism.
        await asyncio.to_thread(
            kafka_configs_write,
            raw_zk,
            chroot,
            "carol",
            encode_user_config(
                {"SCRAM-SHA-512": "salt=x,iterations=1", "SCRAM-SHA-256": GOLDEN_256}
            ),
        )
        await eventually(lambda: _matches(store, "carol", "pencil", "SCRAM-SHA-256"))
        assert store.scram_credential("carol", "SCRAM-SHA-512") is None
        assert _matches(store, "alice", "new-pw", "SCRAM-SHA-512")
    finally:
        await store.close()


async def test_outage_keeps_credentials_and_resyncs(zookeeper_factory: ZooKeeperFactory) -> None:
    server = zookeeper_factory()
    client = ZkUserConfigClient(server.connect)
    await asyncio.to_thread(client.start)
    try:
        cred = scram.make_credential("SCRAM-SHA-512", "pw1").to_kafka_string()
        await asyncio.to_thread(client.update_user, "dave", {"SCRAM-SHA-512": cred})
        store = ZooKeeperCredentialStore(server.connect, session_timeout_s=30)
        await store.start()
        try:
            await asyncio.to_thread(server.stop)
            await eventually(lambda: not store.connected, 10)
            assert _matches(store, "dave", "pw1", "SCRAM-SHA-512")  # still in force
            resyncs = store.resyncs
            await asyncio.to_thread(server.start)
            # Reconnection has been seen to take > 15 s on a loaded CI run (cause not found yet).
            await eventually(lambda: store.connected and client.connected, 45)
            await eventually(lambda: store.resyncs > resyncs, 5)
            new = scram.make_credential("SCRAM-SHA-512", "pw2").to_kafka_string()
            await asyncio.to_thread(client.update_user, "dave", {"SCRAM-SHA-512": new})
            await eventually(lambda: _matches(store, "dave", "pw2", "SCRAM-SHA-512"))
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(client.stop)


async def test_start_fails_without_zookeeper() -> None:
    store = ZooKeeperCredentialStore(f"127.0.0.1:{free_port()}", session_timeout_s=1)
    with pytest.raises(ZooKeeperCredentialError, match="cannot connect"):
        await store.start()
    await store.close()


def test_cli_refuses_plain_in_zookeeper(
    zookeeper: ZooKeeperServer,
    chroot: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = users_cmd(
        monkeypatch,
        "x",
        "add",
        "--zookeeper-connect",
        zookeeper.connect + chroot,
        "--user",
        "u",
        "--mechanism",
        "PLAIN",
        "--password-stdin",
    )
    assert rc == 2
    assert "only SCRAM credentials in ZooKeeper" in capsys.readouterr().err


# -- end to end: confluent-kafka → kafkaguard (SASL/SCRAM from ZooKeeper) → Tansu --------------

confluent_kafka = pytest.importorskip("confluent_kafka")


def _start_proxy(tansu: TansuBroker, zookeeper: ZooKeeperServer, chroot: str) -> RunningProxy:
    sasl = SaslListenerConfig(
        enabled_mechanisms=("SCRAM-SHA-512", "SCRAM-SHA-256"),
        scram_credentials="zookeeper",
        zookeeper=SaslZooKeeperConfig(connect=zookeeper.connect, chroot=chroot),
        failed_authentication_delay_ms=0,
    )
    config = proxy_config(
        tansu.address,
        name="SASL_PLAINTEXT",
        security_protocol="SASL_PLAINTEXT",
        sasl=sasl,
        policy=PolicyConfig(authorizer=AuthorizerConfig(allow_everyone_if_no_acl_found=True)),
    )
    return start_proxy_thread(config)


def authenticates(proxy: RunningProxy, user: str, password: str) -> bool:
    """A Metadata request through the proxy to Tansu with SCRAM-SHA-512: True when answered,
    False when the client reports an authentication failure."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient(
        {
            "bootstrap.servers": proxy.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": errors.append,
            "reconnect.backoff.ms": 500,
        }
    )
    try:
        metadata = admin.list_topics(timeout=3)
        return TANSU_NODE_ID in metadata.brokers  # the broker behind, via the proxy
    except KafkaException:
        deadline = time.monotonic() + 3
        while not errors and time.monotonic() < deadline:
            admin.poll(0.1)  # serves error_cb
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        return False


def _store(proxy: RunningProxy) -> ZooKeeperCredentialStore:
    sasl = proxy.server.listeners[0].sasl
    assert sasl is not None and isinstance(sasl.store, ZooKeeperCredentialStore)
    return sasl.store


@pytest.mark.integration
def test_scram_sha_512_from_zookeeper_through_the_proxy(
    tansu: TansuBroker,
    zookeeper: ZooKeeperServer,
    raw_zk: Any,
    chroot: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # alice exists before the proxy starts, in Kafka's format, written by hand (golden JSON).
    kafka_configs_write(raw_zk, chroot, "alice", GOLDEN_ZNODE)
    proxy = _start_proxy(tansu, zookeeper, chroot)
    try:
        store = _store(proxy)
        assert authenticates(proxy, "alice", "pencil")
        assert not authenticates(proxy, "alice", "wrong")
        assert not authenticates(proxy, "nobody", "pencil")

        # Password change through kafkaguard's CLI: live within 1 s, old fails, new works.
        old = store.scram_credential("alice", "SCRAM-SHA-512")
        written = time.monotonic()
        assert (
            users_cmd(
                monkeypatch,
                "rotated",
                "add",
                "--zookeeper-connect",
                zookeeper.connect,
                "--zookeeper-chroot",
                chroot,
                "--user",
                "alice",
                "--mechanism",
                "SCRAM-SHA-512",
                "--password-stdin",
            )
            == 0
        )
        while store.scram_credential("alice", "SCRAM-SHA-512") == old:
            assert time.monotonic() - written < PROPAGATION_BOUND_S, "password change not applied"
            time.sleep(0.005)
        print(f"password change applied after {(time.monotonic() - written) * 1000:.1f} ms")
        assert not authenticates(proxy, "alice", "pencil")
        assert authenticates(proxy, "alice", "rotated")

        # A second change written the way kafka-configs.sh writes it.
        rotated = store.scram_credential("alice", "SCRAM-SHA-512")
        kafka_configs_write(raw_zk, chroot, "alice", kafka_znode("third"))
        deadline = time.monotonic() + PROPAGATION_BOUND_S
        while store.scram_credential("alice", "SCRAM-SHA-512") == rotated:
            assert time.monotonic() < deadline, "change not applied in time"
            time.sleep(0.005)
        assert authenticates(proxy, "alice", "third")
        assert not authenticates(proxy, "alice", "rotated")

        # Deleting the user (kafkaguard users remove) makes authentication fail.
        assert (
            users_cmd(
                monkeypatch,
                None,
                "remove",
                "--zookeeper-connect",
                zookeeper.connect + chroot,
                "--user",
                "alice",
            )
            == 0
        )
        assert not raw_zk.exists(f"{chroot}/config/users/alice")
        deadline = time.monotonic() + PROPAGATION_BOUND_S
        while store.scram_credential("alice", "SCRAM-SHA-512") is not None:
            assert time.monotonic() < deadline, "deletion not applied in time"
            time.sleep(0.005)
        assert not authenticates(proxy, "alice", "third")
    finally:
        stop_proxy_thread(proxy)


def test_build_credential_store_picks_zookeeper(tmp_path: Path) -> None:
    cfg = SaslListenerConfig(
        enabled_mechanisms=("SCRAM-SHA-512",),
        scram_credentials="zookeeper",
        zookeeper=SaslZooKeeperConfig(connect="127.0.0.1:1", chroot="/x"),
    )
    store = build_credential_store(cfg)
    assert isinstance(store, ZooKeeperCredentialStore) and store.plain_store is None


def test_cli_config_targets_the_listeners_zookeeper(
    zookeeper: ZooKeeperServer,
    raw_zk: Any,
    chroot: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "kafkaguard.yaml"
    config.write_text(
        "upstream: {bootstrap_servers: [127.0.0.1:9092]}\n"
        "listeners:\n"
        "  - name: SASL\n"
        "    security_protocol: SASL_PLAINTEXT\n"
        "    port: 9194\n"
        "    broker_ports: {base: 9400}\n"
        "    sasl:\n"
        "      enabled_mechanisms: [SCRAM-SHA-256]\n"
        "      scram_credentials: zookeeper\n"
        f"      zookeeper: {{connect: '{zookeeper.connect}', chroot: '{chroot}'}}\n"
    )
    assert (
        users_cmd(
            monkeypatch,
            "pencil",
            "add",
            "--config",
            str(config),
            "--user",
            "eve",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        )
        == 0
    )
    data, _ = raw_zk.get(f"{chroot}/config/users/eve")
    cred = ScramCredential.from_kafka_string(decode_user_config(data, "x")["SCRAM-SHA-256"])
    assert cred == scram.make_credential("SCRAM-SHA-256", "pencil", salt=cred.salt)
    capsys.readouterr()
    assert users_cmd(monkeypatch, None, "list", "--config", str(config)) == 0
    assert capsys.readouterr().out == "eve: SCRAM-SHA-256\n"
