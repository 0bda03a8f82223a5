"""Fields many of kio's messages share, as read-only ``Protocol`` members: the handlers' own
``Protocol``s of what they read (docs/design.md#typed-handlers) are built from these and the
fields of their own API. Read-only properties, as kio's classes are frozen dataclasses: a
property is satisfied by a field of the same type or a narrower one (``i32``, ``TopicName``)."""

from __future__ import annotations

from typing import Protocol
from uuid import UUID


class ErrorCoded(Protocol):
    @property
    def error_code(self) -> int: ...


class PartitionIndexed(Protocol):
    @property
    def partition_index(self) -> int: ...


class Named(Protocol):
    """An entry named by a non-null ``name`` (a topic, a user, a resource)."""

    @property
    def name(self) -> str: ...


class TopicIded(Protocol):
    """An entry naming its topic by id (KIP-516)."""

    @property
    def topic_id(self) -> UUID: ...
