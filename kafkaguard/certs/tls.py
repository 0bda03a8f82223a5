"""TLS for listeners (and, optionally, towards the upstream cluster).

* :class:`TlsConfig` / :func:`parse_tls_config` — a listener's ``ssl:`` section.
* :func:`build_server_context` — an :class:`ssl.SSLContext` from PEM files: TLS ≥ 1.2 (TLS 1.3
  preferred), forward-secret AEAD ciphers only for TLS 1.2, no compression, no renegotiation;
  client authentication ``none | requested | required`` like Kafka's ``ssl.client.auth``.
* :class:`ServerTls` — the context a listener serves with, **reloaded from disk without a
  restart**: every new handshake checks the files' stamps (mtime, size, inode; three ``stat``
  calls) and, when they changed, builds a new context. The swap happens in the TLS
  ClientHello callback (``sni_callback``), which OpenSSL calls for every handshake, with or
  without SNI, so new connections get the new certificate while established ones keep theirs.
  A new file set that does not load (half-written, key not matching the certificate, …) keeps
  the previous context; the reason is logged once per file set.
* :func:`principal_from_certificate` — Kafka's ``DefaultKafkaPrincipalBuilder`` for SSL: the
  verified client certificate's subject as Java's ``X500Principal.getName()`` prints it
  (:mod:`kafkaguard.policy.x500`), through ``ssl.principal.mapping.rules``; no certificate →
  ``User:ANONYMOUS``; no matching rule → :class:`NoMatchingRuleError` (authentication fails).

Everything here is synchronous and socket-free; the asyncio shell only passes the context to
``create_server`` and asks for the principal once the handshake is done.
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.policy.principal_mapping import NoMatchingRuleError, SslPrincipalMapper
from kafkaguard.policy.x500 import rfc2253_from_name

log = logging.getLogger("kafkaguard.certs")

CLIENT_AUTH_MODES: Final = ("none", "requested", "required")
_VERIFY_MODES: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
TLS_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
MODERN_TLS12_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!SHA1"
"""TLS 1.2 suites: ECDHE key exchange (forward secrecy) with AES-GCM or ChaCha20-Poly1305
only. TLS 1.3 suites are all AEAD and are left at OpenSSL's defaults."""


class TlsError(ConfigError):
    """PEM files that cannot make a TLS context (missing, unreadable, mismatched)."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """A listener's ``ssl:`` section (SSL and the TLS half of SASL_SSL)."""

    cert_file: Path
    """PEM server certificate, optionally followed by its intermediate CA certificates."""
    key_file: Path
    """PEM private key of ``cert_file`` (unencrypted: protect it with file permissions)."""
    ca_file: Path | None = None
    """PEM CA certificates trusted to sign *client* certificates (needed unless
    ``client_auth`` is ``none``)."""
    client_auth: str = "none"
    """Kafka's ``ssl.client.auth``: ``none`` (no client certificate asked for),
    ``requested`` (asked for; verified if sent), ``required`` (handshake fails without one)."""
    principal_mapping_rules: str = "DEFAULT"
    """Kafka's ``ssl.principal.mapping.rules``, applied to the client certificate's DN."""
    min_version: str = "TLSv1.2"
    ciphers: str = MODERN_TLS12_CIPHERS


@dataclass(frozen=True, slots=True)
class UpstreamTlsConfig:
    """``upstream.ssl:`` — TLS from the proxy to the brokers."""

    ca_file: Path | None = None
    """PEM CAs that sign the brokers' certificates (default: the system trust store)."""
    cert_file: Path | None = None
    """Client certificate the proxy presents to the brokers (mutual TLS), with ``key_file``."""
    key_file: Path | None = None
    check_hostname: bool = True


def _path(section: ConfigSection, key: str, base_dir: Path, required: bool) -> Path | None:
    value = section.get_str(key, None)
    if value is None:
        if required:
            raise section.error(key, "is required")
        return None
    if not value:
        raise section.error(key, "must be a file path")
    path = Path(value)
    return path if path.is_absolute() else base_dir / path


def parse_tls_config(section: ConfigSection, base_dir: Path) -> TlsConfig:
    """A listener's ``ssl:`` section; relative paths are relative to ``base_dir`` (the
    configuration file's directory). Files are read when the listener starts."""
    cert_file = _path(section, "cert_file", base_dir, True)
    key_file = _path(section, "key_file", base_dir, True)
    ca_file = _path(section, "ca_file", base_dir, False)
    client_auth = section.choice("client_auth", CLIENT_AUTH_MODES, "none")
    if client_auth != "none" and ca_file is None:
        raise section.error("ca_file", f"is required with client_auth: {client_auth}")
    rules = section.get_str("principal_mapping_rules", "DEFAULT")
    try:
        SslPrincipalMapper(rules)
    except ValueError as exc:
        raise section.error("principal_mapping_rules", str(exc)) from None
    min_version = section.choice("min_version", tuple(TLS_VERSIONS), "TLSv1.2")
    ciphers = section.get_str("ciphers", MODERN_TLS12_CIPHERS)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(ciphers)
    except ssl.SSLError:
        raise section.error("ciphers", f"no cipher matches {ciphers!r}") from None
    section.reject_unknown()
    assert cert_file is not None and key_file is not None
    return TlsConfig(cert_file, key_file, ca_file, client_auth, rules, min_version, ciphers)


