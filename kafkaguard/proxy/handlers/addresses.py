"""Handlers whose responses carry broker addresses (principle 4: clients never see one).

Every host/port a response carries is replaced by the proxy's own address for that node id on
the client's listener; the broker's real address is remembered so the proxy can connect to it.

Which responses carry broker addresses (checked against every kio response schema with a
``host``/``port`` field): Metadata ``brokers``; FindCoordinator v0–3 top level and v4+
``coordinators``; DescribeCluster ``brokers``; Produce v10+, Fetch v16+, ShareFetch and
ShareAcknowledge ``node_endpoints`` (KIP-951). DescribeQuorum and the Raft/registration APIs
carry controller endpoints and are refused (broker-internal). The ``host`` fields of
Describe/DeleteAcls are ACL hosts and those of the Streams group APIs are application
endpoints: neither is a broker address.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kafkaguard.protocol.codec import ResponsePayload
from kafkaguard.proxy.handlers.base import (
    ApiHandler,
    Forward,
    HandlerContext,
    Request,
    ResponseRewrite,
    Verdict,
)


def rewrite_node_addresses(entries: Any, ctx: HandlerContext, id_field: str) -> Any:
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


class _AddressRewriteHandler(ApiHandler):
    """Forward the request's bytes; rewrite the addresses in the response."""

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        return Forward(rewrite=self.rewriter(ctx))

    def rewriter(self, ctx: HandlerContext) -> ResponseRewrite:
        def rewrite(response: ResponsePayload) -> ResponsePayload:
            rewritten: ResponsePayload = self.rewrite(response, ctx)
            return rewritten

        return rewrite

    def rewrite(self, response: Any, ctx: HandlerContext) -> Any:
        raise NotImplementedError


class MetadataHandler(_AddressRewriteHandler):
    api_key = 3

    def rewrite(self, response: Any, ctx: HandlerContext) -> Any:
        brokers = rewrite_node_addresses(response.brokers, ctx, "node_id")
        return response if brokers is response.brokers else replace(response, brokers=brokers)


class DescribeClusterHandler(_AddressRewriteHandler):
    api_key = 60

    def rewrite(self, response: Any, ctx: HandlerContext) -> Any:
        brokers = rewrite_node_addresses(response.brokers, ctx, "broker_id")
        return response if brokers is response.brokers else replace(response, brokers=brokers)


class FindCoordinatorHandler(_AddressRewriteHandler):
    api_key = 10

    def rewrite(self, response: Any, ctx: HandlerContext) -> Any:
        if hasattr(response, "coordinators"):  # v4+: batched (KIP-699)
            found = tuple(c for c in response.coordinators if c.node_id >= 0)
            if not found:
                return response
            coordinators = tuple(
                rewrite_node_addresses((c,), ctx, "node_id")[0] if c.node_id >= 0 else c
                for c in response.coordinators
            )
            return replace(response, coordinators=coordinators)
        if response.node_id < 0:  # COORDINATOR_NOT_AVAILABLE etc.: no address to hide
            return response
        host, port = ctx.advertise_node(response.node_id, response.host, response.port)
        return replace(response, host=host, port=port)


class NodeEndpointsHandler(_AddressRewriteHandler):
    """Produce, Fetch, ShareFetch, ShareAcknowledge: only versions with ``node_endpoints``
    need their response decoded; older versions are forwarded byte for byte."""

    first_version_with_endpoints: int

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        if request.header.api_version < self.first_version_with_endpoints:
            return Forward()
        return Forward(rewrite=self.rewriter(ctx))

    def rewrite(self, response: Any, ctx: HandlerContext) -> Any:
        if not response.node_endpoints:
            return response
        endpoints = rewrite_node_addresses(response.node_endpoints, ctx, "node_id")
        return replace(response, node_endpoints=endpoints)
