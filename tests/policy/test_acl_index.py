"""The ACL index's per-subject merged views (kafkaguard/policy/acl_index.py, issue 37)."""

from __future__ import annotations

import ipaddress

from kafkaguard.policy.acl_index import _SUBJECT_VIEWS_MAX, AclIndex, AclMatch
from kafkaguard.policy.model import AclOperation
from tests.support.policy import TOPIC, Op, acl

ADDRESS = ipaddress.ip_address("10.0.0.1")


def test_a_full_cache_of_merged_views_drops_its_oldest_subject_not_every_subject() -> None:
    """Full, the cache drops one subject per new one, the oldest made, and keeps the rest (it
    once started again from empty: every active subject's view rebuilt at once); a dropped
    subject's next request makes its view again, with the same verdict."""
    index = AclIndex.build([acl("Group:eng", Op.WRITE), acl("User:alice", Op.READ)])

    def ask(user: str) -> AclMatch:
        verdict, _ = index.match(
            user, "10.0.0.1", ADDRESS, AclOperation.WRITE, TOPIC, "foo", True, ("Group:eng",)
        )
        return verdict

    def subject(user: str) -> tuple[str, tuple[str, ...]]:
        return (user, ("Group:eng",))

    assert ask("User:alice") is AclMatch.ALLOW_ACL
    subjects = index._types[TOPIC].subjects
    for n in range(_SUBJECT_VIEWS_MAX - 1):
        assert ask(f"User:u{n}") is AclMatch.ALLOW_ACL
    assert len(subjects) == _SUBJECT_VIEWS_MAX  # full: alice and u0 .. u9998
    assert ask("User:new") is AclMatch.ALLOW_ACL
    assert len(subjects) == _SUBJECT_VIEWS_MAX
    assert subject("User:alice") not in subjects  # the oldest went, and only it
    assert subject("User:u0") in subjects and subject("User:new") in subjects
    assert ask("User:alice") is AclMatch.ALLOW_ACL  # made again
    assert subject("User:alice") in subjects and subject("User:u0") not in subjects
