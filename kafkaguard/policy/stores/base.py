"""The ACL store contract: where bindings live, separate from how they are matched.

A store produces whole snapshots (``frozenset[AclBinding]``); the authorizer indexes them.
Stores may do I/O and use asyncio or threads; the authorizer core never does. Implementations:
:class:`MemoryAclStore` (tests, store-less runs), ``FileAclStore`` (the embedded default) and
``ZooKeeperAclStore`` (Kafka's ``/kafka-acl`` layout, shared by a fleet of proxies); another
only has to implement this protocol and be registered in
:func:`kafkaguard.policy.config.build_store`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Protocol, runtime_checkable

from kafkaguard.policy.model import AclBinding

Snapshot = frozenset[AclBinding]
SnapshotListener = Callable[[Snapshot], None]

log = logging.getLogger("kafkaguard.policy.store")


class AclStoreError(RuntimeError):
    """The store could not load or persist ACLs; the message says which file/entry and why."""


@runtime_checkable
class AclStore(Protocol):
    """Where ACLs are kept. Changes are all-or-nothing per call."""

    @property
    def description(self) -> str:
        """Human-readable location, for logs and the CLI (e.g. ``file /etc/kg/acls.yaml``)."""
        ...

    async def start(self) -> None:
        """Complete after the first full load; raise :class:`AclStoreError` if it fails."""
        ...

    def snapshot(self) -> Snapshot:
        """The ACLs currently in force (empty before :meth:`start`)."""
        ...

    def subscribe(self, listener: SnapshotListener) -> Callable[[], None]:
        """Call ``listener(snapshot)`` on every change, on the event loop; returns unsubscribe."""
        ...

    async def add(self, bindings: Collection[AclBinding]) -> None:
        """Persist ``bindings`` (already validated) atomically; existing ones are kept once."""
        ...

    async def remove(self, bindings: Collection[AclBinding]) -> None:
        """Remove exactly these bindings atomically; absent ones are ignored."""
        ...

    async def close(self) -> None: ...


class SnapshotPublisher:
    """Listener bookkeeping shared by store implementations."""

    def __init__(self) -> None:
        self._listeners: list[SnapshotListener] = []
        self._snapshot: Snapshot = frozenset()

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def subscribe(self, listener: SnapshotListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in ``snapshot`` and tell listeners; a failing listener must not stop the rest."""
        if snapshot == self._snapshot:
            return
        self._snapshot = snapshot
        for listener in list(self._listeners):
            try:
                listener(snapshot)
            except Exception:
                log.exception("ACL snapshot listener %r failed", listener)


class MemoryAclStore(SnapshotPublisher):
    """A store that keeps ACLs in memory only: tests, and proxies managed via CreateAcls."""

    def __init__(self, bindings: Collection[AclBinding] = ()) -> None:
        super().__init__()
        self._initial = frozenset(bindings)
        self.started = False

    @property
    def description(self) -> str:
        return "memory"

    async def start(self) -> None:
        self.started = True
        self.publish(self._initial)

    async def add(self, bindings: Collection[AclBinding]) -> None:
        self.publish(self.snapshot() | frozenset(bindings))

    async def remove(self, bindings: Collection[AclBinding]) -> None:
        self.publish(self.snapshot() - frozenset(bindings))

    async def close(self) -> None:
        self.started = False
