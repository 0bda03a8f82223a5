"""kafkaguard.certs.tls without sockets to the proxy: context building, the ``ssl:`` config
section, the certificate → principal path and reloading (handshakes over in-memory BIOs)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kafkaguard.certs import tooling
from kafkaguard.certs.tls import (
    MODERN_TLS12_CIPHERS,
    ServerTls,
    TlsConfig,
    TlsError,
    UpstreamTlsConfig,
    build_client_context,
    build_server_context,
    parse_tls_config,
    principal_from_certificate,
)
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.policy.principal_mapping import NoMatchingRuleError, SslPrincipalMapper
from kafkaguard.proxy.config import parse_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pki")
    tooling.init_ca(root)
    tooling.issue_server(root, hosts=["localhost"], ips=["127.0.0.1"])
    tooling.issue_client(
        root, common_name="Alice", organizational_units=["eng"], organization="Acme"
    )
    tooling.issue_client(root, common_name="Tkac, Adam", country="CZ", name="adam")
    return root


def _config(pki: Path, **overrides: object) -> TlsConfig:
    base = TlsConfig(pki / "server.pem", pki / "server-key.pem", pki / "ca.pem", "required")
    return TlsConfig(**{**{f: getattr(base, f) for f in base.__dataclass_fields__}, **overrides})  # type: ignore[arg-type]


def _handshake(
    server: ssl.SSLContext, client: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake between two contexts over memory BIOs (no sockets)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj in (("c", cli), ("s", srv)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server verifies the client's certificate after the client is done.
            with contextlib.suppress(ssl.SSLWantReadError):
                srv.read(1)
            return srv, cli
    raise AssertionError("handshake did not finish")


def _client(pki: Path, who: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if who is not None:
        context.load_cert_chain(pki / f"{who}.pem", pki / f"{who}-key.pem")
    return context


# -- context building ------------------------------------------------------------------------
def test_server_context_is_tls12_plus_with_modern_ciphers(pki: Path) -> None:
    context = build_server_context(_config(pki))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.options & ssl.OP_NO_COMPRESSION
    tls12 = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(c["kea"] == "kx-ecdhe" and c["aead"] for c in tls12)


@pytest.mark.parametrize(
    ("mode", "verify"),
    [("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_client_auth_modes(pki: Path, mode: str, verify: ssl.VerifyMode) -> None:
    assert build_server_context(_config(pki, client_auth=mode)).verify_mode == verify


def test_tls12_client_gets_an_ecdhe_aead_suite_and_min_version_is_enforced(pki: Path) -> None:
    client = _client(pki, "Alice")
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    srv, _ = _handshake(build_server_context(_config(pki)), client)
    assert srv.version() == "TLSv1.2"
    cipher = srv.cipher()
    assert cipher is not None and cipher[0].startswith("ECDHE-") and "GCM" in cipher[0]
    with pytest.raises(ssl.SSLError):
        _handshake(build_server_context(_config(pki, min_version="TLSv1.3")), client)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cert_file": Path("/nonexistent/server.pem")}, "No such file"),
        ({"key_file": Path("adam-key.pem")}, "cannot load certificate/key"),  # not its key
        ({"ca_file": Path("/nonexistent/ca.pem")}, "cannot load CA file"),
    ],
)
def test_bad_files_are_a_clear_error(pki: Path, overrides: dict[str, Path], message: str) -> None:
    overrides = {k: (v if v.is_absolute() else pki / v) for k, v in overrides.items()}
    with pytest.raises(TlsError, match=message):
        build_server_context(_config(pki, **overrides))


def test_upstream_client_context(pki: Path) -> None:
    context = build_client_context(UpstreamTlsConfig(ca_file=pki / "ca.pem"))
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    srv, cli = _handshake(build_server_context(_config(pki, client_auth="none")), context)
    assert cli.getpeercert()


# -- principal -------------------------------------------------------------------------------
def _der(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(Encoding.DER)


def test_principal_from_certificate_is_java_rfc2253_dn(pki: Path) -> None:
    default = SslPrincipalMapper("DEFAULT")
    assert principal_from_certificate(_der(pki / "Alice.pem"), default) == KafkaPrincipal(
        "User", "CN=Alice,OU=eng,O=Acme"
    )
    # Java escapes the comma inside the CN: CN=Tkac\, Adam,C=CZ
    assert (
        principal_from_certificate(_der(pki / "adam.pem"), default).name == r"CN=Tkac\, Adam,C=CZ"
    )
    assert principal_from_certificate(None, default) == KafkaPrincipal.ANONYMOUS


def test_mapping_rules_and_no_matching_rule(pki: Path) -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=eng,.*$/$1/L")
    assert principal_from_certificate(_der(pki / "Alice.pem"), mapper).text == "User:alice"
    with pytest.raises(NoMatchingRuleError, match=r"No rules apply to CN=Tkac\\, Adam,C=CZ"):
        principal_from_certificate(_der(pki / "adam.pem"), mapper)


def test_authenticate_after_a_real_handshake(pki: Path) -> None:
    tls = ServerTls(
        _config(pki, client_auth="requested", principal_mapping_rules="RULE:^CN=([^,]*),.*$/$1/")
    )
    srv, _ = _handshake(tls.context, _client(pki, "Alice"))
    assert tls.authenticate(srv).text == "User:Alice"
    srv, _ = _handshake(tls.context, _client(pki))
    assert tls.authenticate(srv) == KafkaPrincipal.ANONYMOUS
    with pytest.raises(NoMatchingRuleError):
        tls.authenticate(None)  # no TLS object: fail closed, not ANONYMOUS


# -- reload ----------------------------------------------------------------------------------
def _served_serial(tls: ServerTls, pki: Path) -> int:
    _, cli = _handshake(tls.context, _client(pki, "Alice"))
    der = cli.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_reload_new_files_for_new_handshakes_and_keep_old_on_bad_files(
    pki: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("ca.pem", "ca-key.pem", "server.pem", "server-key.pem"):
        shutil.copy(pki / name, tmp_path / name)
    tls = ServerTls(
        _config(pki, cert_file=tmp_path / "server.pem", key_file=tmp_path / "server-key.pem")
    )
    first = _served_serial(tls, pki)
    assert _served_serial(tls, pki) == first and tls.reloads == 0

    # A new certificate with the *old* key (a half-finished rotation): rejected, logged once.
    old_key = (tmp_path / "server-key.pem").read_bytes()
    tooling.issue_server(tmp_path, force=True)
    (tmp_path / "server-key.pem").write_bytes(old_key)
    with caplog.at_level(logging.ERROR, logger="kafkaguard.certs"):
        assert _served_serial(tls, pki) == first
        assert _served_serial(tls, pki) == first
    assert caplog.text.count("new TLS files not loaded") == 1
    assert tls.reloads == 0

    # A missing file (mid-rename) also keeps the old context.
    os.rename(tmp_path / "server.pem", tmp_path / "server.pem.new")
    assert _served_serial(tls, pki) == first
    os.rename(tmp_path / "server.pem.new", tmp_path / "server.pem")

    # The complete new pair: new handshakes get it.
    tooling.issue_server(tmp_path, force=True)
    second = _served_serial(tls, pki)
    assert second != first and tls.reloads == 1
    assert not tls.reload()  # nothing changed since


# -- configuration ---------------------------------------------------------------------------
def _parse(text: str, base: Path) -> TlsConfig:
    return parse_tls_config(ConfigSection.from_text(text, "t.yaml"), base)


def test_parse_ssl_section_relative_paths_and_defaults(tmp_path: Path) -> None:
    config = _parse("cert_file: s.pem\nkey_file: /abs/k.pem\n", tmp_path)
    assert config.cert_file == tmp_path / "s.pem" and config.key_file == Path("/abs/k.pem")
    assert config.client_auth == "none" and config.principal_mapping_rules == "DEFAULT"
    assert config.ciphers == MODERN_TLS12_CIPHERS and config.min_version == "TLSv1.2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("key_file: k.pem", "t.yaml:1 cert_file: is required"),
        ("cert_file: c\nkey_file: k\nclient_auth: required", "ca_file: is required"),
        ("cert_file: c\nkey_file: k\nclient_auth: maybe", "client_auth: must be one of"),
        ("cert_file: c\nkey_file: k\nprincipal_mapping_rules: RULE:x", "Invalid rule"),
        ("cert_file: c\nkey_file: k\nmin_version: TLSv1", "min_version: must be one of"),
        ("cert_file: c\nkey_file: k\nciphers: NOPE", "ciphers: no cipher matches"),
        ("cert_file: c\nkey_file: k\nkeyfile: x", "unknown key 'keyfile'"),
    ],
)
def test_parse_ssl_section_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _parse(text, tmp_path)


LISTENER = """
upstream: {{bootstrap_servers: ["127.0.0.1:9092"]}}
listeners:
  - name: SECURE
    security_protocol: {protocol}
    port: 9193
{ssl}
"""
SSL_SECTION = """    ssl:
      cert_file: certs/server.pem
      key_file: certs/server-key.pem
      ca_file: certs/ca.pem
      client_auth: required
      principal_mapping_rules: "RULE:^CN=(.*?),OU=eng,.*$/$1/L, DEFAULT"
