"""SSL listeners end to end: real clients over TLS through kafkaguard to Tansu.

Certificates are minted by ``kafkaguard.certs.tooling`` into a temporary directory. The
principal of a client certificate is proven through authorization: ACLs granted to the
*mapped* name let one certificate produce while another certificate's principal is denied
with TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from kafkaguard.certs import tooling
from kafkaguard.certs.tls import TlsConfig
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, GroupsConfig, PolicyConfig
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.tansu import TansuBroker
from tests.support.proxy_fixture import (
    RunningProxy,
    created_topic,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
)
from tests.support.raw_client import RawKafkaClient

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.integration

RULES = "RULE:^CN=([^,]+),OU=eng,O=Acme$/$1/L"
"""Engineers map to their lower-cased CN; any other subject matches no rule."""


@dataclass(frozen=True)
class Identity:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Identity
    alice: Identity  # CN=Alice,OU=eng,O=Acme → User:alice
    bob: Identity  # CN=Bob,OU=eng,O=Acme → User:bob
    carol: Identity  # CN=carol,O=Other → no mapping rule
    expired: Identity  # CN=old,OU=eng,O=Acme, expired yesterday
    rogue: Identity  # CN=mallory,OU=eng,O=Acme from a CA the proxy does not trust


def _identity(issued: tooling.Issued) -> Identity:
    return Identity(issued.cert_path, issued.key_path)


def _engineer(
    directory: Path, cn: str, days: int = 30, not_before: dt.datetime | None = None
) -> Identity:
    issued = tooling.issue_client(
        directory,
        common_name=cn,
        organizational_units=["eng"],
        organization="Acme",
        days=days,
        not_before=not_before,
    )
    return _identity(issued)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    tooling.init_ca(root)
    rogue_dir = root / "rogue"
    tooling.init_ca(rogue_dir, common_name="rogue CA")
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    return Pki(
        ca=root / tooling.CA_CERT,
        server=_identity(tooling.issue_server(root, hosts=["localhost"], ips=["127.0.0.1"])),
        alice=_engineer(root, "Alice"),
        bob=_engineer(root, "Bob"),
        carol=_identity(tooling.issue_client(root, common_name="carol", organization="Other")),
        expired=_engineer(root, "old", days=1, not_before=long_ago),
        rogue=_engineer(rogue_dir, "mallory"),
    )


def _topic_acl(topic: str, principal: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
        AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW),
    )


StartTlsProxy = Callable[..., RunningProxy]


@pytest.fixture
def tls_proxy(tansu: TansuBroker, tmp_path: Path, pki: Pki) -> Iterator[StartTlsProxy]:
    """``tls_proxy(acls, client_auth=..., groups=..., **tls_overrides)``: an enforcing proxy
    whose only listener is SSL (named SECURE), with the module's PKI and mapping rules."""
    started: list[RunningProxy] = []

    def start(
        acls: Iterable[AclBinding],
        client_auth: str = "required",
        groups: GroupsConfig | None = None,
        **tls: object,
    ) -> RunningProxy:
        acl_file = tmp_path / f"acls-{len(started)}.yaml"
        acl_file.write_text(format_acl_text(list(acls)), encoding="utf-8")
        policy = PolicyConfig(
            authorizer=AuthorizerConfig(groups=groups or GroupsConfig()),
            acl_store=AclStoreConfig(type="file", path=acl_file),
        )
        config = proxy_config(tansu.address, policy=policy, name="SECURE")
        settings = TlsConfig(
            cert_file=pki.server.cert,
            key_file=pki.server.key,
            ca_file=pki.ca,
            client_auth=client_auth,
            principal_mapping_rules=RULES,
        )
        listener = replace(
            config.listeners[0], security_protocol="SSL", ssl=replace(settings, **tls)
        )
        running = start_proxy_thread(replace(config, listeners=(listener,)))
        running.acl_file = acl_file
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            stop_proxy_thread(running)


@pytest.fixture
def topic(proxy: RunningProxy) -> Iterator[str]:
    """A topic created through the allow-all PLAINTEXT proxy (deleted afterwards)."""
    with created_topic(proxy, "tls") as name:
        yield name


