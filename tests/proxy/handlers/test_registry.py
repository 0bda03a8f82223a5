"""Every API key kio knows is classified, and the registry matches the classification.

* AUTHORIZED: a family handler decides with the authorizer (as ``KafkaApis`` does through
  ``AuthHelper.authorize``) before anything goes up.
* ANSWERED: the proxy answers itself and never forwards (ACL administration — the proxy *is*
  the authorizer; delegation tokens — see ``handlers/delegation_tokens.py``; SaslHandshake and
  SaslAuthenticate — the proxy terminates SASL, see ``handlers/sasl.py``).
* NO_CHECK: Kafka authorizes nothing (ApiVersions, client telemetry); forwarded by an explicit
  handler whose module says why.
* REFUSED: absent from the registry, so the connection is closed (fail closed): the
  broker-internal APIs (KRaft quorum, registration, replication, share-group state, the ZK
  controller APIs 4–7 kio no longer knows) and DescribeQuorum (controller endpoints).
"""

from __future__ import annotations

from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.support.base import ApiHandler, Close, Forward, Request
from tests.support.entities import req
from tests.support.handler_harness import HandlerHarness

AUTHORIZED = frozenset(
    {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 21, 22, 23, 24, 25, 26, 28}
    | {32, 33, 34, 35, 37, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 57, 60, 61, 64, 65, 66}
    | {68, 69, 74, 75, 76, 77, 78, 79, 88, 89, 90, 91, 92}
)
SASL = frozenset({17, 36})
ANSWERED = frozenset({29, 30, 31, 38, 39, 40, 41}) | SASL
NO_CHECK = frozenset({18, 71, 72})
BROKER_INTERNAL = frozenset(
    {4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 58, 59, 62, 63, 67, 70, 73}
    | {80, 81, 82, 83, 84, 85, 86, 87}
)
REFUSED = BROKER_INTERNAL

ALL_KEYS = range(93)

# A handler defined in base.py would be the generic forward-everything ApiHandler itself.
_TRANSITIONAL_MODULES = {"kafkaguard.proxy.handlers.support.base"}


def _param(key: int) -> Any:
    return pytest.param(key, id=f"{key}-{codec.API_NAMES.get(key, 'removed')}")


def _is_bare(handler: ApiHandler) -> bool:
    """Forwards every request without deciding anything."""
    return type(handler).on_request is ApiHandler.on_request


def test_classification_is_a_partition_of_every_key() -> None:
    groups = [AUTHORIZED, ANSWERED, NO_CHECK, REFUSED]
    assert sum(len(g) for g in groups) == len(ALL_KEYS)
    assert frozenset().union(*groups) == frozenset(ALL_KEYS)
    assert set(codec.API_NAMES) <= set(ALL_KEYS)  # kio knows nothing unclassified


def test_registry_holds_only_classified_keys() -> None:
    assert set(REGISTRY) <= AUTHORIZED | ANSWERED | NO_CHECK
    for key, handler in REGISTRY.items():
        assert handler.api_key == key
        assert handler.versions, f"api key {key} advertises no version"
        assert handler.versions.start >= codec.codec_versions(key).start
        assert handler.versions.stop <= codec.codec_versions(key).stop


@pytest.mark.parametrize("key", [_param(k) for k in sorted(REFUSED)])
def test_refused_keys_are_absent(key: int) -> None:
    assert key not in REGISTRY


@pytest.mark.parametrize("key", [_param(k) for k in sorted(NO_CHECK)])
def test_no_check_keys_have_explicit_handlers(key: int) -> None:
    handler = REGISTRY[key]
    assert type(handler).__module__ not in _TRANSITIONAL_MODULES


@pytest.mark.parametrize("key", [_param(k) for k in sorted(AUTHORIZED | ANSWERED)])
def test_enforced_keys_have_deciding_family_handlers(key: int) -> None:
    handler = REGISTRY[key]
    assert type(handler).__module__ not in _TRANSITIONAL_MODULES, type(handler)
    assert not _is_bare(handler)


def test_a_handler_that_does_not_decide_closes_the_connection() -> None:
    """Fail closed by construction: the base handler forwards nothing."""

    class Undecided(ApiHandler):
        api_key = 3

    h = HandlerHarness()
    frame = codec.encode_request(req(3, 12, topics=None), 1, "test")
    # A real request: the compiled ApiHandler checks its arguments' types, as annotated.
    verdict = Undecided().on_request(Request(peek_request_header(frame), frame, None), h)
    assert isinstance(verdict, Close) and "does not decide api key 3" in verdict.reason


# Request fields a zero-filled request needs to be well formed (DescribeAcls: ANY filters).
_VALID_ZERO: dict[int, dict[str, Any]] = {
    29: {
        "resource_type_filter": 1,
        "pattern_type_filter": 1,
        "operation": 1,
        "permission_type": 1,
    },
}


@pytest.mark.parametrize("key", [_param(k) for k in sorted(ANSWERED)])
def test_answered_keys_never_reach_the_broker(key: int) -> None:
    # Even a super user: these requests are the proxy's to answer.
    h = HandlerHarness(super_users="User:alice")
    for version in REGISTRY[key].versions:
        body = codec.make_entity(codec.request_schema(key, version), **_VALID_ZERO.get(key, {}))
        verdict = h.send(body)
        assert not isinstance(verdict, Forward), (key, version, verdict)
