"""Broker addresses in responses: clients never see one
(``docs/design.md#clients-never-see-a-broker-address``).

Every host/port a response carries is replaced by the proxy's own address for that node id on
the client's listener; the broker's real address is remembered so the proxy can connect to it.
The family handlers call these rewrites on the responses of their APIs.

Which responses carry broker addresses (checked against every kio response schema with a
``host``/``port`` field): Metadata ``brokers`` (:func:`rewrite_metadata_brokers`);
FindCoordinator v0–3 top level and v4+ ``coordinators`` (:func:`rewrite_coordinators`);
DescribeCluster ``brokers`` (:func:`rewrite_describe_cluster_brokers`); Produce v10+, Fetch
v16+, ShareFetch and ShareAcknowledge ``node_endpoints`` (KIP-951,
:func:`node_endpoints_rewrite`; on the data path's fast paths :func:`node_endpoints_transform`
rewrites them in the raw response's tail, records untouched). DescribeQuorum and the
Raft/registration APIs carry controller endpoints and are refused (broker-internal). The
``host`` fields of Describe/DeleteAcls are ACL hosts and those of the Streams group APIs are
application endpoints: neither is a broker address.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final, Protocol, TypeVar

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import peek_correlation_id
from kafkaguard.protocol.inflight import ResponseTransform
from kafkaguard.protocol.skim.tails import NodeEndpointsTail, fetch_response_has_node_endpoints
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    Forward,
    HandlerContext,
    Request,
    ResponseRewrite,
)

FETCH: Final = 1
FIRST_VERSION_WITH_NODE_ENDPOINTS: Final = {0: 10, 1: 16}
"""Produce and Fetch: the first version whose response carries ``node_endpoints``."""


class NodeAddress(Entity, Protocol):
    """A broker's address in a response (``brokers``, ``node_endpoints``, ``coordinators``
    entries), its id named by a field of its own (``node_id``, ``broker_id``)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class _Coordinator(NodeAddress, Protocol):
    @property
    def node_id(self) -> int: ...


class _FindCoordinatorResponse(_Coordinator, Protocol):
    """v0–3 are the one coordinator (``_Coordinator``'s fields), v4+ list ``coordinators``
    (KIP-699): each version has one or the other."""

    @property
    def coordinators(self) -> Sequence[_Coordinator]: ...


class NodeAddresses(Entity, Protocol):
    """A response listing ``brokers`` (Metadata, DescribeCluster)."""

    @property
    def brokers(self) -> Sequence[NodeAddress]: ...


class _WithNodeEndpoints(Entity, Protocol):
    @property
    def node_endpoints(self) -> Sequence[NodeAddress]: ...


_N = TypeVar("_N", bound=NodeAddress)
_B = TypeVar("_B", bound=NodeAddresses)
_F = TypeVar("_F", bound=_FindCoordinatorResponse)
_E = TypeVar("_E", bound=_WithNodeEndpoints)


def rewrite_node_addresses(
    entries: Sequence[_N], ctx: HandlerContext, id_field: str
) -> Sequence[_N]:
    """Replace host/port of each entry; returns ``entries`` itself when nothing changed."""
    changed = False
    out = []
    for entry in entries:
        host, port = ctx.advertise_node(getattr(entry, id_field), entry.host, entry.port)
        if host != entry.host or port != entry.port:
            entry = replace(entry, host=host, port=port)
            changed = True
        out.append(entry)
    return tuple(out) if changed else entries


def _rewrite_brokers(response: _B, ctx: HandlerContext, id_field: str) -> _B:
    brokers = rewrite_node_addresses(response.brokers, ctx, id_field)
    return response if brokers is response.brokers else replace(response, brokers=brokers)


def rewrite_metadata_brokers(response: _B, ctx: HandlerContext) -> _B:
    """Metadata ``brokers``."""
    return _rewrite_brokers(response, ctx, "node_id")


def rewrite_describe_cluster_brokers(response: _B, ctx: HandlerContext) -> _B:
    """DescribeCluster ``brokers``."""
    return _rewrite_brokers(response, ctx, "broker_id")