def _confluent_ssl(pki: Pki, who: Identity | None) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    if who is not None:
        conf["ssl.certificate.location"] = str(who.cert)
        conf["ssl.key.location"] = str(who.key)
    return conf


def _confluent_produce(bootstrap: str, ssl_conf: dict[str, str], topic: str) -> list[object]:
    """Produce one record; returns the delivery errors (empty: delivered)."""
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, **ssl_conf})
    producer.produce(topic, b"over tls", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(15) == 0
    return [e for e in errors if e is not None]


def _kafka_python_ssl(pki: Pki, who: Identity | None) -> dict[str, object]:
    conf: dict[str, object] = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca)}
    if who is not None:
        conf |= {"ssl_certfile": str(who.cert), "ssl_keyfile": str(who.key)}
    return conf


def _tls_client(
    running: RunningProxy, pki: Pki, who: Identity | None, ca: Path | None = None
) -> RawKafkaClient:
    """A raw Kafka client over TLS to the bootstrap port (handshake done)."""
    context = ssl.create_default_context(cafile=str(ca or pki.ca))
    if who is not None:
        context.load_cert_chain(who.cert, who.key)
    host, port = running.bootstrap.rsplit(":", 1)
    client = RawKafkaClient(host, int(port), timeout_s=10)
    client.sock = context.wrap_socket(client.sock, server_hostname=host)
    return client


def _refused(running: RunningProxy, pki: Pki, who: Identity | None) -> BaseException:
    """Connect over TLS and ask for ApiVersions; returns how the proxy refused. (With TLS 1.3
    the client's handshake completes before the server has checked the client certificate;
    the server's alert arrives on the first read.)"""
    try:
        with _tls_client(running, pki, who) as client:
            client.api_versions()
    except (ssl.SSLError, EOFError, ConnectionResetError, BrokenPipeError) as exc:
        return exc
    raise AssertionError("the proxy answered a client it should have refused")


# -- server-authenticated TLS --------------------------------------------------------------
def test_server_auth_tls_end_to_end_with_three_clients(
    tls_proxy: StartTlsProxy, pki: Pki, topic: str
) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    anonymous = [
        _topic_acl(topic, "User:ANONYMOUS", op) for op in (AclOperation.WRITE, AclOperation.READ)
    ]
    running = tls_proxy(anonymous, client_auth="none")

    # confluent-kafka verifies the proxy's certificate and its IP SAN (endpoint identification).
    assert _confluent_produce(running.bootstrap, _confluent_ssl(pki, None), topic) == []

    producer = KafkaProducer(bootstrap_servers=running.bootstrap, **_kafka_python_ssl(pki, None))
    producer.send(topic, b"kafka-python over tls").get(timeout=15)
    producer.close()

    async def aiokafka_produce() -> None:
        aio = AIOKafkaProducer(
            bootstrap_servers=running.bootstrap,
            security_protocol="SSL",
            ssl_context=create_ssl_context(cafile=str(pki.ca)),
        )
        await aio.start()
        try:
            await aio.send_and_wait(topic, b"aiokafka over tls")
        finally:
            await aio.stop()

    asyncio.run(aiokafka_produce())

    consumer = KafkaConsumer(
        bootstrap_servers=running.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **_kafka_python_ssl(pki, None),
    )
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < 3 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            values += [r.value for r in records]
    consumer.close()
    assert values == [b"over tls", b"kafka-python over tls", b"aiokafka over tls"]


def test_plaintext_client_on_ssl_listener_gets_no_kafka_answer(
    tls_proxy: StartTlsProxy, pki: Pki
) -> None:
    running = tls_proxy([], client_auth="none")
    host, port = running.bootstrap.rsplit(":", 1)
    with (
        RawKafkaClient(host, int(port), timeout_s=5) as client,
        pytest.raises((EOFError, ConnectionResetError)),
    ):
        client.api_versions()


