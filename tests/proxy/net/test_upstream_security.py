"""TLS and SASL from the proxy to the upstream cluster (``upstream.ssl`` / ``upstream.sasl``).

The upstream with security is another kafkaguard: proxy B has an SSL, SASL_SSL or
SASL_PLAINTEXT listener in front of Tansu and enforces ACLs; proxy A (PLAINTEXT, allow-all)
uses B as its upstream. confluent-kafka produces and consumes through A. B authorizes what A
forwards with the principal A authenticated as (``User:svc`` over SASL, ``User:proxy-a`` from
A's client certificate): a super user on B, every other principal is denied there — so a
record that arrives proves A authenticated. A learns node addresses from B's Metadata (B's own
node ports), so its node connections go through B's TLS/SASL too.

Also here: the SASL_SSL listener end to end (TLS + SCRAM-SHA-512 on one listener, principal
from SASL), and the sans-I/O SASL client against the proxy's own SCRAM server.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.certs import tooling
from kafkaguard.certs.tls import TlsConfig, UpstreamTlsConfig
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
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
from kafkaguard.protocol import codec
from kafkaguard.proxy.config import (
    BrokerPorts,
    HostPort,
    LimitsConfig,
    ListenerConfig,
    ProxyConfig,
    UpstreamConfig,
    parse_config,
)
from kafkaguard.proxy.net.cluster import UpstreamCluster
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.client import (
    PlainClient,
    ScramClient,
    UpstreamAuthenticationError,
    UpstreamSaslConfig,
    UpstreamSaslExchange,
)
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.proxy.sasl.mechanism import Challenge, Failure, Success
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PASSWORDS = {"svc": "svc-secret", "alice": "alice-secret", "bob": "bob-secret"}
RULES = "RULE:^CN=([^,]+),OU=eng,O=Acme$/$1/L"


# -- sans-I/O: the client against the proxy's own servers ------------------------------------------


@pytest.mark.parametrize("mechanism", scram.MECHANISMS)
def test_scram_client_against_the_proxys_scram_server(mechanism: str) -> None:
    credential = scram.make_credential(mechanism, "pw", iterations=4096)
    server = scram.ScramServer(
        mechanism, lambda user, _m: credential if user == "u,1" else None, unknown_user_secret=b"k"
    )
    cache: dict[Any, bytes] = {}
    for _ in range(2):  # the second exchange reuses the cached SaltedPassword
        client = ScramClient(mechanism, "u,1", "pw", cache=cache)
        challenge = server_step(server, client.first())
        final = client.respond(challenge)
        assert final is not None
        result = server.step(final)
        assert isinstance(result, Success) and result.authorization_id == "u,1"
        assert client.respond(result.data) is None
        server = scram.ScramServer(mechanism, lambda _u, _m: credential, unknown_user_secret=b"k")
    assert len(cache) == 1


def server_step(server: scram.ScramServer, token: bytes) -> bytes:
    result = server.step(token)
    assert isinstance(result, Challenge), result
    return result.data


def test_scram_client_rejects_a_server_that_does_not_know_the_password() -> None:
    """Mutual authentication: a server signature made from another credential fails."""
    real = scram.make_credential("SCRAM-SHA-256", "pw", iterations=4096)
    fake = scram.ScramCredential(real.salt, real.stored_key, b"\0" * 32, real.iterations)
    server = scram.ScramServer("SCRAM-SHA-256", lambda _u, _m: fake, unknown_user_secret=b"k")
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    final = client.respond(server_step(server, client.first()))
    assert final is not None
    result = server.step(final)
    assert isinstance(result, Success)  # stored_key is right, server_key is not
    with pytest.raises(UpstreamAuthenticationError, match="invalid server signature"):
        client.respond(result.data)


def test_scram_client_refuses_weak_iterations_and_foreign_nonces() -> None:
    client = ScramClient("SCRAM-SHA-512", "u", "pw", nonce="abc")
    client.first()
    with pytest.raises(UpstreamAuthenticationError, match="iterations 1000"):
        client.respond(b"r=abcdef,s=c2FsdA==,i=1000")
    client = ScramClient("SCRAM-SHA-512", "u", "pw", nonce="abc")
    client.first()
    with pytest.raises(UpstreamAuthenticationError, match="nonce"):
        client.respond(b"r=xyzdef,s=c2FsdA==,i=4096")


def test_plain_client_token_checks_out_with_the_proxys_plain_server() -> None:
    credential = plain.make_credential("pw", iterations=4096)
    server = plain.PlainServer(lambda user: credential if user == "svc" else None)
    result = server.step(PlainClient("svc", "pw").first())
    assert isinstance(result, Success) and result.authorization_id == "svc"
    assert isinstance(server.step(b""), Failure)


def test_exchange_frames_and_refusal() -> None:
    """SaslHandshake v1 first, the proxy's own correlation ids, a refusal carries the broker's
    error code and message."""
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

    exchange = UpstreamSaslExchange("PLAIN", PlainClient("svc", "pw"), version=2)
    first = exchange.start()
    cid = int.from_bytes(first[8:12], "big")
    assert first[4:8] == (17).to_bytes(2, "big") + (1).to_bytes(2, "big")
    ok = SaslHandshakeResponse(error_code=codec.ErrorCode.none, mechanisms=("PLAIN",))
    second = exchange.receive(codec.encode_response(ok, cid))
    assert second is not None and second[4:8] == (36).to_bytes(2, "big") + (2).to_bytes(2, "big")
    refused = codec.make_entity(
        SaslAuthenticateResponse,
        codec.ErrorCode.sasl_authentication_failed,
        error_message="Authentication failed: Invalid username or password",
    )
    with pytest.raises(UpstreamAuthenticationError, match="SASL_AUTHENTICATION_FAILED.*Invalid"):
        exchange.receive(codec.encode_response(refused, cid + 1))
    other = UpstreamSaslExchange("PLAIN", PlainClient("svc", "pw"))
    other.start()
    with pytest.raises(UpstreamAuthenticationError, match="correlation id"):
        other.receive(codec.encode_response(ok, 7))
    for garbage in (b"\0\0\0\1x", codec.encode_response(ok, cid)[:10]):
        third = UpstreamSaslExchange("PLAIN", PlainClient("svc", "pw"))
        third.start()
        with pytest.raises(UpstreamAuthenticationError, match="malformed SASL response"):
            third.receive(garbage)


# -- configuration ---------------------------------------------------------------------------------


def test_upstream_keys_parse(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    text = """
upstream:
  bootstrap_servers: ["127.0.0.1:9092"]
  ssl: {ca_file: ca.pem, cert_file: me.pem, key_file: me-key.pem, check_hostname: false}
  sasl: {mechanism: SCRAM-SHA-256, username: svc, password_file: pw}
