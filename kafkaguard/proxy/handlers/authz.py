"""Helpers every enforcing handler uses: resources, single checks, filtering by name.

They mirror ``AuthHelper`` in Kafka's broker (``authorize``, ``filterByAuthorized``) so each
handler reads like the corresponding ``KafkaApis.handleXxx``.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import (
    CLUSTER_NAME,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.proxy.handlers.base import HandlerContext, Request

CLUSTER = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)

K = TypeVar("K")
E = TypeVar("E")


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
    results = ctx.authorize(request, actions)
    return {
        action.resource_pattern.name
        for action, result in zip(actions, results, strict=True)
        if result is AuthorizationResult.ALLOWED
    }


def merge_in_request_order(
    request_keys: Sequence[K],
    denied: Mapping[K, Sequence[E]],
    broker_entries: Iterable[E],
    key: Callable[[E], K],
) -> tuple[E, ...]:
    """Put the proxy's denied entries back among the broker's, in the request's order.

    ``request_keys`` lists the request's items (duplicates allowed); ``denied`` maps a key to
    the entries synthesized for it. A broker entry the request did not name (which a
    well-behaved broker never sends) is kept, at the end.
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
    for queue in from_broker.values():
        merged.extend(queue)
    return tuple(merged)
