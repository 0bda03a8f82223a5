"""The ACL index's per-subject merged views (kafkaguard/policy/acl_index.py, issue 37)."""

from __future__ import annotations

import ipaddress

from kafkaguard.policy.acl_index import _SUBJECT_VIEWS_MAX, AclIndex, AclMatch
from kafkaguard.policy.model import AclOperation
from tests.support.policy import TOPIC, Op, acl

ADDRESS = ipaddress.ip_address("10.0.0.1")


def test_the_merged_views_keep_the_subjects_in_use_and_drop_the_least_recently_used() -> None:
    """Full, the cache drops its least recently used subject, not every subject: one asking
    all along keeps its view while more subjects than the cache holds come and go."""
    index = AclIndex.build([acl("Group:eng", Op.WRITE), acl("User:alice", Op.READ)])

    def ask(user: str) -> AclMatch:
        verdict, _ = index.match(
            user, "10.0.0.1", ADDRESS, AclOperation.WRITE, TOPIC, "foo", True, ("Group:eng",)
        )
        return verdict

    assert ask("User:alice") is AclMatch.ALLOW_ACL
    subjects = index._types[TOPIC].subjects
    for n in range(_SUBJECT_VIEWS_MAX):
        assert ask(f"User:u{n}") is AclMatch.ALLOW_ACL
        if n % 1000 == 0:
            assert ask("User:alice") is AclMatch.ALLOW_ACL  # alice keeps asking
    assert len(subjects) == _SUBJECT_VIEWS_MAX
    assert ("User:alice", ("Group:eng",)) in subjects
    assert ("User:u0", ("Group:eng",)) not in subjects  # the least recently used went
    assert ("User:u1", ("Group:eng",)) in subjects