listeners: [{name: P, port: 9192}]
"""
    upstream = parse_config(ConfigSection.from_text(text, "c.yaml"), tmp_path).upstream
    assert upstream.ssl == UpstreamTlsConfig(
        tmp_path / "ca.pem", tmp_path / "me.pem", tmp_path / "me-key.pem", False
    )
    assert upstream.sasl == UpstreamSaslConfig("SCRAM-SHA-256", "svc", tmp_path / "pw")


@pytest.mark.parametrize(
    ("sasl", "error"),
    [
        ("{mechanism: GSSAPI, username: a, password_file: pw}", "upstream.sasl.mechanism"),
        ("{mechanism: PLAIN, password_file: pw}", "upstream.sasl.username: is required"),
        ("{mechanism: PLAIN, username: a}", "upstream.sasl.password_file: is required"),
        ("{username: a, password_file: missing}", "cannot read password file"),
        ("{username: a, password_file: pw, password: x}", "upstream.sasl.password"),
    ],
)
def test_upstream_sasl_errors(tmp_path: Path, sasl: str, error: str) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    text = f"upstream: {{bootstrap_servers: ['127.0.0.1:9092'], sasl: {sasl}}}\n"
    text += "listeners: [{name: P, port: 9192}]\n"
    with pytest.raises(ConfigError, match=error):
        parse_config(ConfigSection.from_text(text, "c.yaml"), tmp_path)


def test_example_config_upstream_security_block_parses(tmp_path: Path) -> None:
    """The commented ``ssl:``/``sasl:`` of config.example.yaml's upstream, uncommented."""
    example = (Path(__file__).parents[3] / "config.example.yaml").read_text(encoding="utf-8")
    start = example.index("  # ssl:                          # upstream TLS")
    block = []
    for line in example[start:].splitlines():
        if not line.startswith("  # "):
            break
        block.append("  " + line[4:].split(" #", 1)[0].rstrip())
    (tmp_path / "upstream-password").write_text("x\n")
    text = "upstream:\n  bootstrap_servers: ['127.0.0.1:9092']\n" + "\n".join(block)
    text += "\nlisteners: [{name: P, port: 9192}]\n"
    upstream = parse_config(ConfigSection.from_text(text, "c.yaml"), tmp_path).upstream
    assert upstream.ssl is not None and upstream.sasl is not None


