"""Cluster administration: APIs authorized by one operation on the CLUSTER resource, and
DescribeCluster.

Whole-request checks (``AuthHelper.authorizeClusterOperation`` or the
``authorize(…, CLUSTER, CLUSTER_NAME)`` test at the top of the ``KafkaApis``/``ControllerApis``
handler): allowed → the client's bytes are forwarded unchanged; denied → the proxy answers
CLUSTER_AUTHORIZATION_FAILED (31) itself, shaped like that API's
``XxxRequest.getErrorResponse``, and nothing reaches the broker.

Error messages: ``AuthHelper.authorizeClusterOperation`` throws
``ClusterAuthorizationException(s"Request $request needs $operation permission.")`` — the
broker's ``RequestChannel.Request`` dumped: processor, connection id with the broker's own
address, session and buffer objects (the referee answers exactly that, on broker and
controller alike). The proxy answers a null message instead: broker addresses never reach a
client, and the Java internals are not the proxy's to invent (docs/deviations.md). Where
``getErrorResponse`` writes ``Errors.message()`` itself (AlterClientQuotas) so does the proxy.

DescribeCluster (60) on a broker listener is not authorized at all
(``KafkaApis.handleDescribeCluster`` → ``AuthHelper.computeDescribeClusterResponse``); the
proxy only fills KIP-430 ``clusterAuthorizedOperations`` (the broker behind it has no
authorizer) and keeps hiding broker addresses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, Final, Generic, Protocol, TypeVar

from kafkaguard.policy.authorizer import AUTHORIZED_OPERATIONS_OMITTED
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.addresses import (
    NodeAddresses,
    rewrite_describe_cluster_brokers,
)
from kafkaguard.proxy.handlers.support.authz import CLUSTER, is_allowed
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    B,
    Forward,
    HandlerContext,
    Request,
    Respond,
    RespondLater,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, Named, PartitionIndexed
from kafkaguard.proxy.handlers.support.responses import ERROR_MESSAGES, partition_errors, split
from kafkaguard.proxy.sasl import scram
from kafkaguard.proxy.sasl.kafka_credentials import KafkaCredentialError, KafkaTopicCredentialStore
from kafkaguard.proxy.sasl.scram import ScramCredential

_DENIED = ErrorCode.cluster_authorization_failed
_SCRAM_TYPES: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""``org.apache.kafka.clients.admin.ScramMechanism.type()``."""
_SCRAM_NAMES: Final = {code: name for name, code in _SCRAM_TYPES.items()}
_MAX_ITERATIONS: Final = 16384
"""``ScramControlManager.MAX_ITERATIONS``."""
_TWICE: Final = (
    ErrorCode.duplicate_resource,
    "A user credential cannot be altered twice in the same request",
)
_DELETE_MISSING: Final = "Attempt to delete a user credential that does not exist"
_DESCRIBE_DUPLICATE_USER: Final = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
_DESCRIBE_MISSING_USER: Final = "Attempt to describe a user credential that does not exist: "


# What the handlers read of kio's classes (any version of each schema).
class _NamedPartitions(Named, Protocol):
    """A topic and its partition indexes (AlterReplicaLogDirs' ``topics``)."""

    @property
    def partitions(self) -> Sequence[int]: ...


class _LogDir(Entity, Protocol):
    @property
    def topics(self) -> Sequence[_NamedPartitions]: ...


class _AlterReplicaLogDirsBody(Entity, Protocol):
    @property
    def dirs(self) -> Sequence[_LogDir]: ...


