"""Steps shared by the administration scenarios (test_admin_*.py): ACLs in kafka-acls.sh
shape, raw requests built from plain dicts at any version, and set-up done as the super user.

Raw requests go through :func:`call`, one authenticated connection per request, so a scenario
reads as "user X sends API Y at version Z" and gets Kafka's exact per-entry answer back.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

from kafkaguard.policy.model import (
    AclBinding,
)
from kafkaguard.protocol import codec
from tests.support.conformance.harness import Side, ck_admin, normalize
from tests.support.handler_harness import acl as acl  # re-exported for the scenarios


def build(entity_type: type[Any], values: dict[str, Any]) -> Any:
    """An entity of ``entity_type`` from plain values: dicts (or lists of dicts) become the
    nested entities the field declares; fields this version lacks are dropped, so one dict
    serves every version of a schema."""
    fields = {f.name for f in dataclasses.fields(entity_type)}
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name not in fields:
            continue
        if isinstance(value, dict):
            value = build(codec.nested_type(entity_type, name), value)
        elif isinstance(value, list):
            if value and isinstance(value[0], dict):
                nested = codec.nested_type(entity_type, name)
                value = tuple(build(nested, v) for v in value)
            else:
                value = tuple(value)
        kwargs[name] = value
    return entity_type(**kwargs)


REQUEST_DUMP = re.compile(r"Request Request\(.*\) needs (\w+) permission\.", re.DOTALL)
"""The message of Kafka's ``ClusterAuthorizationException`` from
``AuthHelper.authorizeClusterOperation``: ``s"Request $request needs $operation permission."``,
the broker's ``RequestChannel.Request.toString`` — processor, connection id (the broker's own
listener address), session, buffer. kafkaguard answers these denials with a null message
(docs/deviations.md, Administration)."""


def hide_request_dumps(value: Any) -> Any:
    """``value`` with every ``error_message`` that is a :data:`REQUEST_DUMP` made null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "error_message" and isinstance(item, str):
                if REQUEST_DUMP.fullmatch(item):
                    changes[f.name] = None
            elif isinstance(item, tuple) or dataclasses.is_dataclass(item):
                hidden = hide_request_dumps(item)
                if hidden is not item:
                    changes[f.name] = hidden
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, tuple):
        items = tuple(hide_request_dumps(v) for v in value)
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def call(
    side: Side, user: str, api_key: int, version: int, *, keep_dumps: bool = False, **fields: Any
) -> Any:
    """Send one request as ``user`` on its own connection; the decoded response, with
    Kafka's request dumps hidden (:data:`REQUEST_DUMP`) unless ``keep_dumps``."""
    body = build(codec.request_schema(api_key, version), fields)
    with side.raw(user) as client:
        response = client.request(body)[1]
    return response if keep_dumps else hide_request_dumps(response)


TIMEOUT_S = 15.0
TIMEOUT = timedelta(seconds=TIMEOUT_S)
"""The ``timeout`` of topic requests."""
NO_ID = UUID(int=0)
UNKNOWN_ID = uuid4()
"""A topic id no cluster knows."""

ALICE, BOB, CAROL = "User:alice", "User:bob", "User:carol"
CLUSTER = "kafka-cluster"

# API keys of the administration half.
METADATA, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 3, 19, 20, 21
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS = 32, 33, 37
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS = 44, 60, 75


