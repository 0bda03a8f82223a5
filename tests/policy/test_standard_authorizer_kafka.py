"""kafkaguard's ``StandardAuthorizer`` against Kafka 4.3.1's own, on Kafka's JMH dataset.

The ACLs of ``AuthorizerBenchmark`` (``tests/support/jmh_acls.py``: resources × principals,
a share of DENY, PREFIXED host-specific ACLs, ``*`` ACLs from many hosts) go to both
authorizers (``tests/support/authorizer_referee.py``: Kafka's in one JVM); every query of
``decision_queries`` — ``authorize`` of one resource and ``authorizeByResourceType`` — must get
the same decision from both. ``bench/authorizer_jmh_bench.py`` times the same two.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.standard import StandardAuthorizer
from tests.support.authorizer_referee import KafkaAuthorizer, Query
from tests.support.jmh_acls import (
    BY_TYPE_HOST,
    PRINCIPAL,
    RESOURCE_PREFIX,
    decision_queries,
    jmh_acls,
)

pytestmark = pytest.mark.kafka


def differences(
    kafka_authorizer: KafkaAuthorizer, ours: StandardAuthorizer, queries: list[Query]
) -> list[tuple[Query, bool, bool]]:
    theirs = kafka_authorizer.decide(queries)
    mine = [q.allowed_by(ours) for q in queries]
    return [(q, a, b) for q, a, b in zip(queries, mine, theirs, strict=True) if a != b]


@pytest.mark.parametrize(
    ("resources", "deny", "allow_everyone"),
    [(100, 0.0, False), (1000, 20.0, False), (1000, 50.0, True), (300, 100.0, False)],
)
def test_decisions_equal_kafkas_on_the_jmh_dataset(
    kafka_authorizer: KafkaAuthorizer, resources: int, deny: float, allow_everyone: bool
) -> None:
    acls = jmh_acls(resources, 10, deny, seed=resources)
    kafka_authorizer.load(acls, allow_everyone=allow_everyone)
    ours = StandardAuthorizer(AuthorizerConfig(allow_everyone_if_no_acl_found=allow_everyone))
    ours.load_snapshot(acls)
    queries = decision_queries(resources, 4000, seed=resources)
    assert differences(kafka_authorizer, ours, queries) == []
    allowed = sum(q.allowed_by(ours) for q in queries)
    assert 0 < allowed < len(queries)  # both verdicts are asked for


def test_decisions_equal_kafkas_after_an_incremental_update(
    kafka_authorizer: KafkaAuthorizer,
) -> None:
    """A change small enough to be patched into the index (``AclIndex.updated``) decides as
    Kafka does with the changed ACLs loaded whole: host-specific and '*' ACLs removed, others
    (new hosts, a DENY on a PREFIXED resource) added."""
    acls = jmh_acls(2000, 10, 20.0, seed=7)
    ours = StandardAuthorizer()
    ours.load_snapshot(acls)
    rng = random.Random(7)
    removed = set(rng.sample([b for b in acls if b.entry.host != "*"], 60))
    added = [
        AclBinding(
            b.pattern,
            replace(
                b.entry,
                host=rng.choice(["127.0.0.1", "127.0.0.2", "*"]),
                permission_type=rng.choice([AclPermissionType.ALLOW, AclPermissionType.DENY]),
            ),
        )
        for b in rng.sample(acls, 40)
    ]
    changed = frozenset(acls) - removed | frozenset(added)
    ours.load_snapshot(changed)
    assert ours.acl_index.bindings == changed
    kafka_authorizer.load(changed)
    assert differences(kafka_authorizer, ours, decision_queries(2000, 4000, seed=8)) == []


def test_a_prefix_deny_from_one_host_over_names_allowed_from_any(
    kafka_authorizer: KafkaAuthorizer,
) -> None:
    """A DENY on the prefix every TOPIC name starts with, from one host, dominates what
    ``User:test-user`` may READ from ``*``: by-type answers DENIED from that host only (the
    shortcut over a view's common stem, ``_Grants.open_stem``), as Kafka's scan of every ACL."""
    deny = AclBinding(
        ResourcePattern(ResourceType.TOPIC, RESOURCE_PREFIX, PatternType.PREFIXED),
        AccessControlEntry(PRINCIPAL, BY_TYPE_HOST, AclOperation.READ, AclPermissionType.DENY),
    )
    acls = [*jmh_acls(500, 10, 20.0, seed=3), deny]
    kafka_authorizer.load(acls)
    ours = StandardAuthorizer()
    ours.load_snapshot(acls)
    queries = decision_queries(500, 2000, seed=3)
    assert differences(kafka_authorizer, ours, queries) == []
    by_type = {(q.host, q.operation, q.resource_type): q.allowed_by(ours)
               for q in queries if q.kind == "by_type" and q.principal == PRINCIPAL}  # fmt: skip
    assert by_type[(BY_TYPE_HOST, AclOperation.READ, ResourceType.TOPIC)] is False
    assert by_type[("127.0.0.1", AclOperation.READ, ResourceType.TOPIC)] is True
