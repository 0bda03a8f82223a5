"""The whole-request group gate, in two phases: :class:`GroupGateHandler`.

Kafka's group APIs that name one group (JoinGroup, Heartbeat, LeaveGroup, SyncGroup,
OffsetCommit, OffsetDelete, the KIP-848/932/1071 heartbeats, the share-group offset changes)
start with one check on that group (``authHelper.authorize(request.context, READ, GROUP,
groupId)`` in each ``KafkaApis.handleXxx``; DELETE for the offset deletions). A handler built on
this gate returns that check as its first :class:`~.base.Authorize` step; the dispatcher
(``core/dispatch.py``) decides it and hands the result back. What each API does after the
group is allowed — its own checks, again as ``Authorize`` steps, and its verdict — is in the
API's own module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.support.authz import group
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    Authorize,
    Close,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.responses import whole_error


class _GroupStep:
    """The state of the gate's own step (one instance): the handler's later steps carry
    states of their own, so :meth:`GroupGateHandler.on_authorized` tells them apart by it."""

    __slots__ = ()


GROUP_STEP: Final = _GroupStep()


class GroupGateHandler(ApiHandler):
    """One group check for the whole request (``READ GROUP`` unless told otherwise); denied →
    the API's error response built like ``getErrorResponse(GROUP_AUTHORIZATION_FAILED)``.

    A subclass may answer before the check (:meth:`before_group`: Kafka's request validation
    that precedes it), build its own denial (:meth:`group_denied`), decide once the group is
    allowed (:meth:`after_group`, which may return a further :class:`Authorize` step) and read
    the results of those steps (:meth:`after_checks`)."""

    decode_request = True
    group_operation: ClassVar[AclOperation] = AclOperation.READ

    def on_request(self, request: Request, ctx: HandlerContext) -> Verdict | Authorize:
        body: Any = request.body
        early = self.before_group(request, body)
        if early is not None:
            return early
        action = Action(self.group_operation, group(body.group_id), 1, True, True)
        return Authorize((action,), GROUP_STEP)

    def on_authorized(
        self,
        request: Request,
        ctx: HandlerContext,
        state: Any,
        results: Sequence[AuthorizationResult],
    ) -> Verdict | Authorize:
        if state is not GROUP_STEP:
            return self.after_checks(request, ctx, state, results)
        if results[0] is not AuthorizationResult.ALLOWED:
            return Respond(self.group_denied(request, request.body))
        return self.after_group(request, request.body, ctx)

    def before_group(self, request: Request, body: Any) -> Verdict | None:
        return None

    def group_denied(self, request: Request, body: Any) -> Any:
        return whole_error(request, ErrorCode.group_authorization_failed)

    def after_group(self, request: Request, body: Any, ctx: HandlerContext) -> Verdict | Authorize:
        return FORWARD

    def after_checks(
        self,
        request: Request,
        ctx: HandlerContext,
        state: Any,
        results: Sequence[AuthorizationResult],
    ) -> Verdict | Authorize:
        """The verdict once a step :meth:`after_group` returned is decided."""
        return Close(f"{type(self).__name__} asked for authorization it does not read")
