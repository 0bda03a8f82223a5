"""A key → value table kept in a compacted Kafka topic, shared by the Kafka-topic ACL store
and the Kafka-topic SCRAM credential store (docs/acl-store.md).

:mod:`kafkaguard.policy.stores.kafka_topic` (ACLs) and
:mod:`kafkaguard.proxy.sasl.kafka_credentials` (SCRAM credentials) keep their records in the
same way; what they share lives here, below both ``kafkaguard.policy`` and ``kafkaguard.proxy``
(as :mod:`kafkaguard.zk` does for the ZooKeeper stores). confluent-kafka is imported only
when a table opens (the ``kafkaguard[kafka]`` extra).

Theory of operation
-------------------
* The topic is the table: one record per key, the latest value wins, a tombstone (null
  value) deletes; ``cleanup.policy=compact`` keeps exactly the live keys (Kafka's own
  ``__consumer_offsets`` works so). Two writers never lose each other's change unless they
  write the same key, and then the later append wins for every reader alike.
* One thread per table owns the consumer: it creates the topic when missing (compacted,
  replication ``min(3, brokers)``, ``min.insync.replicas`` ``min(2, replication)``), takes the
  end offsets, reads every partition from the beginning and reports the first full read
  once every partition has reached the end offset taken before it (as Kafka's
  ``StandardAuthorizer`` waits for ``loadingComplete``); then it follows the topic. Every batch
  of changes is handed to the event loop (``call_soon_threadsafe``): the state is only ever
  touched on the loop. The consumer has no group: it assigns every partition itself and
  commits nothing, so every proxy and every worker reads everything.
* Writes: ``acks=all`` with idempotence (KIP-98); :meth:`TopicTable.write` returns only once
  every record is acknowledged, then applies the records locally at once (read your writes).
  A record consumed later for a key with a newer local write is skipped, so a proxy never
  shows an older state after answering a newer one.
* Reachability: the thread asks for the end offsets every second; while that fails the
  table is unreachable, the state in force is kept and writes are refused at once (a write
  could not be acknowledged). librdkafka reconnects on its own; nothing needs a restart.
* Convergence: a reader that was away may never see a tombstone written meanwhile, the log
  cleaner having removed it (after ``delete.retention.ms``) together with the record it
  deleted. So after any unreachable period, when the reader's position is behind the log
  start, and every ``reread_interval_s`` if set, the thread reads the topic again from the
  beginning into a fresh state and the loop swaps it in at once (one batch of changes): the
  table then holds exactly the live set, whatever the cleaner removed. A Kafka broker
  converges the same way, from a metadata snapshot. The topic is created with an explicit
  ``delete.retention.ms`` (seven days by default) so that the broker-wide default, which a
  principal with ALTER_CONFIGS on the cluster can lower, does not apply; an existing topic
  that could delete live records by age or with less delete retention than configured is
  refused (:class:`TopicRefused`).
* Lag: the seconds since the reader last confirmed it had read to the end offsets
  (:meth:`TopicTable.lag_s`, on ``/metrics``); past ``max_lag_s`` the table is not ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kafkaguard.topic_names import unify_collision_chars

log = logging.getLogger("kafkaguard.topic_table")

EXTRA: Final = "kafka"
"""The optional dependency set that brings confluent-kafka (``pip install kafkaguard[kafka]``)."""
_PROBE_EVERY_S: Final = 1.0
DEFAULT_DELETE_RETENTION_MS: Final = 7 * 24 * 3600 * 1000
"""Seven days: a tombstone outlives any outage a proxy rides out with the state it holds."""
_RETRY_S: Final = 1.0
_QUIET: Final[dict[str, Any]] = {"log_level": 2, "log.connection.close": False}
"""librdkafka logs its critical lines only; an outage is reported by the table itself."""

Changes = dict[bytes, bytes | None]
"""key → value (``None``: deleted) of one batch, in the order applied."""


class TopicTableError(RuntimeError):
    """The topic cannot be reached or written; the message says which topic and why."""


class TopicRefused(TopicTableError):
    """The topic cannot serve as the table as the cluster has it (a colliding name, unsafe
    settings): retrying cannot help, the operator must act; the message says how."""


def import_confluent_kafka() -> Any:
    """confluent-kafka, or an error naming the extra that installs it."""
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise TopicTableError(
            f"a Kafka-topic store needs confluent-kafka: pip install 'kafkaguard[{EXTRA}]'"
        ) from exc
    return confluent_kafka


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """How the topic is created when missing; ``-1``: the default rule (module docstring)."""

    name: str
    replication_factor: int = -1
    min_insync_replicas: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    """More topic configs at creation (``segment.ms`` and the like)."""
    write_timeout_ms: int = 10_000
    """How long a write may wait for its acknowledgement before it is refused."""
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    """``delete.retention.ms`` at creation (unless ``configs`` sets it), and the least an
    existing topic may have."""
    max_lag_s: float = 60.0
    """Not ready when the last confirmed read to the end is older than this (0: never)."""
    reread_interval_s: float = 0.0
    """Read the topic again from the beginning this often as well (0: only after a gap)."""


def creation_plan(settings: TopicSettings, brokers: int) -> tuple[int, dict[str, str]]:
    """Replication factor and configs of a new topic on a cluster of ``brokers``."""
    replication = settings.replication_factor
    if replication < 1:
        replication = max(1, min(3, brokers))
    min_isr = settings.min_insync_replicas
    if min_isr < 1:
        min_isr = min(2, replication)
    configs = {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(min_isr),
        "delete.retention.ms": str(settings.delete_retention_ms),
        **settings.configs,
    }
    return replication, configs


def unsafe_settings(settings: TopicSettings, configs: Mapping[str, str]) -> str | None:
    """Why the topic, whose configs are ``configs``, could lose records a reader has not
    read (None: it cannot), naming the setting and the fix."""
    fix = (
        f"kafka-configs.sh --alter --entity-type topics --entity-name {settings.name} --add-config"
    )
    policy = configs.get("cleanup.policy", "delete")
    if not is_compacted(policy):
        return (
            f"topic {settings.name} has cleanup.policy={policy}, not compact: records still in "
            f"force would be deleted by age ({fix} cleanup.policy=compact)"
        )
    wanted = int(creation_plan(settings, 1)[1]["delete.retention.ms"])
    retention = int(configs.get("delete.retention.ms", "86400000"))
    if retention < wanted:
        return (
            f"topic {settings.name} has delete.retention.ms={retention}, below the "
            f"{wanted} configured: a deletion could be compacted away before a proxy that "
            f"was away reads it ({fix} delete.retention.ms={wanted}, or lower "
            "delete_retention_ms)"
        )
    return None


def ensure_topic(
    connection: Mapping[str, Any], settings: TopicSettings, timeout_s: float
) -> dict[str, str]:
    """Create the topic when missing; return its configs (raises :class:`TopicTableError`
    when the cluster does not answer, :class:`TopicRefused` when a topic collides)."""
    ck = import_confluent_kafka()
    from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin's, typed here

    admin, brokers, existing = _describe(connection, settings.name, timeout_s)
    if existing is not None:
        return existing
    replication, configs = creation_plan(settings, brokers)
    new = NewTopic(settings.name, 1, replication, config=configs)
    try:
        admin.create_topics([new], request_timeout=timeout_s)[settings.name].result(timeout_s)
        log.info(
            "topic %s created (compacted, replication factor %d, min.insync.replicas %s)",
            settings.name,
            replication,
            configs["min.insync.replicas"],
        )
    except ck.KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not (
            isinstance(error, ck.KafkaError) and error.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
        ):
            raise TopicTableError(f"cannot create topic {settings.name}: {exc}") from exc
    except TimeoutError as exc:
        raise TopicTableError(f"cannot create topic {settings.name}: no answer") from exc
    created = _describe(connection, settings.name, timeout_s)[2]
    if created is None:
        raise TopicTableError(f"topic {settings.name} is not there after its creation")
    return created


def topic_configs(
    connection: Mapping[str, Any], name: str, timeout_s: float
) -> dict[str, str] | None:
    """The configs of the topic, ``None`` when it does not exist (``check-config``: it
    creates nothing). Raises :class:`TopicTableError` when the cluster does not answer."""
    return _describe(connection, name, timeout_s)[2]


def topic_cleanup_policy(connection: Mapping[str, Any], name: str, timeout_s: float) -> str | None:
    """The ``cleanup.policy`` of the topic, ``None`` when it does not exist (as
    :func:`topic_configs`)."""
    configs = topic_configs(connection, name, timeout_s)
    return None if configs is None else configs.get("cleanup.policy", "delete")


def _describe(
    connection: Mapping[str, Any], name: str, timeout_s: float
) -> tuple[Any, int, dict[str, str] | None]:
    """(admin client, brokers, the topic's configs or None when missing). The topics are
    listed with a Metadata request for all topics: one naming a missing topic could have the
    broker auto-create it, uncompacted."""
    ck = import_confluent_kafka()
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import ConfigResource

    admin = AdminClient({**connection, **_QUIET})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except ck.KafkaException as exc:
        raise TopicTableError(f"cannot reach the cluster: {exc}") from exc
    if name not in metadata.topics:
        _refuse_collision(name, metadata.topics)
        return admin, len(metadata.brokers), None
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    try:
        described = admin.describe_configs([resource], request_timeout=timeout_s)
        entries = described[resource].result(timeout_s)
    except (ck.KafkaException, TimeoutError) as exc:
        raise TopicTableError(f"cannot describe topic {name}: {exc!r}") from exc
    configs = {str(k): str(e.value) for k, e in entries.items() if e.value is not None}
    return admin, len(metadata.brokers), configs


def _refuse_collision(name: str, existing: Collection[str]) -> None:
    """A topic Kafka considers the same name (``Topic.hasCollisionChars``) makes ``name``
    impossible to create (InvalidTopicException "collides with existing topic"): say which
    one and what to do rather than retry for ever."""
    unified = unify_collision_chars(name)
    squatters = sorted(t for t in existing if t != name and unify_collision_chars(t) == unified)
    if squatters:
        raise TopicRefused(
            f"topic {name} cannot be created: topic {squatters[0]} exists and collides with it "
            "('.' and '_' are one character to Kafka); delete it (kafka-topics.sh --delete "
            f"--topic {squatters[0]}, straight on the cluster) or configure another topic name"
        )


def is_compacted(cleanup_policy: str) -> bool:
    """``cleanup.policy`` is a list: ``compact`` or ``compact,delete`` keeps every live key
    only when nothing deletes by age, i.e. exactly ``compact``."""
    return [p.strip() for p in cleanup_policy.split(",")] == ["compact"]


class TopicTable:
    """The table; see the module docstring. ``on_change(changes)`` runs on the event loop
    for every batch consumed or written, after the first full read only."""

    def __init__(
        self,
        connection: Mapping[str, Any],
        settings: TopicSettings,
        *,
        client_id: str,
        on_change: Callable[[Changes], None],
    ) -> None:
        if not connection.get("bootstrap.servers"):
            raise TopicTableError(f"topic {settings.name}: no upstream bootstrap servers")
        self.connection = dict(connection)
        self.settings = settings
        self.client_id = client_id
        self._on_change = on_change
        self.state: dict[bytes, bytes] = {}
        """key → value of every live key (the event loop's copy)."""
        self._local: dict[bytes, tuple[int, int]] = {}
        """key → (partition, offset) of a local write not yet consumed back."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loaded: asyncio.Future[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._producer: Any = None
        self._write_lock: asyncio.Lock | None = None
        self.loaded = False
        self.reachable = False
        self.cleanup_policy: str | None = None
        self.problem: str | None = None
        """Why the cluster cannot be reached or read, for ``/readyz`` (None: it can)."""
        self._fatal = False
        self.progress = "not started"
        self.rereads = 0
        """Re-reads from the beginning swapped in (each logged with its reason)."""
        self._gap = False
        """The thread's: the cluster was unreachable since the last read from the beginning."""
        self._ends: dict[int, int] = {}
        """The thread's: the end offsets of the last probe."""
        self._caught_up: float | None = None
        self._last_pass = time.monotonic()

    @property
    def description(self) -> str:
        return f"topic {self.settings.name} on {self.connection['bootstrap.servers']}"

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Complete after the first full read (retrying, without end, while the cluster is
        away: the caller's readiness says why it waits)."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loaded = self._loop.create_future()
        self._write_lock = asyncio.Lock()
        self._open_producer()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"topic-table:{self.settings.name}", daemon=True
        )
        self._thread.start()
        await asyncio.shield(self._loaded)

    def _open_producer(self) -> None:
        """A new idempotent producer (at start, and after a fatal error of the last one)."""
        ck = import_confluent_kafka()
        self._fatal = False
        self._producer = ck.Producer(
            {
                **self.connection,
                **_QUIET,
                "client.id": f"{self.client_id}-writer",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "partitioner": "murmur2_random",  # the Java producer's, for keyed records
                "message.timeout.ms": self.settings.write_timeout_ms,
                "error_cb": self._on_producer_error,
            }
        )

    def _on_producer_error(self, error: Any) -> None:
        """librdkafka's client-level errors (served by flush in the writing thread)."""
        if error.fatal():
            self._fatal = True
            log.error("%s: the writer hit a fatal error: %s", self.description, error.str())

    async def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, 10.0)
        producer, self._producer = self._producer, None
        if producer is not None:
            await asyncio.to_thread(producer.flush, 1.0)
        if self._loaded is not None and not self._loaded.done():
            self._loaded.cancel()

    # -- writes -----------------------------------------------------------------------------
    async def write(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` (``None`` value: tombstone) and return once every one is
        acknowledged by ``min.insync.replicas`` replicas; then they are in :attr:`state`.
        Raises :class:`TopicTableError` (then some may have been written, none is applied
        locally before it is consumed)."""
        if not records:
            return
        if self._producer is None or self._write_lock is None or not self.loaded:
            raise TopicTableError(f"{self.description}: not loaded yet")
        if not self.reachable:
            raise TopicTableError(
                f"{self.description}: the cluster is unreachable; changes are refused until "
                "it is back (the contents in force are kept)"
            )
        async with self._write_lock:
            if self._fatal:
                await asyncio.to_thread(self._producer.flush, 1.0)
                self._open_producer()
            acked = await asyncio.to_thread(self._produce_and_wait, records)
        changes: Changes = {}
        for (key, value), (partition, offset) in zip(records, acked, strict=True):
            previous = self._local.get(key)
            if previous is None or previous < (partition, offset):
                self._local[key] = (partition, offset)
            changes[key] = value
        self._apply(changes)

    def _produce_and_wait(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[Any]:
        producer = self._producer
        results: list[Any] = [None] * len(records)

        def report(index: int) -> Callable[[Any, Any], None]:
            def on_delivery(error: Any, message: Any) -> None:
                results[index] = (
                    error if error is not None else (message.partition(), message.offset())
                )

            return on_delivery

        for index, (key, value) in enumerate(records):
            while True:
                try:
                    producer.produce(self.settings.name, value, key, on_delivery=report(index))
                    break
                except BufferError:
                    producer.poll(0.05)
        left = producer.flush(self.settings.write_timeout_ms / 1000 + 5.0)
        failures = [r for r in results if not isinstance(r, tuple)]
        if left or failures:
            what = failures[0] if failures and failures[0] is not None else "no acknowledgement"
            raise TopicTableError(
                f"{self.description}: write not acknowledged ({what}); it may or may not have "
                "been applied"
            )
        return results

    # -- the loop's side --------------------------------------------------------------------
    def _apply(self, changes: Changes) -> None:
        for key, value in changes.items():
            if value is None:
                self.state.pop(key, None)
            else:
                self.state[key] = value
        if self.loaded:
            self._on_change(changes)

    def _consumed(self, batch: list[tuple[bytes, bytes | None, int, int]]) -> None:
        """Records read by the thread: apply those no newer local write supersedes."""
        changes: Changes = {}
        for key, value, partition, offset in batch:
            local = self._local.get(key)
            if local is not None:
                if (partition, offset) < local:
                    continue
                del self._local[key]
            changes[key] = value
        if changes:
            self._apply(changes)

    def _finish_load(self) -> None:
        self.loaded = True
        self._on_change(dict(self.state))
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_result(None)

    def _swap(self, fresh: dict[bytes, bytes], read: dict[int, int], why: str) -> None:
        """Put the state a re-read built in force at once: one batch of changes (what the
        old state has and the fresh lacks is deleted). A local write the re-read did not
        reach yet keeps its value."""
        state = dict(fresh)
        for key, (partition, offset) in list(self._local.items()):
            if offset < read.get(partition, 0):
                del self._local[key]  # the re-read saw it, or a newer record of the key
            elif key in self.state:
                state[key] = self.state[key]
            else:
                state.pop(key, None)
        changes: Changes = {key: None for key in self.state if key not in state}
        changes.update((k, v) for k, v in state.items() if self.state.get(k) != v)
        self.rereads += 1
        log.info(
            "%s: read again from the beginning (%s): %d keys, %d changed",
            self.description,
            why,
            len(state),
            len(changes),
        )
        if changes:
            self._apply(changes)
        if not self.loaded:
            self._finish_load()

    def _fail(self, exc: TopicTableError) -> None:
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_exception(exc)

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(callback, *args)

    # -- the consumer thread ----------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._run_consumer()
        except Exception:  # pragma: no cover - a bug: say so, the state in force stays
            log.exception("%s: the reader stopped", self.description)
            self.problem = "the reader stopped (see the log)"
            self.reachable = False

    def _prepare(self) -> tuple[Any, list[Any], dict[int, int]]:
        """Create/check the topic, assign every partition from the beginning, take the end
        offsets; retried every second until it works or the table closes. A topic that
        cannot serve (:class:`TopicRefused`) stops the table: :meth:`start` raises."""
        ck = import_confluent_kafka()
        timeout_s = max(1.0, self.settings.write_timeout_ms / 1000)
        while True:
            try:
                configs = ensure_topic(self.connection, self.settings, timeout_s)
                unsafe = unsafe_settings(self.settings, configs)
                if unsafe is not None:
                    raise TopicRefused(unsafe)
                consumer, partitions, ends = self._open_consumer(ck, timeout_s)
            except TopicRefused as exc:
                self.problem = str(exc)
                log.error("%s: %s", self.description, exc)
                self._post(self._fail, exc)
                raise _Stopped from None
            except (TopicTableError, ck.KafkaException, RuntimeError) as exc:
                self.problem = f"cannot read the topic: {exc}"
                self.reachable = False
                log.warning("%s: %s; retrying", self.description, exc)
                if self._stop.wait(_RETRY_S):
                    raise _Stopped from None
                continue
            self.cleanup_policy = configs.get("cleanup.policy")
            self.reachable = True
            self._from_beginning(ck, consumer, partitions)
            return consumer, partitions, ends

    def _open_consumer(self, ck: Any, timeout_s: float) -> tuple[Any, list[Any], dict[int, int]]:
        consumer = ck.Consumer(
            {
                **self.connection,
                **_QUIET,
                "client.id": f"{self.client_id}-reader",
                "group.id": f"{self.client_id}-unused",  # never joined nor committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "fetch.error.backoff.ms": 100,
                "reconnect.backoff.max.ms": 1000,
            }
        )
        try:
            partitions = self._partitions(ck, consumer, timeout_s)
            ends = {
                p.partition: consumer.get_watermark_offsets(p, timeout=timeout_s, cached=False)[1]
                for p in partitions
            }
        except BaseException:
            consumer.close()
            raise
        return consumer, partitions, ends

    def _from_beginning(self, ck: Any, consumer: Any, partitions: list[Any]) -> None:
        """Every partition from its first offset; what an earlier assignment fetched is
        dropped with it (librdkafka's assignment versions)."""
        consumer.unassign()
        consumer.assign(
            [ck.TopicPartition(self.settings.name, p.partition, ck.OFFSET_BEGINNING)
             for p in partitions]
        )  # fmt: skip

    def _partitions(self, ck: Any, consumer: Any, timeout_s: float) -> list[Any]:
        topic = consumer.list_topics(self.settings.name, timeout=timeout_s).topics.get(
            self.settings.name
        )
        if topic is None or topic.error is not None or not topic.partitions:
            raise TopicTableError(f"topic {self.settings.name} has no partitions yet")
        return [ck.TopicPartition(self.settings.name, p) for p in sorted(topic.partitions)]

    def _run_consumer(self) -> None:
        ck = import_confluent_kafka()
        try:
            consumer, partitions, ends = self._prepare()
        except _Stopped:
            return
        try:
            self._follow(ck, consumer, partitions, ends)
        finally:
            consumer.close()

    def _follow(self, ck: Any, consumer: Any, partitions: list[Any], ends: dict[int, int]) -> None:
        positions = dict.fromkeys(ends, 0)
        reading: _Pass | None = _Pass(ends, None)
        next_probe = time.monotonic() + _PROBE_EVERY_S
        while not self._stop.is_set():
            if reading is not None and reading.done(positions):
                self._passed(reading, positions)
                reading = None
            # poll() returns on the first record; consume(n, timeout) would wait for n of them
            first = consumer.poll(0.1)
            messages = [first, *consumer.consume(499, 0)] if first is not None else []
            batch = self._take(ck, messages, positions)
            if batch:
                self._read(reading, batch)
            now = time.monotonic()
            if now >= next_probe:
                next_probe = now + _PROBE_EVERY_S
                why = self._probe(ck, consumer, partitions, positions, reading)
                if why is not None:
                    reading = self._reread(ck, consumer, partitions, positions, why)

    def _read(
        self, reading: _Pass | None, batch: list[tuple[bytes, bytes | None, int, int]]
    ) -> None:
        """Records read: into the fresh state of a re-read, else to the loop."""
        if reading is None or reading.fresh is None:
            self._post(self._consumed, batch)
        if reading is None:
            return
        reading.records += len(batch)
        if reading.fresh is not None:
            for key, value, _, _ in batch:
                if value is None:
                    reading.fresh.pop(key, None)
                else:
                    reading.fresh[key] = value
        what = "read" if reading.fresh is None else "re-read"
        self.progress = (
            f"{what} {reading.records} records (end offsets {sum(reading.ends.values())})"
        )

    def _passed(self, reading: _Pass, positions: dict[int, int]) -> None:
        """A read of every partition reached the end offsets it set out for."""
        self._caught_up = time.monotonic()
        self._last_pass = self._caught_up
        self.progress = "following"
        if reading.fresh is None:
            self._post(self._finish_load)
        else:
            self._post(self._swap, reading.fresh, dict(positions), reading.why)

    def _reread(
        self, ck: Any, consumer: Any, partitions: list[Any], positions: dict[int, int], why: str
    ) -> _Pass:
        """Start reading every partition again from the beginning, into a fresh state."""
        ends = dict(self._ends)
        log.info("%s: reading the topic again from the beginning (%s)", self.description, why)
        self._from_beginning(ck, consumer, partitions)
        for partition in positions:
            positions[partition] = 0
        return _Pass(ends, {}, why)

    def _take(
        self, ck: Any, messages: list[Any], positions: dict[int, int]
    ) -> list[tuple[bytes, bytes | None, int, int]]:
        """The records of ``messages``; ``positions`` follows them and the end-of-partition
        events (which also cover a log whose last offsets were compacted away)."""
        batch: list[tuple[bytes, bytes | None, int, int]] = []
        for message in messages:
            error = message.error()
            partition = message.partition()
            if error is not None:
                if error.code() == ck.KafkaError._PARTITION_EOF:
                    positions[partition] = max(positions[partition], message.offset())
                else:
                    log.warning("%s: %s", self.description, error.str())
                continue
            positions[partition] = message.offset() + 1
            key = message.key()
            if key is not None:  # every record of the table has one
                batch.append((key, message.value(), partition, message.offset()))
        return batch

    def _probe(
        self,
        ck: Any,
        consumer: Any,
        partitions: list[Any],
        positions: dict[int, int],
        reading: _Pass | None,
    ) -> str | None:
        """Reachability: every partition's offsets answered within a second each. Returns
        why the topic must be read again from the beginning (None: it need not)."""
        try:
            offsets = {
                p.partition: consumer.get_watermark_offsets(p, timeout=1.0, cached=False)
                for p in partitions
            }
        except ck.KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, ck.KafkaError) and error.code() >= 0:
                # A broker answered (librdkafka's own codes, transport and time-outs, are
                # negative): a leader moving after a broker stopped answers
                # OFFSET_NOT_AVAILABLE or NOT_LEADER_OR_FOLLOWER for a moment. Not an
                # outage: reachability stays as it was until the next probe.
                log.debug("%s: offsets not answered yet (%s)", self.description, exc)
                return None
            if self.reachable:
                log.warning(
                    "%s: the cluster is unreachable (%s); keeping the contents in force, "
                    "changes refused",
                    self.description,
                    exc,
                )
            self.reachable = False
            self._gap = True
            self.problem = f"the cluster is unreachable: {exc}"
            return None
        if not self.reachable:
            log.info("%s: the cluster is reachable again", self.description)
        self.reachable = True
        self.problem = None
        self._ends = {p: high for p, (_, high) in offsets.items()}
        if reading is None and all(positions[p] >= high for p, (_, high) in offsets.items()):
            self._caught_up = time.monotonic()
        return self._reread_reason(offsets, positions, reading)

    def _reread_reason(
        self, offsets: dict[int, tuple[int, int]], positions: dict[int, int], reading: _Pass | None
    ) -> str | None:
        if self._gap:
            self._gap = False
            return "after an unreachable period: deletions may have been compacted away"
        if reading is not None:  # a read from the beginning is under way
            return None
        if any(positions[p] < low for p, (low, _) in offsets.items()):
            return "the reader's position is behind the log start"
        interval = self.settings.reread_interval_s
        if interval > 0 and time.monotonic() - self._last_pass >= interval:
            return f"every {interval:g} s (reread_interval_s)"
        return None

    def lag_s(self) -> float | None:
        """Seconds since the reader last confirmed it had read to the end offsets (None:
        never yet). A re-read confirms only once its fresh state is complete."""
        caught_up = self._caught_up
        return None if caught_up is None else max(0.0, time.monotonic() - caught_up)

    def not_ready(self) -> Iterator[str]:
        """Readiness conditions that fail (``/readyz``)."""
        if not self.loaded:
            yield f"{self.description}: first full read not complete ({self.progress})"
        if self.problem is not None:
            yield f"{self.description}: {self.problem}"
        lag, limit = self.lag_s(), self.settings.max_lag_s
        if self.loaded and lag is not None and limit > 0 and lag > limit:
            yield (
                f"{self.description}: last read to the end {lag:.0f} s ago "
                f"(more than max_lag_s {limit:g})"
            )


@dataclass(slots=True)
class _Pass:
    """One read of every partition up to ``ends``: the first (records go to the loop as they
    come) or a re-read (records go into ``fresh``, swapped in whole at the end)."""

    ends: dict[int, int]
    fresh: dict[bytes, bytes] | None
    why: str = "the first read"
    records: int = 0

    def done(self, positions: dict[int, int]) -> bool:
        return all(positions[p] >= end for p, end in self.ends.items())


class _Stopped(Exception):
    """The table closed while the topic was being prepared."""
