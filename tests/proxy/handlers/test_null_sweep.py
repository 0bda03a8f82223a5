"""Every API, every version kio knows, requests built from nulls and empties: no handler may
raise, log an error or a traceback, or return a verdict the connection could not apply.

Kafka decodes a nullable field as null when the client sends -1 and each API's
``KafkaApis.handleXxx`` gives null its meaning (or answers INVALID_REQUEST); a handler that
raises instead turns client input into an ERROR traceback in the proxy's log. The sweep builds
each request from its schema (``codec.make_entity`` for the null/empty shapes, a "filled" entity
with one element per array for the mutations), encodes it as a client would and drives it
through the registry as the connection does (:class:`HandlerHarness`), with an authorizer that
allows everything and one that denies everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import typing
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i16, i32Timedelta

from kafkaguard.policy.authorizer import SecurityProtocol
from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import MalformedFrame, ProtocolError
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.support.base import (
    AskFirst,
    Close,
    Forward,
    Respond,
    RespondLater,
    Verdict,
)
from kafkaguard.proxy.sasl.authenticator import SaslAuthenticator, SaslServer
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import MappingCredentialStore
from tests.support.handler_harness import (
    HandlerHarness,
    acl,
    every_null,
    filled_entity,
    non_null,
)

TOPIC_ID = uuid.UUID("5d2f4c1e-0000-4000-8000-000000000001")
"""The id every filled uuid field carries; the simulated cluster knows it as topic "x"."""
CLUSTER = {TOPIC_ID: "x"}
RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER")
ALLOW_ALL = [acl("User:*", "ALL", kind, "*") for kind in RESOURCE_TYPES]
SASL_APIS = {17, 36}


# -- building requests --------------------------------------------------------------------


def _is_entity(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def filled(entity_type: type[Any]) -> Any:
    """``entity_type`` with every nullable field present and every array one element long."""
    return filled_entity(entity_type, topic_id=TOPIC_ID)


def mutations(entity: Any) -> Iterator[tuple[str, Any]]:  # noqa: C901 - a branch per kind of kio field, recursive
    """``entity`` with one field changed: each nullable field null, each array empty, each
    string empty, each entity array's element all null — at every depth."""
    entity_type = type(entity)
    hints = typing.get_type_hints(entity_type)
    for f in dataclasses.fields(entity_type):
        value = getattr(entity, f.name)
        hint, nullable = non_null(hints[f.name])
        is_array = typing.get_origin(hint) is tuple
        if value is not None and (nullable or is_array):
            # kio reads a null array whatever the schema says (the wire allows -1)
            yield f"{f.name}=null", dataclasses.replace(entity, **{f.name: None})
        if is_array:
            element = typing.get_args(hint)[0]
            if value:
                yield f"{f.name}=[]", dataclasses.replace(entity, **{f.name: ()})
            if value and _is_entity(element):
                nulls = codec.make_entity(element)
                yield f"{f.name}=[nulls]", dataclasses.replace(entity, **{f.name: (nulls,)})
                for path, inner in mutations(value[0]):
                    yield f"{f.name}[0].{path}", dataclasses.replace(entity, **{f.name: (inner,)})
            elif value and f.metadata.get("kafka_type") == "string":
                yield f"{f.name}=['']", dataclasses.replace(entity, **{f.name: (element(""),)})
        elif _is_entity(hint) and value is not None:
            for path, inner in mutations(value):
                yield f"{f.name}.{path}", dataclasses.replace(entity, **{f.name: inner})
        elif f.metadata.get("kafka_type") == "string" and value:
            yield f"{f.name}=''", dataclasses.replace(entity, **{f.name: hint("")})


def variants(schema: type[Any]) -> Iterator[tuple[str, Any]]:
    yield "nullable-null", codec.make_entity(schema)
    yield "every-null", every_null(schema)
    full = filled(schema)
    yield "filled", full
    yield from mutations(full)


# -- contexts -----------------------------------------------------------------------------


