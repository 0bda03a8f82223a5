"""kafkaguard/proxy/edge/sni.py without sockets: real ClientHellos (made by Python's ssl module
into memory), every truncation of them, hostile bytes, and the routing of names."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaguard.certs import tooling
from kafkaguard.cli import main
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.proxy.config import config_warnings, load_config, parse_config
from kafkaguard.proxy.edge.sni import (
    ClientHelloError,
    SniRouting,
    UnroutableName,
    client_hello_record_size,
    client_hello_server_name,
)

ROUTING = SniRouting.parse("Kafka.Example.COM.", "broker-$(nodeId).kafka.example.com")


def client_hello(server_name: str | None, *, tls13: bool = True) -> bytes:
    """The first flight of a TLS client naming ``server_name`` (none for None)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if not tls13:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("tls13", [True, False])
def test_a_real_client_hello_names_its_server(tls13: bool) -> None:
    hello = client_hello("broker-7.kafka.example.com", tls13=tls13)
    assert client_hello_record_size(hello) == len(hello)
    assert client_hello_server_name(hello) == "broker-7.kafka.example.com"
    assert client_hello_server_name(client_hello(None, tls13=tls13)) is None


def test_every_truncation_is_incomplete_never_wrong() -> None:
    hello = client_hello("kafka.example.com")
    for end in range(len(hello)):
        prefix = hello[:end]
        assert client_hello_record_size(prefix) > end  # wait for more
        with pytest.raises(ClientHelloError):
            client_hello_server_name(prefix)


def test_bytes_that_are_not_a_client_hello() -> None:
    kafka_request = b"\x00\x00\x00\x0e\x00\x12\x00\x03"
    with pytest.raises(ClientHelloError, match="not a TLS handshake"):
        client_hello_record_size(kafka_request)
    with pytest.raises(ClientHelloError, match="not a TLS handshake"):
        client_hello_record_size(b"\x00")
    with pytest.raises(ClientHelloError, match="over 2"):
        client_hello_record_size(b"\x16\x03\x01\xff\xff")
    server_hello = b"\x16\x03\x03\x00\x04\x02\x00\x00\x00"
    with pytest.raises(ClientHelloError, match="not a ClientHello"):
        client_hello_server_name(server_hello)
    # A ClientHello longer than its record (split across records) is refused, not guessed.
    hello = bytearray(client_hello("kafka.example.com"))
    hello[6:9] = (len(hello) + 10).to_bytes(3)
    with pytest.raises(ClientHelloError, match="split across"):
        client_hello_server_name(bytes(hello))


@given(st.binary(max_size=300))
def test_hostile_bytes_raise_only_client_hello_error(data: bytes) -> None:
    for candidate in (data, b"\x16\x03\x01" + len(data).to_bytes(2) + data):
        try:
            if client_hello_record_size(candidate) <= len(candidate):
                client_hello_server_name(candidate)
        except ClientHelloError:
            pass


def test_routes() -> None:
    assert ROUTING.bootstrap_host == "kafka.example.com"
    assert ROUTING.route("KAFKA.example.com.") is None  # the bootstrap: any bootstrap server
    assert ROUTING.route("broker-0.kafka.example.com") == 0
    assert ROUTING.route("Broker-2147483647.Kafka.Example.Com") == 2**31 - 1
    assert ROUTING.host_for(12) == "broker-12.kafka.example.com"
    for name in (
        None,
        "",
        "kafka.example.org",
        "broker-.kafka.example.com",
        "broker-01.kafka.example.com",
        "broker-2147483648.kafka.example.com",
        "broker-1.kafka.example.com.evil",
        "broker-１.kafka.example.com",  # a full-width digit is not a node id
        "broker-1.kafka.example.com\x00",
    ):
        with pytest.raises(UnroutableName):
            ROUTING.route(name)


