"""The handler registry: one entry per API key the proxy serves; everything else is refused.

Rules (``docs/design.md#fail-closed``):

* An API key missing from :data:`REGISTRY` is never forwarded: the connection is closed, as
  Kafka closes a connection that sends an API key it does not know.
* A version outside ``handler.versions ∩ kio ∩ broker`` is answered with the API's
  UNSUPPORTED_VERSION error (or the connection closed when no reply can be built).
* ApiVersions advertises exactly that intersection.
* A request with a null array where the schema allows none never reaches its handler: the
  codec refuses it and the connection is closed, as Kafka's request parser does
  (``protocol/guard.py``). Nulls the schema allows are each handler's to interpret, as its
  ``KafkaApis.handleXxx`` does.

Broker-internal APIs (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
WriteTxnMarkers, the Raft quorum and registration APIs, Envelope, AlterPartition,
AllocateProducerIds, the share-group *state* APIs) are deliberately absent. The SASL APIs
(SaslHandshake, SaslAuthenticate) are answered by the proxy itself (``sasl.py``), which
terminates authentication. DescribeQuorum is absent because
its reply carries controller endpoints the proxy does not expose. StreamsGroupHeartbeat asks the
broker which internal topics are missing before deciding (``streams_heartbeat.py``). ShareFetch
and ShareAcknowledge are served (``share_sessions.py``): the proxy mirrors each share session
opened on a connection, because Kafka re-authorizes every partition of the session on each
ShareFetch.

Every other API key has exactly one handler, in the module of its family; each module lists
its handlers in ``HANDLERS`` and this registry collects them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kafkaguard.proxy.handlers import (
    acls,
    api_versions,
    cluster_admin,
    configs,
    consumer_groups,
    delegation_tokens,
    fetch,
    groups,
    metadata,
    offsets,
    partitions,
    produce,
    sasl,
    share_groups,
    share_sessions,
    streams_groups,
    streams_heartbeat,
    telemetry,
    topics_admin,
    transactions,
)
from kafkaguard.proxy.handlers.support.base import ApiHandler

_FAMILIES: Final = (
    acls,
    api_versions,
    cluster_admin,
    configs,
    consumer_groups,
    delegation_tokens,
    fetch,
    groups,
    metadata,
    offsets,
    partitions,
    produce,
    sasl,
    share_groups,
    share_sessions,
    streams_groups,
    streams_heartbeat,
    telemetry,
    topics_admin,
    transactions,
)
"""The family modules, each with a ``HANDLERS`` list, imported by name so that every tool
(mypy, import-linter) sees the registry's edges."""


def _build() -> Mapping[int, ApiHandler]:
    table: dict[int, ApiHandler] = {}
    for family in _FAMILIES:
        for handler in family.HANDLERS:
            if handler.api_key in table:
                raise RuntimeError(f"two handlers for api key {handler.api_key}")
            table[handler.api_key] = handler
    return MappingProxyType(table)


REGISTRY: Final[Mapping[int, ApiHandler]] = _build()


def supported_versions(api_key: int, broker: Mapping[int, range] | None) -> range:
    """What the proxy advertises for ``api_key``: handler ∩ kio ∩ ``broker`` (the broker's
    ranges, once known; an API the proxy answers itself is advertised whatever the broker
    supports). The dispatcher's gate checks the same membership without building the range."""
    handler = REGISTRY.get(api_key)
    if handler is None:
        return range(0)
    result = handler.versions
    if broker is None or handler.answered_by_proxy:
        return result
    theirs = broker.get(api_key, range(0))
    result = range(max(result.start, theirs.start), min(result.stop, theirs.stop))
    return result if result.start < result.stop else range(0)
