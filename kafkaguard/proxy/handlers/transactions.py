"""The transactions family: InitProducerId (22), AddPartitionsToTxn (24), AddOffsetsToTxn
(25), EndTxn (26), TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66).

Each handler mirrors the ``KafkaApis.handleXxx`` method named in its docstring (Kafka 4.x,
KRaft). Whole-request denials are built like the request's ``getErrorResponse``; partial ones
forward only the authorized items and merge the proxy's entries back in request order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, Protocol, TypeVar, cast

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload, ResponsePayload
from kafkaguard.proxy.handlers.support.authz import (
    CLUSTER,
    INTERNAL_TOPICS,
    authorize_topics,
    filter_authorized,
    group,
    is_allowed,
    topic,
    transactional_id,
)
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import Named, PartitionIndexed
from kafkaguard.proxy.handlers.support.offset_merge import builder_merge
from kafkaguard.proxy.handlers.support.responses import (
    entity,
    entity_from,
    merge_in_request_order,
    partition_errors,
    response_type,
    split,
)


# What the handlers read of kio's classes (any version of each schema).
class _TransactionBody(Protocol):
    """EndTxn, AddOffsetsToTxn, TxnOffsetCommit: ``group_id`` in the last two only (read
    only there)."""

    @property
    def transactional_id(self) -> str: ...
    @property
    def group_id(self) -> str: ...


class _InitProducerIdBody(Protocol):
    """``enable2_pc`` (v6) is read by name."""

    @property
    def transactional_id(self) -> str | None: ...


class _TxnTopic(Named, Protocol):
    @property
    def partitions(self) -> Sequence[int]: ...


class _Transaction(Protocol):
    @property
    def transactional_id(self) -> str: ...
    @property
    def topics(self) -> Sequence[_TxnTopic]: ...


class _AddPartitionsToTxnBody(Entity, Protocol):
    """The ``v3_and_below_`` fields up to v3, ``transactions`` from v4: each version has
    one or the other."""

    @property
    def v3_and_below_transactional_id(self) -> str: ...
    @property
    def v3_and_below_topics(self) -> Sequence[_TxnTopic]: ...
    @property
    def transactions(self) -> Sequence[_Transaction]: ...


class _PartitionResult(PartitionIndexed, Protocol):
    @property
    def partition_error_code(self) -> int: ...


class _TopicResult(Named, Protocol):
    @property
    def results_by_partition(self) -> Sequence[_PartitionResult]: ...


class _TransactionResult(Protocol):
    @property
    def transactional_id(self) -> str: ...


class _AddPartitionsToTxnResponse(Entity, Protocol):
    """As the request: ``results_by_topic_v3_and_below`` or ``results_by_transaction``."""

    @property
    def results_by_topic_v3_and_below(self) -> Sequence[_TopicResult]: ...
    @property
    def results_by_transaction(self) -> Sequence[_TransactionResult]: ...


class _CommittedTopic(Named, Protocol):
    @property
    def partitions(self) -> Sequence[PartitionIndexed]: ...


class _TxnOffsetCommitBody(_TransactionBody, Protocol):
    @property
    def topics(self) -> Sequence[_CommittedTopic]: ...


class _DescribeTransactionsBody(Protocol):
    @property
    def transactional_ids(self) -> Sequence[str]: ...


class _StateTopic(Protocol):
    @property
    def topic(self) -> str: ...


class _TransactionState(Entity, Protocol):
    """A state of DescribeTransactions (``topics``) or ListTransactions (no ``topics``)."""

    @property
    def transactional_id(self) -> str: ...
    @property
    def topics(self) -> Sequence[_StateTopic]: ...


class _TransactionStates(Entity, Protocol):
    @property
    def transaction_states(self) -> Sequence[_TransactionState]: ...


_Batch = TypeVar("_Batch", bound=_AddPartitionsToTxnResponse)
_States = TypeVar("_States", bound=_TransactionStates)
_S = TypeVar("_S", bound=_TransactionState)


def _whole(request: Request, code: ErrorCode, **values: object) -> Respond:
    """A response with the top-level ``error_code`` and nothing else of substance
    (``XxxRequest.getErrorResponse``)."""
    return Respond(entity_from(response_type(request), code, values))


def _transaction_denied(
    ctx: HandlerContext, request: Request, body: _TransactionBody, *, read_group: bool
) -> ErrorCode | None:
    """WRITE on the request's TransactionalId (53), then, if asked, READ on its group (30)."""
    if not is_allowed(ctx, request, AclOperation.WRITE, transactional_id(body.transactional_id)):
        return ErrorCode.transactional_id_authorization_failed
    if read_group and not is_allowed(ctx, request, AclOperation.READ, group(body.group_id)):
        return ErrorCode.group_authorization_failed
    return None


