"""Asking the broker first (``kafkaguard/proxy/handlers/support/questions.py``, asked by
``core/dispatch.decide``): every id-keyed request resolves the topic ids the proxy has not seen
before its handler decides."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.base import AskFirst, Forward
from tests.support.handler_harness import HandlerHarness, acl

UNSEEN = uuid.uuid4()
_PARTITION: dict[int, dict[str, Any]] = {1: {"partition": 0}, 8: {"partition_index": 0}}


def _nested(api_key: int, version: int, path: tuple[str, ...], **leaf: Any) -> Any:
    """A request whose list at ``path`` holds one entry with ``leaf`` values (and partition 0,
    where the entry lists partitions)."""
    types = [codec.request_schema(api_key, version)]
    for name in path:
        types.append(codec.nested_type(types[-1], name))
    for field in ("partitions", "partition_indexes"):
        if field in types[-1].__dataclass_fields__:
            partition_type = codec.nested_type(types[-1], field) if field == "partitions" else None
            leaf[field] = (
                (codec.make_entity(partition_type, **_PARTITION.get(api_key, {})),)
                if partition_type is not None
                else (0,)
            )
    value = codec.make_entity(types[-1], **leaf)
    for entity_type, name in zip(reversed(types[:-1]), reversed(path), strict=True):
        extra = {"group_id": "g"} if name == "topics" and api_key == 9 else {}
        value = codec.make_entity(entity_type, **{name: (value,)}, **extra)
    return value


ID_KEYED = [
    pytest.param(_nested(0, 13, ("topic_data",), topic_id=UNSEEN), id="Produce v13"),
    pytest.param(_nested(1, 13, ("topics",), topic_id=UNSEEN), id="Fetch v13"),
    pytest.param(_nested(8, 10, ("topics",), topic_id=UNSEEN), id="OffsetCommit v10"),
    pytest.param(_nested(9, 10, ("groups", "topics"), topic_id=UNSEEN), id="OffsetFetch v10"),
    pytest.param(_nested(20, 6, ("topics",), topic_id=UNSEEN, name=None), id="DeleteTopics v6"),
]


@pytest.mark.parametrize("body", ID_KEYED)
def test_unseen_topic_ids_are_looked_up_before_any_check(body: Any) -> None:
    h = HandlerHarness(
        [acl("User:alice", "ALL", "TOPIC", "*"), acl("User:alice", "ALL", "GROUP", "*")]
    )
    asked = h.send(body)
    assert isinstance(asked, AskFirst) and h.checked() == []
    question = cast(Any, asked.question)
    assert question.__api_key__ == 3 and question.__version__ >= 12
    assert [(t.topic_id, t.name) for t in question.topics] == [(UNSEEN, None)]
    h.answer_metadata(asked, {UNSEEN: "t"})
    assert h.topic_name(UNSEEN) == "t"
    assert ("TOPIC", "t") in {(r, n) for _, r, n, _ in h.checked()}


def test_known_ids_and_names_are_not_asked_about() -> None:
    h = HandlerHarness([acl("User:alice", "READ", "TOPIC", "t")], topic_ids={UNSEEN: "t"})
    assert isinstance(h.send(_nested(1, 13, ("topics",), topic_id=UNSEEN)), Forward)
    assert isinstance(h.send(_nested(1, 12, ("topics",), topic="t")), Forward)


def test_a_broker_without_metadata_by_id_is_not_asked() -> None:
    """Metadata v10/v11 carry an id field Kafka refuses: ids stay unknown (100, fail closed)."""
    h = HandlerHarness(broker_api_versions={3: range(0, 12)})
    verdict = h.send(_nested(1, 13, ("topics",), topic_id=UNSEEN))
    assert not isinstance(verdict, AskFirst)
