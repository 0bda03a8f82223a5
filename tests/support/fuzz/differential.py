"""The parser differential: every request frame read by the proxy's real path and by Kafka's.

The proxy's side is what the exchange runs (:func:`kafkaguard.proxy.core.dispatch.handle_request`):
the header peek, the registry and version gate, the handler's ``read_request`` (kio's decode
behind :func:`kafkaguard.protocol.guard.check_frame`, or the Produce skim) and the handler's
decision, with a real ``StandardAuthorizer`` that records every action it is asked about
(:class:`tests.support.handler_harness.HandlerHarness`). Kafka's side is
``RequestHeader.parse`` + ``AbstractRequest.parseRequest`` in one JVM
(:mod:`tests.support.kafka_referee`).

Per frame (:func:`compare`): both accept or both refuse; for an accepted frame the proxy's
reading equals Kafka's field by field (the kio body, or the skim's fields, against the
generated ``*JsonConverter``'s form after a per-type normalisation: UUIDs, bytes, durations,
timestamps); and every resource the handler asked the authorizer about is named by a value
Kafka read (a string of the request, the name of a topic id it holds, or the cluster).
Frames whose size prefix does not match their length are framing, not parsing: not compared.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any, Final, TypeVar

from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import MalformedFrame, ProtocolError
from kafkaguard.protocol.header import peek_correlation_id, peek_request_header
from kafkaguard.protocol.skim.metadata import MetadataRequestSkim
from kafkaguard.protocol.skim.produce import IdTopicSkim, ProduceRequestSkim
from kafkaguard.proxy.core.dispatch import decide
from kafkaguard.proxy.handlers import REGISTRY
from kafkaguard.proxy.handlers.support.base import Close, Request
from tests.support.fuzz.frames import FrameGenerator, ResponseGenerator, plausible
from tests.support.handler_harness import HandlerHarness, acl
from tests.support.kafka_referee import KafkaReferee

AGREE_ACCEPT: Final = "agree: both accept"
AGREE_REFUSE: Final = "agree: both refuse"
NOT_COMPARED: Final = (
    "not compared: framing",
    "not compared: version or api key the proxy does not serve",
    "not compared: version Kafka does not read",
    "not compared: body not read by the proxy (forwarded as is)",
)
FRAMING, NOT_SERVED, KAFKA_VERSION_GONE, UNREAD = NOT_COMPARED
PROXY_REFUSES: Final = "disagree: the proxy refuses what Kafka accepts"
PROXY_ACCEPTS: Final = "disagree: the proxy accepts what Kafka refuses"
FIELDS: Final = "disagree: a field reads differently"
AUTHZ: Final = "disagree: an authorized resource Kafka did not read"
FAULT: Final = "disagree: the proxy's handler failed"
REENCODED: Final = "disagree: the proxy's re-encoding reads differently"

_T = TypeVar("_T")

CLUSTER_NAME: Final = "kafka-cluster"
_ZERO_UUID: Final = "AAAAAAAAAAAAAAAAAAAAAA"


@dataclass(frozen=True, slots=True)
class Outcome:
    category: str
    detail: str = ""


# -- documented deviations --------------------------------------------------------------------
# The disagreements docs/deviations.md documents, and how to recognise each in an outcome. A run
# fails on any other: every disagreement this suite found once is fixed, and its frame is a
# regression test in tests/differential.

ERROR_CODE: Final = "error code Kafka 4.3.1 does not define (Kafka reads any int16)"
DOCUMENTED: Final = (ERROR_CODE,)


def classify(detail: str) -> str:
    """The documented deviation (:data:`DOCUMENTED`) an outcome is, or ``""``."""
    if "is not a valid ErrorCode" in detail:
        return ERROR_CODE
    return ""


@dataclass
class Figures:
    """A run's figures: frames compared, by category, and the first examples of each."""

    frames: int = 0
    seconds: float = 0.0
    categories: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    known: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: Outcome, description: str, frame: bytes) -> None:
        self.frames += 1
        self.categories[outcome.category] += 1
        if outcome.category.startswith("disagree"):
            known = classify(outcome.detail)
            self.known[known or "UNKNOWN"] += 1
            kept = self.examples.setdefault(known or outcome.category, [])
            if len(kept) < 5:
                kept.append(f"{description}: {outcome.detail} [{frame.hex()}]")

    @property
    def disagreements(self) -> int:
        return sum(n for c, n in self.categories.items() if c.startswith("disagree"))

    @property
    def compared(self) -> int:
        return sum(n for c, n in self.categories.items() if not c.startswith("not compared"))

    def report(self) -> str:
        agreed = self.categories[AGREE_ACCEPT] + self.categories[AGREE_REFUSE]
        rate = self.frames / self.seconds if self.seconds else 0.0
        lines = [
            f"frames: {self.frames} in {self.seconds:.1f} s ({rate:.0f}/s)",
            f"compared: {self.compared}, agreement: {agreed}"
            f" ({100 * agreed / max(self.compared, 1):.3f} %), disagreements: {self.disagreements}",
        ]
        lines += [f"  {n:>8}  {c}" for c, n in sorted(self.categories.items())]
        lines.append("disagreements by cause:")
        lines += [f"  {n:>8}  {c}" for c, n in sorted(self.known.items())]
        for category, examples in sorted(self.examples.items()):
            lines.append(f"{category}, first examples:")
            lines += [f"    {e[:600]}" for e in examples]
        return "\n".join(lines)


