"""Where OAUTHBEARER keys come from: a JWKS file re-read when it changes, and an HTTPS JWKS
endpoint refreshed as Kafka's ``RefreshingHttpsJwks`` (on schedule, on an unknown ``kid`` at
most once a minute per ``kid``, with retries). The endpoint is a real HTTPS server on
127.0.0.1; tokens are minted by jwcrypto."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.proxy.config import parse_config
from kafkaguard.proxy.sasl.authenticator import SaslServer
from kafkaguard.proxy.sasl.config import OAuthBearerConfig, SaslListenerConfig
from kafkaguard.proxy.sasl.mechanism import Success
from kafkaguard.proxy.sasl.oauthbearer import (
    MISSING_KEY_ID_CACHE_IN_FLIGHT_S,
    HttpsJwks,
    JwksFile,
    JwtValidator,
    KeyLoadError,
    TokenInvalid,
)
from tests.support.jose_tokens import AUDIENCE, ISSUER, IdentityProvider, client_message, jwks
from tests.support.jwks_server import JwksServer, jwks_server

OLD = IdentityProvider("RS256", "2025-key")
NEW = IdentityProvider("ES256", "2026-key")


def validator(*sources: JwksFile | HttpsJwks) -> JwtValidator:
    return JwtValidator(sources, expected_issuer=ISSUER, expected_audience=(AUDIENCE,))


def accepts(v: JwtValidator, provider: IdentityProvider) -> bool:
    try:
        return v.validate(provider.token(), time.time())[0] == "alice"
    except TokenInvalid:
        return False


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def eventually(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Wait for what a background thread does (bounded; not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


# -- JWKS file -----------------------------------------------------------------------------------


def test_jwks_file_reloaded_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(OLD)))
    clock = FakeClock()
    source = JwksFile(path, check_interval_s=1.0, clock=clock)
    v = validator(source)
    assert accepts(v, OLD) and not accepts(v, NEW)
    path.write_text(json.dumps(jwks(NEW)))  # rotation at the identity provider
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # mtime surely different
    assert not accepts(v, NEW)  # not looked at again within the check interval
    clock.now += 1.0
    assert accepts(v, NEW) and not accepts(v, OLD)


def test_jwks_file_that_breaks_keeps_the_keys_in_force(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(OLD)))
    clock = FakeClock()
    v = validator(JwksFile(path, clock=clock))
    path.write_text('{"keys": [')  # a half-written file
    clock.now += 5
    assert accepts(v, OLD)
    path.write_text(json.dumps(jwks(OLD, NEW)))
    clock.now += 5
    assert accepts(v, NEW) and accepts(v, OLD)


def test_jwks_file_unreadable_at_start(tmp_path: Path) -> None:
    with pytest.raises(KeyLoadError, match="cannot read"):
        JwksFile(tmp_path / "missing.json")


# -- HTTPS endpoint --------------------------------------------------------------------------------


async def started(server: JwksServer, **kw: int) -> HttpsJwks:
    source = HttpsJwks(server.url, ca_file=server.ca_file, **kw)
    await source.start()
    return source


async def test_unknown_kid_refreshes_then_the_rotated_key_is_accepted(tmp_path: Path) -> None:
    with jwks_server(jwks(OLD), tmp_path) as server:
        source = await started(server)
        try:
            v = validator(source)
            assert server.requests == 1 and accepts(v, OLD)
            server.document = jwks(NEW)  # rotation: the provider signs with a new key
            assert not accepts(v, NEW)  # refused, as Kafka's: the refresh is expedited
            await eventually(lambda: accepts(v, NEW))
            assert server.requests == 2 and not accepts(v, OLD)
        finally:
            await source.close()


async def test_unknown_kid_refresh_is_rate_limited(tmp_path: Path) -> None:
    clock = FakeClock()
    with jwks_server(jwks(OLD), tmp_path) as server:
        source = HttpsJwks(server.url, ca_file=server.ca_file, clock=clock)
        await source.start()
        try:
            v = validator(source)
            ghost = IdentityProvider("RS256", "ghost")
            for _ in range(20):
                assert not accepts(v, ghost)
            await eventually(lambda: server.requests == 2)
            assert source.unknown_kid("ghost") is False  # once a minute per kid
            assert source.unknown_kid("x" * 1001) is False  # too long to remember
            clock.now += MISSING_KEY_ID_CACHE_IN_FLIGHT_S
            assert source.unknown_kid("ghost") is True
            await eventually(lambda: server.requests == 3)
        finally:
            await source.close()


async def test_refresh_retries_with_backoff_and_keeps_keys_on_failure(tmp_path: Path) -> None:
    with jwks_server(jwks(OLD), tmp_path) as server:
        source = await started(server, retry_backoff_ms=10, retry_backoff_max_ms=5000)
        try:
            v = validator(source)
            server.document = jwks(OLD, NEW)
            server.failures_to_serve = 2
            assert not accepts(v, NEW)
            await eventually(lambda: accepts(v, NEW))
            assert server.requests == 4  # start, two 500s, the retry that succeeded
        finally:
            await source.close()
        short = await started(server, retry_backoff_ms=10, retry_backoff_max_ms=50)
        try:
            server.failures_to_serve = 1000
            assert short.unknown_kid("rotated-away") is True
            before = server.requests
            await eventually(lambda: server.requests > before + 1)
            assert accepts(validator(short), NEW)  # the keys in force stay
        finally:
            await short.close()


async def test_scheduled_refresh(tmp_path: Path) -> None:
    with jwks_server(jwks(OLD), tmp_path) as server:
        source = await started(server, refresh_ms=100)
        try:
            server.document = jwks(NEW)
            v = validator(source)
            await eventually(lambda: accepts(v, NEW))  # no unknown kid needed
        finally:
            await source.close()


async def test_endpoint_unreachable_or_untrusted_stops_the_start(tmp_path: Path) -> None:
    with jwks_server(jwks(OLD), tmp_path) as server:
        untrusted = HttpsJwks(server.url)  # the system's CAs do not know the test CA
        with pytest.raises(KeyLoadError, match="cannot fetch"):
            await untrusted.start()
        server.failures_to_serve = 1
        with pytest.raises(KeyLoadError, match="500"):
            await started(server)
        server.document = {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}
        with pytest.raises(KeyLoadError, match="no signature key"):
            await started(server)


async def test_listener_sasl_server_with_a_jwks_endpoint(tmp_path: Path) -> None:
    with jwks_server(jwks(NEW), tmp_path) as server:
        config = SaslListenerConfig(
            enabled_mechanisms=("OAUTHBEARER",),
            oauthbearer=OAuthBearerConfig(
                jwks_endpoint_url=server.url,
                jwks_endpoint_ca_file=server.ca_file,
                expected_issuer=ISSUER,
                expected_audience=(AUDIENCE,),
            ),
        )
        sasl = SaslServer(config)
        await sasl.start()
        try:
            result = sasl.new_mechanism("OAUTHBEARER").step(client_message(NEW.token()))
            assert isinstance(result, Success) and result.authorization_id == "alice"
        finally:
            await sasl.close()


# -- the oauthbearer: section ---------------------------------------------------------------------

OAUTH_CONFIG = """
upstream: {bootstrap_servers: ["127.0.0.1:9092"]}
listeners:
  - name: SASL
    security_protocol: SASL_PLAINTEXT
    port: 9300
    sasl:
      enabled_mechanisms: [OAUTHBEARER]
      oauthbearer:
        jwks_endpoint_url: https://idp.example/jwks
        jwks_endpoint_ca_file: idp-ca.pem
        jwks_endpoint_refresh_ms: 60000
        jwks_endpoint_retry_backoff_ms: 200
        jwks_endpoint_retry_backoff_max_ms: 20000
        expected_issuer: https://idp.example
        expected_audience: [kafka]
        principal_claim: client_id
        scope_claim: scp
        clock_skew_s: 5
        algorithms: [PS256, EdDSA]
