"""Helpers that build what the proxy answers: error entries, whole error responses, the
merge of synthesized entries into the broker's answer, and the verdict of a request the proxy
answers in part (:func:`split`).

Kafka builds these with ``XxxRequest.getErrorResponse`` and the response builders; the proxy
builds them for whatever version the client speaks with :func:`entity`, and puts the entries
of denied items back among the broker's in the request's order (:func:`merge_in_request_order`).

The proxy never trusts the broker to answer only what it was asked: the merge drops broker
entries for items the proxy did not send, and a handler whose answer must line up with the
request entry by entry raises :class:`BrokerMismatch` (the connection is closed) when it does not.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar, cast

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload, ResponsePayload
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.proxy.handlers.support.authz import TopicKey, topic_key
from kafkaguard.proxy.handlers.support.base import Forward, Request, Respond, ResponseRewrite

K = TypeVar("K")
E = TypeVar("E")
_T = TypeVar("_T")


class BrokerMismatch(ProtocolError):
    """The broker's answer does not line up with the request the proxy sent; raised by a
    response rewrite, it closes the client's connection (fail closed) rather than pass on an
    answer the proxy cannot filter."""


ERROR_MESSAGES: Mapping[ErrorCode, str] = {
    # ``Errors.java``: the default message of each error (``Errors.message()``), which
    # ``new ApiError(error)`` puts in errorMessage fields.
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.unknown_topic_id: "This server does not host this topic ID.",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.inconsistent_group_protocol: (
        "The group member's supported protocols are incompatible with those of existing members "
        "or first group member tried to join with empty protocol type or empty protocol list."
    ),
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library or "
        "the message was sent to an incompatible broker. See the broker logs for more details."
    ),
}


def convert(value: object, target: type[_T]) -> _T:
    """``value``, an entity of another version of the same schema, as ``target``: fields the
    target lacks are dropped, fields it adds take their defaults (nested entities alike)."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(target):  # type: ignore[arg-type]
        if not hasattr(value, f.name):
            continue
        v = getattr(value, f.name)
        if isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
            inner = codec.nested_type(target, f.name)
            v = tuple(convert(item, inner) for item in v)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            v = convert(v, codec.nested_type(target, f.name))
        values[f.name] = v
    code = cast(ErrorCode, values.pop("error_code", ErrorCode.none))
    return entity_from(target, code, values)


def entity(
    entity_type: type[_T],
    code: ErrorCode = ErrorCode.none,
    *,
    message: bool = False,
    **values: object,
) -> _T:
    """``codec.make_entity`` for any version of a schema: values for fields the version lacks
    (e.g. ``error_message`` before it existed) are dropped, so one call serves every version;
    ``message=True`` fills ``error_message`` with Kafka's default message for ``code``."""
    return entity_from(entity_type, code, values, message=message)


def entity_from(
    entity_type: type[_T], code: ErrorCode, values: dict[str, object], *, message: bool = False
) -> _T:
    """:func:`entity`, its values as a mapping (of any keys: ``message`` or ``code`` too)."""
    if message and "error_message" not in values:
        values["error_message"] = ERROR_MESSAGES.get(code)
    known = entity_type.__dataclass_fields__  # type: ignore[attr-defined]
    return codec.make_entity(entity_type, code, **{k: v for k, v in values.items() if k in known})


def response_type(request: Request) -> type[ResponsePayload]:
    """The response schema of ``request``'s API and version."""
    return codec.response_schema(request.header.api_key, request.header.api_version)


def whole_error(
    request: Request, code: ErrorCode, *, message: bool = False, **values: object
) -> ResponsePayload:
    """``XxxRequest.getErrorResponse`` for a schema with a top-level error: the code (and,
    with ``message``, ``Errors.message()``) at the top, every list empty unless ``values``
    fills it."""
    return entity(response_type(request), code, message=message, **values)


def partition_errors(
    topic_type: type[Entity],
    partitions_field: str,
    indexes: Iterable[int],
    code: ErrorCode,
    *,
    index_field: str = "partition_index",
    **partition_values: object,
) -> tuple[Entity, ...]:
    """The ``partitions_field`` of a response topic: one entry per index, each with ``code``
    (and ``partition_values``), as Kafka's per-partition error responses are built."""
    return partition_errors_from(
        topic_type, partitions_field, indexes, code, index_field, partition_values
    )


def partition_errors_from(
    topic_type: type[Entity],
    partitions_field: str,
    indexes: Iterable[int],
    code: ErrorCode,
    index_field: str,
    partition_values: Mapping[str, object],
) -> tuple[Entity, ...]:
    partition_type = codec.nested_type(topic_type, partitions_field)
    return tuple(
        codec.make_entity(partition_type, code, **{index_field: i}, **partition_values)
        for i in indexes
    )


