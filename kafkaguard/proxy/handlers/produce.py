"""Produce (api key 0): ``KafkaApis.handleProduceRequest``.

Checks, in Kafka's order:

1. If any record batch is transactional: WRITE on the request's TransactionalId (a null id is
   denied). Denied → TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) on every partition.
2. WRITE on each topic. Denied topics get TOPIC_AUTHORIZATION_FAILED (29) on each of their
   partitions; the rest is forwarded. Topic ids (v13) the proxy has never seen in a broker
   response are UNKNOWN_TOPIC_ID (100), as the broker answers an unknown id before
   authorizing (fail closed: an id the proxy cannot name is never forwarded).

``acks=0`` requests have no response: any denial closes the connection, as Kafka closes it
when an acks=0 produce fails. Allowed ``acks=0`` requests take no reply slot.

Whether a batch is transactional is read from the batch header's attributes (bit 4) only;
records are never decoded (principle 1).
"""

from __future__ import annotations

from typing import Any

from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.addresses import NodeEndpointsHandler
from kafkaguard.proxy.handlers.authz import (
    filter_authorized,
    is_allowed,
    merge_in_request_order,
    transactional_id,
)
from kafkaguard.proxy.handlers.base import (
    ApiHandler,
    Close,
    Forward,
    HandlerContext,
    Request,
    Respond,
    ResponseRewrite,
    Verdict,
)

_TRANSACTIONAL_FLAG = 0x10
_ATTRIBUTES_OFFSET = 21  # baseOffset(8) batchLength(4) leaderEpoch(4) magic(1) crc(4)


def has_transactional_batches(body: Any) -> bool:
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


def _topic_key(entry: Any) -> Any:
    return entry.name if hasattr(entry, "name") else entry.topic_id


class ProduceHandler(NodeEndpointsHandler):
    api_key = 0
    first_version_with_endpoints = 10
    decode_request = True

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        body: Any = request.body
        if has_transactional_batches(body) and (
            body.transactional_id is None
            or not is_allowed(
                ctx, request, AclOperation.WRITE, transactional_id(body.transactional_id)
            )
        ):
            return self._deny(request, body, ErrorCode.transactional_id_authorization_failed)

        names: dict[Any, str | None] = {}
        for entry in body.topic_data:
            key = _topic_key(entry)
            names[key] = key if isinstance(key, str) else ctx.topic_name(key)
        allowed_names = filter_authorized(
            ctx,
            request,
            AclOperation.WRITE,
            ResourceType.TOPIC,
            [name for e in body.topic_data if (name := names[_topic_key(e)]) is not None],
        )
        denied: dict[Any, ErrorCode] = {}
        for key, name in names.items():
            if name is None:
                denied[key] = ErrorCode.unknown_topic_id
            elif name not in allowed_names:
                denied[key] = ErrorCode.topic_authorization_failed
        if not denied:
            if body.acks == 0:
                return Forward(expects_response=False)
            return super().on_request(request, ctx)
        if body.acks == 0:
            return Close("acks=0 Produce to a topic it may not write (Kafka closes too)")
        kept = tuple(e for e in body.topic_data if _topic_key(e) not in denied)
        if not kept:
            return Respond(self._response(request, body, denied))
        endpoint_rewrite = (
            self.rewriter(ctx)
            if request.header.api_version >= self.first_version_with_endpoints
            else None
        )
        return Forward(
            request=codec.replace(body, topic_data=kept),
            rewrite=self._merge(request, body, denied, endpoint_rewrite),
        )

    def _deny(self, request: Request, body: Any, code: ErrorCode) -> Verdict:
        if body.acks == 0:
            return Close("acks=0 transactional Produce without WRITE on its transactional id")
        return Respond(
            self._response(request, body, dict.fromkeys(map(_topic_key, body.topic_data), code))
        )

    def _denied_entries(
        self, request: Request, body: Any, denied: dict[Any, ErrorCode]
    ) -> dict[Any, list[Any]]:
        schema = codec.response_schema(0, request.header.api_version)
        topic_type = codec.nested_type(schema, "responses")
        partition_type = codec.nested_type(topic_type, "partition_responses")
        key_field = "name" if "name" in topic_type.__dataclass_fields__ else "topic_id"
        out: dict[Any, list[Any]] = {}
        for entry in body.topic_data:
            key = _topic_key(entry)
            if key not in denied or key in out:
                continue
            partitions = tuple(
                # Kafka's PartitionResponse(error): baseOffset -1, logAppendTime -1.
                codec.make_entity(partition_type, denied[key], index=p.index, base_offset=-1)
                for p in entry.partition_data
            )
            out[key] = [
                codec.make_entity(topic_type, **{key_field: key, "partition_responses": partitions})
            ]
        return out

    def _response(self, request: Request, body: Any, denied: dict[Any, ErrorCode]) -> Any:
        entries = self._denied_entries(request, body, denied)
        responses = merge_in_request_order(
            [_topic_key(e) for e in body.topic_data], entries, (), _topic_key
        )
        return codec.make_entity(
            codec.response_schema(0, request.header.api_version), responses=responses
        )

    def _merge(
        self,
        request: Request,
        body: Any,
        denied: dict[Any, ErrorCode],
        endpoint_rewrite: ResponseRewrite | None,
    ) -> ResponseRewrite:
        entries = self._denied_entries(request, body, denied)
        keys = [_topic_key(e) for e in body.topic_data]

        def merge(response: Any) -> Any:
            if endpoint_rewrite is not None:
                response = endpoint_rewrite(response)
            merged = merge_in_request_order(keys, entries, response.responses, _topic_key)
            return codec.replace(response, responses=merged)

        return merge


HANDLERS: list[ApiHandler] = [ProduceHandler()]
