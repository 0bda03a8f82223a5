"""Issue 24: a Fetch session mirror follows the broker, never the client.

A property test on the exchange core (sans-I/O): a hostile client drives full and incremental
fetches (right and wrong epochs and session ids, additions and forgotten partitions,
pipelined), the ACLs change between requests, and a model of Kafka's ``FetchManager``
(:mod:`tests.support.fetch_session_model`) answers what the proxy forwards — evicting sessions,
throttling, streaming large answers. After every step: every partition carrying records in a
response that leaves the proxy was authorized READ under the ACLs current when its request was
decided.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kafkaguard.protocol import codec
from kafkaguard.protocol.header import peek_correlation_id, peek_request_header
from kafkaguard.proxy.core.exchange import CUT_THROUGH_MIN
from tests.support.exchange_driver import Driver, closed, split_frames, to_broker, to_client
from tests.support.exchange_driver import request as encode_request
from tests.support.fetch_session_model import KafkaFetchModel, next_epoch
from tests.support.handler_harness import acl

TOPICS = ("a", "b", "c")
IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(TOPICS)}
PARTITIONS = [(t, p) for t in TOPICS for p in (0, 1)]
MAX_PIPELINED = 4
VERSIONS = (11, 12, 17)
"""Non-flexible (answers buffered and read at fixed offsets), flexible by name (walked as they
stream), topic ids with ``node_endpoints`` (walked, tail rewritten)."""

partition_sets = st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=4)
incremental = st.tuples(
    st.just("inc"), partition_sets, partition_sets, st.integers(0, 4), st.integers(0, 4)
)
deliver = st.tuples(st.just("deliver"), st.integers(1, MAX_PIPELINED))
actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("full"),
            st.lists(st.sampled_from(PARTITIONS), unique=True, min_size=1, max_size=4),
            st.sampled_from((0, 0, -1)),
            st.integers(0, 4),
        ),
        incremental,
        incremental,
        deliver,
        deliver,
        st.tuples(st.sampled_from(("grant", "revoke")), st.sampled_from(TOPICS)),
        st.tuples(st.sampled_from(("evict", "throttle", "big", "small"))),
    ),
    min_size=8,
    max_size=60,
)
"""Incremental fetches and answers twice as likely as the rest."""

ISSUE_SCENARIO = [
    ("full", [("a", 0)], 0, 0),  # a session on a-0, READ on a
    ("deliver", 1),
    ("inc", [], [("a", 0)], 4, 0),  # a wrong epoch forgetting a-0
    ("deliver", 1),
    ("revoke", "a"),
    ("inc", [], [], 0, 0),  # the right epoch, naming nothing
    ("deliver", 1),
    ("inc", [], [], 0, 0),
    ("deliver", 1),
]


@dataclass
class Client:
    """A hostile client on one proxy connection, in front of a model broker."""

    version: int
    readable: set[str]
    driver: Driver = field(init=False)
    broker: KafkaFetchModel = field(default_factory=KafkaFetchModel)
    to_answer: deque[bytes] = field(default_factory=deque)
    decided: dict[int, frozenset[str]] = field(default_factory=dict)
    """Correlation id → the topics readable when the proxy decided that request."""
    received: bytearray = field(default_factory=bytearray)
    correlation_id: int = 0
    session_id: int = 0
    epoch: int = 0
    throttle_next: bool = False

    def __post_init__(self) -> None:
        self.driver = Driver(self._acls())
        self.driver.cluster.learn_topic_names((i, n) for n, i in IDS.items())
        self.driver.connect()

    def _acls(self) -> list[Any]:
        return [acl("User:alice", "READ", "TOPIC", t) for t in sorted(self.readable)]

    def set_readable(self, topic: str, allowed: bool) -> None:
        if allowed:
            self.readable.add(topic)
        else:
            self.readable.discard(topic)
        self.driver.authorizer.load_snapshot(self._acls())

    def _key(self, topic: str) -> Any:
        return topic if self.version < 13 else IDS[topic]

    def _name(self, key: Any) -> str:
        return key if isinstance(key, str) else next(n for n, i in IDS.items() if i == key)

    def _session(self, choice: int) -> int:
        """Mostly the session the client learned; else one the broker holds, or a guess."""
        if choice < 3:
            return self.session_id
        candidates = [*self.broker.sessions, 4242]
        return candidates[choice % len(candidates)]

    def fetch(self, session_id: int, epoch: int, named: list[Any], forgotten: list[Any]) -> None:
        schema = codec.request_schema(1, self.version)
        tkey = "topic" if self.version < 13 else "topic_id"
        topic_type = codec.nested_type(schema, "topics")
        partition_type = codec.nested_type(topic_type, "partitions")
        forgotten_type = codec.nested_type(schema, "forgotten_topics_data")
        by_topic: dict[Any, list[int]] = {}
        for topic, index in named:
            by_topic.setdefault(self._key(topic), []).append(index)
        forget: dict[Any, list[int]] = {}
        for topic, index in forgotten:
            forget.setdefault(self._key(topic), []).append(index)
        consumer: dict[str, Any] = (
            {"replica_id": -1}
            if self.version < 15
            else {
                "replica_state": codec.make_entity(
                    codec.nested_type(schema, "replica_state"), replica_id=-1
                )
            }
        )
        body = codec.make_entity(
            schema,
            **consumer,
            max_wait=timedelta(0),
            min_bytes=1,
            max_bytes=1 << 30,
            session_id=session_id,
            session_epoch=epoch,
            topics=tuple(
                topic_type(
                    **{
                        tkey: key,
                        "partitions": tuple(
                            codec.make_entity(
                                partition_type, partition=i, fetch_offset=5, partition_max_bytes=1
                            )
                            for i in indexes
                        ),
                    }
                )
                for key, indexes in by_topic.items()
            ),
            forgotten_topics_data=tuple(
                forgotten_type(**{tkey: key, "partitions": tuple(indexes)})
                for key, indexes in forget.items()
            ),
        )
        while len(self.to_answer) >= MAX_PIPELINED:
            self.deliver(1)
        self.correlation_id += 1
        self.decided[self.correlation_id] = frozenset(self.readable)
        self._run(self.driver.client(encode_request(body, self.correlation_id)))

    def deliver(self, count: int) -> None:
        """The broker answers up to ``count`` forwarded requests, in order; a large answer
        arrives in pieces (so it streams through the proxy)."""
        for _ in range(min(count, len(self.to_answer))):
            frame = self.to_answer.popleft()
            header = peek_request_header(frame)
            body = codec.decode_request(frame, 1, header.api_version)
            answer = self.broker.answer(body, header.api_version, throttled=self.throttle_next)
            self.throttle_next = False
            data = codec.encode_response(answer, header.correlation_id)
            pieces = [data[:11], data[11:40], data[40:]] if len(data) > CUT_THROUGH_MIN else [data]
            for piece in pieces:
                self._run(self.driver.broker(piece))

    def _run(self, commands: list[Any]) -> None:
        assert closed(commands) is None, closed(commands)
        self.to_answer.extend(to_broker(commands))
        self.received += to_client(commands)
        self._check()

    def _check(self) -> None:
        """Every whole response received so far: records only of partitions readable when
        its request was decided."""
        frames = []
        while len(self.received) >= 4:
            size = int.from_bytes(self.received[:4], "big")
            if len(self.received) < 4 + size:
                break
            frames.append(bytes(self.received[: 4 + size]))
            del self.received[: 4 + size]
        for frame in split_frames(b"".join(frames)):
            readable = self.decided.pop(peek_correlation_id(frame))
            response: Any = codec.decode_response(frame, 1, self.version)
            for topic in response.responses:
                name = self._name(getattr(topic, "topic", None) or topic.topic_id)
                for partition in topic.partitions:
                    if partition.records:
                        assert name in readable, (
                            f"records of {name}-{partition.partition_index} left the proxy; "
                            f"readable when decided: {sorted(readable)}"
                        )
            self._follow(response)

    def _follow(self, response: Any) -> None:
        """What a client learns from an answer: a new session's id (epoch 1 next)."""
        if not response.error_code and response.session_id not in (0, self.session_id):
            self.session_id, self.epoch = int(response.session_id), 1

    def act(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "full":
            _, named, epoch, session = action  # mostly without a session id, else closing one
            self.fetch(self._session(session) if session == 4 else 0, epoch, named, [])
        elif kind == "inc":
            _, named, forgotten, epoch_choice, session = action
            session_id = self._session(session)
            held = self.broker.sessions.get(session_id)
            broker_epoch = held.epoch if held is not None else 1
            epoch = [
                self.epoch,
                broker_epoch,
                broker_epoch + len(self.to_answer),
                broker_epoch - 1,
                broker_epoch + 7,
            ][epoch_choice]
            epoch = epoch if epoch not in (0, -1) else 1
            if epoch_choice == 0:
                self.epoch = next_epoch(self.epoch)
            self.fetch(session_id, epoch, named, forgotten)
        elif kind in ("grant", "revoke"):
            self.set_readable(action[1], kind == "grant")
        elif kind == "deliver":
            self.deliver(action[1])
        elif kind == "evict":
            for session_id in list(self.broker.sessions):
                self.broker.evict(session_id)
        elif kind == "throttle":
            self.throttle_next = True
        else:
            self.broker.big_records = CUT_THROUGH_MIN if kind == "big" else 0


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    version=st.sampled_from(VERSIONS),
    readable=st.sets(st.sampled_from(TOPICS)),
    steps=actions,
)
@example(version=12, readable={"a"}, steps=ISSUE_SCENARIO)
@example(version=17, readable={"a"}, steps=[("big",), *ISSUE_SCENARIO])
@example(version=11, readable={"a"}, steps=ISSUE_SCENARIO)
def test_no_record_of_a_partition_unreadable_when_decided_leaves_the_proxy(
    version: int, readable: set[str], steps: list[tuple[Any, ...]]
) -> None:
    client = Client(version, set(readable))
    for step in steps:
        client.act(step)
    client.deliver(len(client.to_answer))
    assert not client.to_answer and not client.decided  # every request was answered
