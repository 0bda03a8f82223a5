"""Kafka's own ``BrokerJwtValidator`` (4.3.1, jose4j) as the referee of kafkaguard's OAUTHBEARER
validation: the same jwcrypto-minted tokens go to both, against the same JWKS file, audience,
issuer and clock skew, and each token must be accepted by both (with the same principal) or
refused by both. The listed deviation (HMAC with an ``oct`` JWKS key) is not among the cases;
``oauthbearer_referee.java`` runs in source-file mode on the Kafka classpath."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafkaguard.proxy.sasl.oauthbearer import JwksFile, JwtValidator, TokenInvalid
from tests.support.jose_tokens import (
    AUDIENCE,
    EXTENSION,
    ISSUER,
    IdentityProvider,
    unsigned_token,
)
from tests.support.kafka_broker import check_runtime

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

REFEREE = Path(__file__).resolve().parent / "oauthbearer_referee.java"

RS = IdentityProvider("RS256", "rs")
PROVIDERS = [
    RS,
    *(IdentityProvider(alg, alg) for alg in ("RS512", "PS256", "PS384", "PS512")),
    *(IdentityProvider(alg, alg) for alg in ("ES256", "ES384", "ES512", "EdDSA")),
    IdentityProvider("EdDSA", "ed448", crv="Ed448"),
]
NO_ALG = IdentityProvider("ES256", "no-alg")  # its JWK has no "alg"
NO_KID = IdentityProvider("RS384", None)  # neither token nor JWK has a kid
STRANGER = IdentityProvider("RS256", "rs")  # same kid as RS, another key


def cases(now: int) -> dict[str, Callable[[], str]]:
    return {
        **{f"alg {p.kid}": p.token for p in PROVIDERS},
        "jwk without alg": NO_ALG.token,
        "no kid": NO_KID.token,
        "a kid the kid-less jwk lacks": lambda: NO_KID.token(header={"kid": "x"}),
        "no iat": lambda: RS.token(iat=None),
        "no exp": lambda: RS.token(exp=None),
        "exp a string": lambda: RS.token(exp=str(now + 600)),
        "iat a float": lambda: RS.token(iat=now - 0.5),
        "exp a float": lambda: RS.token(exp=now + 600.75),
        "nbf a string": lambda: RS.token(nbf=str(now)),
        "expired within skew": lambda: RS.token(exp=now - 10, iat=now - 600),
        "expired outside skew": lambda: RS.token(exp=now - 60, iat=now - 600),
        "iat in the future": lambda: RS.token(iat=now + 300),
        "exp before iat": lambda: RS.token(iat=now + 900),
        "exp out of range": lambda: RS.token(exp=10**30),
        "negative iat": lambda: RS.token(iat=-1),
        "nbf within skew": lambda: RS.token(nbf=now + 10),
        "nbf outside skew": lambda: RS.token(nbf=now + 120),
        "no aud": lambda: RS.token(aud=None),
        "other aud": lambda: RS.token(aud="other"),
        "aud list": lambda: RS.token(aud=["x", AUDIENCE]),
        "aud list with a number": lambda: RS.token(aud=[1, AUDIENCE]),
        "iss a number": lambda: RS.token(iss=1),
        "no iss": lambda: RS.token(iss=None),
        "other iss": lambda: RS.token(iss="https://evil.test"),
        "scope string": lambda: RS.token(scope="read write"),
        "scope list": lambda: RS.token(scope=["read", "write"]),
        "scope repeated": lambda: RS.token(scope=["read", "read"]),
        "scope blank": lambda: RS.token(scope=" "),
        "scope a number": lambda: RS.token(scope=7),
        "sub padded": lambda: RS.token(sub=" bob "),
        "sub blank": lambda: RS.token(sub=" "),
        "sub a number": lambda: RS.token(sub=7),
        "no sub": lambda: RS.token(sub=None),
        "unknown kid": lambda: RS.token(header={"kid": "unknown"}),
        "same kid, other key": STRANGER.token,
        "alg differs from the jwk's": lambda: RS.token(header={"alg": "PS256"}),
        "tampered": lambda: RS.token()[:-6] + "AAAAAA",
        "unknown crit": lambda: RS.token(header={"crit": [EXTENSION], EXTENSION: 1}),
        "alg none": unsigned_token,
        "HS256 keyed with the public key": RS.hmac_with_public_key,
    }


def compare_with_kafka(tmp_path: Path, tokens: dict[str, str], audience: str | None) -> list[str]:
    """Kafka's verdicts (``OK <principal>`` or ``ERR <why>``) for ``tokens``; asserts that
    kafkaguard's, with the same settings, are the same."""
    jwks_file = tmp_path / "jwks.json"
    keys = [p.jwk() for p in PROVIDERS] + [NO_ALG.jwk(alg=None), NO_KID.jwk()]
    jwks_file.write_text(json.dumps({"keys": keys}))
    referee = subprocess.run(
        [
            "java",
            f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=file://{jwks_file}",
            "-cp",
            check_runtime(),
            str(REFEREE),
            str(jwks_file),
            audience or "-",
            ISSUER,
        ],
        input="".join(f"{token}\n" for token in tokens.values()),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    verdicts = referee.stdout.splitlines()
    assert len(verdicts) == len(tokens), referee.stderr[-2000:]
    validator = JwtValidator(
        (JwksFile(jwks_file),),
        expected_issuer=ISSUER,
        expected_audience=(audience,) if audience else (),
    )
    differences = []
    for (name, token), kafka in zip(tokens.items(), verdicts, strict=True):
        try:
            ours = f"OK {validator.validate(token, time.time())[0]}"
        except TokenInvalid as exc:
            ours = f"ERR {exc}"
        if ours.split(" ")[0] != kafka.split(" ")[0] or (ours.startswith("OK") and ours != kafka):
            differences.append(f"{name}: kafka {kafka[:300]!r}, kafkaguard {ours!r}")
    assert not differences, "\n".join(differences)
    return verdicts


def test_same_verdicts_as_kafka(tmp_path: Path) -> None:
    tokens = {name: make() for name, make in cases(int(time.time())).items()}
    verdicts = compare_with_kafka(tmp_path, tokens, AUDIENCE)
    assert sum(v.startswith("OK") for v in verdicts) >= len(PROVIDERS) + 8  # not all refused


def test_same_verdicts_as_kafka_without_an_expected_audience(tmp_path: Path) -> None:
    """jose4j's ``AudValidator`` then refuses a token that *has* an ``aud``."""
    tokens = {
        "with aud": RS.token(),
        "aud list": RS.token(aud=["x", AUDIENCE]),
        "empty aud list": RS.token(aud=[]),
        "empty aud": RS.token(aud=""),
        "no aud": RS.token(aud=None),
    }
    verdicts = compare_with_kafka(tmp_path, tokens, None)
    assert verdicts[0].startswith("ERR") and verdicts[-1] == "OK alice"
