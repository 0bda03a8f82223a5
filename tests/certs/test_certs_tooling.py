"""``kafkaguard certs``: the minted files, their permissions, and the CLI."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from kafkaguard.certs import tooling
from kafkaguard.cli import main


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ca_server_client_chain(tmp_path: Path) -> None:
    ca = tooling.init_ca(tmp_path)
    server = tooling.issue_server(
        tmp_path, hosts=["proxy.example", "localhost"], ips=["127.0.0.1", "::1"]
    )
    client = tooling.issue_client(
        tmp_path,
        common_name="alice",
        organizational_units=["eng", "ops"],
        organization="Acme",
        country="US",
    )
    ca_cert, server_cert, client_cert = (
        _cert(ca.cert_path),
        _cert(server.cert_path),
        _cert(client.cert_path),
    )

    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for leaf in (server_cert, client_cert):
        leaf.verify_directly_issued_by(ca_cert)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    san = server_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["proxy.example", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = server_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    eku = client_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # The subject as Java prints it (reverse order), what mapping rules are written against.
    assert client.subject == "CN=alice,OU=ops,OU=eng,O=Acme,C=US"
    assert client.cert_path == tmp_path / "alice.pem"


def test_keys_are_0600_and_nothing_is_overwritten(tmp_path: Path) -> None:
    ca = tooling.init_ca(tmp_path)
    server = tooling.issue_server(tmp_path)
    for issued in (ca, server):
        assert _mode(issued.key_path) == 0o600
        assert _mode(issued.cert_path) == 0o644
    before = server.cert_path.read_bytes()
    with pytest.raises(tooling.CertToolError, match="exists"):
        tooling.issue_server(tmp_path)
    assert server.cert_path.read_bytes() == before
    server.key_path.chmod(0o644)
    replaced = tooling.issue_server(tmp_path, force=True)
    assert replaced.cert_path.read_bytes() != before
    assert _mode(replaced.key_path) == 0o600  # --force never keeps a wider mode


def test_validity_window(tmp_path: Path) -> None:
    tooling.init_ca(tmp_path)
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    issued = tooling.issue_client(tmp_path, common_name="old", days=2, not_before=start)
    cert = _cert(issued.cert_path)
    assert cert.not_valid_before_utc == start
    assert cert.not_valid_after_utc == start + dt.timedelta(days=2)
    assert "EXPIRED" in tooling.describe(issued.cert_path)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda d: tooling.issue_server(d), "no CA here"),
        (lambda d: tooling.issue_server(d, hosts=[], ips=[]), "at least one"),
        (lambda d: tooling.issue_server(d, ips=["nope"]), "not an IP address"),
        (lambda d: tooling.issue_client(d, common_name="x", name="../evil"), "plain file name"),
        (lambda d: tooling.init_ca(d, days=0), "at least 1"),
    ],
)
def test_errors(tmp_path: Path, call: object, message: str) -> None:
    if message not in ("no CA here", "at least 1"):
        tooling.init_ca(tmp_path)
    with pytest.raises(tooling.CertToolError, match=message):
        call(tmp_path)  # type: ignore[operator]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path / "certs")
    assert main(["certs", "init-ca", "--dir", d]) == 0
    assert main(["certs", "server", "--dir", d, "--host", "kafka.local", "--ip", "10.0.0.1"]) == 0
    assert main(["certs", "client", "--dir", d, "--cn", "bob", "--ou", "eng", "--o", "Acme"]) == 0
    out = capsys.readouterr().out
    assert "subject: CN=bob,OU=eng,O=Acme" in out
    assert _mode(tmp_path / "certs" / "bob-key.pem") == 0o600
    assert main(["certs", "show", str(tmp_path / "certs" / "server.pem")]) == 0
    shown = capsys.readouterr().out
    assert "subject:     CN=kafka.local" in shown
    assert "alt names:   DNS:kafka.local, IP:10.0.0.1" in shown
    assert "usage:       serverAuth" in shown and "(valid)" in shown
    assert main(["certs", "client", "--dir", d, "--cn", "bob"]) == 2
    assert "exists (use --force" in capsys.readouterr().err
    assert main(["certs", "show", str(tmp_path / "missing.pem")]) == 2
