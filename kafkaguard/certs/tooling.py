"""Mint a development CA, server and client certificates (``kafkaguard certs ...``).

For development and tests, not a PKI: one self-signed CA (EC P-256 keys, SHA-256), server
certificates with DNS/IP subject alternative names and the serverAuth usage, client
certificates with the clientAuth usage and a subject built from ``--cn``/``--ou``/``--o``.
Every file is PEM; private keys are written unencrypted with mode 0600 (created so, never
widened afterwards), certificates 0644. Nothing is overwritten unless ``force`` is given.

Layout in the target directory (default ``certs/``)::

    ca.pem  ca-key.pem                 init-ca
    <name>.pem  <name>-key.pem         server (default name "server") / client (default: the CN)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kafkaguard.policy.x500 import rfc2253_from_name

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
DEFAULT_DIR = Path("certs")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_USAGES = {
    ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth",
    ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth",
}


class CertToolError(ValueError):
    """Bad arguments or files (reported by the CLI as one line, exit code 2)."""


@dataclass(frozen=True, slots=True)
class Issued:
    cert_path: Path
    key_path: Path
    subject: str
    """The subject as Java prints it (what ``ssl.principal.mapping.rules`` see)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _validity(days: int, not_before: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    start = not_before if not_before is not None else _now() - dt.timedelta(minutes=5)
    if days < 1:
        raise CertToolError(f"days must be at least 1, got {days}")
    return start, start + dt.timedelta(days=days)


def _write(path: Path, data: bytes, mode: int, force: bool) -> None:
    """Write ``data`` with ``mode`` from the start (a key is never readable by others, not even
    for a moment); refuse to replace an existing file unless ``force``."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise CertToolError(f"{path} exists (use --force to replace it)") from None
    try:
        os.fchmod(fd, mode)  # an existing file (force) keeps no wider mode
        os.write(fd, data)
    finally:
        os.close(fd)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _save(
    directory: Path,
    name: str,
    cert: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
    force: bool,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> Issued:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / (cert_file or f"{name}.pem")
    key_path = directory / (key_file or f"{name}-key.pem")
    for path in (cert_path, key_path):
        if path.exists() and not force:
            raise CertToolError(f"{path} exists (use --force to replace it)")
    _write(key_path, _key_pem(key), 0o600, force)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644, force)
    return Issued(cert_path, key_path, rfc2253_from_name(cert.subject))


def load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise CertToolError(f"{exc.filename}: no CA here (run `kafkaguard certs init-ca`)") from exc
    except ValueError as exc:
        raise CertToolError(f"{directory}: cannot read the CA: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertToolError(f"{key_path}: the CA key must be an EC key minted by this tool")
    return cert, key


def init_ca(
    directory: Path = DEFAULT_DIR,
    *,
    common_name: str = "kafkaguard dev CA",
    days: int = 3650,
    force: bool = False,
) -> Issued:
    """A self-signed CA certificate and key in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start, end = _validity(days, None)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return _save(directory, "ca", cert, key, force, CA_CERT, CA_KEY)


def _leaf(
    directory: Path,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[x509.GeneralName],
    name: str,
    days: int,
    not_before: dt.datetime | None,
    force: bool,
) -> Issued:
    if not _NAME_RE.fullmatch(name):
        raise CertToolError(f"--name must be a plain file name, got {name!r}")
    ca_cert, ca_key = load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, not_before)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return _save(directory, name, cert, key, force)


def issue_server(
    directory: Path = DEFAULT_DIR,
    *,
    hosts: Sequence[str] = ("localhost",),
    ips: Sequence[str] = ("127.0.0.1",),
    name: str = "server",
    days: int = 825,
    not_before: dt.datetime | None = None,
    force: bool = False,
) -> Issued:
    """A server certificate for ``hosts`` (DNS SANs) and ``ips`` (IP SANs), signed by the CA
    in ``directory``. Clients verify the proxy's address against these names (Kafka clients
    do hostname verification by default), so list every address clients connect to."""
    if not hosts and not ips:
        raise CertToolError("a server certificate needs at least one --host or --ip")
    sans: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
    for ip in ips:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise CertToolError(f"--ip {ip!r} is not an IP address") from exc
    cn = hosts[0] if hosts else ips[0]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    return _leaf(
        directory, subject, ExtendedKeyUsageOID.SERVER_AUTH, sans, name, days, not_before, force
    )


def issue_client(
    directory: Path = DEFAULT_DIR,
    *,
    common_name: str,
    organizational_units: Sequence[str] = (),
    organization: str | None = None,
    country: str | None = None,
    name: str | None = None,
    days: int = 825,
    not_before: dt.datetime | None = None,
    force: bool = False,
) -> Issued:
    """A client certificate. The subject is written C, O, OU…, CN (the usual order), so Java
    prints it back to front: ``CN=alice,OU=eng,O=Acme,C=US`` — the DN mapping rules see."""
    if not common_name:
        raise CertToolError("a client certificate needs --cn")
    attrs: list[x509.NameAttribute[str]] = []
    if country:
        attrs.append(x509.NameAttribute(NameOID.COUNTRY_NAME, country))
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    attrs += [
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou) for ou in organizational_units
    ]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    try:
        subject = x509.Name(attrs)
    except ValueError as exc:
        raise CertToolError(str(exc)) from exc
    file_name = name or common_name
    return _leaf(
        directory,
        subject,
        ExtendedKeyUsageOID.CLIENT_AUTH,
        (),
        file_name,
        days,
        not_before,
        force,
    )


def describe(path: Path) -> str:
    """``kafkaguard certs show FILE``: subject (as Java prints it), issuer, validity, SANs,
    usages and SHA-256 fingerprint of every certificate in a PEM file."""
    try:
        certs = x509.load_pem_x509_certificates(path.read_bytes())
    except OSError as exc:
        raise CertToolError(f"{path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CertToolError(f"{path}: not a PEM certificate file ({exc})") from exc
    lines: list[str] = []
    now = _now()
    for cert in certs:
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        state = "valid" if start <= now <= end else ("EXPIRED" if now > end else "NOT YET VALID")
        lines += [
            f"subject:     {rfc2253_from_name(cert.subject)}",
            f"issuer:      {rfc2253_from_name(cert.issuer)}",
            f"serial:      {cert.serial_number:x}",
            f"valid:       {start.isoformat()} .. {end.isoformat()} ({state})",
        ]
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = [f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)]
            names += [f"IP:{n}" for n in san.get_values_for_type(x509.IPAddress)]
            lines.append(f"alt names:   {', '.join(names)}")
        except x509.ExtensionNotFound:
            pass
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
            lines.append(f"CA:          {'yes' if ca else 'no'}")
        except x509.ExtensionNotFound:
            pass
        try:
            eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            lines.append("usage:       " + ", ".join(_USAGES.get(u, u.dotted_string) for u in eku))
        except x509.ExtensionNotFound:
            pass
        lines.append(f"sha256:      {cert.fingerprint(hashes.SHA256()).hex(':')}")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
