"""Produce (api key 0): ``KafkaApis.handleProduceRequest``.

Checks, in Kafka's order:

1. If any record batch is transactional: WRITE on the request's TransactionalId (a null id is
   denied). Denied → TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) on every partition.
2. WRITE on each topic. Denied topics get TOPIC_AUTHORIZATION_FAILED (29) on each of their
   partitions; the rest is forwarded. Topic ids (v13) are resolved first, as the broker
   answers an unknown id before authorizing: ids the proxy has not seen are looked up with
   the broker (``questions.py``); one the broker does not know either is UNKNOWN_TOPIC_ID (100)
   and never forwarded.

``acks=0`` requests have no response: any denial closes the connection, as Kafka closes it
when an acks=0 produce fails. Allowed ``acks=0`` requests take no reply slot.

Whether a batch is transactional is read from the batch header's attributes (bit 4) only;
records are never decoded (``docs/design.md#forwarded-untouched``). The request itself is not
decoded either: a skim reads the transactional id, ``acks``, topics and partitions
(:func:`~kafkaguard.protocol.skim.produce.skim_produce_request`), and an allowed request goes
up as the client's bytes; only a partly denied one is decoded, to be split. The response's
``node_endpoints`` (v10+) are rewritten in its raw tail.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Protocol, cast
from uuid import UUID

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.skim.produce import skim_produce_request
from kafkaguard.proxy.handlers.support.addresses import allowed_forward, node_endpoints_rewrite
from kafkaguard.proxy.handlers.support.authz import (
    TopicChecks,
    TopicKey,
    topic_key,
    transactional_id,
)
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Authorize,
    Close,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.questions import listed_topic_ids
from kafkaguard.proxy.handlers.support.responses import (
    merge_in_request_order,
    merge_rewrite,
    partition_errors,
    split,
)


class _Partition(Protocol):
    """``PartitionProduceData`` of any version, or its skim."""

    @property
    def index(self) -> int: ...
    @property
    def records(self) -> bytes | memoryview | None: ...


class _Topic(Protocol):
    """``TopicProduceData`` of any version (by name, or by id from v13), or its skim."""

    @property
    def partition_data(self) -> Sequence[_Partition]: ...


class ProduceBody(Protocol):
    """What the handler reads of a ``ProduceRequest``: kio's of any version, or
    :class:`~kafkaguard.protocol.skim.produce.ProduceRequestSkim`."""

    @property
    def transactional_id(self) -> str | None: ...
    @property
    def acks(self) -> int: ...
    @property
    def topic_data(self) -> Sequence[_Topic]: ...


_TRANSACTIONAL_FLAG = 0x10
_ATTRIBUTES_OFFSET = 21  # baseOffset(8) batchLength(4) leaderEpoch(4) magic(1) crc(4)


def has_transactional_batches(body: ProduceBody) -> bool:
    """``ProduceRequest.hasTransactionalRecords``: walks batch headers, never records."""
    for topic_data in body.topic_data:
        for partition in topic_data.partition_data:
            records = partition.records
            if not records:
                continue
            pos = 0
            while pos + _ATTRIBUTES_OFFSET + 2 <= len(records):
                batch_length = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True)
                magic = records[pos + 16]
                if magic >= 2 and records[pos + _ATTRIBUTES_OFFSET + 1] & _TRANSACTIONAL_FLAG:
                    return True
                if batch_length <= 0:
                    break
                pos += 12 + batch_length
    return False


_FIRST_VERSION_BY_ID: Final = 13
"""Produce names topics by id from v13 (KIP-516)."""
_ProduceState = TopicChecks | None
"""The topics' checks; None in the first of two steps: WRITE on the transactional id, the
topics after."""


def _refuse_internal_topics(
    ctx: HandlerContext, request: Request, denied: dict[TopicKey, ErrorCode]
) -> None:
    """The proxy's internal topics: ReplicaManager's answer to an append to an internal topic
    (``InvalidTopicException`` "Cannot append to internal topic", 17), given to every principal
    the rule refuses (docs/deviations.md), instead of 29."""
    for key, code in denied.items():
        name = key if isinstance(key, str) else ctx.topic_name(key)
        if (
            code is ErrorCode.topic_authorization_failed
            and name is not None
            and ctx.internal_topic(request, name)
        ):
            denied[key] = ErrorCode.invalid_topic_exception


class ProduceHandler(ApiHandler[ProduceBody, _ProduceState]):
    api_key = 0

    def read_request(self, header: RequestHeaderInfo, frame: Frame) -> ProduceBody:
        skim = skim_produce_request(frame, header.api_version, header.client_id_end)
        if skim is None:  # a version the skim does not know: kio's decode
            decoded = codec.decode_request(frame, self.api_key, header.api_version)
            return cast(ProduceBody, decoded)
        return skim

    def topic_ids(self, request: Request[ProduceBody]) -> Iterable[UUID]:
        if request.header.api_version < _FIRST_VERSION_BY_ID:  # topics by name: nothing to walk
            return ()
        return listed_topic_ids(request.body, "topic_data")

    def on_request(
        self, request: Request[ProduceBody], ctx: HandlerContext
    ) -> Verdict | Authorize[_ProduceState]:
        """Two phases (base.Authorize): WRITE on the transactional id of a transactional
        request, first and alone (Kafka checks its topics only once that is granted), then
        WRITE on the topics."""
        body = request.body
        if has_transactional_batches(body):
            if body.transactional_id is None:
                return self._deny(request, body, ErrorCode.transactional_id_authorization_failed)
            action = Action(
                AclOperation.WRITE, transactional_id(body.transactional_id), 1, True, True
            )
            return Authorize([action], None)
        return self._check_topics(ctx, body)

    @staticmethod
    def _check_topics(ctx: HandlerContext, body: ProduceBody) -> Authorize[_ProduceState]:
        checks = TopicChecks(ctx, AclOperation.WRITE, [topic_key(e) for e in body.topic_data])
        return Authorize(checks.actions, checks)

    def on_authorized(
        self,
        request: Request[ProduceBody],
        ctx: HandlerContext,
        state: _ProduceState,
        results: Sequence[AuthorizationResult],
    ) -> Verdict | Authorize[_ProduceState]:
        body = request.body
        if state is None:  # the transactional id's check
            if results[0] is not AuthorizationResult.ALLOWED:
                return self._deny(request, body, ErrorCode.transactional_id_authorization_failed)
            return self._check_topics(ctx, body)
        checks = state
        denied = checks.denied(results)
        if denied:
            _refuse_internal_topics(ctx, request, denied)
        if not denied:
            if body.acks == 0:
                return Forward(expects_response=False)
            return allowed_forward(request, ctx)
        if body.acks == 0:
            return Close("acks=0 Produce to a topic it may not write (Kafka closes too)")
        keys = [topic_key(e) for e in body.topic_data]
        entries = self._denied_entries(request, body, denied)
        # The split re-encodes the request: it needs kio's body, not the skim.
        decoded = codec.decode_request(request.frame, self.api_key, request.header.api_version)
        whole = Request(request.header, request.frame, decoded)
        kept = tuple(e for e in cast(ProduceBody, decoded).topic_data if topic_key(e) not in denied)
        merge = merge_rewrite(keys, entries, "responses", topic_key)
        endpoints = node_endpoints_rewrite(whole, ctx)
        return split(whole, "topic_data", kept, "responses", merge, rewrite=endpoints)

    def _deny(self, request: Request[ProduceBody], body: ProduceBody, code: ErrorCode) -> Verdict:
        if body.acks == 0:
            return Close("acks=0 transactional Produce without WRITE on its transactional id")
        keys = [topic_key(e) for e in body.topic_data]
        entries = self._denied_entries(request, body, dict.fromkeys(keys, code))
        return Respond(self._response(request, keys, entries))

    @staticmethod
    def _denied_entries(
        request: Request[ProduceBody], body: ProduceBody, denied: dict[TopicKey, ErrorCode]
    ) -> dict[TopicKey, list[Entity]]:
        schema = codec.response_schema(0, request.header.api_version)
        topic_type = codec.nested_type(schema, "responses")
        key_field = "name" if "name" in topic_type.__dataclass_fields__ else "topic_id"
        out: dict[TopicKey, list[Entity]] = {}
        for entry in body.topic_data:
            key = topic_key(entry)
            if key not in denied or key in out:
                continue
            # Kafka's PartitionResponse(error): baseOffset -1, logAppendTime -1.
            partitions = partition_errors(
                topic_type,
                "partition_responses",
                (p.index for p in entry.partition_data),
                denied[key],
                index_field="index",
                base_offset=-1,
            )
            out[key] = [
                codec.make_entity(
                    topic_type,
                    ErrorCode.none,
                    **{key_field: key, "partition_responses": partitions},
                )
            ]
        return out

    @staticmethod
    def _response(
        request: Request[ProduceBody], keys: list[TopicKey], entries: dict[TopicKey, list[Entity]]
    ) -> ResponsePayload:
        responses = merge_in_request_order(keys, entries, (), topic_key)
        return codec.make_entity(
            codec.response_schema(0, request.header.api_version), responses=responses
        )


HANDLERS: list[ApiHandler] = [ProduceHandler()]