class InitProducerIdHandler(ApiHandler[_InitProducerIdBody]):
    """``KafkaApis.handleInitProducerIdRequest``.

    Transactional: WRITE on the TransactionalId, then (KIP-939, v6 ``enable2Pc``)
    TWO_PHASE_COMMIT on it → 53. Idempotent (null id): IDEMPOTENT_WRITE on the cluster
    (logIfDenied=false) or, failing that, WRITE on *any* topic via ``authorizeByResourceType``
    (KIP-679) → 31. The error response is ``InitProducerIdRequest.getErrorResponse``:
    producerId -1, producerEpoch -1.
    """

    api_key = 22
    decode_request = True

    def on_request(self, request: Request[_InitProducerIdBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        txn_id = body.transactional_id
        if txn_id is not None:
            if not is_allowed(ctx, request, AclOperation.WRITE, transactional_id(txn_id)):
                return self._deny(request, ErrorCode.transactional_id_authorization_failed)
            if getattr(body, "enable2_pc", False) and not is_allowed(
                ctx, request, AclOperation.TWO_PHASE_COMMIT, transactional_id(txn_id)
            ):
                return self._deny(request, ErrorCode.transactional_id_authorization_failed)
            return FORWARD
        if is_allowed(
            ctx, request, AclOperation.IDEMPOTENT_WRITE, CLUSTER, log_if_denied=False
        ) or (
            ctx.authorize_by_resource_type(request, AclOperation.WRITE, ResourceType.TOPIC)
            is AuthorizationResult.ALLOWED
        ):
            return FORWARD
        return self._deny(request, ErrorCode.cluster_authorization_failed)

    @staticmethod
    def _deny(request: Request, code: ErrorCode) -> Respond:
        return _whole(request, code, producer_id=-1, producer_epoch=-1)


class AddPartitionsToTxnHandler(ApiHandler[_AddPartitionsToTxnBody]):
    """``KafkaApis.handleAddPartitionsToTxnRequest``.

    v0–3 (clients): WRITE on the TransactionalId (53 on every partition), then WRITE on each
    topic (``filterByAuthorized`` over partitions, so the reference count is the topic's
    partition count); internal topics are never authorized (no check, always 29). The
    transaction is all-or-nothing: with any denial Kafka answers 29 on the denied partitions,
    3 UNKNOWN_TOPIC_OR_PARTITION on authorized partitions that do not exist and 55
    OPERATION_NOT_ATTEMPTED on the others, without calling the coordinator.

    Which authorized partitions exist only the broker knows, so in that case the proxy sends
    it a *probe*: the authorized partitions with producer id/epoch -1. The broker checks
    existence first (answering 3/55 itself when something is missing, as above); when all
    exist it asks the coordinator, which refuses a producer id no transaction holds
    (INVALID_PRODUCER_ID_MAPPING, or a retriable coordinator error) before changing anything
    (``TransactionCoordinator.handleAddPartitionsToTransaction``). The proxy keeps only the
    3s from that answer and builds the rest: nothing is added to any transaction.

    v4+ (broker-to-broker verification batches, KIP-890): CLUSTER_ACTION on the cluster, 31 in
    the top-level error (``AddPartitionsToTxnRequest.getErrorResponse``). CLUSTER_ACTION
    authorizes every topic, so a transaction naming one of the proxy's internal topics would
    put a control batch into it at EndTxn: such a transaction is answered by the proxy, 29 on
    the internal partitions and 55 on its others (all-or-nothing, as v3 denials), and never
    reaches the coordinator; the batch's other transactions are forwarded.
    """

    api_key = 24
    decode_request = True

    def on_request(self, request: Request[_AddPartitionsToTxnBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        if request.header.api_version >= 4:
            if is_allowed(ctx, request, AclOperation.CLUSTER_ACTION, CLUSTER):
                return self._batch(request, ctx)
            return _whole(request, ErrorCode.cluster_authorization_failed)
        topics = body.v3_and_below_topics
        if not is_allowed(
            ctx, request, AclOperation.WRITE, transactional_id(body.v3_and_below_transactional_id)
        ):
            code = ErrorCode.transactional_id_authorization_failed
            return Respond(self._response(request, topics, lambda _, __: code))
        allowed = filter_authorized(
            ctx,
            request,
            AclOperation.WRITE,
            ResourceType.TOPIC,
            [t.name for t in topics if t.name not in INTERNAL_TOPICS for _ in t.partitions],
        )
        if all(t.name in allowed for t in topics if t.partitions):  # no partition, no check
            return FORWARD
        denied = ErrorCode.topic_authorization_failed
        probe_topics = tuple(t for t in topics if t.name in allowed and t.partitions)
        if not probe_topics:
            return Respond(self._response(request, topics, lambda name, _: denied))
        probe = codec.replace(
            body,
            v3_and_below_producer_id=-1,
            v3_and_below_producer_epoch=-1,
            v3_and_below_topics=probe_topics,
        )

        def rewrite(response: _AddPartitionsToTxnResponse) -> ResponsePayload:
            missing = {
                (t.name, p.partition_index)
                for t in response.results_by_topic_v3_and_below
                if t.name in allowed
                for p in t.results_by_partition
                if p.partition_error_code == ErrorCode.unknown_topic_or_partition
            }

            def code_of(name: str, index: int) -> ErrorCode:
                if name not in allowed:
                    return denied
                if (name, index) in missing:
                    return ErrorCode.unknown_topic_or_partition
                return ErrorCode.operation_not_attempted

            return self._response(request, topics, code_of)

        return Forward(request=cast(RequestPayload, probe), rewrite=rewrite)  # the client's schema

    @staticmethod
    def _batch(request: Request[_AddPartitionsToTxnBody], ctx: HandlerContext) -> Verdict:
        """v4+: the transactions naming an internal topic answered here, the others forwarded."""
        transactions = request.body.transactions
        refused = {
            t.transactional_id
            for t in transactions
            if any(ctx.internal_topic(request, x.name) for x in t.topics)
        }
        if not refused:
            return FORWARD
        schema = codec.response_schema(24, request.header.api_version)
        result_type = codec.nested_type(schema, "results_by_transaction")
        topic_type = codec.nested_type(result_type, "topic_results")
        denied: dict[str, list[_TransactionResult]] = {}
        for t in transactions:
            if t.transactional_id not in refused:
                continue
            internal = frozenset(x.name for x in t.topics if ctx.internal_topic(request, x.name))
            results = _topic_results(topic_type, t.topics, _refusal(internal))
            denied.setdefault(t.transactional_id, []).append(
                entity(result_type, transactional_id=t.transactional_id, topic_results=results)
            )
        ids = [t.transactional_id for t in transactions]

        def merge(response: _Batch) -> _Batch:
            results = merge_in_request_order(
                ids, denied, response.results_by_transaction, lambda r: r.transactional_id
            )
            return codec.replace(response, results_by_transaction=results)

        kept = [t for t in transactions if t.transactional_id not in refused]
        return split(request, "transactions", kept, "results_by_transaction", merge)

    @staticmethod
    def _response(
        request: Request, topics: Sequence[_TxnTopic], code_of: Callable[[str, int], ErrorCode]
    ) -> ResponsePayload:
        """``AddPartitionsToTxnResponse.resultForTransaction``: one entry per topic."""
        schema = codec.response_schema(24, request.header.api_version)
        topic_type = codec.nested_type(schema, "results_by_topic_v3_and_below")
        results = _topic_results(topic_type, topics, code_of)
        return entity(schema, results_by_topic_v3_and_below=results)


def _refusal(internal: frozenset[str]) -> Callable[[str, int], ErrorCode]:
    """29 on the ``internal`` topics' partitions, 55 on the transaction's others."""

    def code_of(name: str, _: int) -> ErrorCode:
        if name in internal:
            return ErrorCode.topic_authorization_failed
        return ErrorCode.operation_not_attempted

    return code_of


def _topic_results(
    topic_type: type[Entity], topics: Iterable[_TxnTopic], code_of: Callable[[str, int], ErrorCode]
) -> tuple[Entity, ...]:
    """One result per topic (duplicates merged), each partition answered ``code_of``."""
    partition_type = codec.nested_type(topic_type, "results_by_partition")
    partitions: dict[str, dict[int, None]] = {}
    for t in topics:
        partitions.setdefault(t.name, {}).update(dict.fromkeys(t.partitions))
    return tuple(
        entity(
            topic_type,
            name=name,
            results_by_partition=tuple(
                codec.make_entity(partition_type, code_of(name, i), partition_index=i)
                for i in indexes
            ),
        )
        for name, indexes in partitions.items()
    )


class EndTxnHandler(ApiHandler[_TransactionBody]):
    """``KafkaApis.handleEndTxnRequest``: WRITE TransactionalId → 53 (top level; v5's
    producerId/epoch stay -1 as in ``EndTxnRequest.getErrorResponse``)."""

    api_key = 26
    decode_request = True
    read_group: ClassVar[bool] = False

    def on_request(self, request: Request[_TransactionBody], ctx: HandlerContext) -> Verdict:
        code = _transaction_denied(ctx, request, request.body, read_group=self.read_group)
        return FORWARD if code is None else _whole(request, code)


class AddOffsetsToTxnHandler(EndTxnHandler):
    """``KafkaApis.handleAddOffsetsToTxnRequest``: WRITE TransactionalId (53), then READ
    on the group (30); top-level error code."""

    api_key = 25
    read_group = True


class TxnOffsetCommitHandler(ApiHandler[_TxnOffsetCommitBody]):
    """``KafkaApis.handleTxnOffsetCommitRequest`` (4.x): WRITE TransactionalId (53 on every
    partition), READ group (30 on every partition) — both before any topic, so a principal
    without them learns nothing about topics — then READ per topic (``filterByAuthorized``
    over topic entries) → 29 on that topic's partitions; the rest is forwarded. Authorized
    but missing topics get 3 from the broker. The answer is in the order of Kafka's
    ``TxnOffsetCommitResponse.Builder`` (:func:`~offset_merge.builder_merge`)."""

    api_key = 28
    decode_request = True

    def on_request(self, request: Request[_TxnOffsetCommitBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        keys = [t.name for t in body.topics]
        schema = codec.response_schema(28, request.header.api_version)
        topic_type = codec.nested_type(schema, "topics")
        code = _transaction_denied(ctx, request, body, read_group=True)
        if code is not None:  # TxnOffsetCommitRequest.getErrorResponse: every request topic
            topics = tuple(
                entity(
                    topic_type,
                    name=t.name,
                    partitions=partition_errors(
                        topic_type, "partitions", (p.partition_index for p in t.partitions), code
                    ),
                )
                for t in body.topics
            )
            return Respond(entity(schema, topics=topics))
        denied = authorize_topics(ctx, request, AclOperation.READ, keys)
        if not denied:
            return FORWARD
        merge = builder_merge(
            topic_type, body.topics, denied, lambda t: [p.partition_index for p in t.partitions]
        )
        kept = tuple(t for t in body.topics if t.name not in denied)
        return split(request, "topics", kept, "topics", merge)


class DescribeTransactionsHandler(ApiHandler[_DescribeTransactionsBody]):
    """``KafkaApis.handleDescribeTransactionsRequest``: DESCRIBE on each TransactionalId
    (one check per occurrence) → 53 for that id; the broker describes the others, and in
    its answer each topic of a state is kept only with DESCRIBE on the topic (silently
    removed otherwise). Deviation: Kafka interleaves the id and topic checks per id; the
    proxy makes the topic checks when the broker's answer arrives."""

    api_key = 65
    decode_request = True

    def on_request(
        self, request: Request[_DescribeTransactionsBody], ctx: HandlerContext
    ) -> Verdict:
        body = request.body
        ids = list(body.transactional_ids)
        actions = [Action(AclOperation.DESCRIBE, transactional_id(i)) for i in ids]
        results = ctx.authorize(request, actions) if actions else []
        allowed = [i for i, r in zip(ids, results, strict=True) if r is AuthorizationResult.ALLOWED]
        schema = codec.response_schema(65, request.header.api_version)
        state_type = codec.nested_type(schema, "transaction_states")
        denied: dict[str, list[_TransactionState]] = {}
        for i, r in zip(ids, results, strict=True):
            if r is not AuthorizationResult.ALLOWED:
                denied.setdefault(i, []).append(
                    entity(
                        state_type,
                        ErrorCode.transactional_id_authorization_failed,
                        transactional_id=i,
                    )
                )

        def rewrite(response: _States) -> _States:
            states = _filter_state_topics(request, ctx, response.transaction_states)
            if denied:
                states = merge_in_request_order(ids, denied, states, lambda s: s.transactional_id)
            if states is response.transaction_states:
                return response
            return codec.replace(response, transaction_states=states)

        if allowed and not denied:
            return Forward(rewrite=rewrite)
        # With nothing allowed, ``rewrite`` over the empty answer is the denied states alone.
        return split(request, "transactional_ids", allowed, "transaction_states", rewrite)


def _filter_state_topics(
    request: Request, ctx: HandlerContext, states: Sequence[_S]
) -> Sequence[_S]:
    """Drop every topic of every state the principal may not DESCRIBE; ``states`` itself
    when nothing was dropped."""
    actions = [Action(AclOperation.DESCRIBE, topic(t.topic)) for s in states for t in s.topics]
    if not actions:
        return states
    results = iter(ctx.authorize(request, actions))
    out: list[_S] = []
    changed = False
    for s in states:
        kept = tuple(t for t in s.topics if next(results) is AuthorizationResult.ALLOWED)
        if len(kept) != len(s.topics):
            s = codec.replace(s, topics=kept)
            changed = True
        out.append(s)
    return tuple(out) if changed else states


class ListTransactionsHandler(ApiHandler[None]):
    """``KafkaApis.handleListTransactionsRequest``: no check up front; each returned state
    is kept only with DESCRIBE on its TransactionalId (filtered, never an error)."""

    api_key = 66

    def on_request(self, request: Request[None], ctx: HandlerContext) -> Verdict:
        def rewrite(response: _States) -> _States:
            states = response.transaction_states
            if not states:
                return response
            results = ctx.authorize(
                request,
                [
                    Action(AclOperation.DESCRIBE, transactional_id(s.transactional_id))
                    for s in states
                ],
            )
            kept = tuple(
                s for s, r in zip(states, results, strict=True) if r is AuthorizationResult.ALLOWED
            )
            if len(kept) == len(states):
                return response
            return codec.replace(response, transaction_states=kept)

        return Forward(rewrite=rewrite)


HANDLERS: list[ApiHandler] = [
    InitProducerIdHandler(),
    AddPartitionsToTxnHandler(),
    AddOffsetsToTxnHandler(),
    EndTxnHandler(),
    TxnOffsetCommitHandler(),
    DescribeTransactionsHandler(),
    ListTransactionsHandler(),
]
