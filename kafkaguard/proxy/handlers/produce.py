"""Produce (api key 0).

``acks=0`` requests get no response from the broker, so they take no reply slot (see
:mod:`kafkaguard.protocol.inflight`). Produce v10+ responses may carry ``node_endpoints``
(KIP-951), which are rewritten like every broker address.
"""

from __future__ import annotations

from typing import Any

from kafkaguard.proxy.handlers.addresses import NodeEndpointsHandler
from kafkaguard.proxy.handlers.base import Forward, HandlerContext, Request, Verdict


class ProduceHandler(NodeEndpointsHandler):
    api_key = 0
    first_version_with_endpoints = 10
    decode_request = True

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        body: Any = request.body
        if body.acks == 0:
            return Forward(expects_response=False)
        return super().on_request(request, ctx)
