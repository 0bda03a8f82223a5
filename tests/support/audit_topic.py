"""The audit topic for tests: read it whole, restart the broker holding it.

:func:`read_topic` reads every record of a topic with confluent-kafka's Consumer (assigned
partitions, no group: nothing to wait for but the data). :func:`restart_kafka` stops an
Apache Kafka node started by :func:`tests.support.kafka_broker.start_kafka` cleanly and
starts it again on the same data directory and ports (Tansu keeps records in memory, so a
restart test needs Kafka).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from tests.support.kafka_broker import (
    JVM_OPTS,
    KAFKA_VERSION,
    READY_TIMEOUT_S,
    KafkaBroker,
    _die_with_parent,
    _wait_ready,
    check_runtime,
    log_config_args,
)

QUIET = {"log_level": 3}


@dataclass(frozen=True)
class TopicRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[TopicRecord]:
    """Every record of ``topic`` (all partitions, offset 0 to the high watermark)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-audit-reader",  # never joined: assign() only
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **QUIET,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
            for p in partitions
        }
        wanted = {p: end for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
        records: list[TopicRecord] = []
        positions = dict.fromkeys(wanted, 0)
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < end for p, end in wanted.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"read only {positions} of {wanted} within {timeout_s} s")
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                partition, offset, value = message.partition(), message.offset(), message.value()
                if message.error() is not None or partition is None or offset is None:
                    continue
                headers = tuple((k, v or b"") for k, v in message.headers() or ())
                records.append(TopicRecord(partition, offset, message.key(), value or b"", headers))
                positions[partition] = offset + 1
        return records
    finally:
        consumer.close()


def decisions_in(records: list[TopicRecord]) -> int:
    """The decisions the audit records stand for (the sum of their ``count`` fields)."""
    return sum(int(json.loads(record.value)["count"]) for record in records)


def restart_kafka(
    broker: KafkaBroker,
    *,
    while_down: Callable[[], None] | None = None,
    version: str = KAFKA_VERSION,
) -> float:
    """Stop ``broker`` (SIGTERM: a clean shutdown), call ``while_down``, and start it again
    on its own ``server.properties``, data and ports, without formatting; returns the seconds
    it was unreachable. Call it from the thread that started the broker (PDEATHSIG)."""
    began = time.monotonic()
    broker.stop()
    if while_down is not None:
        while_down()
    directory = broker.log_dir
    properties = directory / "server.properties"
    java = ["java", *JVM_OPTS, *log_config_args(directory, level="info", to_stderr=False)]
    java += ["-cp", check_runtime(version)]
    with open(directory / "server.log", "ab") as log:
        proc = subprocess.Popen(
            [*java, f"-Dkafka.logs.dir={directory}", "kafka.Kafka", str(properties)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
    broker.proc = proc
    try:
        _wait_ready(broker, proc, READY_TIMEOUT_S)
    except BaseException:
        broker.stop()
        raise
    return time.monotonic() - began
