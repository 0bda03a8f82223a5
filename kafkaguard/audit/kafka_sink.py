"""The audit topic (``audit.sink: kafka | both``): records produced to a Kafka topic.

Why a topic: every proxy behind a load balancer writes to one place that Spark reads in
batch or as a stream, instead of each leaving a partial trail on its own disk (docs/audit.md).

The writer thread (kafkaguard/audit/writer.py) formats each record once and hands the same
bytes to the files and to :class:`AuditTopicSink`: a record's value is exactly a line of the
file trail without its newline, so readers of either parse the same JSON. Nothing here runs
on the event loop.

Hand-off and accounting, in decisions (an aggregate record stands for ``count`` of them):

* ``produce()`` only appends to librdkafka's own bounded queue (``queue_max_events``
  records); its threads do the network I/O. When that queue is full the record is
  **dropped** and counted, never waited for: a broker that is down or slow fills the queue,
  and traffic goes on (the writer's own queue, in front, is bounded too).
* A record the broker does not acknowledge within ``delivery_timeout_ms`` (or that is still
  queued when the shutdown flush ends) is **lost** and counted.
* Acknowledged records are **written**. Delivery reports are requested for failures only
  (``delivery.report.only.error``), so a busy trail costs no Python call per acknowledged
  record: written = records accepted - records still in the producer - records failed.

With idempotence (KIP-98) and ``acks=all``, a broker restart costs neither records nor
duplicates: librdkafka retries what was in flight with the same producer id and sequence
numbers, and the broker discards what it had already appended. So at any quiet moment, the
``count`` fields in the topic add up to the decisions audited minus the dropped and lost ones.

Key: the principal. One principal's records then stay in order on one partition (Kafka
orders records per partition only), so a reader sees a principal's first denial before its
later ones, which ``analyze watch``'s "new principal" needs across several partitions; the
partition is chosen like the Java producer's (murmur2), so every proxy of a fleet puts a
principal on the same partition. The cost is skew: one very busy principal loads one
partition; the aggregated defaults (``allowed: aggregate``) keep that small.

The producer connects to the brokers the proxy protects with the proxy's own upstream
settings (the caller passes them as librdkafka settings), bypassing client authorization as
the broker's own writes do.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin.NewTopic, typed here

from kafkaguard.audit.config import FORMAT_CLOUDEVENTS, FORMAT_KAFKAGUARD, AuditKafkaConfig
from kafkaguard.audit.events import CLOUDEVENTS_CONTENT_TYPE

log = logging.getLogger("kafkaguard.audit")

CLIENT_ID: Final = "kafkaguard-audit"
"""The internal producer's ``client.id`` (what the brokers' request logs show)."""
CREATE_TIMEOUT_S: Final = 10.0
"""How long the start-up check (and creation) of the topic may take."""
_LOG_EVERY_S: Final = 60.0
_DROP_LOG_EVERY_S: Final = 10.0
_COUNT: Final = b'"count":'
_QUIET: Final[dict[str, Any]] = {
    "logger": logging.getLogger("kafkaguard.audit.producer"),
    "log_level": 2,  # syslog levels <= LOG_CRIT only: not a line per failed connect
    "log.connection.close": False,
}
"""librdkafka logs through Python logging, and only its critical lines: a broker outage is
reported by the error callback instead, at most once a minute."""


def record_count(value: bytes) -> int:
    """The decisions a record stands for: its ``count`` field (1 when unreadable).

    The first ``"count":`` of a record is its field: in the kafkaguard format only
    ``schema_version``, ``kind``, ``time`` and ``window_end`` precede it, none of which can
    hold that text; in a CloudEvents one the strings before it (principal, groups, resource)
    are JSON-escaped, so a name spelling the key has ``\\"`` where the key has ``"``.
    """
    _, found, tail = value.partition(_COUNT)
    if not found:
        return 1
    try:
        return int(tail.split(b",", 1)[0])
    except ValueError:
        return 1


class AuditTopicSink:
    """The internal producer of the audit topic (used by the writer thread only).

    :attr:`written`, :attr:`dropped` and :attr:`lost` are read by ``/metrics`` from another
    thread: plain integers, and ``len()`` of the producer, which librdkafka makes safe.
    """

    def __init__(
        self,
        config: AuditKafkaConfig,
        connection: Mapping[str, Any],
        *,
        create_timeout_s: float = CREATE_TIMEOUT_S,
        record_format: str = FORMAT_KAFKAGUARD,
    ) -> None:
        """``connection``: librdkafka settings reaching the brokers (``bootstrap.servers``,
        ``security.protocol``, ``ssl.*``, ``sasl.*``); ``record_format``: the records'
        (``audit.kafka.format``, else ``audit.format``). CloudEvents go in structured mode,
        with the CloudEvents Kafka binding's ``content-type`` header."""
        self.create_timeout_s = create_timeout_s
        if not connection.get("bootstrap.servers"):
            raise ValueError("the audit topic needs the upstream bootstrap servers")
        self.config = config
        self.topic = config.topic
        self.connection = dict(connection)
        self.bootstrap: str = str(connection["bootstrap.servers"])
        self._producer: Any = None
        self._produce: Any = None
        self.sent = 0
        """Records accepted by the producer."""
        self.failed = 0
        """Records whose delivery failed (their decisions are in :attr:`lost`)."""
        self.dropped = 0
        """Decisions whose record was refused because the producer's queue was full."""
        self.lost = 0
        """Decisions whose record was not acknowledged (delivery failed or timed out, still
        queued at the end of the shutdown flush, or not formatted)."""
        self._last_drop_log = -math.inf
        self._last_error_log = -math.inf
        self._fatal = False
        self._headers: list[tuple[str, bytes]] | None = (
            [("content-type", CLOUDEVENTS_CONTENT_TYPE.encode())]
            if record_format == FORMAT_CLOUDEVENTS
            else None
        )

    # -- lifecycle (the writer's start and close) --------------------------------------------
    def producer_settings(self) -> dict[str, Any]:
        """The librdkafka settings of the internal producer (Kafka's ProducerConfig names
        where librdkafka shares them)."""
        config = self.config
        return {
            **self.connection,
            "client.id": CLIENT_ID,
            "acks": config.acks,
            "enable.idempotence": config.enable_idempotence,
            "linger.ms": config.linger_ms,
            "compression.type": config.compression,
            "queue.buffering.max.messages": config.queue_max_events,
            "message.timeout.ms": config.delivery_timeout_ms,
            "partitioner": "murmur2_random",  # the Java producer's partitioner for keyed records
            "delivery.report.only.error": True,
            "on_delivery": self._on_failed_delivery,
            "error_cb": self._on_client_error,
            **_QUIET,
        }

    def open(self) -> None:
        """Create the producer (no I/O yet): a bad setting fails the proxy's start."""
        self._producer = Producer(self.producer_settings())
        self._produce = self._producer.produce
        self._fatal = False

    def ensure_topic(self) -> None:
        """Create the topic with ``partitions`` and ``replication_factor`` when it is missing
        (writer thread, before the first record). A failure is logged, not raised: records
        wait in the producer, and are counted as lost if the topic never appears.

        CreateTopics comes first (TOPIC_ALREADY_EXISTS is the usual answer): a Metadata
        request for a missing topic may have the broker auto-create it with its defaults.
        """
        timeout_s = self.create_timeout_s
        admin = AdminClient({**self.connection, "client.id": CLIENT_ID, **_QUIET})
        new = NewTopic(self.topic, self.config.partitions, self.config.replication_factor)
        try:
            admin.create_topics([new], request_timeout=timeout_s)[self.topic].result(timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                log.debug("audit topic %s exists", self.topic)
                return
            # E.g. the upstream principal may not CREATE: fine if the topic is there.
            if self._exists(admin, timeout_s):
                return
            log.error("audit topic %s: cannot create it: %s", self.topic, exc)
            return
        except Exception as exc:  # noqa: BLE001 - a timeout; the proxy serves regardless
            log.error("audit topic %s: cannot create it: %s", self.topic, exc)
            return
        log.info(
            "audit topic %s created (%d partitions, replication factor %s)",
            self.topic,
            self.config.partitions,
            "the broker's default"
            if self.config.replication_factor == -1
            else self.config.replication_factor,
        )

    def _exists(self, admin: AdminClient, timeout_s: float) -> bool:
        try:
            described = admin.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        except Exception:  # noqa: BLE001 - unknown: reported by the caller
            return False
        return described is not None and described.error is None

    def close(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for every record to be acknowledged; what is left is
        purged and counted as lost."""
        producer = self._producer
        if producer is None:
            return
        left = producer.flush(max(0.0, timeout_s))
        if left:
            # Queued records are purged (reported as failed: lost); one in flight may still be
            # appended, so it gets a last second before it is purged too.
            producer.purge(in_queue=True, in_flight=False)
            if producer.flush(1.0):
                producer.purge()
                producer.flush(0.5)
            log.error(
                "audit topic %s: %d records not acknowledged within %.1f s at shutdown",
                self.topic,
                left,
                timeout_s,
            )
        self._producer = self._produce = None

    # -- the writer thread ---------------------------------------------------------------------
    def send(self, value: bytes, principal: str, count: int) -> None:
        """Hand one record to the producer; a full queue drops it (counted), never waits."""
        try:
            self._produce(self.topic, value, principal.encode(), headers=self._headers)
        except BufferError:
            self.dropped += count
            now = time.monotonic()
            if now - self._last_drop_log >= _DROP_LOG_EVERY_S:
                self._last_drop_log = now
                log.warning(
                    "audit topic %s: the producer queue is full (%d records); dropping "
                    "records (%d decisions dropped so far)",
                    self.topic,
                    self.config.queue_max_events,
                    self.dropped,
                )
            return
        except Exception as exc:  # noqa: BLE001 - a fatal producer, a record too large
            self.lost += count
            self._error(f"cannot produce: {exc}")
            return
        self.sent += 1

    def poll(self) -> None:
        """Serve the producer's callbacks (failed deliveries, errors, logs); replace a
        producer that hit a fatal error (its records are counted as lost)."""
        producer = self._producer
        if producer is None:
            return
        producer.poll(0)
        if self._fatal:
            producer.purge()
            producer.flush(1.0)
            log.error("audit topic %s: recreating the producer after a fatal error", self.topic)
            self.open()

    def lost_before_sending(self, count: int) -> None:
        """Decisions whose record could not be formatted (the writer counts them per sink)."""
        self.lost += count

    @property
    def written(self) -> int:
        """Records acknowledged by the brokers."""
        producer = self._producer
        in_producer = len(producer) if producer is not None else 0
        return max(0, self.sent - in_producer - self.failed)

    @property
    def pending(self) -> int:
        """Records in the producer: queued, in flight, or failed and not yet reported."""
        producer = self._producer
        return len(producer) if producer is not None else 0

    # -- callbacks (served by poll/flush, in the writer thread) --------------------------------
    def _on_failed_delivery(self, error: Any, message: Any) -> None:
        if error is None:  # delivery.report.only.error: not expected
            return
        self.failed += 1
        value = message.value()
        self.lost += record_count(value) if isinstance(value, bytes) else 1
        self._error(f"delivery failed: {error.str() if hasattr(error, 'str') else error}")

    def _on_client_error(self, error: Any) -> None:
        """librdkafka's client-level errors: brokers down (transient: records wait, and
        are retried until delivery_timeout_ms) or, rarely, a fatal idempotence error."""
        fatal = bool(getattr(error, "fatal", lambda: False)())
        if fatal:
            self._fatal = True
        what = error.str() if hasattr(error, "str") else str(error)
        self._error(f"producer: {what}", logging.ERROR if fatal else logging.WARNING)

    def _error(self, what: str, level: int = logging.ERROR) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= _LOG_EVERY_S:
            self._last_error_log = now
            log.log(
                level,
                "audit topic %s on %s: %s (%d decisions lost so far)",
                self.topic,
                self.bootstrap,
                what,
                self.lost,
            )
