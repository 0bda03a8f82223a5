"""KIP-1071 StreamsGroupHeartbeat (88), with Kafka's internal-topic creation check.

``KafkaApis.handleStreamsGroupHeartbeat`` (Kafka 4.3.1):

1. READ GROUP, else ``getErrorResponse(GROUP_AUTHORIZATION_FAILED)`` (30).
2. With a topology: the distinct topics of every subtopology (source, repartition sink,
   repartition source, state changelog) must not be Kafka's internal topics, then must be valid
   names (STREAMS_INVALID_TOPOLOGY, 130, with Kafka's message each), then must all be
   DESCRIBE-able (``filterByAuthorized``), else a bare TOPIC_AUTHORIZATION_FAILED (29).
3. The coordinator (``GroupMetadataManager``, ``InternalTopicManager.configureTopics``) reports
   the topology's missing internal topics (changelog and repartition source topics) as the
   ``status`` MISSING_INTERNAL_TOPICS ("Internal topics are missing: …") and returns them as
   ``creatableTopics``. KafkaApis creates them all with CREATE CLUSTER (``logIfDenied=false``),
   else those allowed CREATE TOPIC each; for the rest it appends "; Unauthorized to CREATE on
   topics a, b." to that status. The member still joins and the group waits (no tasks).

The broker behind the proxy has no authorizer: it would create every missing internal topic.
So before forwarding, the proxy makes sure none it may not create is missing:

* internal topics all creatable (CREATE CLUSTER or CREATE TOPIC on each, checked silently) →
  forwarded as is: whatever the broker creates, Kafka would have created too;
* otherwise the broker is asked which of them exist (:func:`ask.ask_which_exist`, a Metadata
  question without auto-creation); Kafka's CREATE checks then run, logged as Kafka logs them,
  on the missing ones only. All creatable → forwarded. Some not → the proxy answers itself,
  without forwarding (fail closed): error NONE, the member's own id and epoch, no tasks, and
  Kafka's MISSING_INTERNAL_TOPICS status — after the coordinator's request validation
  (:func:`invalid_request`), which the broker does not get to run. Removing the topics from
  the forwarded topology instead would register a different topology with the coordinator (a
  changelog-less store, a subtopology without its repartition input), so the group would run
  wrong rather than wait. Unlike Kafka, the member is not registered with the coordinator
  while it waits (docs/deviations.md, measured in tests/conformance/test_streams_groups.py).

Heartbeats without a topology can also make the coordinator create topics (it reconfigures the
group's stored topology when topic metadata changes), so the proxy remembers, per connection,
the internal topics of each member's last topology and checks them on every heartbeat. A
member whose topology the proxy never saw (it joined on another connection) is told
FENCED_MEMBER_EPOCH unless it may CREATE CLUSTER: the client then rejoins with its topology
(``StreamsMembershipManager``), which the proxy checks. Leave heartbeats (epoch < 0) create
nothing and are forwarded.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Final, Protocol
from uuid import UUID

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation, ResourcePattern, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.partitions import topic_name_error
from kafkaguard.proxy.handlers.support.authz import (
    INTERNAL_TOPICS,
    allowed_names,
    filter_authorized,
    first_seen,
    name_actions,
)
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    Checks,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import Named
from kafkaguard.proxy.handlers.support.group_gate import GroupBody, GroupGateHandler
from kafkaguard.proxy.handlers.support.questions import ask_which_exist
from kafkaguard.proxy.handlers.support.responses import entity, response_type, whole_error

MISSING_INTERNAL_TOPICS: Final = 3
"""``StreamsGroupHeartbeatResponse.Status.MISSING_INTERNAL_TOPICS``."""
_CLUSTER: Final = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster")
_REMEMBERED: Final = 64
"""Members remembered per connection (one Streams client uses one member per connection)."""
_HEARTBEAT_INTERVAL: Final = timedelta(milliseconds=5000)
"""``group.streams.heartbeat.interval.ms``'s default, for an answer the coordinator never saw
(Kafka 4.3.1's coordinator leaves acceptable recovery lag and task offset interval at 0)."""


class _Subtopology(Protocol):
    """``StreamsGroupHeartbeatRequest.Subtopology``."""

    @property
    def source_topics(self) -> Sequence[str] | None: ...

    @property
    def repartition_sink_topics(self) -> Sequence[str] | None: ...

    @property
    def repartition_source_topics(self) -> Sequence[Named] | None: ...

    @property
    def state_changelog_topics(self) -> Sequence[Named] | None: ...


class _Topology(Protocol):
    @property
    def subtopologies(self) -> Sequence[_Subtopology] | None: ...


class StreamsHeartbeatBody(GroupBody, Protocol):
    """What the handler reads of a ``StreamsGroupHeartbeatRequest`` (kio's, v0)."""

    @property
    def member_id(self) -> str: ...

    @property
    def member_epoch(self) -> int: ...

    @property
    def instance_id(self) -> str | None: ...

    @property
    def rack_id(self) -> str | None: ...

    @property
    def rebalance_timeout(self) -> timedelta: ...

    @property
    def topology(self) -> _Topology | None: ...

    @property
    def active_tasks(self) -> Sequence[object] | None: ...

    @property
    def standby_tasks(self) -> Sequence[object] | None: ...

    @property
    def warmup_tasks(self) -> Sequence[object] | None: ...

    @property
    def endpoint_information_epoch(self) -> int: ...


class StreamsTopologies:
    """Per connection: (group id, member id) → the internal topics of the member's last
    topology, oldest first (bounded)."""

    def __init__(self) -> None:
        self.internal: dict[tuple[str, str], tuple[str, ...]] = {}

    def put(self, key: tuple[str, str], topics: tuple[str, ...]) -> None:
        self.internal.pop(key, None)
        self.internal[key] = topics
        while len(self.internal) > _REMEMBERED:
            del self.internal[next(iter(self.internal))]


def topology_topics(topology: _Topology) -> Iterator[str]:
    """Every topic the topology names, in KafkaApis' order (source, repartition sink,
    repartition source, state changelog, per subtopology)."""
    for sub in topology.subtopologies or ():
        yield from sub.source_topics or ()
        yield from sub.repartition_sink_topics or ()
        yield from (t.name for t in sub.repartition_source_topics or ())
        yield from (t.name for t in sub.state_changelog_topics or ())


def internal_topics(topology: _Topology) -> tuple[str, ...]:
    """The topics ``InternalTopicManager`` may create: repartition source and changelog."""
    return tuple(
        first_seen(
            t.name
            for sub in topology.subtopologies or ()
            for t in (*(sub.repartition_source_topics or ()), *(sub.state_changelog_topics or ()))
        )
    )


def summarize(topics: Iterable[str]) -> str:
    """``InternalTopicManager.summarizeTopics``: three names, then how many more."""
    names = sorted(topics)
    if not names:
        return "<none>"
    more = f" and {len(names) - 3} additional topics" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


class StreamsGroupHeartbeatHandler(GroupGateHandler[StreamsHeartbeatBody]):
    """``handleStreamsGroupHeartbeat``; see the module docstring."""

    api_key = 88

    def after_group(
        self,
        request: Request[StreamsHeartbeatBody],
        body: StreamsHeartbeatBody,
        ctx: HandlerContext,
    ) -> Checks:
        """Everything after the group check, up to asking the broker which internal topics
        are missing, each check a step of the dispatcher's."""
        key = (body.group_id, body.member_id)
        state = ctx.connection_state.get(StreamsTopologies)
        if body.topology is not None:
            invalid = yield from self._topology_error(request, body.topology)
            if invalid is not None:
                return invalid
            internal = internal_topics(body.topology)
            state.put(key, internal)
        elif body.member_epoch < 0:
            return FORWARD
        elif key in state.internal:
            internal = state.internal[key]
        elif (yield _create_cluster(log=False))[0] is AuthorizationResult.ALLOWED:
            return FORWARD
        else:
            return Respond(whole_error(request, ErrorCode.fenced_member_epoch, message=True))
        if not internal or (yield from self._may_create_all(internal)):
            return FORWARD
        return self._ask_missing(request, body, ctx, internal)

    def _topology_error(
        self, request: Request, topology: _Topology
    ) -> Generator[Sequence[Action], Sequence[AuthorizationResult], Verdict | None]:
        topics = first_seen(topology_topics(topology))
        kafka_internal = [t for t in topics if t in INTERNAL_TOPICS]
        if kafka_internal:
            return _invalid(
                request,
                f"Use of Kafka internal topics {', '.join(kafka_internal)} in a Kafka Streams "
                "topology is prohibited.",
            )
        invalid = [t for t in topics if topic_name_error(t) is not None]
        if invalid:
            return _invalid(request, f"Topic names {', '.join(invalid)} are not valid topic names.")
        if topics:
            actions = name_actions(AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
            if len(allowed_names(actions, (yield actions))) < len(topics):
                return Respond(whole_error(request, ErrorCode.topic_authorization_failed))
        return None

    @staticmethod
    def _may_create_all(
        topics: Iterable[str],
    ) -> Generator[Sequence[Action], Sequence[AuthorizationResult], bool]:
        """The silent pre-check: Kafka checks CREATE only on topics found missing, so nothing
        is logged here; the logged checks run in :meth:`_ask_missing`."""
        if (yield _create_cluster(log=False))[0] is AuthorizationResult.ALLOWED:
            return True
        names = set(topics)
        actions = name_actions(AclOperation.CREATE, ResourceType.TOPIC, names, logged=False)
        return allowed_names(actions, (yield actions)) == names

    def _ask_missing(
        self,
        request: Request,
        body: StreamsHeartbeatBody,
        ctx: HandlerContext,
        internal: tuple[str, ...],
    ) -> Verdict:
        def then(existing: dict[str, UUID | None]) -> Verdict:
            return self._decide(request, body, ctx, [t for t in internal if t not in existing])

        asked = ask_which_exist(ctx, internal, then)
        # A broker that cannot be asked without creating them: treat every one as missing.
        return asked if asked is not None else then({})

    def _decide(
        self, request: Request, body: StreamsHeartbeatBody, ctx: HandlerContext, missing: list[str]
    ) -> Verdict:
        """KafkaApis' checks on ``creatableTopics``, logged as Kafka logs them. They follow the
        broker's answer (an ``AskFirst``), so they are asked of the context here."""
        if not missing or (
            ctx.authorize(request, _create_cluster(log=True))[0] is AuthorizationResult.ALLOWED
        ):
            return FORWARD
        allowed = filter_authorized(ctx, request, AclOperation.CREATE, ResourceType.TOPIC, missing)
        denied = [t for t in missing if t not in allowed]
        if not denied:
            return FORWARD
        invalid = invalid_request(body)
        if invalid is not None:
            return Respond(whole_error(request, ErrorCode.invalid_request, error_message=invalid))
        return Respond(_waiting(request, body, missing, denied))


_JAVA_WHITESPACE: Final = "".join(map(chr, range(33)))
"""What Java's ``String.trim`` removes."""


def invalid_request(body: StreamsHeartbeatBody) -> str | None:
    """The first checks of ``GroupCoordinatorService.throwIfStreamsGroupHeartbeatRequestIsInvalid``
    (INVALID_REQUEST), for a request the proxy answers itself, which the coordinator never
    validates: ids, and what a (re-)joining member must send."""
    for value, name in (
        (body.member_id, "MemberId"),
        (body.group_id, "GroupId"),
        (body.instance_id, "InstanceId"),
        (body.rack_id, "RackId"),
    ):
        if value is not None and not value.strip(_JAVA_WHITESPACE):
            return f"{name} can't be empty."
    if body.member_epoch != 0:
        return None
    if body.rebalance_timeout == timedelta(milliseconds=-1):
        return "RebalanceTimeoutMs must be provided in first request."
    for tasks, name in (
        (body.active_tasks, "ActiveTasks"),
        (body.standby_tasks, "StandbyTasks"),
        (body.warmup_tasks, "WarmupTasks"),
    ):
        if tasks is None or tasks:  # Utils.throwIfNotEmptyCollection: null is not empty
            return f"{name} must be empty when (re-)joining."
    return None


def _create_cluster(*, log: bool) -> list[Action]:
    """CREATE on the cluster, never logged when denied (``logIfDenied = false``)."""
    return [Action(AclOperation.CREATE, _CLUSTER, 1, log, False)]


def _invalid(request: Request, message: str) -> Respond:
    return Respond(whole_error(request, ErrorCode.streams_invalid_topology, error_message=message))


def _waiting(
    request: Request, body: StreamsHeartbeatBody, missing: list[str], denied: list[str]
) -> ResponsePayload:
    """The answer of a secured Kafka whose group waits for internal topics, minus the
    coordinator's bookkeeping: no tasks, Kafka's status text (the coordinator's summary, then
    KafkaApis' "Unauthorized to CREATE" suffix). Once the topics exist, the member's next
    heartbeat is forwarded; the coordinator, which never saw it, fences it, and the client
    rejoins with its topology (``StreamsMembershipManager``)."""
    schema = response_type(request)
    detail = (
        f"Internal topics are missing: {summarize(missing)}; "
        f"Unauthorized to CREATE on topics {', '.join(denied)}."
    )
    status = entity(
        codec.nested_type(schema, "status"),
        status_code=MISSING_INTERNAL_TOPICS,
        status_detail=detail,
    )
    return entity(
        schema,
        member_id=body.member_id,
        # The coordinator answers a join with epoch 1 (GroupMetadataManager bumps the member
        # epoch), so the client's next heartbeats are those of a member, not a second join
        # (which must carry a rebalance timeout): the member waits, as on a secured broker.
        member_epoch=max(body.member_epoch, 1),
        status=(status,),
        active_tasks=(),
        standby_tasks=(),
        warmup_tasks=(),
        endpoint_information_epoch=body.endpoint_information_epoch,
        heartbeat_interval=_HEARTBEAT_INTERVAL,
    )


HANDLERS: list[ApiHandler] = [StreamsGroupHeartbeatHandler()]
