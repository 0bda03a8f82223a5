"""The files a configuration names, opened and parsed as ``kafkaguard run`` will: what
``check-config`` (and so ``kafkaguard reload``, which checks first) adds to the parse, so that
a file it says ``ok`` to is not refused at start for a missing key or a bad ACL file.

Checked: each TLS listener's certificate/key pair (they must match) and CA file; upstream TLS
files; each SASL listener's credentials file and OAUTHBEARER keys (JWKS file, PEM public
keys); a file ACL store's file (its syntax and keys). Errors name the configuration file,
line and key, as parse errors do. Files outside the proxy's control at check time (ZooKeeper,
a JWKS endpoint) are not contacted.
"""

from __future__ import annotations

from pathlib import Path

from kafkaguard.certs.tls import TlsError, build_client_context, build_server_context
from kafkaguard.config_tree import ConfigError, ConfigSection, report
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.proxy.config import ProxyConfig
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import read_users_file
from kafkaguard.proxy.sasl.oauthbearer import KeyLoadError, load_pem_key, parse_jwks
from kafkaguard.proxy.sasl.scram import CredentialFormatError


def check_files(config: ProxyConfig) -> None:
    """Raise :class:`ConfigError` (``file:line key: what``) for the first referenced file that
    ``run`` would refuse; under :func:`~kafkaguard.config_tree.collecting`, record one for
    each."""
    root = config.section
    if root is None:  # built in code: no file to point at
        return
    for section, listener in zip(root.sections("listeners"), config.listeners, strict=True):
        if listener.ssl is not None:
            try:
                build_server_context(listener.ssl)
            except TlsError as exc:
                key = "ca_file" if str(exc).startswith("cannot load CA file") else "cert_file"
                report(section.section("ssl").error(key, str(exc)))
        if listener.sasl is not None:
            _check_sasl(section.section("sasl"), listener.sasl)
    upstream_tls = config.upstream.ssl
    if upstream_tls is not None:
        try:
            build_client_context(upstream_tls)
        except TlsError as exc:
            key = "ca_file" if upstream_tls.cert_file is None else "cert_file"
            report(root.section("upstream").section("ssl").error(key, str(exc)))
    store = config.policy.acl_store
    if store.type == "file" and store.path is not None:
        try:
            read_acl_file(store.path)
        except AclStoreError as exc:
            report(root.section("acl_store").error("path", str(exc)))


def check_store_topics(config: ProxyConfig, timeout_s: float = 5.0) -> list[str]:
    """``acl_store: {type: kafka}``: an existing topic must be one the store would start on
    (compacted, enough ``delete.retention.ms``: a :class:`ConfigError` naming the fix); a
    missing one is created at start, an unreachable cluster only warned about (the check
    may run where the cluster cannot be reached). Creates nothing."""
    store = config.policy.acl_store
    if store.type != "kafka":
        return []
    from kafkaguard.policy.config import kafka_topic_settings
    from kafkaguard.proxy.app.server import audit_connection
    from kafkaguard.topic_table import TopicTableError, topic_configs, unsafe_settings

    try:
        configs = topic_configs(audit_connection(config.upstream), store.topic, timeout_s)
    except (TopicTableError, OSError) as exc:
        return [f"acl_store: cannot check topic {store.topic}: {exc}"]
    unsafe = None if configs is None else unsafe_settings(kafka_topic_settings(store), configs)
    if unsafe is not None:
        raise ConfigError(f"{config.source}: acl_store.topic: {unsafe}")
    return []


def _check_sasl(section: ConfigSection, sasl: SaslListenerConfig) -> None:
    if sasl.credentials_file is not None:
        try:
            read_users_file(sasl.credentials_file)
        except (CredentialFormatError, OSError) as exc:
            report(section.error("credentials_file", str(exc)))
    oauth = sasl.oauthbearer
    if oauth is None:
        return
    oauth_section = section.section("oauthbearer")
    if oauth.jwks_file is not None:
        try:
            parse_jwks(Path(oauth.jwks_file).read_bytes(), str(oauth.jwks_file))
        except OSError as exc:
            report(oauth_section.error("jwks_file", f"{oauth.jwks_file}: {exc.strerror}"))
        except KeyLoadError as exc:
            report(oauth_section.error("jwks_file", str(exc)))
    for pem in oauth.public_key_files:
        try:
            load_pem_key(pem)
        except KeyLoadError as exc:
            report(oauth_section.error("public_key_files", str(exc)))


__all__ = ["ConfigError", "check_files", "check_store_topics"]
