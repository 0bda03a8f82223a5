"""OAUTHBEARER regressions, through the listener's SASL server as configured (the API every
version of the validator has had), with tokens minted by jwcrypto."""

from __future__ import annotations

import json
from pathlib import Path

from kafkaguard.proxy.sasl.authenticator import SaslServer
from kafkaguard.proxy.sasl.config import OAuthBearerConfig, SaslListenerConfig
from kafkaguard.proxy.sasl.mechanism import Challenge, Success
from kafkaguard.proxy.sasl.oauthbearer import INVALID_TOKEN
from tests.support.jose_tokens import AUDIENCE, IdentityProvider, client_message, jwks

RSA = IdentityProvider("RS256", "rsa-1")


def test_token_without_iat_is_refused(tmp_path: Path) -> None:
    """Kafka's BrokerJwtValidator requires iat (jose4j setRequireIssuedAt); the listener as
    configured, so the same test runs against any validator behind it."""
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks(RSA)))
    config = SaslListenerConfig(
        enabled_mechanisms=("OAUTHBEARER",),
        oauthbearer=OAuthBearerConfig(jwks_file=keys, expected_audience=(AUDIENCE,)),
    )
    server = SaslServer(config)
    assert isinstance(
        server.new_mechanism("OAUTHBEARER").step(client_message(RSA.token())), Success
    )
    no_iat = server.new_mechanism("OAUTHBEARER").step(client_message(RSA.token(iat=None)))
    assert no_iat == Challenge(INVALID_TOKEN.encode())
