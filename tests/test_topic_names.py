"""Kafka's topic-name rules (kafkaguard/topic_names.py), compiled with the allowed path."""

from __future__ import annotations

import pytest

from kafkaguard.topic_names import unify_collision_chars


@pytest.mark.parametrize(
    ("name", "unified"),
    [
        ("orders", "orders"),
        ("my.orders.v1", "my_orders_v1"),
        ("my_orders_v1", "my_orders_v1"),
        (".kafkaguard-acls", "_kafkaguard-acls"),
        ("", ""),
    ],
)
def test_dots_and_underscores_are_one_character(name: str, unified: str) -> None:
    """``Topic.unifyCollisionChars``: ``topic.replace('.', '_')``."""
    assert unify_collision_chars(name) == unified


def test_a_name_without_a_dot_is_the_name_itself() -> None:
    name = "".join(["bench-", "orders"])  # a new object, as a decoded request's name is
    assert unify_collision_chars(name) is name
