"""A SASL_PLAINTEXT kafkaguard in front of Tansu, knowing the users :data:`PASSWORDS` for
PLAIN and both SCRAM mechanisms and OAUTHBEARER tokens signed by :data:`PROVIDER` (jwcrypto)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from kafkaguard.audit.config import AuditConfig
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBinding
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.config import OAuthBearerConfig, SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import TansuBroker
from tests.support.jose_tokens import AUDIENCE, ISSUER, IdentityProvider
from tests.support.proxy_fixture import RunningProxy, proxy_config, start_proxy_thread

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
PROVIDER = IdentityProvider("RS256", "test-key")


def start_sasl_proxy(
    tansu: TansuBroker,
    tmp_path: Path,
    acls: list[AclBinding],
    *,
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
    reauth_ms: int = 0,
    policy: PolicyConfig | None = None,
    passwords: Mapping[str, str] = PASSWORDS,
    audit: AuditConfig | None = None,
) -> RunningProxy:
    """``policy``: another authorizer than the StandardAuthorizer over ``acls`` (OPA);
    ``passwords``: other users than :data:`PASSWORDS`; ``audit``: the audit trail's settings
    (default: the proxy's, off)."""
    users = {}
    for user, password in passwords.items():
        users[user] = {
            "PLAIN": plain.make_credential(password, iterations=4096).to_string(),
            **{
                m: scram.make_credential(m, password, iterations=4096).to_kafka_string()
                for m in scram.MECHANISMS
            },
        }
    credentials = tmp_path / "users.yaml"
    write_users_file(credentials, users)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [PROVIDER.jwk()]}))
    acl_file = tmp_path / "acls.yaml"
    acl_file.write_text(format_acl_text(acls), encoding="utf-8")
    sasl = SaslListenerConfig(
        enabled_mechanisms=mechanisms,
        credentials_file=credentials,
        oauthbearer=OAuthBearerConfig(
            jwks_file=jwks, expected_issuer=ISSUER, expected_audience=(AUDIENCE,)
        ),
        connections_max_reauth_ms=reauth_ms,
        failed_authentication_delay_ms=10,
        max_failed_authentication_delay_ms=50,
    )
    config = proxy_config(
        tansu.address,
        name="SASL_PLAINTEXT",
        security_protocol="SASL_PLAINTEXT",
        sasl=sasl,
        policy=policy
        or PolicyConfig(
            authorizer=AuthorizerConfig(),
            acl_store=AclStoreConfig(type="file", path=acl_file),
        ),
    )
    if audit is not None:
        config = dataclasses.replace(config, audit=audit)
    running = start_proxy_thread(config)
    running.acl_file = acl_file
    return running