# -- the proxy's reading ---------------------------------------------------------------------


@dataclass(slots=True)
class ProxyReading:
    accepted: bool
    error: str = ""
    body: Any = None
    checked: list[tuple[str, str, str, str]] = field(default_factory=list)
    served: bool = True
    fault: bool = False


def principal_harness(topic_ids: dict[uuid.UUID, str]) -> HandlerHarness:
    """The harness the differential reads with: a principal allowed everything on ``fuzz-``
    resources, so handlers go past their first denial and ask about every resource."""
    acls = [
        acl("User:fuzzer", "ALL", kind, "fuzz-", pattern="PREFIXED")
        for kind in ("TOPIC", "GROUP", "TRANSACTIONAL_ID")
    ]
    return HandlerHarness(acls, principal="User:fuzzer", topic_ids=topic_ids)


def proxy_read(harness: HandlerHarness, frame: bytes) -> ProxyReading:
    """The exchange's request step (``handle_request``) on ``frame``, the checks recorded."""
    try:
        header = peek_request_header(frame)
    except MalformedFrame as exc:
        return ProxyReading(False, f"header: {exc}")
    handler = REGISTRY.get(header.api_key)
    if handler is None or header.api_version not in harness.supported_versions(header.api_key):
        return ProxyReading(False, "not served", served=False)
    try:
        body = handler.read_request(header, frame)
    except ProtocolError as exc:
        return ProxyReading(False, str(exc))
    harness.checks.clear()
    try:
        verdict = decide(handler, Request(header, frame, body), harness)
        denied = any(not result.name.startswith("ALLOW") for _, result in harness.checks)
        if isinstance(verdict, Close) and not denied:
            # A close before any denial is what Kafka does when a request fails to parse
            # (e.g. ``DescribeAclsRequest``'s UNKNOWN codes); after one, it is policy (an
            # acks=0 Produce that may not write).
            return ProxyReading(False, f"handler closes: {verdict.reason}")
    except ProtocolError as exc:
        return ProxyReading(False, f"handler: {exc}")
    except Exception as exc:  # noqa: BLE001 - a handler fault is a finding, reported as one
        return ProxyReading(True, f"{type(exc).__name__}: {exc}", body, fault=True)
    return ProxyReading(True, body=body, checked=harness.checked())


