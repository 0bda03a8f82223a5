"""The proxy's own questions to the broker, asked before deciding (``AskFirst``).

Kafka's broker looks things up between its ACL checks: it resolves a topic id to the name the
checks need (``KafkaApis``/``ControllerApis`` resolve ids first), and ``deleteTopics`` asks the
controller whether a describable topic exists before it checks DELETE. The broker behind the
proxy is the only one who knows, so a handler that needs such a fact returns
:class:`~kafkaguard.proxy.handlers.support.base.AskFirst` with a Metadata request (never
forwarded to the client, never authorized: it is the proxy's own question) and decides on the
answer.

Topic ids are resolved for every handler alike, before its ``on_request`` runs
(``core/dispatch.decide`` asks :func:`ask_topic_names`): a handler lists the ids its request
names (``ApiHandler.topic_ids``), ids the proxy has not seen in any broker answer yet are
looked up with one Metadata-by-id request, and the handler then decides with every name known —
or, for an id the broker does not know either, answers UNKNOWN_TOPIC_ID (100) as Kafka does. A
broker too old for Metadata by id (v12+) is not asked and those ids stay unknown (100, fail
closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol
from uuid import UUID

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload
from kafkaguard.proxy.handlers.support.base import AskFirst, HandlerContext, Verdict
from kafkaguard.proxy.handlers.support.fields import ErrorCoded
from kafkaguard.proxy.handlers.support.responses import entity_from

METADATA = 3
_BY_ID_SINCE = 12
"""Metadata v10/v11 carry a topic id field but Kafka refuses ids before v12."""
_NO_AUTO_CREATE_SINCE = 4


class _DescribedTopic(ErrorCoded, Protocol):
    """``MetadataResponse.MetadataResponseTopic``; ``topic_id`` (v10+) is read by name."""

    @property
    def name(self) -> str | None: ...


class _MetadataAnswer(Entity, Protocol):
    """The broker's answer to the Metadata question asked here."""

    @property
    def topics(self) -> Sequence[_DescribedTopic]: ...


def listed_topic_ids(holder: object, *path: str) -> Iterator[UUID]:
    """The ids of the topics listed at ``path`` of ``holder`` (e.g. ``"groups", "topics"``) that
    are named by id only (id-keyed versions; DeleteTopics v6 entries may carry either)."""
    if not path:
        topic_id = getattr(holder, "topic_id", None)
        if topic_id is not None and topic_id.int != 0 and not getattr(holder, "name", None):
            yield topic_id
        return
    for entry in getattr(holder, path[0], None) or ():
        yield from listed_topic_ids(entry, *path[1:])


def _metadata_question(
    ctx: HandlerContext, min_version: int, topics: Sequence[dict[str, object]]
) -> RequestPayload | None:
    """A Metadata request for ``topics`` at the newest version both sides speak, without
    auto-creation; ``None`` when the broker is too old for it."""
    supported = ctx.supported_versions(METADATA)
    if not supported or supported[-1] < min_version:
        return None
    schema = codec.request_schema(METADATA, supported[-1])
    topic_type = codec.nested_type(schema, "topics")
    return codec.make_entity(
        schema,
        topics=tuple(entity_from(topic_type, ErrorCode.none, t) for t in topics),
        allow_auto_topic_creation=False,
    )


def ask_which_exist(
    ctx: HandlerContext,
    names: Sequence[str],
    then: Callable[[dict[str, UUID | None]], Verdict],
) -> Verdict | None:
    """Ask whether the topics ``names`` exist; ``then`` gets those that do (with their ids,
    learned on the way). ``None`` when the broker cannot be asked without creating them."""
    question = _metadata_question(
        ctx, _NO_AUTO_CREATE_SINCE, [{"name": n, "topic_id": UUID(int=0)} for n in names]
    )
    if question is None:
        return None

    def answered(answer: _MetadataAnswer) -> Verdict:
        existing = _described(answer)
        ctx.learn_topic_names(_id_pairs(existing))
        return then(existing)

    return AskFirst(question, answered)


def _described(answer: _MetadataAnswer) -> dict[str, UUID | None]:
    """The topics a Metadata answer describes: name → id (``None`` before ids existed)."""
    return {
        t.name: getattr(t, "topic_id", None) or None
        for t in answer.topics
        if t.error_code == ErrorCode.none and t.name
    }


def ask_topic_names(
    ctx: HandlerContext, topic_ids: Iterable[UUID], then: Callable[[], Verdict]
) -> Verdict | None:
    """Ask the broker for the names of ``topic_ids`` (one Metadata-by-id request), learn them,
    then decide with ``then``. ``None`` when the broker is too old to be asked (v12+): the ids
    stay unknown, UNKNOWN_TOPIC_ID (100), fail closed."""
    question = _metadata_question(
        ctx, _BY_ID_SINCE, [{"topic_id": i, "name": None} for i in dict.fromkeys(topic_ids)]
    )
    if question is None:
        return None

    def answered(answer: _MetadataAnswer) -> Verdict:
        ctx.learn_topic_names(_id_pairs(_described(answer)))
        return then()

    return AskFirst(question, answered)


def _id_pairs(described: dict[str, UUID | None]) -> Iterable[tuple[UUID, str]]:
    return ((i, n) for n, i in described.items() if i is not None)
