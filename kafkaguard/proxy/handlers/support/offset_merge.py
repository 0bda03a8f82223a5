"""Where the proxy's denied entries go in offset responses: Kafka's own order, per API.

Kafka does not answer offset APIs in request order, and clients never rely on the order; the
proxy still reproduces it, so its answers are the broker's answers entry for entry:

* OffsetCommit, OffsetDelete, TxnOffsetCommit build their answer with a response *builder*
  (``OffsetCommitResponse.TopicNameBuilder``, ``OffsetDeleteResponse.Builder``,
  ``TxnOffsetCommitResponse.Builder``): the entries ``KafkaApis`` rejects itself (denied
  topics, unknown topics or ids, missing partitions) are added in request order, one topic entry
  per topic key (``getOrCreate``); then the coordinator's result is merged in — its partitions
  appended to an existing entry of the same topic, its other topics after.
  :func:`builder_merge` replays that over the broker's answer: the broker's own rejections
  (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID) take their request position among the
  proxy's denials, the coordinator's results follow.
* OffsetFetch (``fetchOffsetsForGroup``) lists the coordinator's topics first, then one error
  entry per rejected request topic, in request order: :func:`errors_last`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.authz import EntityRewrite, TopicKey, topic_key
from kafkaguard.proxy.handlers.support.base import ResponseRewrite
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, PartitionIndexed

REJECTED_BEFORE_COORDINATOR = frozenset(
    {ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id}
)
"""Partition errors ``KafkaApis`` sets itself before calling the coordinator."""

_T = TypeVar("_T")
_E = TypeVar("_E", bound=Entity)


class _Partition(PartitionIndexed, ErrorCoded, Entity, Protocol):
    """A partition of an offset response (any of the APIs above, any version)."""


class _Topic(Entity, Protocol):
    @property
    def partitions(self) -> Sequence[_Partition]: ...


def _key_field(topic_type: type[Entity]) -> str:
    fields = topic_type.__dataclass_fields__
    return next(f for f in ("name", "topic_id") if f in fields)


def builder_merge(
    topic_type: type[Entity],
    request_topics: Sequence[_T],
    denied: dict[TopicKey, ErrorCode],
    partition_indexes: Callable[[_T], Iterable[int]],
    *,
    field: str = "topics",
    **partition_values: object,
) -> ResponseRewrite:
    """A rewrite putting the proxy's ``denied`` topics (their code on every requested
    partition) into the broker's answer the way Kafka's response builder orders them. Broker
    entries for topics that were not sent (denied, or never requested) are dropped."""
    partition_type = codec.nested_type(topic_type, "partitions")
    key_field = _key_field(topic_type)
    requested = [(topic_key(t), list(partition_indexes(t))) for t in request_topics]
    sent = {key for key, _ in requested if key not in denied}

    def merge(response: ResponsePayload) -> ResponsePayload:
        broker: list[_Topic] = [t for t in getattr(response, field) if topic_key(t) in sent]
        rejected = {
            (topic_key(t), int(p.partition_index)): p
            for t in broker
            for p in t.partitions
            if p.error_code in REJECTED_BEFORE_COORDINATOR
        }
        built: dict[TopicKey, list[Entity]] = {}
        placed: set[tuple[TopicKey, int]] = set()
        for key, indexes in requested:
            for index in indexes:
                if key in denied:
                    built.setdefault(key, []).append(
                        codec.make_entity(
                            partition_type,
                            denied[key],
                            partition_index=index,
                            **partition_values,
                        )
                    )
                elif (key, index) in rejected and (key, index) not in placed:
                    built.setdefault(key, []).append(rejected[(key, index)])
                    placed.add((key, index))
        templates: dict[TopicKey, _Topic] = {}
        for t in broker:
            key = topic_key(t)
            templates.setdefault(key, t)
            for p in t.partitions:
                if (key, int(p.partition_index)) not in placed:
                    built.setdefault(key, []).append(p)
        topics = tuple(
            codec.replace(templates[key], partitions=tuple(parts))
            if key in templates
            else codec.make_entity(
                topic_type, ErrorCode.none, **{key_field: key, "partitions": tuple(parts)}
            )
            for key, parts in built.items()
        )
        return codec.replace(response, **{field: topics})

    return merge


def errors_last(
    request_topics: Sequence[object],
    denied_entries: dict[int, Entity],
    sent_keys: Iterable[TopicKey],
    *,
    field: str = "topics",
) -> EntityRewrite:
    """A rewrite of an OffsetFetch topic holder (response or group): the broker's topics for
    ``sent_keys`` first, then ``denied_entries`` (request position → entry) in request order."""
    sent = set(sent_keys)
    errors = tuple(denied_entries[i] for i in range(len(request_topics)) if i in denied_entries)

    def merge(holder: _E) -> _E:
        broker = tuple(t for t in getattr(holder, field) if topic_key(t) in sent)
        return codec.replace(holder, **{field: broker + errors})

    return merge