class SaslHarness(HandlerHarness):
    """A connection on a SASL_PLAINTEXT listener, before authentication."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(listener_name="SASL_PLAINTEXT", **kwargs)
        server = SaslServer(
            SaslListenerConfig(("PLAIN",)), store=MappingCredentialStore({}), wall_clock=lambda: 0.0
        )
        self.session.security_protocol = SecurityProtocol.SASL_PLAINTEXT
        self.sasl = SaslAuthenticator(server, self.session)


def contexts(api_key: int) -> dict[str, HandlerHarness]:
    """An authorizer allowing everything and one denying everything (no ACLs), on a plain
    listener and, for the SASL APIs, on a SASL one too."""
    made = {"allow": HandlerHarness(ALLOW_ALL), "deny": HandlerHarness()}
    if api_key in SASL_APIS:
        made |= {"sasl-allow": SaslHarness(acls=ALLOW_ALL), "sasl-deny": SaslHarness()}
    return made


# -- checking verdicts --------------------------------------------------------------------


def _assert_response(response: Any, api_key: int, version: int) -> None:
    assert int(response.__api_key__) == api_key and int(response.__version__) == version
    encoded = codec.encode_response(response, 7)
    codec.decode_response(encoded, api_key, version)


def _broker_answer(question: Any) -> Any:
    api_key, version = int(question.__api_key__), int(question.__version__)
    if api_key == 3:
        return None  # answered with HandlerHarness.answer_metadata
    return codec.make_entity(codec.response_schema(api_key, version))


def check(verdict: Verdict, api_key: int, version: int, depth: int = 0) -> None:
    """``verdict`` is one the connection can apply, and what it answers encodes."""
    if isinstance(verdict, Respond):
        _assert_response(verdict.response, api_key, version)
    elif isinstance(verdict, Forward):
        if verdict.request is not None:
            assert int(verdict.request.__api_key__) == api_key
            assert int(verdict.request.__version__) == version
            codec.encode_request(verdict.request, 7, "test")
        if verdict.rewrite is not None:
            broker = codec.make_entity(codec.response_schema(api_key, version))
            # BrokerMismatch: the connection closes, with a log line of its own
            with contextlib.suppress(ProtocolError):
                _assert_response(HandlerHarness.complete(verdict, broker), api_key, version)
    elif isinstance(verdict, AskFirst):
        assert depth < 3, "asked the broker again and again"
        question: Any = verdict.question
        codec.encode_request(question, 7, "test")
        answer = _broker_answer(question)
        then = (
            HandlerHarness.answer_metadata(verdict, CLUSTER)
            if answer is None
            else HandlerHarness.answer(verdict, answer)
        )
        check(then, api_key, version, depth + 1)
    elif isinstance(verdict, RespondLater):
        _assert_response(asyncio.run(verdict.response()).response, api_key, version)
    else:
        assert isinstance(verdict, Close) and verdict.reason


# -- the sweep ----------------------------------------------------------------------------


def _verdict(harness: HandlerHarness, body: Any) -> Verdict:
    try:
        return harness.send(body)
    except ProtocolError:  # the decoder refused the frame: the connection closes ("bad request")
        return Close("bad request")


@pytest.mark.parametrize("api_key", sorted(REGISTRY), ids=lambda k: codec.API_NAMES[k])
def test_null_and_empty_requests(api_key: int, caplog: pytest.LogCaptureFixture) -> None:
    """Every version kio knows (the versions a handler does not serve take its
    ``unsupported_version`` path), every variant, every context."""
    caplog.set_level(logging.DEBUG, logger="kafkaguard")
    failures: list[str] = []
    for version in codec.codec_versions(api_key):
        for name, body in variants(codec.request_schema(api_key, version)):
            for label, harness in contexts(api_key).items():
                caplog.clear()
                try:
                    check(_verdict(harness, body), api_key, version)
                except Exception as exc:  # noqa: BLE001 - collected: one report lists them all
                    failures.append(f"v{version} {name} [{label}]: {type(exc).__name__}: {exc}")
                failures += [
                    f"v{version} {name} [{label}]: logged {r.levelname} {r.getMessage()}"
                    for r in caplog.records
                    if r.name.startswith("kafkaguard")
                    and (r.levelno >= logging.ERROR or r.exc_info)
                ]
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} failures)"


def test_a_null_where_the_schema_allows_none_closes_the_connection() -> None:
    """Kafka's ``ProduceRequestData.read`` throws "non-nullable field topicData was serialized
    as null" and the connection is closed; kio would read such arrays as ``None``, so the
    codec refuses them before any handler runs."""
    produce = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(0)),
        topic_data=None,
    )
    with pytest.raises(MalformedFrame, match="non-nullable field topic_data was serialized"):
        HandlerHarness(ALLOW_ALL).send(produce)
    topics = (
        offset_fetch_v8.OffsetFetchRequestTopics(name=TopicName("t"), partition_indexes=None),
    )
    group = offset_fetch_v8.OffsetFetchRequestGroup(group_id=GroupId("g"), topics=topics)
    offset_fetch = offset_fetch_v8.OffsetFetchRequest(groups=(group,), require_stable=False)
    with pytest.raises(MalformedFrame, match="field partition_indexes was serialized as null"):
        HandlerHarness(ALLOW_ALL).send(offset_fetch)
    # A broker response is held to the same rule where the proxy must decode it to rewrite
    # it: the connection closes deliberately instead of a rewrite failing on None.
    response = codec.make_entity(codec.response_schema(0, 9), responses=None)
    frame = codec.encode_response(response, 7)
    with pytest.raises(MalformedFrame, match="non-nullable field responses was serialized"):
        codec.decode_response(frame, 0, 9)


def test_a_null_the_schema_allows_reaches_the_handler() -> None:
    """OffsetFetch v8 ``topics`` null means every offset of the group
    (``KafkaApis.handleOffsetFetchRequest``): forwarded, not refused."""
    group = offset_fetch_v8.OffsetFetchRequestGroup(group_id=GroupId("g"), topics=None)
    offset_fetch = offset_fetch_v8.OffsetFetchRequest(groups=(group,), require_stable=False)
    assert isinstance(HandlerHarness(ALLOW_ALL).send(offset_fetch), Forward)
