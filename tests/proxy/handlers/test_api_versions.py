"""ApiVersions answered by the proxy (a SASL client before authentication, no broker
connection) is exactly the answer the forwarded-and-rewritten path gives for the same broker.

The broker's answers are built as Kafka's ``ApiVersionsResponse`` builds them per version:
v0 has no throttle time, v0-2 no feature fields, v0-3 leave out supported features whose
minimum version is 0. Answers are compared as encoded bytes."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, cast

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.proxy.handlers import REGISTRY, supported_versions
from kafkaguard.proxy.handlers.support.base import Forward, HandlerContext, Request, Respond
from kafkaguard.proxy.net.cluster import UpstreamCluster

VERSIONS = codec.codec_versions(18)
NEWEST = VERSIONS.stop - 1
UNKNOWN_API = 9999
"""An API the broker offers and the proxy does not know: never advertised."""


class Context:
    """What ApiVersionsHandler asks of its connection, backed by a real UpstreamCluster."""

    def __init__(self, *, deferred: bool) -> None:
        self.upstream_deferred = deferred
        self.cluster = UpstreamCluster((), 1.0)
        self.api_versions_answers = self.cluster.api_versions_answers

    def record_broker_api_versions(self, response: Any) -> None:
        self.cluster.record_broker_api_versions(response)

    def latest_api_versions(self, version: int) -> Any:
        return self.cluster.latest_api_versions(version)

    def supported_versions(self, api_key: int) -> range:
        return supported_versions(api_key, self.cluster.broker_versions)


def make(schema: type[Any], **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(schema)}
    return codec.make_entity(schema, **{k: v for k, v in values.items() if k in names})


def broker_answer(version: int, *, throttle_ms: int = 0) -> Any:
    """A KRaft broker's ApiVersions answer at ``version``."""
    schema = codec.response_schema(18, version)
    api_keys = {k: codec.codec_versions(k) for k in codec.API_NAMES if k not in (17, 36)}
    api_keys[3] = range(0, 9)  # older than the proxy's Metadata: narrowed
    api_keys[UNKNOWN_API] = range(0, 2)
    supported = [("group.version", 0, 1), ("metadata.version", 7, 25), ("kraft.version", 0, 1)]
    if version < 4:
        supported = [f for f in supported if f[1] >= 1]
    finalized = [("metadata.version", 25, 25), ("group.version", 1, 1)]
    entry = codec.nested_type(schema, "api_keys")
    values: dict[str, Any] = {
        "api_keys": tuple(
            make(entry, api_key=k, min_version=r.start, max_version=r.stop - 1)
            for k, r in sorted(api_keys.items())
        ),
        "throttle_time": timedelta(milliseconds=throttle_ms),
    }
    if version >= 3:
        feature = codec.nested_type(schema, "supported_features")
        final = codec.nested_type(schema, "finalized_features")
        values |= {
            "supported_features": tuple(
                make(feature, name=n, min_version=lo, max_version=hi) for n, lo, hi in supported
            ),
            "finalized_features": tuple(
                make(final, name=n, max_version_level=hi, min_version_level=lo)
                for n, hi, lo in finalized
            ),
            "finalized_features_epoch": 42,
            "zk_migration_ready": True,
        }
    return make(schema, **values)


def request(version: int) -> Request:
    body = make(
        codec.request_schema(18, version), client_software_name="t", client_software_version="1"
    )
    frame = codec.encode_request(body, 7, "test")
    return Request(peek_request_header(frame), frame, None)


def forwarded(version: int, broker: Any, correlation_id: int = 7) -> bytes:
    """What a client on an authenticated connection receives: the broker's answer, rewritten
    (decoded, rewritten and encoded afresh)."""
    ctx = Context(deferred=False)
    verdict = REGISTRY[18].on_request(request(version), cast(HandlerContext, ctx))
    assert isinstance(verdict, Forward) and verdict.rewrite is not None
    return codec.encode_response(verdict.rewrite(broker), correlation_id)


def answered(version: int, ctx: Context) -> bytes:
    verdict = REGISTRY[18].on_request(request(version), cast(HandlerContext, ctx))
    assert isinstance(verdict, Respond), verdict
    return codec.encode_response(verdict.response, 7)


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_from_the_probe_equals_the_forwarded_answer(version: int) -> None:
    ctx = Context(deferred=True)
    ctx.record_broker_api_versions(broker_answer(NEWEST))  # the start-up probe's
    assert answered(version, ctx) == forwarded(version, broker_answer(version))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("seen", VERSIONS)