# -- normalisation and comparison ------------------------------------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _kafka_key(name: str, json_object: dict[str, Any]) -> str | None:
    """Kafka's field name for a kio field (kio drops the ``Ms`` of durations/timestamps)."""
    for key in (camel(name), camel(name) + "Ms"):
        if key in json_object:
            return key
    return None


def _uuid_text(value: uuid.UUID | None) -> str:
    """``Uuid.toString()``: URL-safe base64 without padding; kio reads the zero UUID as
    None in the fields Kafka gives ``Uuid.ZERO_UUID`` by default."""
    raw = bytes(16) if value is None else value.bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _millis(value: Any) -> int:
    if isinstance(value, timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime):
        return round((value - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000)
    if isinstance(value, codec.Millis):
        return value.millis
    return int(value)


def compare_value(  # noqa: C901 - one branch per kio wire type
    mine: Any, theirs: Any, kafka_type: str, path: str, out: list[str]
) -> None:
    if mine is None or theirs is None:
        # kio reads the zero UUID as None where Kafka's default is ``Uuid.ZERO_UUID``.
        if kafka_type == "uuid" and _uuid_text(mine) == (theirs or _ZERO_UUID):
            return
        # kio reads a nullable timestamp's -1 (``RecordBatch.NO_TIMESTAMP``) as None.
        if kafka_type == "datetime_i64" and mine is None and theirs == -1:
            return
        if (mine is None) != (theirs is None):
            out.append(f"{path}: proxy {mine!r}, Kafka {theirs!r}")
        return
    if dataclasses.is_dataclass(mine) and not isinstance(mine, codec.Millis):
        compare_entity(mine, theirs, path, out)
        return
    if isinstance(mine, tuple):
        if not isinstance(theirs, list) or len(mine) != len(theirs):
            out.append(f"{path}: proxy {len(mine)} elements, Kafka {theirs!r:.200}")
            return
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            compare_value(a, b, kafka_type, f"{path}[{i}]", out)
        return
    if kafka_type == "uuid":
        same = _uuid_text(mine) == theirs
    elif kafka_type == "records":
        same = True  # the JsonConverter leaves records out; null-ness was compared above
    elif kafka_type == "bytes":
        same = bytes(mine) == base64.b64decode(theirs)
    elif kafka_type in ("timedelta_i32", "timedelta_i64", "datetime_i64"):
        same = _millis(mine) == theirs
    elif kafka_type == "float64":
        same = mine == theirs or (math.isnan(mine) and str(theirs) == "NaN")
        if isinstance(theirs, str) and theirs in ("Infinity", "-Infinity"):
            same = mine == float(theirs)
    elif isinstance(mine, bool) or kafka_type == "string":
        same = mine == theirs
    else:
        same = int(mine) == theirs
    if not same:
        out.append(f"{path}: proxy {mine!r:.200}, Kafka {theirs!r:.200}")


def compare_entity(mine: Any, theirs: Any, path: str, out: list[str]) -> None:
    if not isinstance(theirs, dict):
        out.append(f"{path}: proxy a {type(mine).__name__}, Kafka {theirs!r:.200}")
        return
    for f in dataclasses.fields(mine):
        key = _kafka_key(f.name, theirs)
        if key is None:
            if "tag" not in f.metadata:  # Kafka's JSON leaves out default tagged fields
                out.append(f"{path}.{f.name}: not in Kafka's reading")
            continue
        compare_value(
            getattr(mine, f.name), theirs[key], f.metadata.get("kafka_type", ""), key, out
        )


def compare_skim(skim: ProduceRequestSkim, theirs: dict[str, Any], out: list[str]) -> None:
    """The Produce skim's fields against ``ProduceRequestData``'s."""
    compare_value(
        skim.transactional_id, theirs["transactionalId"], "string", "transactionalId", out
    )
    compare_value(skim.acks, theirs["acks"], "int16", "acks", out)
    topics = theirs["topicData"]
    if len(skim.topic_data) != len(topics):
        out.append(f"topicData: proxy {len(skim.topic_data)}, Kafka {len(topics)} topics")
        return
    for i, (topic, kafka_topic) in enumerate(zip(skim.topic_data, topics, strict=True)):
        if isinstance(topic, IdTopicSkim):
            topic_id = topic.topic_id
            compare_value(topic_id, kafka_topic["topicId"], "uuid", f"topicData[{i}].topicId", out)
        else:
            compare_value(topic.name, kafka_topic["name"], "string", f"topicData[{i}].name", out)
        parts = kafka_topic["partitionData"]
        if len(topic.partition_data) != len(parts):
            out.append(f"topicData[{i}]: proxy {len(topic.partition_data)} partitions")
            continue
        for j, (p, q) in enumerate(zip(topic.partition_data, parts, strict=True)):
            compare_value(p.index, q["index"], "int32", f"topicData[{i}][{j}].index", out)
            compare_value(p.records, q["records"], "records", f"topicData[{i}][{j}].records", out)


def compare_metadata_skim(
    skim: MetadataRequestSkim, theirs: dict[str, Any], out: list[str]
) -> None:
    """The Metadata skim's fields against ``MetadataRequestData``'s; a flag the version lacks
    is not in Kafka's reading (``JsonConverter`` writes a version's fields only), and the skim
    holds it at its default, which the handler does not read there."""
    for name in (
        "allow_auto_topic_creation",
        "include_cluster_authorized_operations",
        "include_topic_authorized_operations",
    ):
        key = _kafka_key(name, theirs)
        if key is not None:
            compare_value(getattr(skim, name), theirs[key], "bool", key, out)
    topics = theirs.get("topics")
    if skim.topics is None or topics is None:
        compare_value(skim.topics, topics, "", "topics", out)
        return
    if len(skim.topics) != len(topics):
        out.append(f"topics: proxy {len(skim.topics)}, Kafka {len(topics)} topics")
        return
    for i, (topic, kafka_topic) in enumerate(zip(skim.topics, topics, strict=True)):
        if "topicId" in kafka_topic:
            compare_value(
                topic.topic_id, kafka_topic["topicId"], "uuid", f"topics[{i}].topicId", out
            )
        compare_value(topic.name, kafka_topic.get("name"), "string", f"topics[{i}].name", out)


def read_values(theirs: Any, harness: HandlerHarness) -> set[str]:
    """Every string Kafka read, and the name of every topic id it read that the proxy knows."""
    found: set[str] = {CLUSTER_NAME}
    stack = [theirs]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            found.add(node)
            if len(node) == 22:
                try:
                    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(node + "=="))
                except ValueError:
                    continue
                name = harness.topic_name(topic_id)
                if name is not None:
                    found.add(name)
    return found