def ensure_topics(side: Side, *names: str, partitions: int = 1) -> None:
    """Create ``names`` as the super user and wait until every partition has a leader."""
    admin = side.admin()
    futures = admin.create_topics(
        [ck_admin.NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
        operation_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(TIMEOUT_S)
    wait_for_topics(side, names, partitions)


def wait_for_topics(side: Side, names: Iterable[str], partitions: int | None = None) -> None:
    """Until every topic of ``names`` is known with all partitions led (``partitions`` of
    them when given), as the super user sees it."""
    names = list(names)
    admin = side.admin()
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        topics = admin.list_topics(timeout=TIMEOUT_S).topics
        ready = [
            n
            for n in names
            if n in topics
            and topics[n].error is None
            and topics[n].partitions
            and all(p.leader >= 0 for p in topics[n].partitions.values())
            and (partitions is None or len(topics[n].partitions) == partitions)
        ]
        if len(ready) == len(names):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: topics not ready: {set(names) - set(ready)}")
        time.sleep(0.05)


def wait_until_gone(side: Side, names: Iterable[str]) -> None:
    """Until no topic of ``names`` is listed any more (deletion is asynchronous)."""
    names = set(names)
    admin = side.admin()
    deadline = time.monotonic() + TIMEOUT_S
    while names & set(admin.list_topics(timeout=TIMEOUT_S).topics):
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: topics not deleted: {names}")
        time.sleep(0.05)


def topic_ids(side: Side, *names: str) -> dict[str, UUID]:
    """Each topic's id on ``side`` (the two clusters give the same name different ids)."""
    response = call(
        side,
        "admin",
        METADATA,
        12,
        topics=[{"name": n, "topic_id": NO_ID} for n in names],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    ids = {t.name: t.topic_id for t in response.topics if t.topic_id != NO_ID}
    assert set(ids) == set(names), f"{side.name}: no id for {set(names) - set(ids)}"
    return ids


def metadata(
    side: Side,
    user: str,
    version: int,
    names: Iterable[str] | None,
    *,
    auto_create: bool = False,
    cluster_ops: bool = False,
    topic_ops: bool = False,
    ids: Iterable[UUID] = (),
    only: Iterable[str] | None = None,
) -> Any:
    """A Metadata request: ``names`` (None = all topics) or, when given, topic ``ids``; the
    answer's topics sorted (:func:`sorted_entries`), only those named in ``only`` if given
    (:func:`only_topics`)."""
    topics: list[dict[str, Any]] | None
    if ids:
        topics = [{"name": None, "topic_id": i} for i in ids]
    elif names is None:
        topics = None
    else:
        topics = [{"name": n, "topic_id": NO_ID} for n in names]
    response = call(
        side,
        user,
        METADATA,
        version,
        topics=topics,
        allow_auto_topic_creation=auto_create,
        include_cluster_authorized_operations=cluster_ops,
        include_topic_authorized_operations=topic_ops,
    )
    if only is not None:
        return only_topics(response, only)
    return sorted_entries(response, "topics")


def only_topics(response: Any, names: Iterable[str], field: str = "topics") -> Any:
    """``response`` with ``field`` keeping only entries named in ``names``: "everything"
    answers list other scenarios' topics too, which are not this scenario's to compare."""
    wanted = set(names)
    kept = tuple(t for t in getattr(response, field) if t.name in wanted)
    return sorted_entries(dataclasses.replace(response, **{field: kept}), field)


def sorted_entries(response: Any, field: str) -> Any:
    """``response`` with its ``field`` entries sorted by name (then error code and message).

    Kafka builds these lists from Scala sets and Java hash maps (and DeleteTopics shuffles its
    results on purpose), so their order is hash order, not the request's; kafkaguard answers
    in request order. Clients match entries by name; the comparison does too
    (docs/deviations.md, Administration: "Order of entries")."""
    entries = getattr(response, field)

    def key(entry: Any) -> tuple[str, int, str]:
        name = getattr(entry, "name", None) or getattr(entry, "resource_name", None) or ""
        message = getattr(entry, "error_message", None) or ""
        return str(name), int(getattr(entry, "error_code", 0)), message

    return dataclasses.replace(response, **{field: tuple(sorted(entries, key=key))})


def per_side(sides: Iterable[Side], run: Callable[[Side], Any]) -> dict[str, Any]:
    """``run`` on every side, normalised, without asserting equality: for the steps that pin
    a documented deviation (the test then asserts both answers exactly)."""
    return {side.name: normalize(run(side)) for side in sides}


def step(action: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[Side], Any]:
    """``action(side, *args, **kwargs)`` as a step for :func:`differential`, its arguments
    bound now (a lambda in a loop would see the loop's last values)."""

    def run(side: Side) -> Any:
        return action(side, *args, **kwargs)

    return run


def set_acls(sides: Iterable[Side], bindings: list[AclBinding]) -> None:
    """The scenario's ACLs, and only they, on every side."""
    for side in sides:
        side.set_acls(bindings)


def codes(answer: Any, field: str) -> dict[str, str]:
    """name → error code of a normalised answer's ``field`` entries."""
    return {e["name"]: e["error_code"] for e in answer[field]}


def topic_codes(answer: Any) -> dict[str, str]:
    """name → error code of a normalised Metadata-like answer's topics."""
    return codes(answer, "topics")
