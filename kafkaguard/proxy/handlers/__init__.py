"""The handler registry: one entry per API key the proxy serves; everything else is refused.

Rules (principle 2, fail closed):

* An API key missing from :data:`REGISTRY` is never forwarded: the connection is closed, as
  Kafka closes a connection that sends an API key it does not know.
* A version outside ``handler.versions ∩ kio ∩ broker`` is answered with the API's
  UNSUPPORTED_VERSION error (or the connection closed when no reply can be built).
* ApiVersions advertises exactly that intersection.

Broker-internal APIs (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
WriteTxnMarkers, the Raft quorum and registration APIs, Envelope, AlterPartition,
AllocateProducerIds, the share-group *state* APIs) and the SASL APIs (terminated by the proxy
itself once listeners authenticate) are deliberately absent. DescribeQuorum is absent because
its reply carries controller endpoints the proxy does not expose.
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
    share_groups,
    streams_groups,
    telemetry,
    topics_admin,
    transactions,
)
from kafkaguard.proxy.handlers.addresses import (
    DescribeClusterHandler,
    FetchHandler,
    FindCoordinatorHandler,
    MetadataHandler,
    ShareAcknowledgeHandler,
    ShareFetchHandler,
)
from kafkaguard.proxy.handlers.base import ApiHandler, forwarding_handler

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
    share_groups,
    streams_groups,
    telemetry,
    topics_admin,
    transactions,
)

# Transitional (backbone stage): client-facing APIs still forwarded unchecked until their
# family module enforces them. A family handler always takes precedence over these.
_FORWARDED: Final = (
    2, 8, 9, 11, 12, 13, 14, 15, 16, 19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 32, 33,
    34, 35, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 57, 61, 64, 65, 66,
    68, 69, 71, 72, 74, 75, 76, 77, 88, 89, 90, 91, 92,
)  # fmt: skip


def _build() -> Mapping[int, ApiHandler]:
    table: dict[int, ApiHandler] = {}
    for family in _FAMILIES:
        for handler in family.HANDLERS:
            if handler.api_key in table:
                raise RuntimeError(f"two handlers for api key {handler.api_key}")
            table[handler.api_key] = handler
    legacy: list[ApiHandler] = [
        FetchHandler(),
        MetadataHandler(),
        FindCoordinatorHandler(),
        DescribeClusterHandler(),
        ShareFetchHandler(),
        ShareAcknowledgeHandler(),
    ]
    legacy += [forwarding_handler(key) for key in _FORWARDED]
    for handler in legacy:
        table.setdefault(handler.api_key, handler)
    return MappingProxyType(table)


REGISTRY: Final[Mapping[int, ApiHandler]] = _build()