def _acceptance(frame: bytes, kafka: dict[str, Any], mine: ProxyReading) -> Outcome | None:
    """The outcome when the frame is not compared or the two sides do not both accept."""
    if not mine.served:
        return Outcome(NOT_SERVED)
    if not kafka["ok"] and kafka["error"].startswith("UnsupportedVersionException"):
        return Outcome(KAFKA_VERSION_GONE, kafka["error"])
    if mine.fault:
        return Outcome(FAULT, mine.error)
    if mine.accepted == kafka["ok"]:
        return None if mine.accepted else Outcome(AGREE_REFUSE)
    if mine.accepted and mine.body is None:
        return Outcome(UNREAD)
    if mine.accepted:
        return Outcome(PROXY_ACCEPTS, f"Kafka: {kafka['error']}")
    return Outcome(PROXY_REFUSES, f"proxy: {mine.error}; Kafka read {kafka.get('body')}")


def compare(
    harness: HandlerHarness, frame: bytes, kafka: dict[str, Any], mine: ProxyReading | None = None
) -> Outcome:
    """One frame's outcome (see the module docstring)."""
    if len(frame) < 4 or struct.unpack_from(">i", frame)[0] != len(frame) - 4:
        return Outcome(FRAMING)
    mine = mine or proxy_read(harness, frame)
    refused = _acceptance(frame, kafka, mine)
    if refused is not None:
        return refused
    differences: list[str] = []
    header = kafka["header"]
    client_id = peek_request_header(frame).client_id
    compare_value(client_id, header["clientId"], "string", "header.clientId", differences)
    if isinstance(mine.body, ProduceRequestSkim):
        compare_skim(mine.body, kafka["body"], differences)
        # The split of a partly denied Produce reads the frame with kio: the same again.
        version = peek_request_header(frame).api_version
        try:
            decoded = codec.decode_request(frame, 0, version)
        except ProtocolError as exc:
            differences.append(f"Produce split: proxy: {exc}")
        else:
            compare_entity(decoded, kafka["body"], "split", differences)
    elif isinstance(mine.body, MetadataRequestSkim):
        compare_metadata_skim(mine.body, kafka["body"], differences)
    elif mine.body is not None:
        compare_entity(mine.body, kafka["body"], "", differences)
    if differences:
        return Outcome(FIELDS, "; ".join(differences[:5]))
    values = read_values(kafka["body"], harness)
    outside = [c for c in mine.checked if c[2] not in values]
    if outside:
        return Outcome(AUTHZ, f"checked {outside[:3]}")
    return Outcome(AGREE_ACCEPT if mine.body is not None else UNREAD)


