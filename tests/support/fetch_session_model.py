"""A model of one Kafka broker's incremental fetch sessions (KIP-227), to answer the requests
the proxy forwards as Apache Kafka 4.x would.

It follows ``FetchManager.newContext`` (the session checks in their order: session id 70,
epoch 71, topic ids 106, then ``FetchSession.update``: add or update the named partitions, drop
the forgotten ones; an emptied session is removed and the request served sessionless),
``FetchMetadata.nextEpoch``, ``FullFetchContext`` (epoch 0 creates a session holding every
partition of the request; epoch −1 none; a session id in a full fetch is removed first) and the
throttled answer (``getThrottledResponse``: no error, no session id, no partitions — after the
incremental session was updated, before a full fetch's session is created).

The broker authorizes nothing here (the proxy's upstream principal may read everything) and
answers records for every partition of its fetch context on every request — the most a real
broker could return — so whatever leaves the proxy is what the proxy let through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode

Key = tuple[Any, int]
"""A partition as the request names it: topic name (v4–12) or topic id (v13+), and index."""

INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """``FetchMetadata.nextEpoch``."""
    if epoch < 0:
        return -1
    return 1 if epoch == INT32_MAX else epoch + 1


def records_of(key: Key) -> bytes:
    """The (opaque) records the model answers for ``key``."""
    return f"records of {key[0]}-{key[1]}".encode()


@dataclass
class ModelSession:
    """``FetchSession``: its partitions in ``CachedPartitionMap`` order, and epoch."""

    session_id: int
    uses_topic_ids: bool
    partitions: dict[Key, int] = field(default_factory=dict)
    """Partition → fetch offset."""
    epoch: int = 1


class KafkaFetchModel:
    """The fetch sessions of one broker (its ``FetchSessionCache``, never full)."""

    def __init__(self, big_records: int = 0) -> None:
        self.sessions: dict[int, ModelSession] = {}
        self._next_id = 1000
        self.big_records = big_records
        """Bytes of padding added to every record set (large answers stream past the proxy)."""

    def evict(self, session_id: int) -> None:
        """The cache evicts a session (``FetchSessionCache.tryEvict``)."""
        self.sessions.pop(session_id, None)

    def answer(self, body: Any, version: int, *, throttled: bool = False) -> Any:
        """The FetchResponse to ``body``."""
        tkey = "topic" if version < 13 else "topic_id"
        fetch_data = {
            (getattr(t, tkey), int(p.partition)): int(p.fetch_offset)
            for t in body.topics
            for p in t.partitions
        }
        to_forget = [
            (getattr(t, tkey), int(i)) for t in body.forgotten_topics_data for i in t.partitions
        ]
        session_id, epoch = int(body.session_id), int(body.session_epoch)
        schema = codec.response_schema(1, version)
        if epoch in (0, -1):  # FetchMetadata.isFull
            return self._full(schema, session_id, epoch, fetch_data, throttled)
        return self._incremental(
            schema, version, session_id, epoch, fetch_data, to_forget, throttled
        )

    def _full(
        self,
        schema: type[Any],
        session_id: int,
        epoch: int,
        fetch_data: dict[Key, int],
        throttled: bool,
    ) -> Any:
        if session_id:
            self.sessions.pop(session_id, None)
        if throttled:
            return self._response(schema, 0, [])
        if epoch == -1:
            return self._response(schema, 0, list(fetch_data))
        self._next_id += 7
        session = ModelSession(self._next_id, int(schema.__version__) >= 13, dict(fetch_data))
        self.sessions[session.session_id] = session
        return self._response(schema, session.session_id, list(fetch_data))

    def _incremental(
        self,
        schema: type[Any],
        version: int,
        session_id: int,
        epoch: int,
        fetch_data: dict[Key, int],
        to_forget: list[Key],
        throttled: bool,
    ) -> Any:
        session = self.sessions.get(session_id)
        if session is None:
            return self._error(schema, ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return self._error(schema, ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != (version >= 13):
            return self._error(schema, ErrorCode.fetch_session_topic_id_error)
        session.partitions.update(fetch_data)
        for key in to_forget:
            session.partitions.pop(key, None)
        if not session.partitions:  # an emptied session is removed: served sessionless
            del self.sessions[session_id]
            return self._response(schema, 0, [] if throttled else list(fetch_data))
        session.epoch = next_epoch(session.epoch)
        if throttled:
            return self._response(schema, 0, [])
        return self._response(schema, session_id, list(session.partitions))

    @staticmethod
    def _error(schema: type[Any], code: ErrorCode) -> Any:
        """``SessionErrorContext``: ``FetchResponse.of(error, 0, INVALID_SESSION_ID, empty)``."""
        return codec.make_entity(schema, code, session_id=0, responses=())

    def _response(self, schema: type[Any], session_id: int, context: list[Key]) -> Any:
        topic_type = codec.nested_type(schema, "responses")
        partition_type = codec.nested_type(topic_type, "partitions")
        tkey = "topic" if "topic" in topic_type.__dataclass_fields__ else "topic_id"
        runs: list[tuple[Any, list[Any]]] = []
        for key in context:
            entry = codec.make_entity(
                partition_type,
                partition_index=key[1],
                high_watermark=10,
                records=records_of(key) + bytes(self.big_records),
            )
            if runs and runs[-1][0] == key[0]:
                runs[-1][1].append(entry)
            else:
                runs.append((key[0], [entry]))
        return codec.make_entity(
            schema,
            throttle_time=timedelta(0),
            session_id=session_id,
            responses=tuple(topic_type(**{tkey: t, "partitions": tuple(ps)}) for t, ps in runs),
        )