"""


def parsed(text: str) -> OAuthBearerConfig:
    config = parse_config(ConfigSection.from_text(text, "/etc/kafkaguard/config.yaml"))
    sasl = config.listeners[0].sasl
    assert sasl is not None and sasl.oauthbearer is not None
    return sasl.oauthbearer


def test_config_keys() -> None:
    oauth = parsed(OAUTH_CONFIG)
    assert oauth == OAuthBearerConfig(
        jwks_endpoint_url="https://idp.example/jwks",
        jwks_endpoint_ca_file=Path("/etc/kafkaguard/idp-ca.pem"),
        jwks_endpoint_refresh_ms=60000,
        jwks_endpoint_retry_backoff_ms=200,
        jwks_endpoint_retry_backoff_max_ms=20000,
        expected_issuer="https://idp.example",
        expected_audience=("kafka",),
        principal_claim="client_id",
        scope_claim="scp",
        clock_skew_s=5,
        algorithms=("PS256", "EdDSA"),
    )
    defaults = parsed(OAUTH_CONFIG.split("        jwks_endpoint_ca_file")[0])
    assert (
        defaults.jwks_endpoint_refresh_ms,
        defaults.jwks_endpoint_retry_backoff_ms,
        defaults.jwks_endpoint_retry_backoff_max_ms,
        defaults.clock_skew_s,
        defaults.scope_claim,
        defaults.principal_claim,
    ) == (3_600_000, 100, 10_000, 30, "scope", "sub")


@pytest.mark.parametrize(
    "change,message",
    [
        (("https://idp.example/jwks", "http://idp.example/jwks"), "must be an https:// URL"),
        (
            ("jwks_endpoint_url: https://idp.example/jwks", "jwks_file: jwks.json"),
            "jwks_endpoint_ca_file: is only for jwks_endpoint_url",
        ),
        (
            (
                "        jwks_endpoint_ca_file",
                "        jwks_file: jwks.json\n        jwks_endpoint_ca_file",
            ),
            "exclusive with jwks_file",
        ),
        (("retry_backoff_max_ms: 20000", "retry_backoff_max_ms: 100"), "must not be less"),
        (("refresh_ms: 60000", "refresh_ms: 0"), "at least 1"),
        (("[PS256, EdDSA]", "[RS256, HS256]"), "'HS256' is not one of"),
        (("[PS256, EdDSA]", "[none]"), "'none' is not one of"),
        (("clock_skew_s: 5", "clock_skew_s: -1"), "at least 0"),
        (("scope_claim: scp", "scope_claims: scp"), "unknown key 'scope_claims'"),
    ],
)
def test_config_errors(change: tuple[str, str], message: str) -> None:
    text = OAUTH_CONFIG.replace(*change)
    assert text != OAUTH_CONFIG
    with pytest.raises(ConfigError, match=message):
        parsed(text)
