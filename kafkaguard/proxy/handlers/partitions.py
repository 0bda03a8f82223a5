"""Per-partition topic APIs: ListOffsets (2), DeleteRecords (21), OffsetForLeaderEpoch (23),
DescribeProducers (61).

All four follow one pattern from ``KafkaApis``: one authorization decision per topic, every
partition of a denied topic answered TOPIC_AUTHORIZATION_FAILED (29) without any existence
check (Kafka authorizes before it looks a topic up, so a denied principal cannot learn whether
the topic exists), the authorized topics forwarded in a reduced request, and the denied entries
merged back in the request's order. When nothing is authorized the proxy answers by itself.

* ListOffsets — ``handleListOffsetRequestV1AndAbove``: DESCRIBE TOPIC per topic
  (``partitionSeqByAuthorized``); denied partitions carry timestamp −1 and offset −1.
* DeleteRecords — ``handleDeleteRecordsRequest``: DELETE TOPIC per topic; low watermark −1.
* OffsetForLeaderEpoch — ``handleOffsetForLeaderEpochRequest``: CLUSTER_ACTION on the cluster
  (``logIfDenied=false``) authorizes everything, else DESCRIBE TOPIC per topic.
* DescribeProducers — ``handleDescribeProducersRequest``: topic-name validity first
  (INVALID_TOPIC_EXCEPTION, 17, with ``Topic.validate``'s message), then **READ** TOPIC (not
  DESCRIBE), one ``authorize`` call per topic entry; error messages as ``ApiError`` sets them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar, Protocol, SupportsInt, TypeVar, cast

from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode
from kafkaguard.proxy.handlers.support.authz import CLUSTER, filter_authorized, is_allowed, topic
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    HandlerContext,
    Request,
    ResponseRewrite,
    Verdict,
)
from kafkaguard.proxy.handlers.support.responses import (
    ERROR_MESSAGES,
    merge_in_request_order,
    merge_rewrite,
    partition_errors_from,
    split,
)

Denial = tuple[ErrorCode, str | None]
"""An error code and, for schemas with a per-partition message, its text."""


class _TopicsBody(Protocol):
    """The request of a :class:`PerTopicHandler`: its ``topics`` entries are read by the field
    names the handler gives."""

    @property
    def topics(self) -> Sequence[object]: ...


class _TopicsResponse(Entity, Protocol):
    @property
    def topics(self) -> Sequence[Entity]: ...


_R = TypeVar("_R", bound=_TopicsResponse)

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249


def topic_name_error(name: str) -> str | None:
    """``org.apache.kafka.common.internals.Topic.validate``: the exception message, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > _MAX_TOPIC_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {_MAX_TOPIC_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


class PerTopicHandler(ApiHandler[_TopicsBody]):
    """Decide per topic, strip denied topics, merge synthesized partition errors back.

    Subclasses name the schema fields and implement :meth:`decide`.
    """

    decode_request = True
    request_name: ClassVar[str] = "name"
    request_partitions: ClassVar[str] = "partitions"
    request_index: ClassVar[str | None] = "partition_index"
    """``None`` when the request lists partitions as bare integers."""
    response_name: ClassVar[str] = "name"
    response_partitions: ClassVar[str] = "partitions"
    response_index: ClassVar[str] = "partition_index"
    denied_values: ClassVar[Mapping[str, int]] = {}
    """Fields Kafka sets on a denied partition besides index and error (e.g. offset −1)."""
    denied_last: ClassVar[bool] = False
    """Kafka appends the denied topics after the broker's answer (``response ++
    unauthorizedResponseStatus``) instead of keeping the request's order."""

    def decide(self, request: Request, ctx: HandlerContext, names: list[str]) -> dict[str, Denial]:
        """Denied topic names (``names`` has one item per request topic entry)."""
        raise NotImplementedError

    def on_request(self, request: Request[_TopicsBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        names = [getattr(entry, self.request_name) for entry in body.topics]
        denied = self.decide(request, ctx, names)
        if not denied:
            return FORWARD
        entries = self._denied_entries(request, body, denied)
        kept = tuple(e for e in body.topics if getattr(e, self.request_name) not in denied)
        # the merge keeps only broker topics that were sent (named and not denied)
        merge = (
            self._denied_after(names, denied, entries)
            if self.denied_last
            else merge_rewrite(names, entries, "topics", self._response_key)
        )
        return split(request, "topics", kept, "topics", merge)

    def _denied_after(
        self, names: list[str], denied: Mapping[str, Denial], entries: dict[str, list[Entity]]
    ) -> ResponseRewrite:
        """The :attr:`denied_last` merge: the broker's topics, then the denied ones."""
        sent = [n for n in names if n not in denied]
        tail = merge_in_request_order(names, entries, (), self._response_key)

        def merge(response: _R) -> _R:
            head = merge_in_request_order(sent, {}, response.topics, self._response_key)
            return codec.replace(response, topics=head + tail)

        return merge

    def _response_key(self, entry: object) -> str:
        name: str = getattr(entry, self.response_name)
        return name

    def _denied_entries(
        self, request: Request, body: _TopicsBody, denied: Mapping[str, Denial]
    ) -> dict[str, list[Entity]]:
        schema = codec.response_schema(self.api_key, request.header.api_version)
        topic_type = codec.nested_type(schema, "topics")
        fields = codec.nested_type(topic_type, self.response_partitions).__dataclass_fields__
        extra = {k: v for k, v in self.denied_values.items() if k in fields}
        out: dict[str, list[Entity]] = {}
        for entry in body.topics:
            name = getattr(entry, self.request_name)
            if name not in denied:
                continue
            code, message = denied[name]
            values: dict[str, object] = dict(extra)
            if message is not None and "error_message" in fields:
                values["error_message"] = message
            partitions = partition_errors_from(
                topic_type,
                self.response_partitions,
                map(self._index, getattr(entry, self.request_partitions)),
                code,
                self.response_index,
                values,
            )
            out.setdefault(name, []).append(
                codec.make_entity(
                    topic_type, **{self.response_name: name, self.response_partitions: partitions}
                )
            )
        return out

    def _index(self, partition: object) -> int:
        if self.request_index is None:  # a bare index
            return int(cast(SupportsInt, partition))
        return int(getattr(partition, self.request_index))


def _denied_by_filter(
    ctx: HandlerContext, request: Request, operation: AclOperation, names: list[str]
) -> dict[str, Denial]:
    """``partitionSeqByAuthorized`` / ``filterByAuthorized``: one action per distinct topic,
    its reference count the number of request entries naming it."""
    allowed = filter_authorized(ctx, request, operation, ResourceType.TOPIC, names)
    return {n: (ErrorCode.topic_authorization_failed, None) for n in names if n not in allowed}


class ListOffsetsHandler(PerTopicHandler):
    """``KafkaApis.handleListOffsetRequestV1AndAbove`` (buildErrorResponse: timestamp and
    offset −1)."""

    api_key = 2
    denied_values = {"timestamp": -1, "offset": -1}
    denied_last = True

    def decide(self, request: Request, ctx: HandlerContext, names: list[str]) -> dict[str, Denial]:
        return _denied_by_filter(ctx, request, AclOperation.DESCRIBE, names)


class DeleteRecordsHandler(PerTopicHandler):
    """``KafkaApis.handleDeleteRecordsRequest`` (INVALID_LOW_WATERMARK = −1)."""

    api_key = 21
    denied_values = {"low_watermark": -1}

    def decide(self, request: Request, ctx: HandlerContext, names: list[str]) -> dict[str, Denial]:
        return _denied_by_filter(ctx, request, AclOperation.DELETE, names)


class OffsetForLeaderEpochHandler(PerTopicHandler):
    """``KafkaApis.handleOffsetForLeaderEpochRequest``: CLUSTER_ACTION on the cluster (the
    inter-broker use, logged only when allowed) or DESCRIBE per topic (KIP-320 consumers)."""

    api_key = 23
    denied_last = True
    request_name = "topic"
    request_index = "partition"
    response_name = "topic"
    response_index = "partition"

    def decide(self, request: Request, ctx: HandlerContext, names: list[str]) -> dict[str, Denial]:
        if is_allowed(ctx, request, AclOperation.CLUSTER_ACTION, CLUSTER, log_if_denied=False):
            code = ErrorCode.topic_authorization_failed  # the proxy's topics stay out of reach
            return {n: (code, None) for n in names if ctx.internal_topic(request, n)}
        return _denied_by_filter(ctx, request, AclOperation.DESCRIBE, names)


class DescribeProducersHandler(PerTopicHandler):
    """``KafkaApis.handleDescribeProducersRequest``: per topic entry, ``checkValidTopic``
    (17) before READ (29); both carry ``ApiError``'s message."""

    api_key = 61
    request_partitions = "partition_indexes"
    request_index = None

    def decide(self, request: Request, ctx: HandlerContext, names: list[str]) -> dict[str, Denial]:
        denied: dict[str, Denial] = {}
        for name in names:  # one check per entry, duplicates included, as Kafka does
            invalid = topic_name_error(name)
            if invalid is not None:
                denied[name] = (ErrorCode.invalid_topic_exception, invalid)
                continue
            if not is_allowed(ctx, request, AclOperation.READ, topic(name)):
                code = ErrorCode.topic_authorization_failed
                denied[name] = (code, ERROR_MESSAGES[code])
        return denied


HANDLERS: list[ApiHandler] = [
    ListOffsetsHandler(),
    DeleteRecordsHandler(),
    OffsetForLeaderEpochHandler(),
    DescribeProducersHandler(),
]