# -- real peers: proxy A → (TLS / SASL) → proxy B → Tansu ------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: tooling.Issued
    proxy_a: tooling.Issued  # CN=proxy-a,OU=eng,O=Acme → User:proxy-a on B
    rogue_ca: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("upstream-pki")
    tooling.init_ca(root)
    rogue = root / "rogue"
    tooling.init_ca(rogue, common_name="rogue CA")
    return Pki(
        ca=root / tooling.CA_CERT,
        server=tooling.issue_server(root, hosts=["localhost"], ips=["127.0.0.1"]),
        proxy_a=tooling.issue_client(
            root, common_name="proxy-a", organizational_units=["eng"], organization="Acme"
        ),
        rogue_ca=rogue / tooling.CA_CERT,
    )


def _users_file(directory: Path) -> Path:
    users = {
        user: {
            "PLAIN": plain.make_credential(password, iterations=4096).to_string(),
            **{
                m: scram.make_credential(m, password, iterations=4096).to_kafka_string()
                for m in scram.MECHANISMS
            },
        }
        for user, password in PASSWORDS.items()
    }
    path = directory / "users.yaml"
    write_users_file(path, users)
    return path


def _acl(principal: str, op: AclOperation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


StartProxy = Callable[..., RunningProxy]


@pytest.fixture
def start_b(tansu: TansuBroker, pki: Pki, tmp_path: Path) -> Iterator[StartProxy]:
    """``start_b(protocol, acls=(), mechanisms=...)``: proxy B in front of Tansu with one
    secured listener; super users ``User:svc`` (SASL) and ``User:proxy-a`` (certificate)."""
    started: list[RunningProxy] = []

    def start(
        protocol: str,
        acls: tuple[AclBinding, ...] = (),
        mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    ) -> RunningProxy:
        tls = sasl = None
        if protocol in ("SSL", "SASL_SSL"):
            tls = TlsConfig(
                cert_file=pki.server.cert_path,
                key_file=pki.server.key_path,
                ca_file=pki.ca,
                client_auth="required" if protocol == "SSL" else "none",
                principal_mapping_rules=RULES,
            )
        if protocol.startswith("SASL"):
            sasl = SaslListenerConfig(
                enabled_mechanisms=mechanisms,
                credentials_file=_users_file(tmp_path),
                failed_authentication_delay_ms=10,
                max_failed_authentication_delay_ms=50,
            )
        acl_file = tmp_path / f"b-acls-{len(started)}.yaml"
        acl_file.write_text(format_acl_text(list(acls)), encoding="utf-8")
        listener = ListenerConfig(
            name=protocol,
            security_protocol=protocol,
            bind_host="127.0.0.1",
            port=free_port(),
            advertised_host="127.0.0.1",
            broker_ports=BrokerPorts(free_base([TANSU_NODE_ID]), {}),
            ssl=tls,
            sasl=sasl,
        )
        config = ProxyConfig(
            listeners=(listener,),
            upstream=UpstreamConfig((tansu.address,), connect_timeout_s=5.0),
            limits=LimitsConfig(),
            policy=PolicyConfig(
                authorizer=AuthorizerConfig(super_users=frozenset({"User:svc", "User:proxy-a"})),
                acl_store=AclStoreConfig(type="file", path=acl_file),
            ),
        )
        running = start_proxy_thread(config)
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            stop_proxy_thread(running)


def _address(proxy: RunningProxy) -> HostPort:
    host, port = proxy.bootstrap.rsplit(":", 1)
    return HostPort(host, int(port))


@pytest.fixture
def start_a(tmp_path: Path) -> Iterator[StartProxy]:
    """``start_a(b, ssl=..., sasl=...)``: allow-all PLAINTEXT proxy A whose upstream is B."""
    started: list[RunningProxy] = []

    def start(
        b: RunningProxy,
        ssl: UpstreamTlsConfig | None = None,
        sasl: UpstreamSaslConfig | None = None,
    ) -> RunningProxy:
        config = proxy_config(_address(b))
        upstream = replace(config.upstream, ssl=ssl, sasl=sasl, connect_timeout_s=3.0)
        running = start_proxy_thread(replace(config, upstream=upstream))
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            stop_proxy_thread(running)


def _password_file(tmp_path: Path, password: str, name: str = "upstream-password") -> Path:
    path = tmp_path / name
    path.write_text(password + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def _round_trip(bootstrap: str, extra: dict[str, Any] | None = None, n: int = 5) -> None:
    """Create a topic, produce ``n`` records and read them back, all through ``bootstrap``."""
    extra = extra or {}
    topic = unique_name("up")
    admin = AdminClient({"bootstrap.servers": bootstrap, **extra})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, **extra})
        delivered: list[Any] = []
        for i in range(n):
            producer.produce(topic, f"m{i}".encode(), on_delivery=lambda e, _m: delivered.append(e))
        producer.flush(15)
        assert delivered == [None] * n
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique_name("g"),
                "enable.auto.commit": False,
                **extra,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < n and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    got.append(message.value())
            assert got == [f"m{i}".encode() for i in range(n)]
        finally:
            consumer.close()
    finally:
        for future in admin.delete_topics([topic]).values():
            future.result(15)