def test_answer_from_any_forwarded_response_equals_the_forwarded_answer(
    version: int, seen: int
) -> None:
    """Refreshed by a (throttled) response that passed through on some connection: a version
    is answered from its own latest response, else from a newer one (which has every field
    an older version has), never from an older one while a newer is known."""
    ctx = Context(deferred=True)
    ctx.record_broker_api_versions(broker_answer(NEWEST))
    ctx.record_broker_api_versions(broker_answer(seen, throttle_ms=30))
    assert answered(version, ctx) == forwarded(version, broker_answer(version))


def test_the_answer_is_narrowed_and_unthrottled() -> None:
    ctx = Context(deferred=True)
    ctx.record_broker_api_versions(broker_answer(NEWEST, throttle_ms=500))
    response: Any = codec.decode_response(answered(NEWEST, ctx), 18, NEWEST)
    advertised = {e.api_key: range(e.min_version, e.max_version + 1) for e in response.api_keys}
    assert UNKNOWN_API not in advertised
    assert advertised[3] == range(max(REGISTRY[3].versions.start, 0), 9)
    assert advertised[36] == REGISTRY[36].versions  # answered by the proxy: always advertised
    assert response.throttle_time == timedelta(0)
    assert response.error_code == ErrorCode.none
    assert response.finalized_features_epoch == 42
    assert [f.name for f in response.supported_features] == [
        "group.version",
        "metadata.version",
        "kraft.version",
    ]


def test_a_changed_broker_replaces_every_remembered_answer() -> None:
    ctx = Context(deferred=True)
    ctx.record_broker_api_versions(broker_answer(NEWEST))
    upgraded = dataclasses.replace(broker_answer(0), api_keys=broker_answer(0).api_keys[:-1])
    ctx.record_broker_api_versions(upgraded)
    response: Any = codec.decode_response(answered(NEWEST, ctx), 18, NEWEST)
    # No stale v4 answer is kept: this one is derived from the v0 one, which has no features.
    assert response.supported_features == ()
    assert response.finalized_features_epoch == -1


def through_memo(ctx: Context, version: int, broker: Any, correlation_id: int) -> bytes:
    """What a client on an authenticated connection of ``ctx``'s cluster receives when the
    broker answers ``broker`` (encoded as the broker would) to its request."""
    body = make(
        codec.request_schema(18, version), client_software_name="t", client_software_version="1"
    )
    frame = codec.encode_request(body, correlation_id, "test")
    verdict = REGISTRY[18].on_request(
        Request(peek_request_header(frame), frame, None), cast(HandlerContext, ctx)
    )
    assert isinstance(verdict, Forward) and verdict.transform is not None
    return bytes(verdict.transform(codec.encode_response(broker, correlation_id)))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_repeated_broker_answer_gets_the_same_answer_with_its_own_correlation_id(
    version: int,
) -> None:
    ctx = Context(deferred=False)
    first = through_memo(ctx, version, broker_answer(version), 11)
    again = through_memo(ctx, version, broker_answer(version), 12)
    assert first == forwarded(version, broker_answer(version), 11)
    assert again == forwarded(version, broker_answer(version), 12)
    assert codec.decode_response(again, 18, version) == codec.decode_response(first, 18, version)


def test_a_changed_broker_answer_is_not_served_from_the_memo() -> None:
    """The memo follows the broker's bytes: a new feature level, or a narrower API range, is
    rewritten afresh, and what the broker said last is what the proxy keeps."""
    ctx = Context(deferred=False)
    before = broker_answer(NEWEST)
    through_memo(ctx, NEWEST, before, 11)
    new_epoch = dataclasses.replace(before, finalized_features_epoch=43)
    narrower = dataclasses.replace(before, api_keys=before.api_keys[1:])  # no Produce
    for changed in (new_epoch, narrower, before):
        answer = through_memo(ctx, NEWEST, changed, 12)
        assert answer == forwarded(NEWEST, changed, 12)
        assert ctx.latest_api_versions(NEWEST) == changed
    answer = through_memo(ctx, NEWEST, narrower, 13)  # a memo hit that changes the broker
    response: Any = codec.decode_response(answer, 18, NEWEST)
    assert 0 not in {e.api_key for e in response.api_keys}
    assert ctx.supported_versions(0) == range(0)


def test_an_error_answer_passes_as_the_broker_sent_it() -> None:
    ctx = Context(deferred=False)
    refused = dataclasses.replace(
        broker_answer(NEWEST), error_code=ErrorCode.unsupported_version, api_keys=()
    )
    for correlation_id in (11, 12):
        answer = through_memo(ctx, NEWEST, refused, correlation_id)
        assert answer == codec.encode_response(refused, correlation_id)
    assert ctx.latest_api_versions(NEWEST) is None
