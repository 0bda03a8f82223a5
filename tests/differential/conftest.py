"""The session's Kafka referee JVM (:mod:`tests.support.kafka_referee`): skipped without Java
17 or Kafka's jars, failed in CI (``require_kafka``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import require_kafka
from tests.support.kafka_referee import KafkaReferee


@pytest.fixture(scope="session")
def kafka_reader() -> Iterator[KafkaReferee]:
    with KafkaReferee(require_kafka()) as referee:
        yield referee