# -- mutual TLS: the principal comes from the certificate ------------------------------------
@pytest.mark.parametrize("client_auth", ["required", "requested"])
def test_mtls_principal_is_the_mapped_dn_confluent(
    tls_proxy: StartTlsProxy, pki: Pki, topic: str, client_auth: str
) -> None:
    running = tls_proxy([_topic_acl(topic, "User:alice", AclOperation.WRITE)], client_auth)
    # CN=Alice,OU=eng,O=Acme → rule → "alice" (lower-cased): allowed.
    assert _confluent_produce(running.bootstrap, _confluent_ssl(pki, pki.alice), topic) == []
    # CN=Bob,OU=eng,O=Acme → User:bob: no ACL, denied.
    errors = _confluent_produce(running.bootstrap, _confluent_ssl(pki, pki.bob), topic)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_the_certificates_ou_is_a_group_through_ssl_mapping_rules(
    tls_proxy: StartTlsProxy, pki: Pki, topic: str
) -> None:
    """``ssl_mapping_rules`` over the DN Java prints (CN=Bob,OU=eng,O=Acme): Group:eng, whose
    ACL alone lets bob produce; the same ACLs without the rules refuse him."""
    groups = GroupsConfig(ssl_mapping_rules="RULE:^CN=[^,]+,OU=([^,]+),O=.*$/$1/")
    acls = [_topic_acl(topic, "Group:eng", AclOperation.WRITE)]
    running = tls_proxy(acls, groups=groups)
    assert _confluent_produce(running.bootstrap, _confluent_ssl(pki, pki.bob), topic) == []
    without = tls_proxy(acls)
    errors = _confluent_produce(without.bootstrap, _confluent_ssl(pki, pki.bob), topic)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_mtls_principal_is_the_mapped_dn_kafka_python(
    tls_proxy: StartTlsProxy, pki: Pki, topic: str
) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    running = tls_proxy([_topic_acl(topic, "User:alice", AclOperation.WRITE)])
    alice = KafkaProducer(bootstrap_servers=running.bootstrap, **_kafka_python_ssl(pki, pki.alice))
    alice.send(topic, b"from alice").get(timeout=15)
    alice.close()
    bob = KafkaProducer(
        bootstrap_servers=running.bootstrap, max_block_ms=10000, **_kafka_python_ssl(pki, pki.bob)
    )
    with pytest.raises(TopicAuthorizationFailedError):
        bob.send(topic, b"from bob").get(timeout=15)
    bob.close()


def test_requested_without_certificate_is_anonymous(
    tls_proxy: StartTlsProxy, pki: Pki, topic: str
) -> None:
    running = tls_proxy(
        [_topic_acl(topic, "User:ANONYMOUS", AclOperation.WRITE)], client_auth="requested"
    )
    assert _confluent_produce(running.bootstrap, _confluent_ssl(pki, None), topic) == []
    # The same listener maps a presented certificate: bob is not ANONYMOUS, so denied.
    errors = _confluent_produce(running.bootstrap, _confluent_ssl(pki, pki.bob), topic)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


# -- rejected clients ------------------------------------------------------------------------
def test_required_client_auth_without_certificate_fails_the_handshake(
    tls_proxy: StartTlsProxy, pki: Pki
) -> None:
    running = tls_proxy([])
    refused = _refused(running, pki, None)
    assert isinstance(refused, ssl.SSLError | EOFError | ConnectionResetError), refused
    # A real client cannot get metadata either.
    admin = AdminClient({"bootstrap.servers": running.bootstrap, **_confluent_ssl(pki, None)})
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)


@pytest.mark.parametrize("who", ["rogue", "expired"])
def test_untrusted_or_expired_client_certificate_is_rejected(
    tls_proxy: StartTlsProxy, pki: Pki, topic: str, who: str
) -> None:
    identity: Identity = getattr(pki, who)
    # Even an ACL for every principal does not let the certificate in.
    running = tls_proxy([_topic_acl(topic, "User:*", AclOperation.WRITE)], client_auth="requested")
    refused = _refused(running, pki, identity)
    # asyncio drops the connection without sending the TLS alert: EOF or an SSL error.
    assert isinstance(refused, ssl.SSLError | EOFError | ConnectionResetError), refused
    admin = AdminClient({"bootstrap.servers": running.bootstrap, **_confluent_ssl(pki, identity)})
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)
    # The trusted, valid certificate of the same shape works on the same listener.
    with _tls_client(running, pki, pki.alice) as client:
        assert client.api_versions()