pytestmark = pytest.mark.integration


def test_upstream_mutual_tls(start_a: StartProxy, start_b: StartProxy, pki: Pki) -> None:
    """A → B over TLS with A's client certificate; B's principal for A is User:proxy-a (a
    super user there: an ANONYMOUS A would be denied everything)."""
    b = start_b("SSL")
    a = start_a(
        b,
        ssl=UpstreamTlsConfig(
            ca_file=pki.ca, cert_file=pki.proxy_a.cert_path, key_file=pki.proxy_a.key_path
        ),
    )
    _round_trip(a.bootstrap)


def test_upstream_tls_untrusted_ca_and_plaintext_broker(
    start_b: StartProxy, pki: Pki, tansu: TansuBroker
) -> None:
    """The probe verifies the broker's certificate; TLS to a plaintext broker fails too."""
    b = start_b("SSL")

    async def probe(server: HostPort, tls: UpstreamTlsConfig) -> None:
        await UpstreamCluster((server,), 3.0, tls=tls).probe()

    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(probe(_address(b), UpstreamTlsConfig(ca_file=pki.rogue_ca)))
    with pytest.raises(OSError, match="no upstream bootstrap server answered"):
        asyncio.run(probe(tansu.address, UpstreamTlsConfig(ca_file=pki.ca)))


def test_upstream_sasl_ssl_scram_sha_512(
    start_a: StartProxy, start_b: StartProxy, pki: Pki, tmp_path: Path
) -> None:
    b = start_b("SASL_SSL")
    a = start_a(
        b,
        ssl=UpstreamTlsConfig(ca_file=pki.ca),
        sasl=UpstreamSaslConfig("SCRAM-SHA-512", "svc", _password_file(tmp_path, "svc-secret")),
    )
    _round_trip(a.bootstrap)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_upstream_sasl_plaintext(
    start_a: StartProxy, start_b: StartProxy, tmp_path: Path, mechanism: str
) -> None:
    b = start_b("SASL_PLAINTEXT")
    a = start_a(
        b, sasl=UpstreamSaslConfig(mechanism, "svc", _password_file(tmp_path, "svc-secret"))
    )
    _round_trip(a.bootstrap, n=2)