@pytest.mark.parametrize(
    ("bootstrap", "pattern", "error"),
    [
        ("kafka.example.com", "broker.kafka.example.com", r"\$\(nodeId\) once"),
        ("kafka.example.com", "b-$(nodeId)-$(nodeId).example.com", r"\$\(nodeId\) once"),
        ("kafka.example.com", "broker_$(nodeId).example.com", "not a DNS name"),
        ("kafka example", "broker-$(nodeId).example.com", "not a DNS name"),
        ("kafka-1.example.com", "kafka-$(nodeId).example.com", "also one of the pattern"),
    ],
)
def test_bad_routing_settings(bootstrap: str, pattern: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        SniRouting.parse(bootstrap, pattern)


# -- configuration and check-config ----------------------------------------------------------
EXAMPLE = Path(__file__).parents[3] / "config.example.yaml"


def _sni_listener(extra: str = "", *, protocol: str = "SSL") -> str:
    return (
        "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\nlisteners:\n"
        f"  - name: EXTERNAL\n    security_protocol: {protocol}\n    port: 9094\n"
        "    routing: sni\n    bootstrap_host: kafka.example.com\n"
        "    advertised_host_pattern: broker-$(nodeId).kafka.example.com\n"
        "    ssl: {cert_file: server.pem, key_file: server-key.pem}\n" + extra
    )


def test_yaml_routing_sni() -> None:
    (listener,) = parse_config(ConfigSection.from_text(_sni_listener(), "c.yaml")).listeners
    assert listener.sni == SniRouting("kafka.example.com", "broker-$(nodeId).kafka.example.com")
    assert listener.fixed_ports() == {9094: "bootstrap port"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_sni_listener().replace("SSL", "PLAINTEXT").replace("    ssl: {c", "    x: {c"), "TLS"),
        (_sni_listener("    advertised_host: a.example\n"), "advertised_host: is not for"),
        (_sni_listener("    broker_ports: {base: 9300}\n"), "broker_ports: is not for"),
        (_sni_listener().replace("    bootstrap_host: kafka.example.com\n", ""), "required"),
        (_sni_listener().replace("broker-$(nodeId)", "broker"), "nodeId"),
        (_sni_listener().replace("routing: sni", "routing: ports"), "only for listeners with"),
        (_sni_listener().replace("routing: sni", "routing: host"), "must be one of ports, sni"),
    ],
)
def test_yaml_routing_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(ConfigSection.from_text(text, "c.yaml"))


@pytest.mark.parametrize(
    ("hosts", "warnings"),
    [
        (["kafka.example.com", "*.kafka.example.com"], []),
        (["*.kafka.example.com"], ["does not cover bootstrap_host"]),  # one label, not zero
        (["kafka.example.com", "broker-*.kafka.example.com"], []),
        (
            ["kafka.example.com", "broker-0.kafka.example.com", "broker-1.kafka.example.com"],
            ["only covers nodes 0, 1 of advertised_host_pattern"],
        ),
        (["*.example.com"], ["does not cover advertised_host_pattern"]),
    ],
)
def test_check_config_warns_when_the_certificate_misses_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hosts: list[str], warnings: list[str]
) -> None:
    assert main(["certs", "init-ca", "--dir", str(tmp_path)]) == 0
    host_args = [arg for host in hosts for arg in ("--host", host)]
    assert main(["certs", "server", "--dir", str(tmp_path), *host_args]) == 0
    path = tmp_path / "config.yaml"
    path.write_text(_sni_listener(), encoding="utf-8")
    capsys.readouterr()
    assert main(["check-config", "--config", str(path)]) == 0
    printed = capsys.readouterr().err
    assert len(printed.strip().splitlines()) == len(warnings), printed
    for warning in warnings:
        assert warning in printed


def test_the_example_sni_listener_is_valid(tmp_path: Path) -> None:
    """config.example.yaml's commented SNI listener, uncommented, with a wildcard certificate."""
    example = EXAMPLE.read_text(encoding="utf-8")
    start = example.index("#  - name: EXTERNAL\n")
    block = example[start : example.index("\n\n", start)]
    text = example.replace(block, re.sub(r"^#", "", block, flags=re.MULTILINE), 1)
    (tmp_path / "certs").mkdir()
    tooling.init_ca(tmp_path / "certs")
    hosts = ["kafka.example.com", "*.kafka.example.com"]
    tooling.issue_server(tmp_path / "certs", hosts=hosts, ips=[])
    (tmp_path / "users.yaml").write_text("{}\n", encoding="utf-8")
    (tmp_path / "config.yaml").write_text(text, encoding="utf-8")
    config = load_config(tmp_path / "config.yaml")
    (listener,) = (ls for ls in config.listeners if ls.name == "EXTERNAL")
    assert listener.sni is not None and listener.security_protocol == "SASL_SSL"
    assert listener.sni.host_for(3) == "broker-3.kafka.example.com"
    assert [w for w in config_warnings(config) if "EXTERNAL" in w] == []
