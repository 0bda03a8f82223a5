"""The whole-request group gate: :class:`GroupGateHandler`.

Kafka's group APIs that name one group (JoinGroup, Heartbeat, LeaveGroup, SyncGroup,
OffsetCommit, OffsetDelete, the KIP-848/932/1071 heartbeats, the share-group offset changes)
start with one check on that group (``authHelper.authorize(request.context, READ, GROUP,
groupId)`` in each ``KafkaApis.handleXxx``; DELETE for the offset deletions). A handler built on
this gate yields that check as its first step (:class:`~.base.StepwiseHandler`); the
dispatcher (``core/dispatch.py``) decides it in one ``authorize`` call and sends the result
back. What each API does once the group is allowed — its own checks, yielded the same way, and
its verdict — is in the API's own module.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from typing_extensions import TypeVar  # PEP 696 defaults, in typing itself from 3.13

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.authz import group
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    Checks,
    HandlerContext,
    Request,
    Respond,
    StepwiseHandler,
    Verdict,
)
from kafkaguard.proxy.handlers.support.responses import whole_error


class GroupBody(Entity, Protocol):
    """A request that names one group: what the gate reads of it."""

    @property
    def group_id(self) -> str: ...


G = TypeVar("G", bound=GroupBody, default=GroupBody)
"""The body a :class:`GroupGateHandler` reads: its API's ``Protocol``, a :class:`GroupBody`."""


class GroupGateHandler(StepwiseHandler[G]):
    """One group check for the whole request (``READ GROUP`` unless told otherwise); denied →
    the API's error response built like ``getErrorResponse(GROUP_AUTHORIZATION_FAILED)``.

    A subclass may answer before the check (:meth:`before_group`: Kafka's request validation
    that precedes it), build its own denial (:meth:`group_denied`), and decide once the group
    is allowed (:meth:`after_group`, itself :data:`~.base.Checks`: its further checks are
    ``yield`` steps too)."""

    decode_request = True
    group_operation: ClassVar[AclOperation] = AclOperation.READ

    def checks(self, request: Request[G], ctx: HandlerContext) -> Checks:
        body = request.body
        early = self.before_group(request, body)
        if early is not None:
            return early
        (result,) = yield (Action(self.group_operation, group(body.group_id), 1, True, True),)
        if result is not AuthorizationResult.ALLOWED:
            return Respond(self.group_denied(request, body))
        return (yield from self.after_group(request, body, ctx))

    def before_group(self, request: Request[G], body: G) -> Verdict | None:
        return None

    def group_denied(self, request: Request[G], body: G) -> ResponsePayload:
        return whole_error(request, ErrorCode.group_authorization_failed)

    def after_group(self, request: Request[G], body: G, ctx: HandlerContext) -> Checks:
        """The rest of the decision once the group is allowed: by default, forward."""
        yield from ()
        return FORWARD
