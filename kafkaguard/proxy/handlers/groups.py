"""Classic group APIs: FindCoordinator, Join/Heartbeat/Leave/SyncGroup, Describe/List/DeleteGroups.

Each handler mirrors its ``KafkaApis.handleXxx`` (Kafka 4.x, api keys 10–16 and 42), its
checks yielded to the dispatcher (``StepwiseHandler``). Join, Heartbeat, Leave and SyncGroup
are the group gate alone (``support/group_gate.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.addresses import coordinators_rewrite
from kafkaguard.proxy.handlers.support.authz import (
    CLUSTER,
    allowed_names,
    authorized_operations_rewrite,
    first_seen,
    group,
    group_checks,
    is_allowed,
    name_actions,
    transactional_id,
)
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    Checks,
    Forward,
    HandlerContext,
    Request,
    Respond,
    StepwiseHandler,
    Verdict,
)
from kafkaguard.proxy.handlers.support.group_gate import GroupBody, GroupGateHandler
from kafkaguard.proxy.handlers.support.responses import (
    entity,
    merge_rewrite,
    response_type,
    split,
    whole_error,
)


class _SyncGroupBody(GroupBody, Protocol):
    """``SyncGroupRequest``: the protocol type and name exist from v5, read only there."""

    @property
    def protocol_type(self) -> str | None: ...

    @property
    def protocol_name(self) -> str | None: ...


class _FindCoordinatorBody(Entity, Protocol):
    """``FindCoordinatorRequest``: ``key`` in v0–3, ``coordinator_keys`` from v4, each read
    only there; ``key_type`` (v1+) by name."""

    @property
    def key(self) -> str: ...

    @property
    def coordinator_keys(self) -> Sequence[str]: ...


class _Coordinator(Protocol):
    """``FindCoordinatorResponse.Coordinator`` (v4+)."""

    @property
    def key(self) -> str: ...


class _DescribeGroupsBody(Entity, Protocol):
    """``DescribeGroupsRequest``; ``include_authorized_operations`` (v3+) is read by name."""

    @property
    def groups(self) -> Sequence[str]: ...


class _DeleteGroupsBody(Entity, Protocol):
    @property
    def groups_names(self) -> Sequence[str]: ...


class _GroupEntry(Entity, Protocol):
    """A group of DescribeGroups' and ListGroups' answers, a result of DeleteGroups'."""

    @property
    def group_id(self) -> str: ...


class _GroupsResponse(Entity, Protocol):
    """``DescribeGroupsResponse`` or ``ListGroupsResponse``."""

    @property
    def groups(self) -> Sequence[_GroupEntry]: ...


class _DeleteGroupsResponse(Entity, Protocol):
    @property
    def results(self) -> Sequence[_GroupEntry]: ...


_GR = TypeVar("_GR", bound=_GroupsResponse)
_DR = TypeVar("_DR", bound=_DeleteGroupsResponse)


class JoinGroupHandler(GroupGateHandler):
    """``handleJoinGroupRequest``: READ GROUP → ``JoinGroupRequest.getErrorResponse`` (generation
    −1, empty leader/member id, protocol name "" before v7 and null after — the kio defaults)."""

    api_key = 11


class HeartbeatHandler(GroupGateHandler):
    api_key = 12


class LeaveGroupHandler(GroupGateHandler):
    """``handleLeaveGroupRequest``: READ GROUP; the error response has no member entries."""

    api_key = 13


class SyncGroupHandler(GroupGateHandler[_SyncGroupBody]):
    """``handleSyncGroupRequest``: v5+ requires protocolType and protocolName
    (``areMandatoryProtocolTypeAndNamePresent``) — INCONSISTENT_GROUP_PROTOCOL before the
    READ GROUP check."""

    api_key = 14

    def before_group(
        self, request: Request[_SyncGroupBody], body: _SyncGroupBody
    ) -> Verdict | None:
        if request.header.api_version >= 5 and (
            body.protocol_type is None or body.protocol_name is None
        ):
            return Respond(whole_error(request, ErrorCode.inconsistent_group_protocol))
        return None


# -- FindCoordinator ---------------------------------------------------------------------------

_GROUP, _TRANSACTION, _SHARE = 0, 1, 2
_FIRST_BATCHED = 4
_FIRST_SHARE = 6


