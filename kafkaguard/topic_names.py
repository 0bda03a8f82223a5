"""Kafka's rules on topic names that kafkaguard applies itself (``org.apache.kafka.common.
internals.Topic``), below everything that applies them: the internal-topics rule every
authorization question passes first (:mod:`kafkaguard.policy.internal_topics`, compiled with the
allowed path, which calls this directly) and the topic tables' collision check
(:mod:`kafkaguard.topic_table`)."""

from __future__ import annotations


def unify_collision_chars(topic: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: two topics whose names are equal after this
    cannot both exist (their metrics names would collide), ``.`` and ``_`` being one. A name
    without ``.`` is returned as it is (nearly every name a request carries: no copy)."""
    return topic.replace(".", "_") if "." in topic else topic
