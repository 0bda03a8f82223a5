"""Kafka's JMH ``AuthorizerBenchmark`` dataset and queries, for kafkaguard and Kafka alike.

A port of ``jmh-benchmarks/.../acl/AuthorizerBenchmark.java`` (``prepareAclCache``, the
``testAuthorizer`` and ``testAuthorizeByResourceType`` queries), with a seeded
``random.Random`` in place of its clock-seeded ``java.util.Random`` so that one dataset is given
to both authorizers (``tests/support/authorizer_referee.py``). Per resource ``i`` of
``resource_count``: a GROUP every 10th, else a TOPIC, named ``foo-bar35_resource-<i>``,
PREFIXED every 5th, else LITERAL; on it, for each of ``acl_count`` principals
(``User:test-user``, ``User:test-user1`` …) an ALLOW READ from host ``*`` and, with
``deny_percentage`` chance, the same DENY. Then the PREFIXED topic ``foo-bar35_resource-`` gets
ALLOW (and maybe DENY) READ for ``User:test-user`` from hosts ``127.0.0.0`` … ``127.0.0.9``, and
the LITERAL topic ``*`` the same from ``resource_count / 10`` hosts spelt ``"127.0.0" + id``
(no dot: the benchmark's own spelling, kept, so none of them is the by-type query's
``127.0.0.2``, which the benchmark means to skip).

:func:`decision_queries` adds questions around the dataset (every principal kind, hosts that
match and miss the host-specific ACLs, operations with and without implication, names that are
resources, prefixes, extensions of prefixes, and none) for the decision comparison.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.support.authorizer_referee import Query

RESOURCE_PREFIX = "foo-bar35_resource-"
PRINCIPAL = "User:test-user"
HOST_PRE_COUNT = 10
BY_TYPE_HOST = "127.0.0.2"
EPS = 1e-9

AUTHORIZE_QUERY = Query(
    "authorize",
    PRINCIPAL,
    "127.0.0.1",
    AclOperation.WRITE,
    ResourceType.TOPIC,
    f"{RESOURCE_PREFIX}95",
)
"""``testAuthorizer``: WRITE on the topic ``…-95`` (itself a PREFIXED resource), which no ACL
allows: every ACL on the name, its prefixes and ``*`` is looked at."""
BY_TYPE_QUERY = Query("by_type", PRINCIPAL, BY_TYPE_HOST, AclOperation.READ, ResourceType.TOPIC)
"""``testAuthorizeByResourceType``: READ on any TOPIC."""


def jmh_acls(
    resource_count: int, acl_count: int = 10, deny_percentage: float = 20.0, seed: int = 0
) -> list[AclBinding]:
    """``prepareAclCache``: the ACLs, each once (the benchmark keeps them in sets)."""
    rng = random.Random(seed)

    def deny() -> bool:
        return rng.random() * 100.0 - EPS < deny_percentage

    principals = [PRINCIPAL + ("" if i == 0 else str(i)) for i in range(acl_count)]
    out: list[AclBinding] = []
    for resource_id in range(resource_count):
        pattern = ResourcePattern(
            ResourceType.GROUP if resource_id % 10 == 0 else ResourceType.TOPIC,
            RESOURCE_PREFIX + str(resource_id),
            PatternType.PREFIXED if resource_id % 5 == 0 else PatternType.LITERAL,
        )
        for principal in principals:
            out.extend(_read_acls(pattern, principal, "*", deny()))
    prefix = ResourcePattern(ResourceType.TOPIC, RESOURCE_PREFIX, PatternType.PREFIXED)
    for host_id in range(HOST_PRE_COUNT):
        out.extend(_read_acls(prefix, PRINCIPAL, f"127.0.0.{host_id}", deny()))
    wildcard = ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL)
    for host_id in range(resource_count // 10):
        host = f"127.0.0{host_id}"
        if host != BY_TYPE_HOST:
            out.extend(_read_acls(wildcard, PRINCIPAL, host, deny()))
    return out


def _read_acls(
    pattern: ResourcePattern, principal: str, host: str, deny: bool
) -> Iterator[AclBinding]:
    yield AclBinding(
        pattern, AccessControlEntry(principal, host, AclOperation.READ, AclPermissionType.ALLOW)
    )
    if deny:
        yield AclBinding(
            pattern, AccessControlEntry(principal, host, AclOperation.READ, AclPermissionType.DENY)
        )


QUERY_PRINCIPALS = (PRINCIPAL, f"{PRINCIPAL}3", "User:test-user10", "User:other", "Group:test-user")
QUERY_HOSTS = ("127.0.0.1", BY_TYPE_HOST, "127.0.0.9", "10.0.0.1")
QUERY_OPERATIONS = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.DESCRIBE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
)
QUERY_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)


def decision_queries(
    resource_count: int, count: int, seed: int = 1, by_type: int | None = None
) -> list[Query]:
    """The two benchmark queries, ``count`` random ``authorize`` queries and the ``by_type``
    combinations of the principals, hosts, operations and types above: all of them, or a
    random ``by_type`` of them (Kafka's answer lists every ACL of the type: at 2.4M ACLs, each
    takes seconds)."""
    rng = random.Random(seed)
    out = [AUTHORIZE_QUERY, BY_TYPE_QUERY]
    for _ in range(count):
        resource_id = rng.randrange(max(resource_count, 1) * 11 // 10)  # ~10% beyond the last
        name = RESOURCE_PREFIX + str(resource_id)
        shape = rng.randrange(8)
        if shape == 1:
            name += rng.choice(("0", "-x", "9"))  # under a PREFIXED resource when it is one
        elif shape == 2:
            name = name[: rng.randrange(1, len(name))]  # a prefix of it
        elif shape == 3:
            name = rng.choice(("*", RESOURCE_PREFIX, "other-topic", "f", ""))
        out.append(
            Query(
                "authorize",
                rng.choice(QUERY_PRINCIPALS),
                rng.choice(QUERY_HOSTS),
                rng.choice(QUERY_OPERATIONS),
                rng.choice(QUERY_TYPES),
                name,
            )
        )
    combinations = [
        Query("by_type", principal, host, op, rtype)
        for principal in QUERY_PRINCIPALS
        for host in QUERY_HOSTS
        for op in QUERY_OPERATIONS
        for rtype in QUERY_TYPES
    ]
    if by_type is not None and by_type < len(combinations):
        combinations = rng.sample(combinations, by_type)
    return out + combinations