class FindCoordinatorHandler(StepwiseHandler[_FindCoordinatorBody]):
    """``handleFindCoordinatorRequest`` / ``getCoordinator``, keeping the address rewrite.

    GROUP keys need DESCRIBE GROUP (30), TRANSACTION keys DESCRIBE TRANSACTIONAL_ID (53), checked
    per key in request order; v4+ denied keys get ``(-1, "", -1)`` and the code, the rest are
    forwarded; v0–3 answer the whole request with ``prepareOldResponse``. SHARE keys below v6 are
    INVALID_REQUEST per key (Kafka 3.9+), from v6 they need CLUSTER_ACTION on the cluster, whose
    ``ClusterAuthorizationException`` fails the whole batch (31 on every key). An unknown key
    type makes ``CoordinatorType.forId`` throw: the whole request fails with 42.
    """

    api_key = 10
    decode_request = True

    def checks(self, request: Request[_FindCoordinatorBody], ctx: HandlerContext) -> Checks:
        body = request.body
        version = request.header.api_version
        key_type = int(getattr(body, "key_type", _GROUP))
        batched = version >= _FIRST_BATCHED
        keys: Sequence[str] = body.coordinator_keys if batched else (body.key,)
        if key_type not in (_GROUP, _TRANSACTION, _SHARE):
            return Respond(self._all_failed(request, keys, ErrorCode.invalid_request))
        if not keys:  # Kafka maps over no keys: no check at all
            return Forward(rewrite=coordinators_rewrite(ctx))
        if key_type == _SHARE:
            if version < _FIRST_SHARE:
                return Respond(self._all_failed(request, keys, ErrorCode.invalid_request))
            (result,) = yield (Action(AclOperation.CLUSTER_ACTION, CLUSTER, 1, True, True),)
            if result is not AuthorizationResult.ALLOWED:
                return Respond(
                    self._all_failed(request, keys, ErrorCode.cluster_authorization_failed)
                )
            return Forward(rewrite=coordinators_rewrite(ctx))
        if key_type == _GROUP:
            resource, code = group, ErrorCode.group_authorization_failed
        else:
            resource, code = transactional_id, ErrorCode.transactional_id_authorization_failed
        results = yield [Action(AclOperation.DESCRIBE, resource(k), 1, True, True) for k in keys]
        denied = [
            k
            for k, result in zip(keys, results, strict=True)
            if result is not AuthorizationResult.ALLOWED
        ]
        if not denied:
            return Forward(rewrite=coordinators_rewrite(ctx))
        if not batched:
            return Respond(self._all_failed(request, keys, code))
        coordinator_type = codec.nested_type(response_type(request), "coordinators")
        entries: dict[str, list[_Coordinator]] = {}
        for key in denied:
            entries.setdefault(key, []).append(
                # v4+ per-key denial: Node.noNode and the code; Kafka sets no message, so the
                # field keeps its schema default, "" (handleFindCoordinatorRequestV4AndAbove).
                codec.make_entity(
                    coordinator_type,
                    code,
                    key=key,
                    node_id=-1,
                    host="",
                    port=-1,
                    error_message="",
                )
            )
        kept = tuple(k for k in keys if k not in entries)
        merge = merge_rewrite(keys, entries, "coordinators", _coordinator_key)
        return split(
            request,
            "coordinator_keys",
            kept,
            "coordinators",
            merge,
            rewrite=coordinators_rewrite(ctx),
        )

    @staticmethod
    def _all_failed(request: Request, keys: Sequence[str], code: ErrorCode) -> ResponsePayload:
        """``FindCoordinatorRequest.getErrorResponse``: ``prepareOldResponse(error, noNode)``
        before v4, ``prepareErrorResponse(error, keys)`` (every key, with message) after."""
        schema = response_type(request)
        if request.header.api_version < _FIRST_BATCHED:
            return entity(schema, code, message=True, node_id=-1, host="", port=-1)
        coordinator_type = codec.nested_type(schema, "coordinators")
        return codec.make_entity(
            schema,
            coordinators=tuple(
                entity(coordinator_type, code, message=True, key=k, node_id=-1, host="", port=-1)
                for k in keys
            ),
        )


def _coordinator_key(entry: _Coordinator) -> str:
    return str(entry.key)


# -- DescribeGroups / ListGroups / DeleteGroups -------------------------------------------------