# -- runs ------------------------------------------------------------------------------------

BATCH: Final = 2000


def _chunks(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    chunk: list[_T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def generated(seed: int, count: int, topic_ids: Sequence[uuid.UUID]) -> Iterator[tuple[str, bytes]]:
    """The fuzz generator's frames, each cut to its first size-prefixed frame (a frame sent
    twice is one frame to the parsers)."""
    generator = FrameGenerator(seed, topic_ids)
    for index in range(count):
        fuzz = generator.frame(index)
        data = fuzz.data
        if len(data) >= 4:
            size = struct.unpack_from(">i", data)[0]
            if 0 <= size < len(data) - 4:
                data = data[: 4 + size]
        yield f"#{index} {fuzz.description}", data


TOPIC_IDS: Final = {
    uuid.UUID(int=0x5EED_0001 << 64 | 1): "fuzz-ok",
    uuid.UUID(int=0x5EED_0002 << 64 | 2): "guarded",
}


def run(
    referee: KafkaReferee, frames: Iterable[tuple[str, bytes]], figures: Figures | None = None
) -> Figures:
    """Compare every (description, frame): the JVM reads a batch while Python reads it."""
    figures = figures or Figures()
    harness = principal_harness(dict(TOPIC_IDS))
    start = time.perf_counter()
    for chunk in _chunks(frames, BATCH):
        pending = referee.submit([referee.request_op(f) for _, f in chunk])
        readings = [proxy_read(harness, f) for _, f in chunk]
        for (description, frame), kafka, mine in zip(
            chunk, pending.answers(), readings, strict=True
        ):
            figures.add(compare(harness, frame, kafka, mine), description, frame)
    figures.seconds += time.perf_counter() - start
    return figures


def run_seeded(referee: KafkaReferee, seed: int, count: int) -> Figures:
    return run(referee, generated(seed, count, tuple(TOPIC_IDS)))


# -- responses ---------------------------------------------------------------------------------


def response_frames(seed: int, variants: int) -> Iterator[tuple[str, int, int, bytes]]:
    """(description, api key, version, frame): ``variants`` plausible broker responses to every
    (api key, version) the proxy serves, encoded as a broker would."""
    for api_key, handler in sorted(REGISTRY.items()):
        for version in handler.versions:
            schema = codec.response_schema(api_key, version)
            for variant in range(variants):
                body = plausible(schema, f"{seed}/{api_key}/{version}/{variant}", tuple(TOPIC_IDS))
                frame = codec.encode_response(body, variant)
                yield f"{codec.API_NAMES[api_key]} v{version} #{variant}", api_key, version, frame


def mutated_responses(seed: int, count: int) -> Iterator[tuple[str, int, int, bytes]]:
    """``count`` hostile responses (:class:`~tests.support.fuzz.frames.ResponseGenerator`) to
    the served versions."""
    versions = {api_key: handler.versions for api_key, handler in REGISTRY.items()}
    generator = ResponseGenerator(seed, versions, tuple(TOPIC_IDS))
    return (generator.frame(index) for index in range(count))


def run_responses(
    referee: KafkaReferee,
    responses: Iterable[tuple[str, int, int, bytes]],
    figures: Figures | None = None,
) -> Figures:
    """Every (description, api key, version, response frame) read by kio
    (``codec.decode_response``, the rewrites' input) and by Kafka's client, field by field;
    then, where both read it, the proxy's re-encoding of what kio read (what a rewrite sends
    for the fields it does not change) read by Kafka again: the same."""
    figures = figures or Figures()
    start = time.perf_counter()
    for items in _chunks(responses, BATCH):
        kafka = referee.batch([referee.response_op(k, v, f) for _, k, v, f in items])
        reencoded: list[tuple[str, int, int, bytes, dict[str, Any]]] = []
        for (description, api_key, version, frame), theirs in zip(items, kafka, strict=True):
            outcome = _response_outcome(frame, api_key, version, theirs)
            figures.add(outcome, description, frame)
            if outcome.category == AGREE_ACCEPT:
                mine = codec.decode_response(frame, api_key, version)
                again = codec.encode_response(mine, peek_correlation_id(frame))
                reencoded.append((description, api_key, version, again, theirs))
        re_read = referee.batch([referee.response_op(k, v, f) for _, k, v, f, _ in reencoded])
        for (description, _, _, frame, first), second in zip(reencoded, re_read, strict=True):
            if not second["ok"] or first["body"] != second["body"]:
                detail = f"Kafka read {first['body']!r:.300}, then {second.get('body')!r:.300}"
                figures.add(Outcome(REENCODED, detail), description + " re-encoded", frame)
    figures.seconds += time.perf_counter() - start
    return figures


def _response_outcome(frame: bytes, api_key: int, version: int, theirs: dict[str, Any]) -> Outcome:
    try:
        mine = codec.decode_response(frame, api_key, version)
    except ProtocolError as exc:
        if theirs["ok"]:
            return Outcome(PROXY_REFUSES, f"proxy: {exc}; Kafka read {theirs['body']!r:.300}")
        return Outcome(AGREE_REFUSE)
    if not theirs["ok"]:
        return Outcome(PROXY_ACCEPTS, f"Kafka: {theirs['error']}")
    differences: list[str] = []
    compare_entity(mine, theirs["body"], "", differences)
    if differences:
        return Outcome(FIELDS, "; ".join(differences[:5]))
    return Outcome(AGREE_ACCEPT)


def main(seed: int, frames: int) -> int:
    """``./dev fuzz --differential --frames N [--seed S]``: N request frames, then plausible
    responses (one per 10,000 frames, at least 4, per served version) and N/4 hostile ones;
    print the figures; 1 on any disagreement that is not a documented deviation."""
    with KafkaReferee() as referee:
        requests = run_seeded(referee, seed, frames)
        valid = response_frames(seed, max(4, frames // 10_000))
        responses = run_responses(referee, chain(valid, mutated_responses(seed, frames // 4)))
    print(f"seed: {seed}\nrequests:\n{requests.report()}\nresponses:\n{responses.report()}")
    return 1 if requests.known["UNKNOWN"] or responses.known["UNKNOWN"] else 0
