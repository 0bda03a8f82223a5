"""GetTelemetrySubscriptions / PushTelemetry: no authorization in Kafka, forwarded as is."""

from __future__ import annotations

import uuid

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.support.base import Forward
from tests.support.handler_harness import HandlerHarness


def test_get_telemetry_subscriptions_forwarded_without_checks() -> None:
    h = HandlerHarness()  # no ACL at all
    verdict = h.send(codec.request_schema(71, 0)(client_instance_id=None))
    assert verdict == Forward()
    assert h.checked() == []


def test_push_telemetry_forwarded_without_checks() -> None:
    h = HandlerHarness()
    body = codec.request_schema(72, 0)(
        client_instance_id=uuid.uuid4(),
        subscription_id=5,
        terminating=False,
        compression_type=0,
        metrics=b"\x00\x01",
    )
    assert h.send(body) == Forward()
    assert h.checked() == []