def topic_entries(
    topic_type: type[Entity],
    partitions_field: str,
    topics: Iterable[_T],
    codes: Mapping[TopicKey, ErrorCode],
    partition_indexes: Callable[[_T], Iterable[int]],
    **partition_values: object,
) -> dict[TopicKey, list[Entity]]:
    """One response topic per denied key (the partitions of every request entry naming it,
    like Kafka's ``Response.Builder.addPartitions``), each partition carrying the key's code."""
    key_field = next(
        f for f in ("name", "topic_name", "topic_id") if f in topic_type.__dataclass_fields__
    )
    grouped: dict[TopicKey, list[int]] = {}
    for entry in topics:
        key = topic_key(entry)
        if key in codes:
            grouped.setdefault(key, []).extend(partition_indexes(entry))
    return {
        key: [
            codec.make_entity(
                topic_type,
                ErrorCode.none,
                **{
                    key_field: key,
                    partitions_field: partition_errors_from(
                        topic_type,
                        partitions_field,
                        indexes,
                        codes[key],
                        "partition_index",
                        partition_values,
                    ),
                },
            )
        ]
        for key, indexes in grouped.items()
    }


def merge_in_request_order(
    request_keys: Sequence[K],
    denied: Mapping[K, Sequence[E]],
    broker_entries: Iterable[E],
    key: Callable[[E], K],
) -> tuple[E, ...]:
    """Put the proxy's denied entries back among the broker's, in the request's order.

    ``request_keys`` lists the request's items (duplicates allowed); ``denied`` maps a key to
    the entries synthesized for it. Broker entries are taken for the keys that were sent
    (named and not denied), at most as many as the request named each; any other broker entry
    (a key never sent, a denied key, a surplus duplicate — which a well-behaved broker never
    answers) is dropped: the proxy passes on nothing it did not authorize and ask for.
    """
    from_broker: dict[K, deque[E]] = {}
    for entry in broker_entries:
        from_broker.setdefault(key(entry), deque()).append(entry)
    merged: list[E] = []
    used_denied: set[K] = set()
    for item in request_keys:
        if item in denied:
            if item not in used_denied:
                merged.extend(denied[item])
                used_denied.add(item)
            continue
        queue = from_broker.get(item)
        if queue:
            merged.append(queue.popleft())
    return tuple(merged)


def merge_rewrite(
    keys: Sequence[K], entries: Mapping[K, Sequence[E]], field: str, key: Callable[[E], K]
) -> ResponseRewrite:
    """A rewrite merging synthesized ``entries`` into the broker's ``field`` in request order."""

    def merge(response: ResponsePayload) -> ResponsePayload:
        merged = merge_in_request_order(keys, entries, getattr(response, field), key)
        return codec.replace(response, **{field: merged})

    return merge


def chain(*steps: ResponseRewrite | None) -> ResponseRewrite | None:
    """The rewrites that are not ``None``, applied in order (``None`` when there is none)."""
    present = [step for step in steps if step is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]

    def run(response: ResponsePayload) -> ResponsePayload:
        for step in present:
            response = step(response)
        return response

    return run


def split(
    request: Request,
    field: str,
    kept: Sequence[object],
    answer_field: str,
    merge: ResponseRewrite,
    *,
    rewrite: ResponseRewrite | None = None,
    changes: Mapping[str, object] | None = None,
) -> Forward | Respond:
    """The verdict for a request the proxy answers in part: forward the body with only
    ``kept`` in its ``field`` (and ``changes``), and ``merge`` the proxy's own entries into the
    broker's answer, after ``rewrite`` (which applies to what the broker answered only).

    When nothing is left to forward the proxy answers alone: ``merge`` over the empty response
    (``answer_field`` empty), as ``KafkaApis`` mostly answers without the coordinator or
    controller once every item is rejected. Where Kafka would still call them with an empty
    list, the proxy answers alone all the same: a broker that reads an empty list as "every
    item" would act on items nobody authorized (``docs/design.md#fail-closed``; the split itself is
    ``docs/design.md#forwarded-untouched``)."""
    if not kept:
        empty: dict[str, object] = {answer_field: ()}
        return Respond(merge(entity_from(response_type(request), ErrorCode.none, empty)))
    original: RequestPayload = request.body
    body = codec.replace(original, **{field: tuple(kept)}, **(changes or {}))
    return Forward(request=body, rewrite=chain(rewrite, merge))