"""


def test_ssl_listener_in_the_proxy_config(tmp_path: Path) -> None:
    text = LISTENER.format(protocol="SSL", ssl=SSL_SECTION)
    config = parse_config(ConfigSection.from_text(text, "c.yaml"), tmp_path)
    tls = config.listeners[0].ssl
    assert tls is not None and tls.client_auth == "required"
    assert tls.cert_file == tmp_path / "certs/server.pem"


@pytest.mark.parametrize(
    ("protocol", "ssl_text", "message"),
    [
        ("SSL", "", "listeners\\[0\\].ssl: is required"),
        ("PLAINTEXT", SSL_SECTION, "ssl: is only for SSL and SASL_SSL listeners"),
    ],
)
def test_ssl_listener_config_errors(
    tmp_path: Path, protocol: str, ssl_text: str, message: str
) -> None:
    text = LISTENER.format(protocol=protocol, ssl=ssl_text)
    with pytest.raises(ConfigError, match=message):
        parse_config(ConfigSection.from_text(text, "c.yaml"), tmp_path)


def test_example_config_ssl_listener_parses() -> None:
    """config.example.yaml's commented SSL listener, uncommented, is a valid listener."""
    example = (Path(__file__).parents[2] / "config.example.yaml").read_text(encoding="utf-8")
    start = example.index("#  - name: SSL")
    block = []
    for line in example[start:].splitlines():
        if not line.startswith("#  "):
            break
        block.append(line[1:])
    text = "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\nlisteners:\n" + "\n".join(block)
    config = parse_config(ConfigSection.from_text(text, "example"), Path("/etc/kafkaguard"))
    (listener,) = config.listeners
    assert listener.security_protocol == "SSL" and listener.ssl is not None


def test_upstream_ssl_is_parsed(tmp_path: Path) -> None:
    """Wired since upstream TLS exists (tests/proxy/net/test_upstream_security.py)."""
    text = "upstream: {bootstrap_servers: ['127.0.0.1:9092'], ssl: {ca_file: ca.pem}}\n"
    text += "listeners: [{name: P, port: 9192}]\n"
    config = parse_config(ConfigSection.from_text(text, "c.yaml"), tmp_path)
    assert config.upstream.ssl == UpstreamTlsConfig(ca_file=tmp_path / "ca.pem")