class _ElectionTopic(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> Sequence[int]: ...


class _ElectLeadersBody(Protocol):
    @property
    def topic_partitions(self) -> Sequence[_ElectionTopic] | None: ...


class _ReassignableTopic(Named, Protocol):
    @property
    def partitions(self) -> Sequence[PartitionIndexed]: ...


class _AlterPartitionReassignmentsBody(Protocol):
    @property
    def topics(self) -> Sequence[_ReassignableTopic]: ...


class _ListedTopic(Named, Protocol):
    @property
    def partition_indexes(self) -> Sequence[int]: ...


class _ListPartitionReassignmentsBody(Protocol):
    @property
    def topics(self) -> Sequence[_ListedTopic] | None: ...


class _QuotaEntity(Protocol):
    @property
    def entity_type(self) -> str: ...
    @property
    def entity_name(self) -> str | None: ...


class _QuotaEntry(Protocol):
    @property
    def entity(self) -> Sequence[_QuotaEntity]: ...


class _AlterClientQuotasBody(Protocol):
    @property
    def entries(self) -> Sequence[_QuotaEntry]: ...


class _DescribeUserScramCredentialsBody(Protocol):
    @property
    def users(self) -> Sequence[Named] | None: ...


class _ScramDeletion(Named, Protocol):
    @property
    def mechanism(self) -> int: ...


class _ScramUpsertion(_ScramDeletion, Protocol):
    @property
    def iterations(self) -> int: ...
    @property
    def salt(self) -> bytes: ...
    @property
    def salted_password(self) -> bytes: ...


class _AlterUserScramCredentialsBody(Protocol):
    @property
    def deletions(self) -> Sequence[_ScramDeletion]: ...
    @property
    def upsertions(self) -> Sequence[_ScramUpsertion]: ...


class _DescribeClusterBody(Protocol):
    """``endpoint_type`` (v1+) is read by name."""

    @property
    def include_cluster_authorized_operations(self) -> bool: ...


class _NamedTopics(Entity, Protocol):
    """An entry listing topics by name: a log dir's result (DescribeLogDirs), a
    ListPartitionReassignments response."""

    @property
    def topics(self) -> Sequence[Named]: ...


class _AlterReplicaLogDirsResponse(Entity, Protocol):
    @property
    def results(self) -> Sequence[Entity]: ...


class _DescribeLogDirsResponse(Entity, Protocol):
    @property
    def results(self) -> Sequence[_NamedTopics]: ...


class _ConfigResource(Protocol):
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...


class _ListConfigResourcesResponse(Entity, Protocol):
    @property
    def config_resources(self) -> Sequence[_ConfigResource]: ...


class _DescribeClusterResponse(ErrorCoded, NodeAddresses, Protocol):
    @property
    def cluster_authorized_operations(self) -> int: ...


_T = TypeVar("_T")
_LogDirsAltered = TypeVar("_LogDirsAltered", bound=_AlterReplicaLogDirsResponse)
_LogDirs = TypeVar("_LogDirs", bound=_DescribeLogDirsResponse)
_Reassignments = TypeVar("_Reassignments", bound=_NamedTopics)
_Resources = TypeVar("_Resources", bound=_ListConfigResourcesResponse)
_Cluster = TypeVar("_Cluster", bound=_DescribeClusterResponse)


def _topic_credentials(ctx: HandlerContext) -> KafkaTopicCredentialStore | None:
    """The listener's ``scram_credentials: kafka`` store: the proxy then keeps the SCRAM users
    and answers AlterUserScramCredentials / DescribeUserScramCredentials itself."""
    sasl = ctx.sasl
    store = sasl.server.store if sasl is not None else None
    return store if isinstance(store, KafkaTopicCredentialStore) else None


def _check_user_and_mechanism(name: str, mechanism: str | None) -> tuple[ErrorCode, str] | None:
    """``ScramControlManager.validateScramUsernameAndMechanism``."""
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _deletion_error(
    store: KafkaTopicCredentialStore, name: str, mechanism: str | None
) -> tuple[ErrorCode, str] | None:
    """``ScramControlManager.validateDeletion``."""
    error = _check_user_and_mechanism(name, mechanism)
    if error is None and mechanism not in store.iterations(name):
        return ErrorCode.resource_not_found, _DELETE_MISSING
    return error


def _upsertion_error(
    name: str, mechanism: str | None, iterations: int
) -> tuple[ErrorCode, str] | None:
    """``ScramControlManager.validateUpsertion``."""
    error = _check_user_and_mechanism(name, mechanism)
    if error is None and iterations < scram.MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if error is None and iterations > _MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    return error


class ClusterCheckHandler(ApiHandler[B]):
    """One ``operation`` on CLUSTER authorizes the whole request.

    Subclasses set ``api_key`` and ``operation``; those whose ``getErrorResponse`` echoes the
    request's items decode it and override :meth:`error_response`. The default is the
    top-level error with every list empty, which is also what an API without a top-level
    error field degrades to (DescribeLogDirs v1–2).
    """

    operation: ClassVar[AclOperation]

    def on_request(self, request: Request[B], ctx: HandlerContext) -> Verdict:
        if is_allowed(ctx, request, self.operation, CLUSTER):
            return self.allowed(request, ctx)
        return Respond(self.error_response(request.body, request.header.api_version))

    def allowed(self, request: Request[B], ctx: HandlerContext) -> Verdict:
        """The verdict once the check passed: the request as sent."""
        return FORWARD

    def error_response(self, body: B, version: int) -> ResponsePayload:
        return codec.build_error_response(self.api_key, version, _DENIED)

    def _schema(self, version: int) -> type[ResponsePayload]:
        return codec.response_schema(self.api_key, version)


def _partition_results(
    schema: type[Entity],
    field: str,
    topics: Iterable[tuple[str, Iterable[int]]],
    code: ErrorCode,
    *,
    name_field: str = "name",
    partitions_field: str = "partitions",
    index_field: str = "partition_index",
) -> tuple[Entity, ...]:
    """``field`` of an error response echoing the request's (topic, partitions): one topic
    entry per request entry, ``code`` on each of its partitions."""
    topic_type = codec.nested_type(schema, field)
    return tuple(
        codec.make_entity(
            topic_type,
            ErrorCode.none,
            **{
                name_field: name,
                partitions_field: partition_errors(
                    topic_type, partitions_field, indexes, code, index_field=index_field
                ),
            },
        )
        for name, indexes in topics
    )


def _hidden(request: Request, ctx: HandlerContext) -> Callable[[str], bool]:
    """Whether a topic of a listing of every topic is one of the proxy's internal topics
    (kafkaguard/policy/internal_topics.py), dropped from the broker's answer: a right on the
    whole cluster does not show them."""

    def hidden(name: str) -> bool:
        return ctx.internal_topic(request, name)

    return hidden


_INTERNAL: Final = ErrorCode.topic_authorization_failed
"""What a cluster-wide right gets for the proxy's internal topics (docs/deviations.md)."""


class InternalTopicsRefused(ClusterCheckHandler[B], Generic[_T, B]):
    """A cluster ALTER that names topics to act on (move replicas, elect leaders): the
    proxy's internal topics are answered :data:`_INTERNAL` on each partition named, the rest
    forwarded (issue 35: no client moves the store's replicas either). ``_T`` is the request's
    topic entry, read by the names of ``topics_field`` and ``name_field``."""

    topics_field: ClassVar[str]
    answer_field: ClassVar[str]
    name_field: ClassVar[str] = "name"
    answer_names: ClassVar[dict[str, str]] = {}
    """``_partition_results``'s field names of the answer's entries."""

    def allowed(self, request: Request[B], ctx: HandlerContext) -> Verdict:
        topics: Sequence[_T] = getattr(request.body, self.topics_field) or ()  # null: every one
        refused = [t for t in topics if ctx.internal_topic(request, getattr(t, self.name_field))]
        if not refused:
            return FORWARD
        results = _partition_results(
            self._schema(request.header.api_version),
            self.answer_field,
            ((getattr(t, self.name_field), self.indexes(t)) for t in refused),
            _INTERNAL,
            **self.answer_names,
        )
        field = self.answer_field

        def merge(response: ResponsePayload) -> ResponsePayload:
            return codec.replace(response, **{field: (*getattr(response, field), *results)})

        kept = [t for t in topics if not any(t is r for r in refused)]
        return split(request, self.topics_field, kept, field, merge)

    def indexes(self, topic: _T) -> Iterable[int]:
        """The partition indexes ``topic`` names."""
        raise NotImplementedError


class AlterReplicaLogDirsHandler(ClusterCheckHandler[_AlterReplicaLogDirsBody]):
    """``handleAlterReplicaLogDirsRequest``: ALTER; one result per (dir, topic) of the request
    with 31 on each partition (``AlterReplicaLogDirsRequest.getErrorResponse``). The proxy's
    internal topics: 29 on their partitions, the rest forwarded."""

    api_key = 34
    operation = AclOperation.ALTER
    decode_request = True

    def allowed(self, request: Request[_AlterReplicaLogDirsBody], ctx: HandlerContext) -> Verdict:
        dirs = request.body.dirs
        refused = [
            (t.name, t.partitions)
            for d in dirs
            for t in d.topics
            if ctx.internal_topic(request, t.name)
        ]
        if not refused:
            return FORWARD
        schema = self._schema(request.header.api_version)
        results = _partition_results(schema, "results", refused, _INTERNAL, name_field="topic_name")
        kept = [
            codec.replace(d, topics=topics)
            for d in dirs
            if (topics := tuple(t for t in d.topics if not ctx.internal_topic(request, t.name)))
        ]

        def merge(response: _LogDirsAltered) -> _LogDirsAltered:
            return codec.replace(response, results=(*response.results, *results))

        return split(request, "dirs", kept, "results", merge)

    def error_response(self, body: _AlterReplicaLogDirsBody, version: int) -> ResponsePayload:
        schema = self._schema(version)
        topics = ((t.name, t.partitions) for log_dir in body.dirs for t in log_dir.topics)
        results = _partition_results(schema, "results", topics, _DENIED, name_field="topic_name")
        return codec.make_entity(schema, results=results)


class DescribeLogDirsHandler(ClusterCheckHandler[None]):
    """``handleDescribeLogDirsRequest``: DESCRIBE; top-level 31 (v3+) and no results; v1–2
    have no error field, so the client sees an empty result."""

    api_key = 35
    operation = AclOperation.DESCRIBE

    def allowed(self, request: Request[None], ctx: HandlerContext) -> Verdict:
        hidden = _hidden(request, ctx)

        def rewrite(response: _LogDirs) -> _LogDirs:
            if not any(hidden(t.name) for d in response.results for t in d.topics):
                return response
            results = tuple(
                codec.replace(d, topics=tuple(t for t in d.topics if not hidden(t.name)))
                for d in response.results
            )
            return codec.replace(response, results=results)

        return Forward(rewrite=rewrite)


class ElectLeadersHandler(InternalTopicsRefused[_ElectionTopic, _ElectLeadersBody]):
    """``ControllerApis.handleElectLeaders``: ALTER (Kafka's docs say ClusterAction; the code
    checks ALTER). ``ElectLeadersRequest.getErrorResponse``: top-level code (v1+) and 31 on
    every requested partition; none for an all-partitions (null) request, which is forwarded
    as it is (the controller elects where the preferred leader is not leading)."""

    api_key = 43
    operation = AclOperation.ALTER
    decode_request = True
    topics_field = "topic_partitions"
    answer_field = "replica_election_results"
    name_field = "topic"
    answer_names: ClassVar[dict[str, str]] = {
        "name_field": "topic",
        "partitions_field": "partition_result",
        "index_field": "partition_id",
    }

    def indexes(self, topic: _ElectionTopic) -> Iterable[int]:
        return topic.partitions

    def error_response(self, body: _ElectLeadersBody, version: int) -> ResponsePayload:
        schema = self._schema(version)
        results = _partition_results(
            schema,
            "replica_election_results",
            ((t.topic, t.partitions) for t in body.topic_partitions or ()),
            _DENIED,
            name_field="topic",
            partitions_field="partition_result",
            index_field="partition_id",
        )
        return codec.make_entity(schema, _DENIED, replica_election_results=results)


class AlterPartitionReassignmentsHandler(
    InternalTopicsRefused[_ReassignableTopic, _AlterPartitionReassignmentsBody]
):
    """``ControllerApis.handleAlterPartitionReassignments``: ALTER; top-level 31 plus 31 on
    every requested partition (``AlterPartitionReassignmentsRequest.getErrorResponse``)."""

    api_key = 45
    operation = AclOperation.ALTER
    decode_request = True
    topics_field = "topics"
    answer_field = "responses"

    def indexes(self, topic: _ReassignableTopic) -> Iterable[int]:
        return (p.partition_index for p in topic.partitions)

    def error_response(
        self, body: _AlterPartitionReassignmentsBody, version: int
    ) -> ResponsePayload:
        schema = self._schema(version)
        topics = ((t.name, (p.partition_index for p in t.partitions)) for t in body.topics)
        responses = _partition_results(schema, "responses", topics, _DENIED)
        return codec.make_entity(schema, _DENIED, responses=responses)


class ListPartitionReassignmentsHandler(ClusterCheckHandler[_ListPartitionReassignmentsBody]):
    """``ControllerApis.handleListPartitionReassignments``: DESCRIBE; top-level 31 and the
    requested partitions echoed with empty replica lists
    (``ListPartitionReassignmentsRequest.getErrorResponse``)."""

    api_key = 46
    operation = AclOperation.DESCRIBE
    decode_request = True

    def error_response(
        self, body: _ListPartitionReassignmentsBody, version: int
    ) -> ResponsePayload:
        schema = self._schema(version)
        topics = ((t.name, t.partition_indexes) for t in body.topics or ())
        # The partitions carry no error of their own.
        return codec.make_entity(
            schema, _DENIED, topics=_partition_results(schema, "topics", topics, ErrorCode.none)
        )

    def allowed(
        self, request: Request[_ListPartitionReassignmentsBody], ctx: HandlerContext
    ) -> Verdict:
        hidden = _hidden(request, ctx)

        def rewrite(response: _Reassignments) -> _Reassignments:
            topics = tuple(t for t in response.topics if not hidden(t.name))
            if len(topics) == len(response.topics):
                return response
            return codec.replace(response, topics=topics)

        return Forward(rewrite=rewrite)


class DescribeClientQuotasHandler(ClusterCheckHandler[None]):
    """``handleDescribeClientQuotasRequest``: DESCRIBE_CONFIGS; top-level 31, ``entries``
    null (``DescribeClientQuotasRequest.getErrorResponse``)."""

    api_key = 48
    operation = AclOperation.DESCRIBE_CONFIGS

    def error_response(self, body: None, version: int) -> ResponsePayload:
        return codec.make_entity(self._schema(version), _DENIED, entries=None)


class AlterClientQuotasHandler(ClusterCheckHandler[_AlterClientQuotasBody]):
    """``ControllerApis.handleAlterClientQuotas``: ALTER_CONFIGS; every entry echoed with 31
    and ``Errors.message()`` (``AlterClientQuotasRequest.getErrorResponse``)."""

    api_key = 49
    operation = AclOperation.ALTER_CONFIGS
    decode_request = True

    def error_response(self, body: _AlterClientQuotasBody, version: int) -> ResponsePayload:
        schema = self._schema(version)
        entry_type = codec.nested_type(schema, "entries")
        entity_cls = codec.nested_type(entry_type, "entity")
        entries = tuple(
            codec.make_entity(
                entry_type,
                _DENIED,
                error_message=ERROR_MESSAGES[_DENIED],
                entity=tuple(
                    # make_entity's first parameter is itself called entity_type
                    entity_cls(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
            for entry in body.entries
        )
        return codec.make_entity(schema, entries=entries)


class DescribeUserScramCredentialsHandler(ClusterCheckHandler[_DescribeUserScramCredentialsBody]):
    """``handleDescribeUserScramCredentialsRequest``: DESCRIBE; top-level 31 plus one result
    with 31 per requested user — whose ``user`` Kafka leaves empty
    (``DescribeUserScramCredentialsRequest.getErrorResponse``); none for a null user list."""

    api_key = 50
    operation = AclOperation.DESCRIBE
    decode_request = True

    def on_request(
        self, request: Request[_DescribeUserScramCredentialsBody], ctx: HandlerContext
    ) -> Verdict:
        verdict = super().on_request(request, ctx)
        store = _topic_credentials(ctx)
        if verdict is not FORWARD or store is None:
            return verdict
        return Respond(self._describe(store, request.body, request.header.api_version))

    def _describe(
        self,
        store: KafkaTopicCredentialStore,
        body: _DescribeUserScramCredentialsBody,
        version: int,
    ) -> ResponsePayload:
        """``ScramImage.describe`` over the proxy's Kafka-topic store (docs/acl-store.md)."""
        schema = self._schema(version)
        result_type = codec.nested_type(schema, "results")
        info_type = codec.nested_type(result_type, "credential_infos")
        if not body.users:
            names: dict[str, bool] = dict.fromkeys(store.users(), False)
        else:
            names = {}
            for user in body.users:
                names[user.name] = user.name in names
        results = []
        for name, duplicate in names.items():
            if duplicate:
                results.append(codec.make_entity(
                    result_type, ErrorCode.duplicate_resource, user=name,
                    error_message=f"{_DESCRIBE_DUPLICATE_USER}{name}",
                ))  # fmt: skip
                continue
            found = store.iterations(name)
            if not found:
                results.append(codec.make_entity(
                    result_type, ErrorCode.resource_not_found, user=name,
                    error_message=f"{_DESCRIBE_MISSING_USER}{name}",
                ))  # fmt: skip
                continue
            infos = tuple(
                info_type(mechanism=_SCRAM_TYPES[m], iterations=n)
                for m, n in sorted(found.items(), key=lambda item: _SCRAM_TYPES[item[0]])
            )
            results.append(codec.make_entity(result_type, user=name, credential_infos=infos))
        return codec.make_entity(schema, results=tuple(results))

    def error_response(
        self, body: _DescribeUserScramCredentialsBody, version: int
    ) -> ResponsePayload:
        schema = self._schema(version)
        result_type = codec.nested_type(schema, "results")
        results = tuple(codec.make_entity(result_type, _DENIED) for _ in body.users or ())
        return codec.make_entity(schema, _DENIED, results=results)


class AlterUserScramCredentialsHandler(ClusterCheckHandler[_AlterUserScramCredentialsBody]):
    """``ControllerApis.handleAlterUserScramCredentials``: ALTER; one result per distinct
    user of the deletions and upsertions, sorted, with 31
    (``AlterUserScramCredentialsRequest.getErrorResponse``)."""

    api_key = 51
    operation = AclOperation.ALTER
    decode_request = True

    def on_request(
        self, request: Request[_AlterUserScramCredentialsBody], ctx: HandlerContext
    ) -> Verdict:
        verdict = super().on_request(request, ctx)
        store = _topic_credentials(ctx)
        if verdict is not FORWARD or store is None:
            return verdict
        body, version = request.body, request.header.api_version

        async def respond() -> Respond:
            return Respond(await self._alter(store, body, version))

        return RespondLater(respond)

    async def _alter(  # noqa: C901 - mirrors ScramControlManager.alterCredentials
        self, store: KafkaTopicCredentialStore, body: _AlterUserScramCredentialsBody, version: int
    ) -> ResponsePayload:
        """``ScramControlManager.alterCredentials`` over the proxy's Kafka-topic store: a user
        named twice is refused, the rest is written at once (docs/acl-store.md)."""
        errors: dict[str, tuple[ErrorCode, str]] = {}
        deletions: dict[str, tuple[str, str]] = {}
        upsertions: dict[str, tuple[str, str, ScramCredential]] = {}
        for deletion in body.deletions:
            name, mechanism = deletion.name, _SCRAM_NAMES.get(int(deletion.mechanism))
            if name in errors:
                continue
            if deletions.pop(name, None) is not None:
                errors[name] = _TWICE
            elif (error := _deletion_error(store, name, mechanism)) is not None:
                errors[name] = error
            elif mechanism is not None:
                deletions[name] = (name, mechanism)
        for upsertion in body.upsertions:
            name, mechanism = upsertion.name, _SCRAM_NAMES.get(int(upsertion.mechanism))
            if name in errors:
                continue
            if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
                errors[name] = _TWICE
            elif (error := _upsertion_error(name, mechanism, upsertion.iterations)) is not None:
                errors[name] = error
            elif mechanism is not None:
                credential = scram.credential_from_salted_password(
                    mechanism,
                    bytes(upsertion.salt),
                    bytes(upsertion.salted_password),
                    int(upsertion.iterations),
                )
                upsertions[name] = (name, mechanism, credential)
        written = [*deletions, *upsertions]
        if written:
            try:
                await store.alter(list(upsertions.values()), list(deletions.values()))
            except KafkaCredentialError as exc:
                failure = (ErrorCode.unknown_server_error, f"Failed to store credentials: {exc}")
                errors = dict.fromkeys(written, failure) | errors
                written = []
        schema = self._schema(version)
        result_type = codec.nested_type(schema, "results")
        results = [codec.make_entity(result_type, user=name) for name in written]
        results += [
            codec.make_entity(result_type, code, user=name, error_message=message)
            for name, (code, message) in errors.items()
        ]
        return codec.make_entity(schema, results=tuple(results))

    def error_response(self, body: _AlterUserScramCredentialsBody, version: int) -> ResponsePayload:
        schema = self._schema(version)
        result_type = codec.nested_type(schema, "results")
        users = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
        results = tuple(codec.make_entity(result_type, _DENIED, user=user) for user in users)
        return codec.make_entity(schema, results=results)


class UpdateFeaturesHandler(ClusterCheckHandler[None]):
    """``ControllerApis.handleUpdateFeatures``: ALTER; top-level 31 and no per-feature results
    (``UpdateFeaturesResponse.createWithErrors`` lists results only on success)."""

    api_key = 57
    operation = AclOperation.ALTER


class UnregisterBrokerHandler(ClusterCheckHandler[None]):
    """``ControllerApis.handleUnregisterBroker``: ALTER; top-level 31."""

    api_key = 64
    operation = AclOperation.ALTER


class ListConfigResourcesHandler(ClusterCheckHandler[None]):
    """``handleListConfigResources`` (was ListClientMetricsResources): DESCRIBE_CONFIGS,
    checked before the resource types are validated; top-level 31, empty list. Allowed
    principals see every name the broker lists (v1 TOPIC/GROUP), as in Kafka."""

    api_key = 74
    operation = AclOperation.DESCRIBE_CONFIGS

    def allowed(self, request: Request[None], ctx: HandlerContext) -> Verdict:
        if request.header.api_version < 1:  # v0 lists client-metrics resources only
            return FORWARD
        hidden = _hidden(request, ctx)

        def rewrite(response: _Resources) -> _Resources:
            kept = tuple(
                r
                for r in response.config_resources
                if not (r.resource_type == _CONFIG_TOPIC and hidden(r.resource_name))
            )
            if len(kept) == len(response.config_resources):
                return response
            return codec.replace(response, config_resources=kept)

        return Forward(rewrite=rewrite)


_CONFIG_TOPIC = 2
"""``ConfigResource.Type.TOPIC``."""


# EndpointType ids (org.apache.kafka.common.requests.EndpointType).
_ENDPOINT_BROKER = 1
_ENDPOINT_CONTROLLER = 2


class DescribeClusterHandler(ApiHandler[_DescribeClusterBody]):
    """DescribeCluster (60), ``AuthHelper.computeDescribeClusterResponse`` on a broker:

    1. ``endpointType`` (v1+) other than BROKER is answered locally, before anything else:
       CONTROLLER → MISMATCHED_ENDPOINT_TYPE (114), an unknown id → UNSUPPORTED_ENDPOINT_TYPE
       (115), with Kafka's messages. v0 cannot name an endpoint type (the 42 branch for v0
       is unreachable).
    2. No check for the request itself (clients learn brokers and cluster id from Metadata
       anyway).
    3. ``includeClusterAuthorizedOperations``: DESCRIBE CLUSTER (an ordinary, logged check);
       denied → 0, allowed → the KIP-430 bitfield. Not requested → Int.MinValue, whatever the
       broker wrote. Decided when the request arrives, like every other decision.
    4. Broker addresses are replaced by the proxy's
       (``addresses.rewrite_describe_cluster_brokers``).
    """

    api_key = 60
    decode_request = True

    def on_request(self, request: Request[_DescribeClusterBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        version = request.header.api_version
        endpoint_type = int(getattr(body, "endpoint_type", _ENDPOINT_BROKER))
        if endpoint_type != _ENDPOINT_BROKER:
            if endpoint_type == _ENDPOINT_CONTROLLER:
                code = ErrorCode.mismatched_endpoint_type
                message = (
                    "The request was sent to an endpoint of type BROKER, "
                    "but we wanted an endpoint of type CONTROLLER"
                )
            else:
                code = ErrorCode.unsupported_endpoint_type
                message = f"Unsupported endpoint type {endpoint_type}"
            return Respond(
                codec.make_entity(
                    codec.response_schema(self.api_key, version), code, error_message=message
                )
            )
        operations = AUTHORIZED_OPERATIONS_OMITTED
        if body.include_cluster_authorized_operations:
            operations = (
                ctx.authorized_operations(request, CLUSTER)
                if is_allowed(ctx, request, AclOperation.DESCRIBE, CLUSTER)
                else 0
            )

        def rewrite(response: _Cluster) -> _Cluster:
            response = rewrite_describe_cluster_brokers(response, ctx)
            if (
                response.error_code != ErrorCode.none  # Kafka leaves the default then
                or response.cluster_authorized_operations == operations
            ):
                return response
            return codec.replace(response, cluster_authorized_operations=operations)

        return Forward(rewrite=rewrite)


HANDLERS: list[ApiHandler] = [
    AlterReplicaLogDirsHandler(),
    DescribeLogDirsHandler(),
    ElectLeadersHandler(),
    AlterPartitionReassignmentsHandler(),
    ListPartitionReassignmentsHandler(),
    DescribeClientQuotasHandler(),
    AlterClientQuotasHandler(),
    DescribeUserScramCredentialsHandler(),
    AlterUserScramCredentialsHandler(),
    UpdateFeaturesHandler(),
    UnregisterBrokerHandler(),
    ListConfigResourcesHandler(),
    DescribeClusterHandler(),
]
