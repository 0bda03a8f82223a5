"""Helpers every enforcing handler uses: resources, single checks, filtering by name.

They mirror ``AuthHelper`` in Kafka's broker (``authorize``, ``filterByAuthorized``,
``authorizedOperations``) so each handler reads like the corresponding ``KafkaApis.handleXxx``.
Building what the proxy answers for denied items is :mod:`responses`' part.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast
from uuid import UUID

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import (
    CLUSTER_NAME,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.base import HandlerContext, Request

CLUSTER = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""``Topic.isInternal``."""

TopicKey = str | UUID
"""A topic as a request names it: its name, or its id in the id-keyed versions."""

_T = TypeVar("_T")
_E = TypeVar("_E", bound=Entity)


class EntityRewrite(Protocol):
    """A change of a decoded entity that keeps its class (a whole response, or an entry of
    one): usable as a :data:`~base.ResponseRewrite`."""

    def __call__(self, holder: _E, /) -> _E: ...


def topic(name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name)


def group(name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.GROUP, name)


def transactional_id(name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.TRANSACTIONAL_ID, name)


def is_allowed(
    ctx: HandlerContext,
    request: Request,
    operation: AclOperation,
    resource: ResourcePattern,
    *,
    log_if_allowed: bool = True,
    log_if_denied: bool = True,
) -> bool:
    """``AuthHelper.authorize`` for one resource."""
    action = Action(operation, resource, 1, log_if_allowed, log_if_denied)
    return ctx.authorize(request, [action])[0] is AuthorizationResult.ALLOWED


def group_checks(operation: AclOperation, group_ids: Iterable[str]) -> list[Action]:
    """One ``operation`` GROUP action per entry of ``group_ids``, duplicates included (Kafka's
    per-group loops call ``authorize`` once per entry), for an ``Authorize`` step."""
    return [Action(operation, group(g), 1, True, True) for g in group_ids]


def filter_authorized(
    ctx: HandlerContext,
    request: Request,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
    *,
    log_if_allowed: bool = True,
    log_if_denied: bool = True,
) -> set[str]:
    """``AuthHelper.filterByAuthorized``: one action per distinct name, whose reference count
    is how many request items named it; returns the allowed names."""
    counts = Counter(names)
    if not counts:
        return set()
    actions = [
        Action(
            operation, ResourcePattern(resource_type, name), count, log_if_allowed, log_if_denied
        )
        for name, count in counts.items()
    ]
    return allowed_names(actions, ctx.authorize(request, actions))


def name_actions(
    operation: AclOperation, kind: ResourceType, names: Iterable[str], *, logged: bool = True
) -> list[Action]:
    """The actions of ``filterByAuthorized`` over ``names``, for a step the dispatcher decides:
    one per distinct name, in first-seen order, its reference count how many items named it;
    audited unless ``logged`` is False (neither an allowed nor a denied result logged)."""
    pattern = ResourcePattern
    return [
        Action(operation, pattern(kind, n), count, logged, logged)
        for n, count in Counter(names).items()
    ]


def allowed_names(actions: Sequence[Action], results: Sequence[AuthorizationResult]) -> set[str]:
    """The names of ``actions`` whose result is ALLOWED (``filterByAuthorized``'s answer)."""
    return {
        action.resource_pattern.name
        for action, result in zip(actions, results, strict=True)
        if result is AuthorizationResult.ALLOWED
    }


def duplicates(names: Iterable[_T]) -> set[_T]:
    """The items named more than once."""
    return {name for name, count in Counter(names).items() if count > 1}


def first_seen(names: Iterable[_T]) -> list[_T]:
    """The distinct items, in the order they first appear."""
    return list(dict.fromkeys(names))


def topic_key(entry: Any) -> TopicKey:  # Any: a topic entry of any schema (below)
    """A request/response topic's identity: its name, or its id in the id-keyed versions.
    ``entry`` is any version's topic entry of any request or response, or a skim's: each
    names its topic by a different field, which the checks below tell apart."""
    for field in ("name", "topic_name"):
        if hasattr(entry, field):
            return str(getattr(entry, field))
    topic_id: UUID = entry.topic_id
    return topic_id


_ONE_TOPIC_ACTIONS: dict[tuple[AclOperation, str], tuple[Action]] = {}
"""The one action of a request naming one topic, by operation and name: the same immutable
value for every such request of every connection (a producer sends thousands), built once."""
_ONE_TOPIC_ACTIONS_MAX = 4096
"""Past this many names the cache starts over (a client naming ever new topics costs a
rebuild now and then, never memory)."""


