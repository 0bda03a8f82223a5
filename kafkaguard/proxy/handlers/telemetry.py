"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71) and PushTelemetry (72).

Kafka authorizes neither (``KafkaApis.handleGetTelemetrySubscriptionRequest`` and
``handlePushTelemetryRequest`` go straight to the ``ClientMetricsManager``): any connected
client may fetch its subscription and push its own metrics. The proxy forwards both byte for
byte. They are explicit handlers, not transitional forwarding entries, so that "no check" is
a recorded decision; neither response carries a broker address or topic data.
"""

from __future__ import annotations

from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    HandlerContext,
    Request,
    Verdict,
)


class _NoCheckHandler(ApiHandler):
    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict:
        return FORWARD  # Kafka performs no authorization for this API


class GetTelemetrySubscriptionsHandler(_NoCheckHandler):
    api_key = 71


class PushTelemetryHandler(_NoCheckHandler):
    api_key = 72


HANDLERS: list[ApiHandler] = [GetTelemetrySubscriptionsHandler(), PushTelemetryHandler()]