def rewrite_coordinators(response: _F, ctx: HandlerContext) -> _F:
    """FindCoordinator: the v0–3 top-level node, or each found v4+ ``coordinators`` entry
    (a node id below 0, e.g. COORDINATOR_NOT_AVAILABLE, has no address to hide)."""
    if hasattr(response, "coordinators"):  # v4+: batched (KIP-699)
        if all(c.node_id < 0 for c in response.coordinators):
            return response
        coordinators = tuple(
            rewrite_node_addresses((c,), ctx, "node_id")[0] if c.node_id >= 0 else c
            for c in response.coordinators
        )
        return replace(response, coordinators=coordinators)
    if response.node_id < 0:
        return response
    host, port = ctx.advertise_node(response.node_id, response.host, response.port)
    return replace(response, host=host, port=port)


def coordinators_rewrite(ctx: HandlerContext) -> ResponseRewrite:
    """:func:`rewrite_coordinators` as a :class:`~base.Forward` rewrite."""

    def rewrite(response: _F) -> _F:
        return rewrite_coordinators(response, ctx)

    return rewrite


def node_endpoints_rewrite(request: Request, ctx: HandlerContext) -> ResponseRewrite | None:
    """The ``node_endpoints`` rewrite for a Produce/Fetch request, ``None`` for versions
    without them (their response need not be decoded for addresses)."""
    header = request.header
    if header.api_version < FIRST_VERSION_WITH_NODE_ENDPOINTS[header.api_key]:
        return None

    def rewrite(response: _E) -> _E:
        if not response.node_endpoints:
            return response
        endpoints = rewrite_node_addresses(response.node_endpoints, ctx, "node_id")
        if endpoints is response.node_endpoints:
            return response
        return replace(response, node_endpoints=endpoints)

    return rewrite


def node_endpoints_transform(
    request: Request, ctx: HandlerContext, rewrite: ResponseRewrite | None = None
) -> NodeEndpointsTail | None:
    """The ``node_endpoints`` rewrite of a forwarded Produce/Fetch request's response, on its
    raw bytes: the tail is found by a skim and rewritten alone, a Fetch response streams
    (:mod:`kafkaguard.protocol.skim`). ``None`` for versions without ``node_endpoints``. A
    response the skim cannot walk is decoded and rewritten whole
    (:func:`node_endpoints_rewrite`)."""
    if rewrite is None:  # (the caller's own :func:`node_endpoints_rewrite`, when it has one)
        rewrite = node_endpoints_rewrite(request, ctx)
        if rewrite is None:
            return None
    header = request.header
    decoded = decoded_transform(request, rewrite)
    return NodeEndpointsTail(header.api_key, header.api_version, ctx.advertise_node, decoded)


def decoded_transform(request: Request, rewrite: ResponseRewrite) -> ResponseTransform:
    """The fallback of a raw-frame transform for a frame its walk does not take on: the
    response to ``request`` decoded whole, passed through ``rewrite`` and encoded again (the
    broker's own frame when ``rewrite`` changed nothing)."""
    header = request.header
    api_key, version = header.api_key, header.api_version

    def decoded(frame: Frame) -> Frame:
        body = codec.decode_response(frame, api_key, version)
        new = rewrite(body)
        return frame if new is body else codec.encode_response(new, peek_correlation_id(frame))

    return decoded


class _AllowedForwards:
    """Per connection: the verdict for an allowed Produce/Fetch of each (api key, version),
    built once: it carries nothing of the request, and the data path is spared building the
    same rewrite, transform and verdict for every request."""

    __slots__ = ("by_version",)

    def __init__(self) -> None:
        self.by_version: dict[tuple[int, int], Forward] = {}


def allowed_forward(request: Request, ctx: HandlerContext) -> Forward:
    """``Forward()`` of an allowed Produce/Fetch sent as the client's bytes, with the
    ``node_endpoints`` rewrite of its response for the versions that have them (Fetch: with
    the skim that spares the decoded path from decoding responses without them)."""
    header = request.header
    key = (header.api_key, header.api_version)
    cache = ctx.connection_state.get(_AllowedForwards).by_version
    verdict = cache.get(key)
    if verdict is None:
        rewrite = node_endpoints_rewrite(request, ctx)
        if rewrite is None:
            verdict = FORWARD
        else:
            version = header.api_version
            verdict = Forward(
                rewrite=rewrite,
                decode_if=(
                    (lambda frame: fetch_response_has_node_endpoints(frame, version))
                    if header.api_key == FETCH
                    else None
                ),
                transform=node_endpoints_transform(request, ctx, rewrite),
            )
        cache[key] = verdict
    return verdict