def test_dn_matching_no_mapping_rule_closes_the_connection(
    tls_proxy: StartTlsProxy, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    running = tls_proxy([])
    with caplog.at_level(logging.WARNING, logger="kafkaguard.proxy"):
        refused = _refused(running, pki, pki.carol)
        deadline = time.monotonic() + 5
        while "SSL authentication failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    assert isinstance(refused, EOFError | ConnectionResetError | ssl.SSLError), refused
    assert "SSL authentication failed: No rules apply to CN=carol,O=Other" in caplog.text


# -- certificate reload ----------------------------------------------------------------------
def _served_serial(running: RunningProxy, pki: Pki) -> str:
    with _tls_client(running, pki, pki.alice) as client:
        assert isinstance(client.sock, ssl.SSLSocket)
        cert = client.sock.getpeercert()
        assert client.api_versions()
        return str(cert["serialNumber"])


def test_new_server_certificate_is_used_by_new_connections(
    tls_proxy: StartTlsProxy, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "server.pem", live / "server-key.pem"
    shutil.copy(pki.server.cert, cert)
    shutil.copy(pki.server.key, key)
    running = tls_proxy([], cert_file=cert, key_file=key)
    first = _served_serial(running, pki)
    kept = _tls_client(running, pki, pki.alice)  # an established connection
    try:
        assert kept.api_versions()

        # A broken certificate file: the old context stays, the reason is logged.
        with caplog.at_level(logging.ERROR, logger="kafkaguard.certs"):
            cert.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n", encoding="ascii")
            assert _served_serial(running, pki) == first
        assert "new TLS files not loaded, still serving the previous certificate" in caplog.text

        # A new certificate and key from the same CA (written by the tooling into the live dir).
        shutil.copy(pki.ca, live / tooling.CA_CERT)
        shutil.copy(pki.ca.with_name(tooling.CA_KEY), live / tooling.CA_KEY)
        tooling.issue_server(live, hosts=["localhost"], ips=["127.0.0.1"], force=True)
        second = _served_serial(running, pki)
        assert second != first
        assert running.server.listeners[0].tls is not None
        assert running.server.listeners[0].tls.reloads == 1
        # The connection made before the reload keeps working.
        assert kept.api_versions()
    finally:
        kept.close()


def test_node_ports_serve_tls_too(tls_proxy: StartTlsProxy, pki: Pki, topic: str) -> None:
    """Produce goes to the broker's node port: it must be TLS with the same client auth."""
    running = tls_proxy([_topic_acl(topic, "User:alice", AclOperation.WRITE)])
    assert _confluent_produce(running.bootstrap, _confluent_ssl(pki, pki.alice), topic) == []
    listener = running.server.listeners[0]
    (node_port,) = listener.node_ports.ports.values()
    with socket.create_connection(("127.0.0.1", node_port), timeout=5) as raw:
        raw.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)  # plaintext Kafka bytes: not TLS
        raw.settimeout(5)
        try:
            data = raw.recv(100)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(b"\x00\x00")  # no Kafka frame came back


def test_the_acl_tools_read_over_mtls_as_the_certificate(
    tls_proxy: StartTlsProxy, pki: Pki
) -> None:
    """``acls apply``/``--list`` through an SSL listener (kafkaguard/proxy/app/wire_admin.py):
    the librdkafka TLS settings a client uses work, and a refusal names the certificate's
    subject (before the listener's mapping rules, which make it User:bob here)."""
    import asyncio

    from kafkaguard.policy.stores.base import AclStoreError
    from kafkaguard.proxy.app.wire_admin import describe_acls

    grant = AclBinding(
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    )
    running = tls_proxy([grant])
    settings = {"bootstrap.servers": running.bootstrap, **_confluent_ssl(pki, pki.alice)}
    assert asyncio.run(describe_acls(settings)) == {grant}
    bob = {"bootstrap.servers": running.bootstrap, **_confluent_ssl(pki, pki.bob)}
    with pytest.raises(AclStoreError) as refused:
        asyncio.run(describe_acls(bob))
    assert (
        "as User:CN=Bob,OU=eng,O=Acme (the certificate's subject, before principal mapping "
        "rules) refused: CLUSTER_AUTHORIZATION_FAILED (31)" in str(refused.value)
    )
