"""The harness itself: both sides authenticate the same users and take the same ACLs."""

from __future__ import annotations

import pytest

from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.protocol import codec
from tests.support.conformance.harness import Side, differential, scenario_name
from tests.support.raw_client import build_request

pytestmark = pytest.mark.kafka


def test_same_acls_same_metadata_answer(sides: list[Side]) -> None:
    topic = scenario_name("harness")
    for side in sides:
        side.set_acls(
            [
                AclBinding(
                    ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    AccessControlEntry(
                        "User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW
                    ),
                )
            ]
        )

    # Named but missing topic: alice may DESCRIBE it → UNKNOWN_TOPIC_OR_PARTITION; bob → 29.
    def named(user: str):
        def run(side: Side) -> object:
            with side.raw(user) as client:
                topic_schema = codec.nested_type(codec.request_schema(3, 12), "topics")
                _, response = client.request(
                    build_request(
                        3,
                        12,
                        topics=(topic_schema(name=topic, topic_id=None),),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    )
                )
            return [(t.name, t.error_code) for t in response.topics]

        return run

    assert differential(sides, named("alice")) == [[topic, "unknown_topic_or_partition"]]
    assert differential(sides, named("bob")) == [[topic, "topic_authorization_failed"]]