def test_upstream_principal_is_the_sasl_user(
    start_a: StartProxy, start_b: StartProxy, tmp_path: Path
) -> None:
    """B authorizes A's traffic as the user A authenticated as: ``alice`` (not a super user,
    no ACLs on B) is denied, so A's client sees TOPIC_AUTHORIZATION_FAILED."""
    b = start_b("SASL_PLAINTEXT")
    a = start_a(
        b,
        sasl=UpstreamSaslConfig("SCRAM-SHA-256", "alice", _password_file(tmp_path, "alice-secret")),
    )
    producer = Producer({"bootstrap.servers": a.bootstrap, "message.timeout.ms": 5000})
    delivered: list[Any] = []
    producer.produce(unique_name("up"), b"x", on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(10)
    assert len(delivered) == 1 and delivered[0] is not None
    assert delivered[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_wrong_upstream_credentials(
    start_a: StartProxy,
    start_b: StartProxy,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At start the probe fails at once with the broker's reason; later (the password file
    changed under a running proxy) each client connection is closed with a log line, and the
    corrected file is picked up without a restart."""
    b = start_b("SASL_PLAINTEXT")
    wrong = _password_file(tmp_path, "not-the-password", "wrong")
    began = time.monotonic()
    with pytest.raises(UpstreamAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        start_a(b, sasl=UpstreamSaslConfig("SCRAM-SHA-512", "svc", wrong))
    assert time.monotonic() - began < 5  # not retried: the credentials will not get better

    password = _password_file(tmp_path, "svc-secret")
    only_scram = start_b("SASL_PLAINTEXT", mechanisms=("SCRAM-SHA-512",))
    plain_cluster = UpstreamCluster(
        (_address(only_scram),), 3.0, sasl=UpstreamSaslConfig("PLAIN", "svc", password)
    )
    with pytest.raises(UpstreamAuthenticationError, match=r"UNSUPPORTED_SASL_MECHANISM.*SCRAM"):
        asyncio.run(plain_cluster.probe())

    a = start_a(b, sasl=UpstreamSaslConfig("SCRAM-SHA-512", "svc", password))
    host, port = a.bootstrap.rsplit(":", 1)
    password.write_text("rotated-wrongly\n")
    caplog.set_level(logging.WARNING, logger="kafkaguard.proxy")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.settimeout(10)
        assert sock.recv(1) == b""  # closed by the proxy without a request being sent
    assert any(
        "refused the proxy's SASL authentication (SCRAM-SHA-512 as 'svc')" in r.getMessage()
        and "SASL_AUTHENTICATION_FAILED" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]

    password.write_text("svc-secret\n")
    _round_trip(a.bootstrap, n=1)


# -- SASL_SSL listener end to end (TLS + SCRAM-SHA-512 on one listener) ----------------------------


def test_sasl_ssl_listener_with_confluent_kafka(start_b: StartProxy, pki: Pki) -> None:
    """The principal comes from SASL (no client certificate asked for): alice holds WRITE on
    the topic and produces; bob authenticates but is denied; a wrong password fails
    authentication; a client that does not trust the proxy's CA never gets to SASL."""
    topic = unique_name("saslssl")
    acls = (
        _acl("User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic),
        _acl("User:alice", AclOperation.CREATE, ResourceType.TOPIC, topic),
        _acl("User:alice", AclOperation.DELETE, ResourceType.TOPIC, topic),
        _acl("User:alice", AclOperation.READ, ResourceType.TOPIC, topic),
    )
    b = start_b("SASL_SSL", acls=acls, mechanisms=("SCRAM-SHA-512",))

    def config(user: str, password: str, ca: Path = pki.ca) -> dict[str, Any]:
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }

    def produce(extra: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        errors: list[Any] = []
        producer = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "message.timeout.ms": 5000,
                "enable.idempotence": False,
                "error_cb": errors.append,
                **extra,
            }
        )
        delivered: list[Any] = []
        producer.produce(topic, b"x", on_delivery=lambda e, _m: delivered.append(e))
        producer.flush(10)
        return delivered, errors

    _round_trip_as_alice = config("alice", "alice-secret")
    admin = AdminClient({"bootstrap.servers": b.bootstrap, **_round_trip_as_alice})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    try:
        delivered, _ = produce(_round_trip_as_alice)
        assert delivered == [None]
        delivered, _ = produce(config("bob", "bob-secret"))
        assert delivered[0] is not None
        assert delivered[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        delivered, errors = produce(config("alice", "wrong"))
        assert delivered[0] is not None
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        delivered, errors = produce(config("alice", "alice-secret", ca=pki.rogue_ca))
        assert delivered[0] is not None
        assert any(e.code() == KafkaError._SSL for e in errors), errors
    finally:
        for future in admin.delete_topics([topic]).values():
            future.result(15)


def test_ssl_context_is_client_side(pki: Pki) -> None:
    """``build_client_context``: verification on by default (hostname too)."""
    from kafkaguard.certs.tls import build_client_context

    context = build_client_context(UpstreamTlsConfig(ca_file=pki.ca))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
