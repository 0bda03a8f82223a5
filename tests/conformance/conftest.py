"""Fixtures of the differential conformance suite: the two sides a scenario runs on.

The harness itself (:class:`~tests.support.conformance.harness.Side`, ``differential``,
``normalize``) and the scenario steps are in tests/support/conformance/.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.conformance.harness import Side, guard_config
from tests.support.kafka_broker import KafkaBroker
from tests.support.proxy_fixture import RunningProxy, start_proxy_thread, stop_proxy_thread


@pytest.fixture(scope="session")
def guard_proxy(
    kafka_upstream: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    """kafkaguard with the referee's users and super user, in front of the upstream Kafka."""
    running = start_proxy_thread(guard_config(kafka_upstream, tmp_path_factory.mktemp("guard")))
    try:
        yield running
    finally:
        stop_proxy_thread(running)


@pytest.fixture(scope="session")
def sides(kafka_referee: KafkaBroker, guard_proxy: RunningProxy) -> list[Side]:
    return [Side("referee", kafka_referee.bootstrap), Side("kafkaguard", guard_proxy.bootstrap)]