class DescribeGroupsHandler(StepwiseHandler[_DescribeGroupsBody]):
    """``handleDescribeGroupsRequest``: DESCRIBE GROUP per requested group (one check per
    occurrence, as Kafka loops), denied → ``DescribeGroupsResponse.groupError(id, 30)``; the rest
    is forwarded. KIP-430 operations (v3+, if requested) are computed by the proxy for groups
    the broker returns with NONE. As in Kafka, the denied groups come first (request order),
    then the coordinator's answer in its own order (grouped by coordinator shard)."""

    api_key = 15
    decode_request = True

    def checks(self, request: Request[_DescribeGroupsBody], ctx: HandlerContext) -> Checks:
        body = request.body
        ids = body.groups
        include_ops = bool(getattr(body, "include_authorized_operations", False))
        results = yield group_checks(AclOperation.DESCRIBE, ids)
        denied = [
            g
            for g, result in zip(ids, results, strict=True)
            if result is not AuthorizationResult.ALLOWED
        ]
        fill = authorized_operations_rewrite(request, ctx) if include_ops else None
        if not denied:
            return FORWARD if fill is None else Forward(rewrite=fill)
        group_type = codec.nested_type(response_type(request), "groups")
        entries: dict[str, list[Entity]] = {}
        for g in denied:
            entries.setdefault(g, []).append(
                entity(group_type, ErrorCode.group_authorization_failed, message=True, group_id=g)
            )
        kept = tuple(g for g in ids if g not in entries)
        errors = tuple(entries[g][0] for g in ids if g in entries)
        sent = set(kept)

        def errors_first(response: _GR) -> _GR:
            broker = tuple(g for g in response.groups if g.group_id in sent)
            return codec.replace(response, groups=errors + broker)

        return split(request, "groups", kept, "groups", errors_first, rewrite=fill)


class ListGroupsHandler(StepwiseHandler):
    """``handleListGroupsRequest``: DESCRIBE CLUSTER (logIfDenied=false) lists every group;
    otherwise each returned group is kept only with DESCRIBE GROUP (logIfDenied=false). Never
    an authorization error (``testListGroupApiWithAndWithoutListGroupAcls``)."""

    api_key = 16

    def checks(self, request: Request, ctx: HandlerContext) -> Checks:
        (result,) = yield (Action(AclOperation.DESCRIBE, CLUSTER, 1, True, False),)
        if result is AuthorizationResult.ALLOWED:
            return FORWARD

        def keep_describable(response: _GR) -> _GR:
            # Checked on the broker's answer, the only place the groups are known: these
            # checks are the context's to make, not the dispatcher's.
            groups = tuple(
                g
                for g in response.groups
                if is_allowed(
                    ctx, request, AclOperation.DESCRIBE, group(g.group_id), log_if_denied=False
                )
            )
            if len(groups) == len(response.groups):
                return response
            return codec.replace(response, groups=groups)

        return Forward(rewrite=keep_describable)


class DeleteGroupsHandler(StepwiseHandler[_DeleteGroupsBody]):
    """``handleDeleteGroupsRequest``: DELETE GROUP per *distinct* group
    (``partitionSeqByAuthorized`` over ``groupsNames.distinct``); one 30 result per denied
    group, after the coordinator's results (as Kafka appends them), the authorized ones
    forwarded."""

    api_key = 42
    decode_request = True

    def checks(self, request: Request[_DeleteGroupsBody], ctx: HandlerContext) -> Checks:
        body = request.body
        distinct = first_seen(body.groups_names)
        actions = name_actions(AclOperation.DELETE, ResourceType.GROUP, distinct)
        allowed = allowed_names(actions, (yield actions))
        if len(allowed) == len(distinct):
            return FORWARD
        result_type = codec.nested_type(response_type(request), "results")
        entries = {
            g: [codec.make_entity(result_type, ErrorCode.group_authorization_failed, group_id=g)]
            for g in distinct
            if g not in allowed
        }
        kept = tuple(g for g in distinct if g in allowed)
        errors = tuple(entries[g][0] for g in distinct if g in entries)
        sent = set(kept)

        def errors_last(response: _DR) -> _DR:
            broker = tuple(r for r in response.results if r.group_id in sent)
            return codec.replace(response, results=broker + errors)

        return split(request, "groups_names", kept, "results", errors_last)


HANDLERS: list[ApiHandler] = [
    FindCoordinatorHandler(),
    JoinGroupHandler(),
    HeartbeatHandler(),
    LeaveGroupHandler(),
    SyncGroupHandler(),
    DescribeGroupsHandler(),
    ListGroupsHandler(),
    DeleteGroupsHandler(),
]