def parse_upstream_tls_config(section: ConfigSection, base_dir: Path) -> UpstreamTlsConfig:
    ca_file = _path(section, "ca_file", base_dir, False)
    cert_file = _path(section, "cert_file", base_dir, False)
    key_file = _path(section, "key_file", base_dir, False)
    if (cert_file is None) != (key_file is None):
        raise section.error("key_file" if key_file is None else "cert_file", "give both or neither")
    check_hostname = section.get_bool("check_hostname", True)
    section.reject_unknown()
    return UpstreamTlsConfig(ca_file, cert_file, key_file, check_hostname)


def _harden(context: ssl.SSLContext, min_version: str, ciphers: str) -> None:
    context.minimum_version = TLS_VERSIONS[min_version]
    context.set_ciphers(ciphers)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)


def _load_error(what: str, path: Path | None, exc: BaseException) -> TlsError:
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    else:
        detail = str(exc) or type(exc).__name__
    return TlsError(f"{what} {path}: {detail}" if path is not None else f"{what}: {detail}")


def build_server_context(config: TlsConfig) -> ssl.SSLContext:
    """A server-side context from the PEM files of ``config``; :class:`TlsError` if the files
    cannot be loaded (missing, not PEM, key not matching the certificate, …)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _harden(context, config.min_version, config.ciphers)
    try:
        context.load_cert_chain(config.cert_file, config.key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise _load_error("cannot load certificate/key", config.cert_file, exc) from None
    context.verify_mode = _VERIFY_MODES[config.client_auth]
    if config.ca_file is not None:
        try:
            context.load_verify_locations(cafile=config.ca_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise _load_error("cannot load CA file", config.ca_file, exc) from None
    _warn_if_key_readable(config.key_file)
    return context


def build_client_context(config: UpstreamTlsConfig) -> ssl.SSLContext:
    """The proxy's client-side context towards the brokers."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if config.ca_file is not None:
            context.load_verify_locations(cafile=config.ca_file)
        if config.cert_file is not None and config.key_file is not None:
            context.load_cert_chain(config.cert_file, config.key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise _load_error("cannot load upstream TLS files", None, exc) from None
    context.check_hostname = config.check_hostname
    return context


def _warn_if_key_readable(path: Path) -> None:
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("private key %s is accessible to group/others (mode %o)", path, mode & 0o777)


_Stamp = tuple[tuple[int, int, int], ...]


def _stamp(paths: tuple[Path, ...]) -> _Stamp:
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def _not_after(path: Path) -> float | None:
    """The ``notAfter`` of the first certificate in a PEM file."""
    try:
        return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return None


class ServerTls:
    """A listener's TLS: its current context (reloaded when the files change) and the
    principal mapping of its client certificates."""

    def __init__(self, config: TlsConfig, listener_name: str = "?") -> None:
        self.config = config
        self.listener_name = listener_name
        self.mapper = SslPrincipalMapper(config.principal_mapping_rules)
        self._paths = tuple(
            p for p in (config.cert_file, config.key_file, config.ca_file) if p is not None
        )
        self._lock = threading.Lock()
        try:
            stamp = _stamp(self._paths)
        except OSError as exc:
            raise _load_error("cannot read", Path(exc.filename or "?"), exc) from None
        self._built_not_after: float | None = None
        self._current = self._build()
        self.not_after: float | None = self._built_not_after
        """POSIX time the certificate being served expires (None: unreadable), for metrics;
        a replacement file that fails to load does not change it."""
        self._stamp: _Stamp = stamp
        self._rejected: object = None
        self.reloads = 0
        """How many times new files were loaded (observability and tests)."""
        self.context = self._current
        """The context given to ``create_server``; each handshake switches to :meth:`current`."""

    def _build(self) -> ssl.SSLContext:
        context = build_server_context(self.config)
        context.sni_callback = self._on_client_hello
        self._built_not_after = _not_after(self.config.cert_file)
        return context

    def current(self) -> ssl.SSLContext:
        """The newest context that loaded; checks the files' stamps first."""
        try:
            stamp = _stamp(self._paths)
        except OSError as exc:  # a file is being replaced: keep serving the old one
            self._reject(("missing", exc.filename), f"cannot stat {exc.filename}: {exc.strerror}")
            return self._current
        if stamp == self._stamp or stamp == self._rejected:
            return self._current
        with self._lock:
            if stamp != self._stamp:
                try:
                    context = self._build()
                except TlsError as exc:
                    self._reject(stamp, str(exc))
                    return self._current
                self._current, self._stamp, self._rejected = context, stamp, None
                self.not_after = self._built_not_after
                self.reloads += 1
                log.info(
                    "listener %s: reloaded TLS certificate %s (new connections use it)",
                    self.listener_name,
                    self.config.cert_file,
                )
        return self._current

    def reload(self) -> bool:
        """Check the files now (e.g. on SIGHUP); True when a new context was loaded."""
        before = self._current
        self.current()
        return self._current is not before

    def _reject(self, key: object, reason: str) -> None:
        """Log a rejected file set once (``key``: its stamp, or the file that is missing)."""
        if key == self._rejected:
            return
        self._rejected = key
        log.error(
            "listener %s: new TLS files not loaded, still serving the previous certificate: %s",
            self.listener_name,
            reason,
        )

    def _on_client_hello(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        try:
            context = self.current()
            if ssl_object.context is not context:
                ssl_object.context = context
        except Exception:  # never fail a handshake over a reload problem
            log.exception("listener %s: TLS reload check failed", self.listener_name)

    def principal(self, peer_der: bytes | None) -> KafkaPrincipal:
        return principal_from_certificate(peer_der, self.mapper)

    def authenticate(self, ssl_object: object) -> KafkaPrincipal:
        """The principal of a connection whose handshake completed (``ssl_object``: the
        transport's ``"ssl_object"`` extra). Fails closed: no TLS object at all is an error,
        not ``User:ANONYMOUS``."""
        return self.principal(_peer_der(ssl_object))

    def peer_dn(self, ssl_object: object) -> str | None:
        """The client certificate's subject as Java prints it (None: no certificate), for the
        group mapping rules (kafkaguard/policy/groups.py)."""
        der = _peer_der(ssl_object)
        if der is None:
            return None
        try:
            return peer_dn(der)
        except ValueError as exc:
            raise NoMatchingRuleError(
                f"cannot read the client certificate's subject: {exc}"
            ) from exc


def _peer_der(ssl_object: object) -> bytes | None:
    """The verified client certificate of a completed handshake (None: the client sent none)."""
    getpeercert = getattr(ssl_object, "getpeercert", None)
    if getpeercert is None:
        raise NoMatchingRuleError("the connection has no TLS session")
    der = getpeercert(binary_form=True)
    if der is not None and not isinstance(der, bytes):
        raise NoMatchingRuleError("unexpected peer certificate type")
    return der


def dns_names(cert_file: Path) -> list[str]:
    """The DNS subject alternative names of the first certificate of a PEM file."""
    certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return [name.lower() for name in extension.value.get_values_for_type(x509.DNSName)]


def name_matches(san: str, host: str) -> bool:
    """Whether a DNS SAN covers ``host`` (RFC 6125 §6.4.3): labels compared without case, a
    ``*`` only in the leftmost label, matching within that one label (``*.example.com`` and
    ``broker-*.example.com`` cover ``broker-1.example.com``, not ``a.b.example.com``)."""
    wanted, labels = host.lower().split("."), san.lower().split(".")
    if len(wanted) != len(labels) or wanted[1:] != labels[1:] or "*" in "".join(labels[1:]):
        return False
    prefix, star, suffix = labels[0].partition("*")
    if not star:
        return wanted[0] == labels[0]
    first = wanted[0]
    fits = len(first) > len(prefix) + len(suffix)  # the * stands for one character or more
    return fits and first.startswith(prefix) and first.endswith(suffix)


def peer_dn(peer_der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` prints it."""
    return rfc2253_from_name(x509.load_der_x509_certificate(peer_der).subject)


def principal_from_certificate(
    peer_der: bytes | None, mapper: SslPrincipalMapper
) -> KafkaPrincipal:
    """``DefaultKafkaPrincipalBuilder.build`` for an SSL channel (``SslAuthenticationContext``).

    ``peer_der`` is the *verified* client certificate (``getpeercert(binary_form=True)``), or
    None when the client sent none. Raises :class:`NoMatchingRuleError` when no mapping rule
    applies: the connection's authentication fails.
    """
    if peer_der is None:
        return KafkaPrincipal.ANONYMOUS
    try:
        dn = peer_dn(peer_der)
    except ValueError as exc:
        raise NoMatchingRuleError(f"cannot read the client certificate's subject: {exc}") from exc
    return KafkaPrincipal(KafkaPrincipal.USER_TYPE, mapper.get_name(dn))


__all__ = [
    "CLIENT_AUTH_MODES",
    "NoMatchingRuleError",
    "ServerTls",
    "TlsConfig",
    "TlsError",
    "UpstreamTlsConfig",
    "build_client_context",
    "build_server_context",
    "parse_tls_config",
    "parse_upstream_tls_config",
    "principal_from_certificate",
]
