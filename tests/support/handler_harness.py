"""Drive handlers without sockets: a real StandardAuthorizer, real kio messages, no mocks.

``HandlerHarness.send(body)`` encodes a kio request exactly as a client would, runs it through
the exchange core's request step (``dispatch.handle_request``: registry, version gate,
decoding, the handler) with a real :class:`StandardAuthorizer` holding the given ACLs, and
returns the verdict; ``complete(verdict, broker_response)`` runs the broker's encoded response
through the core's ``response_transform``, as the exchange does. ``checks`` records every
(action, result) in order, so tests can assert Kafka's check order and log flags.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import typing
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import NoneType, UnionType
from typing import Any
from uuid import UUID

from kio.schema.types import TopicName

from kafkaguard.policy.authorizer import (
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
    operations_bitfield,
)
from kafkaguard.policy.config import AuthorizerConfig, parse_super_users
from kafkaguard.policy.internal_topics import InternalTopicGuard, InternalTopics
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.protocol import codec
from kafkaguard.protocol.answer_memo import AnswerMemo
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import RequestHeaderInfo, peek_request_header
from kafkaguard.proxy.core.dispatch import handle_request, response_transform
from kafkaguard.proxy.handlers import REGISTRY, supported_versions
from kafkaguard.proxy.handlers.support.base import (
    AskFirst,
    ConnectionState,
    Forward,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.responses import entity
from kafkaguard.proxy.sasl.authenticator import SaslAuthenticator
from kafkaguard.proxy.session import Session


def acl(
    principal: str,
    operation: str,
    resource_type: str,
    name: str,
    *,
    permission: str = "ALLOW",
    pattern: str = "LITERAL",
    host: str = "*",
) -> AclBinding:
    """``acl("User:alice", "READ", "TOPIC", "orders")`` — the shape of a kafka-acls.sh line."""
    return AclBinding(
        ResourcePattern(ResourceType[resource_type], name, PatternType[pattern]),
        AccessControlEntry(principal, host, AclOperation[operation], AclPermissionType[permission]),
    )


class HandlerHarness:
    """A :class:`HandlerContext` for one simulated client connection."""

    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        *,
        principal: str = "User:alice",
        super_users: str = "",
        allow_everyone_if_no_acl_found: bool = False,
        listener_name: str = "PLAINTEXT",
        client_address: str = "10.0.0.1",
        topic_ids: dict[UUID, str] | None = None,
        broker_api_versions: dict[int, range] | None = None,
        internal_topic_principals: str = "",
    ) -> None:
        self.authorizer = StandardAuthorizer(
            AuthorizerConfig(
                super_users=parse_super_users(super_users),
                allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
            )
        )
        self.authorizer.load_snapshot(acls)
        self.guard = InternalTopicGuard(
            self.authorizer, InternalTopics(principals=parse_super_users(internal_topic_principals))
        )
        """What the proxy asks (kafkaguard/proxy/core/context.py): the internal-topics rule."""
        self.session = Session(
            listener_name,
            SecurityProtocol.PLAINTEXT,
            ipaddress.ip_address(client_address),
            KafkaPrincipal.parse(principal),
        )
        self.topic_names: dict[UUID, str] = dict(topic_ids or {})
        self.checks: list[tuple[Action, AuthorizationResult]] = []
        self.advertised: dict[int, tuple[str, int]] = {}
        self.broker_api_versions = broker_api_versions
        self.api_versions_response: Any = None
        """The last ApiVersions response recorded (the proxy answers a deferred client's
        ApiVersions from the broker's latest)."""
        self.api_versions_answers = AnswerMemo()
        self.upstream_deferred = False
        """True: a SASL listener's client before authentication (no broker connection)."""
        self.connection_state = ConnectionState()
        self.sasl: SaslAuthenticator | None = None
        """No SASL state machine: a listener without SASL."""

    # -- HandlerContext --------------------------------------------------------------------
    @property
    def listener_name(self) -> str:
        return self.session.listener_name

    def _context(self, request: Request) -> RequestContext:
        return self.session.request_context(request.header)

    def authorize(self, request: Request, actions: Sequence[Action]) -> list[AuthorizationResult]:
        results = self.guard.authorize(self._context(request), actions)
        self.checks.extend(zip(actions, results, strict=True))
        return results

    def authorize_by_resource_type(
        self, request: Request, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        return self.authorizer.authorize_by_resource_type(
            self._context(request), operation, resource_type
        )

    def authorized_operations(self, request: Request, resource: ResourcePattern) -> int:
        return operations_bitfield(
            self.guard.authorized_operations(self._context(request), resource)
        )

    def internal_topic(self, request: Request, name: str) -> bool:
        return self.guard.refused(self._context(request), name)

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return self.authorizer.acls(acl_filter)

    def create_acls(
        self, request: Request, bindings: Sequence[AclBinding]
    ) -> Awaitable[list[AclCreateResult]]:
        return self.authorizer.create_acls(self._context(request), bindings)

    def delete_acls(
        self, request: Request, filters: Sequence[AclBindingFilter]
    ) -> Awaitable[list[AclDeleteResult]]:
        return self.authorizer.delete_acls(self._context(request), filters)

    def topic_name(self, topic_id: UUID) -> str | None:
        return self.topic_names.get(topic_id)

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None:
        for topic_id, name in topics:
            self.topic_names[topic_id] = name

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.advertised[node_id] = ("proxy.test", 30000 + node_id)
        return self.advertised[node_id]

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        return self.advertised.get(node_id)

    def record_broker_api_versions(self, response: Any) -> None:
        self.broker_api_versions = {
            int(e.api_key): range(e.min_version, e.max_version + 1) for e in response.api_keys
        }
        self.api_versions_response = response

    def latest_api_versions(self, version: int) -> Any:
        return self.api_versions_response

    def broker_versions(self) -> Mapping[int, range] | None:
        """The broker's ranges the harness was given (or learned), every API key not among
        them at the handler's own range: a harness broker narrows only what a test names."""
        if self.broker_api_versions is None:
            return None
        return {k: h.versions for k, h in REGISTRY.items()} | self.broker_api_versions

    def supported_versions(self, api_key: int) -> range:
        return supported_versions(api_key, self.broker_versions())

    # -- driving ---------------------------------------------------------------------------
    def send(
        self, body: Any, *, correlation_id: int = 7, client_id: str | None = "test"
    ) -> Verdict:
        """Run ``body`` through the exchange core's request step (registry, version gate,
        decoding, the handler), encoded exactly as a client would; return the verdict."""
        self.checks.clear()
        frame = codec.encode_request(body, correlation_id, client_id)
        verdict, _ = handle_request(peek_request_header(frame), frame, self)
        return verdict

    @staticmethod
    def answer(verdict: Verdict, broker_answer: Any) -> Verdict:
        """The verdict once the broker answered the proxy's question."""
        assert isinstance(verdict, AskFirst), verdict
        return verdict.then(broker_answer)

    @classmethod
    def answer_metadata(cls, verdict: Verdict, cluster: dict[UUID, str]) -> Verdict:
        """Answer the proxy's Metadata question (by topic id, by name, or for every topic) as a
        broker holding the topics ``cluster`` (id → name) would."""
        assert isinstance(verdict, AskFirst), verdict
        question: Any = verdict.question
        assert question.__api_key__ == 3 and not question.allow_auto_topic_creation
        schema = codec.response_schema(3, question.__version__)
        topics = described_topics(schema, question.topics, cluster)
        return cls.answer(verdict, codec.make_entity(schema, topics=topics))

    @staticmethod
    def forwarded_body(verdict: Verdict, original: Any) -> Any:
        """The body the broker would receive (the original when forwarded unchanged)."""
        assert isinstance(verdict, Forward), verdict
        return original if verdict.request is None else verdict.request

    @staticmethod
    def complete(verdict: Verdict, broker_response: Any = None) -> Any:
        """The response the client would receive: the handler's transform on the broker's
        encoded bytes, or its rewrite applied by the exchange core's response transform, as
        the exchange applies them."""
        if isinstance(verdict, Respond):
            return verdict.response
        assert isinstance(verdict, Forward), verdict
        if verdict.rewrite is None and verdict.transform is None:
            return broker_response
        api_key, version = int(broker_response.__api_key__), int(broker_response.__version__)
        header = RequestHeaderInfo(api_key, version, 1, "", 0)
        frame = codec.encode_response(broker_response, 1)
        transform = verdict.transform
        if transform is None:
            assert verdict.rewrite is not None
            transform = response_transform(verdict.rewrite, header, verdict.decode_if)
        sent = transform(frame)
        return broker_response if sent is frame else codec.decode_response(sent, api_key, version)

    def checked(self) -> list[tuple[str, str, str, str]]:
        """The checks made, as (operation, resource type, name, result) in order."""
        return [
            (
                a.operation.name,
                a.resource_pattern.resource_type.name,
                a.resource_pattern.name,
                r.name,
            )
            for a, r in self.checks
        ]


def described_topics(
    schema: type[Any], asked: Iterable[Any] | None, cluster: dict[UUID, str]
) -> tuple[Any, ...]:
    """Metadata ``schema``'s topic entries for the ``asked`` request topics (by id or by
    name; ``None``: every topic), as a broker holding the topics ``cluster`` (id → name)
    answers them."""
    topic_type = codec.nested_type(schema, "topics")
    if asked is None:
        return tuple(entity(topic_type, name=n, topic_id=i) for i, n in cluster.items())
    ids = {name: topic_id for topic_id, name in cluster.items()}
    topics = []
    for asked_topic in asked:
        name = asked_topic.name
        if name is None:
            name = cluster.get(getattr(asked_topic, "topic_id", None) or UUID(int=0))
        if name in ids:
            topics.append(entity(topic_type, name=name, topic_id=ids[name]))
        elif asked_topic.name is None:
            topics.append(entity(topic_type, ErrorCode.unknown_topic_id, name=None))
        else:
            code = ErrorCode.unknown_topic_or_partition
            topics.append(entity(topic_type, code, name=name, topic_id=UUID(int=0)))
    return tuple(topics)


def non_null(hint: Any) -> tuple[Any, bool]:
    """A kio field's type hint without ``| None``, and whether it had it (nullable field)."""
    if typing.get_origin(hint) in (UnionType, typing.Union) and NoneType in typing.get_args(hint):
        return next(a for a in typing.get_args(hint) if a is not NoneType), True
    return hint, False


def every_null(schema: type[Any]) -> Any:
    """A request of ``schema`` with every array and every nullable field null — whatever the
    schema allows: on the wire any array may arrive null (length −1) — and the rest zero."""
    hints = typing.get_type_hints(schema)
    nulls: dict[str, None] = {}
    for f in dataclasses.fields(schema):
        hint, nullable = non_null(hints[f.name])
        if nullable or typing.get_origin(hint) is tuple:
            nulls[f.name] = None
    return codec.make_entity(schema, **nulls)


def _filled_value(hint: Any, kafka_type: str, topic_id: UUID, topic: str) -> Any:
    """A present, non-empty value of a primitive (or entity) type."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return filled_entity(hint, topic_id=topic_id, topic=topic)
    if kafka_type == "string":
        return hint(topic if hint is TopicName else "x")
    if kafka_type in ("bytes", "records"):
        return hint(b"")
    if kafka_type == "uuid":
        return topic_id
    if kafka_type == "bool":
        return False
    if kafka_type == "float64":
        return hint(0.0)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return hint(timedelta(0))
    if kafka_type == "datetime_i64":
        return datetime.fromtimestamp(0, UTC)
    if kafka_type == "error_code":
        return ErrorCode.none
    return hint(0)


def filled_entity(entity_type: type[Any], *, topic_id: UUID, topic: str = "x") -> Any:
    """``entity_type`` with every nullable field present and every array one element long:
    every uuid ``topic_id``, every topic name (kio's ``TopicName``) ``topic``, other strings
    ``"x"``, numbers 0."""
    hints = typing.get_type_hints(entity_type)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(entity_type):
        hint, _ = non_null(hints[f.name])
        kafka_type = f.metadata.get("kafka_type", "")
        if typing.get_origin(hint) is tuple:
            element = typing.get_args(hint)[0]
            values[f.name] = (_filled_value(element, kafka_type, topic_id, topic),)
        else:
            values[f.name] = _filled_value(hint, kafka_type, topic_id, topic)
    return entity_type(**values)