def _one_topic_action(operation: AclOperation, name: str) -> tuple[Action]:
    key = (operation, name)
    actions = _ONE_TOPIC_ACTIONS.get(key)
    if actions is None:
        if len(_ONE_TOPIC_ACTIONS) >= _ONE_TOPIC_ACTIONS_MAX:
            _ONE_TOPIC_ACTIONS.clear()
        actions = _ONE_TOPIC_ACTIONS[key] = (Action(operation, topic(name), 1, True, True),)
    return actions


class TopicChecks:
    """``filterByAuthorized`` over topic keys, in two phases (base.Authorize): the
    :attr:`actions` to authorize — one per distinct name, its reference count how many keys
    name it; ids the proxy cannot name get none — then :meth:`denied` reads their results.
    A request naming one topic (nearly every producer's and consumer's) builds one
    :class:`Action` and no mapping."""

    __slots__ = ("actions", "key", "names")

    def __init__(self, ctx: HandlerContext, operation: AclOperation, keys: list[TopicKey]) -> None:
        self.key: TopicKey | None = None
        """The one key, when ``keys`` has one (``names`` is then None)."""
        self.names: dict[TopicKey, str | None] | None = None
        self.actions: Sequence[Action]
        if len(keys) == 1:
            key = self.key = keys[0]
            name = key if isinstance(key, str) else ctx.topic_name(key)
            self.actions = () if name is None else _one_topic_action(operation, name)
            return
        names = self.names = {k: (k if isinstance(k, str) else ctx.topic_name(k)) for k in keys}
        counts = Counter(name for k in keys if (name := names[k]) is not None)
        self.actions = [
            Action(operation, ResourcePattern(ResourceType.TOPIC, name), count, True, True)
            for name, count in counts.items()
        ]

    def denied(self, results: Sequence[AuthorizationResult]) -> dict[TopicKey, ErrorCode]:
        """The denied keys and their code: 29, or 100 for an id the proxy cannot name (checked
        before authorization, as the broker resolves ids first)."""
        names = self.names
        if names is None:
            key = cast(TopicKey, self.key)  # (a null topic id is a key too: 100)
            if not results:
                return {key: ErrorCode.unknown_topic_id}
            if results[0] is AuthorizationResult.ALLOWED:
                return {}
            return {key: ErrorCode.topic_authorization_failed}
        allowed = allowed_names(self.actions, results)
        denied: dict[TopicKey, ErrorCode] = {}
        for key, name in names.items():
            if name is None:
                denied[key] = ErrorCode.unknown_topic_id
            elif name not in allowed:
                denied[key] = ErrorCode.topic_authorization_failed
        return denied


def authorize_topics(
    ctx: HandlerContext,
    request: Request,
    operation: AclOperation,
    keys: Iterable[TopicKey],
) -> dict[TopicKey, ErrorCode]:
    """``filterByAuthorized`` over the topics named by ``keys`` (one reference per key, so
    duplicates count), in one call (:class:`TopicChecks`); returns the denied keys and their
    code: 29, or 100 for an id the proxy cannot name."""
    checks = TopicChecks(ctx, operation, list(keys))
    return checks.denied(ctx.authorize(request, checks.actions) if checks.actions else [])


def drop_denied_topics(
    ctx: HandlerContext, request: Request, operation: AclOperation, field: str = "topics"
) -> EntityRewrite:
    """A rewrite of an entry whose ``field`` lists topics: keep only the topics the principal
    may ``operation``, without an error (Kafka's "list everything" forms filter silently)."""

    def keep(holder: _E) -> _E:
        topics = getattr(holder, field)
        if not topics:
            return holder
        denied = authorize_topics(ctx, request, operation, map(topic_key, topics))
        if not denied:
            return holder
        return codec.replace(
            holder, **{field: tuple(t for t in topics if topic_key(t) not in denied)}
        )

    return keep


def authorized_operations_rewrite(
    request: Request, ctx: HandlerContext, field: str = "groups"
) -> Callable[[ResponsePayload], ResponsePayload]:
    """KIP-430 (``AuthHelper.authorizedOperations``) for described groups: the broker behind
    the proxy has no authorizer, so every group returned with NONE gets the proxy's bitfield;
    others keep the broker's value (the "omitted" sentinel)."""

    def fill(response: ResponsePayload) -> ResponsePayload:
        groups = tuple(
            codec.replace(
                g, authorized_operations=ctx.authorized_operations(request, group(g.group_id))
            )
            if g.error_code == ErrorCode.none
            else g
            for g in getattr(response, field)
        )
        return codec.replace(response, **{field: groups})

    return fill
