"""StandardAuthorizer: Kafka's ``StandardAuthorizer`` decisions over an :class:`AclIndex`.

Theory of operation
-------------------
* The ACLs in force are one immutable :class:`AclIndex` held in ``self._index``. ``authorize``
  reads that attribute once per call and never locks; a store change builds a new index
  (incrementally when the change is small) and assigns it — the swap is a single reference
  store, atomic for readers. Writers (store callbacks, ``load_snapshot``) serialise on a lock.
* Until the store's first load completes, ``authorize`` raises
  :class:`AuthorizerNotReadyError` for the whole batch, except for super users
  (``StandardAuthorizer.authorize`` checks super users first). ``start()`` hands out one
  future per listener that resolves when the load is done, so listeners open only then.
* Decisions follow ``StandardAuthorizerData.findAclRule``/``findResult`` exactly (see
  :mod:`.acl_index`); the audit line is ``StandardAuthorizerData.buildAuditMessage``'s.
* Beyond Kafka, off unless configured: CIDR hosts, per-listener super users / allow-everyone,
  group principals (a context's ``groups``: decided as for a subject holding the principal and
  all its groups, :meth:`AclIndex.match` with ``groups``; ``super_users`` may name a group).
* ``super_users``, ``allow_everyone_if_no_acl_found`` and the per-listener overrides can be
  replaced at run time (:meth:`StandardAuthorizer.reconfigure`, a configuration reload): they
  are one immutable :class:`_Policies` object, swapped like the index. Kafka reads these two
  settings once, in ``configure``; here a reload must not need a restart (issue 14).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from kafkaguard.policy.acl_index import (
    AclIndex,
    AclMatch,
    Entry,
    principal_key,
)
from kafkaguard.policy.audit_log import (
    TRACE,
    DecisionEvent,
    DecisionReason,
    audit_logger,
    log_decision,
)
from kafkaguard.policy.authorizer import (
    AclBindingDeleteResult,
    AclCreateResult,
    AclDeleteResult,
    Action,
    ApiError,
    ApiErrorCode,
    AuthorizationResult,
    AuthorizerNotReadyError,
    RequestContext,
    allowed_operations,
    check_literal,
)
from kafkaguard.policy.config import AuthorizerConfig, PolicyInForce
from kafkaguard.policy.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    InvalidAclBindingError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import sort_key
from kafkaguard.policy.stores.base import AclStore

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
_ALLOW_ACL = AclMatch.ALLOW_ACL
_DENY_ACL = AclMatch.DENY_ACL
_NO_ACL = AclMatch.NO_ACL
_FULL_REBUILD_RATIO = 0.05  # above 5% changed, rebuilding beats patching buckets
DecisionListener = Callable[[DecisionEvent], None]


class _Policies:
    """The default policy and the per-listener ones, built together from one
    :class:`AuthorizerConfig`: one reference to swap, so a decision never mixes two configs."""

    __slots__ = ("by_listener", "default")

    def __init__(self, config: AuthorizerConfig) -> None:
        self.default = config.in_force("")
        self.by_listener: dict[str, PolicyInForce] = {
            name: config.in_force(name) for name in config.listeners
        }


class StandardAuthorizer:
    """The default :class:`~kafkaguard.policy.authorizer.Authorizer` (Kafka's semantics)."""

    def __init__(
        self,
        config: AuthorizerConfig | None = None,
        store: AclStore | None = None,
        *,
        decision_listener: DecisionListener | None = None,
    ) -> None:
        self.config = config or AuthorizerConfig()
        self.store = store
        self.decision_listener = decision_listener
        self._index = AclIndex.empty(self.config.host_cidr)
        self._ready = False
        self.loaded_at: float | None = None
        """Wall-clock time the ACL snapshot in force was loaded (None: not yet)."""
        self._swap_lock = threading.Lock()
        self._write_lock: asyncio.Lock | None = None
        self._policies = _Policies(self.config)
        self._load_task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def acl_index(self) -> AclIndex:
        """The ACL snapshot in force (immutable), for offline reasoning (:mod:`.explain`)."""
        return self._index

    def start(self, listeners: Sequence[str]) -> Mapping[str, Awaitable[None]]:  # noqa: C901 - includes the nested load() settling these futures
        """``Authorizer.start``: one future per listener, done when the ACLs are loaded."""
        loop = asyncio.get_running_loop()
        futures: dict[str, asyncio.Future[None]] = {
            name: loop.create_future() for name in listeners
        }

        async def load() -> None:
            try:
                if self.store is not None:
                    self._unsubscribe = self.store.subscribe(self.load_snapshot)
                    await self.store.start()
                    self.load_snapshot(self.store.snapshot())
                else:
                    self.load_snapshot(frozenset())
            except BaseException as exc:
                for fut in futures.values():
                    if not fut.done():
                        fut.set_exception(exc)
                raise
            for fut in futures.values():
                if not fut.done():
                    fut.set_result(None)

        if self._load_task is None:
            self._load_task = loop.create_task(load(), name="authorizer-initial-load")
            # The failure is delivered through the listener futures; keep the task quiet.
            self._load_task.add_done_callback(lambda t: t.cancelled() or t.exception())
        elif self._ready:
            for fut in futures.values():
                fut.set_result(None)
        return futures

    def load_snapshot(self, bindings: Iterable[AclBinding]) -> None:
        """Swap in a new ACL set (store callback, tests); marks the authorizer ready."""
        snapshot = bindings if isinstance(bindings, frozenset) else frozenset(bindings)
        with self._swap_lock:
            current = self._index
            if snapshot is not current.bindings:
                added = snapshot - current.bindings
                removed = current.bindings - snapshot
                if len(added) + len(removed) <= max(64, len(current) * _FULL_REBUILD_RATIO):
                    self._index = current.updated(added, removed)
                else:
                    self._index = AclIndex.build(snapshot, self.config.host_cidr)
            self._ready = True
            self.loaded_at = time.time()

    def reconfigure(self, config: AuthorizerConfig) -> None:
        """Apply a reloaded ``authorizer:`` section: super users, allow-everyone, the
        per-listener overrides and ``host_cidr`` (the ACL index is rebuilt for it). Decisions
        made after the call use the new settings, on every connection, as an ACL change does.

        ``class`` and ``options`` are not applied (they choose and configure the authorizer
        itself: a restart); the ACL store is untouched."""
        policies = _Policies(config)
        with self._swap_lock:
            if config.host_cidr != self.config.host_cidr:
                self._index = AclIndex.build(self._index.bindings, config.host_cidr)
            self.config = replace(
                config, class_path=self.config.class_path, options=self.config.options
            )
            self._policies = policies

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()
        if self.store is not None:
            await self.store.close()

    # -- decisions ---------------------------------------------------------------------------
    def authorize(  # noqa: C901 - hot path; verdict mapping and audit-level check inlined
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        """``StandardAuthorizer.authorize``: one result per action, in order."""
        policies = self._policies  # read once: a reconfigure swaps it whole
        policy = (
            policies.by_listener.get(context.listener_name, policies.default)
            if policies.by_listener
            else policies.default
        )
        listener = self.decision_listener
        groups = context.groups
        super_users = policy.super_users
        # Kafka's super.users check (AclAuthorizer.isSuperUser); with no super user at all (the
        # usual case) not even called, on the allowed path of every request.
        if super_users and context.named_in(super_users):
            for action in actions:
                check_literal(action)
                self._record(context, action, ALLOWED, DecisionReason.SUPER_USER, None, listener)
            return [ALLOWED] * len(actions)
        if not self._ready:
            raise AuthorizerNotReadyError("the authorizer has not finished loading ACLs")
        index = self._index
        principal = context.principal  # principal_key(), inlined
        pkey = None if ":" in principal.principal_type else principal.text
        gkeys = tuple(g.text for g in groups) if groups else ()
        host, address = context.host, context.client_address
        # "Does any ACL apply at all?" only changes a decision under allow.everyone, and only
        # a decision listener reports it otherwise (the audit line does not).
        need_applicable = policy.allow_everyone_if_no_acl_found or listener is not None
        enabled = audit_logger.isEnabledFor
        results: list[AuthorizationResult] = []
        for action in actions:
            pattern = action.resource_pattern
            if pattern.pattern_type != PatternType.LITERAL:
                check_literal(action)
            verdict, entry = index.match(
                pkey,
                host,
                address,
                action.operation,
                pattern.resource_type,
                pattern.name,
                need_applicable,
                gkeys,
            )
            if verdict is _ALLOW_ACL:
                result, reason = ALLOWED, DecisionReason.ALLOW_ACL
            elif verdict is _DENY_ACL:
                result, reason = DENIED, DecisionReason.DENY_ACL
            elif verdict is _NO_ACL and policy.allow_everyone_if_no_acl_found:
                result, reason = ALLOWED, DecisionReason.DEFAULT_ALLOW
            else:
                result, reason = DENIED, DecisionReason.DEFAULT_DENY
            results.append(result)
            # Inline level check (StandardAuthorizerData.logAuditMessage): the message is only
            # built when the audit logger would emit it.
            if result is ALLOWED:
                level = logging.DEBUG if action.log_if_allowed else TRACE
            else:
                level = logging.INFO if action.log_if_denied else TRACE
            if listener is not None or enabled(level):
                self._record(context, action, result, reason, entry, listener, verdict)
        return results

    @staticmethod
    def _record(
        context: RequestContext,
        action: Action,
        result: AuthorizationResult,
        reason: DecisionReason,
        entry: Entry | None,
        listener: DecisionListener | None,
        verdict: AclMatch | None = None,
    ) -> None:
        acl = entry.binding if entry is not None else None
        log_decision(context, action, result, reason, acl)
        if listener is not None:
            implied = entry is not None and entry.operation not in (
                action.operation,
                AclOperation.ALL,
            )
            listener(
                DecisionEvent(
                    context, action, result, reason, acl, implied, verdict is not AclMatch.NO_ACL
                )
            )

    def authorize_by_resource_type(
        self, context: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """``Authorizer.authorizeByResourceType``'s default method (KIP-679, for InitProducerId).

        "May ``operation`` be done on at least one resource of this type?" — no implication;
        a DENY only cancels an ALLOW whose name it covers (:meth:`AclIndex.any_allowed`).
        """
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"Must specify a non-filter operation type, got {operation.name}")
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"Must specify a non-filter resource type, got {resource_type.name}")
        probe = Action(operation, ResourcePattern(resource_type, "hardcode"), 0, True, False)
        if self.authorize(context, [probe])[0] is ALLOWED:
            return ALLOWED
        allowed = self._index.any_allowed(
            principal_key(context.principal),
            context.host,
            context.client_address,
            operation,
            resource_type,
            tuple(g.text for g in context.groups),
        )
        return ALLOWED if allowed else DENIED

    def authorized_operations(
        self, context: RequestContext, resource: ResourcePattern
    ) -> set[AclOperation]:
        """KIP-430 ``AuthHelper.authorizedOperations``: the supported ops allowed, unlogged."""
        return allowed_operations(self, context, resource)

    # -- ACL management ----------------------------------------------------------------------
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """``Authorizer.acls``: every stored binding the filter matches, in a stable order."""
        return sorted((b for b in self._index.bindings if acl_filter.matches(b)), key=sort_key)

    def _lock(self) -> asyncio.Lock:
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        return self._write_lock

    async def _persist(self, add: frozenset[AclBinding], remove: frozenset[AclBinding]) -> None:
        if self.store is None:
            current = self._index.bindings
            self.load_snapshot((current - remove) | add)
        elif add:
            await self.store.add(add)
        else:
            await self.store.remove(remove)

    async def create_acls(
        self, context: RequestContext, bindings: Sequence[AclBinding]
    ) -> list[AclCreateResult]:
        """``createAcls``: invalid bindings fail with 42; the valid ones are stored as one batch.

        Authorizing the caller (ALTER on CLUSTER) is the request handler's job, as in Kafka's
        ``AclApis``.
        """
        results: list[AclCreateResult | None] = []
        valid: list[int] = []
        for i, binding in enumerate(bindings):
            try:
                binding.validate()
            except InvalidAclBindingError as exc:
                results.append(AclCreateResult(ApiError(ApiErrorCode.INVALID_REQUEST, str(exc))))
                continue
            results.append(None)
            valid.append(i)
        if valid:
            try:
                async with self._lock():
                    await self._persist(frozenset(bindings[i] for i in valid), frozenset())
            except Exception as exc:  # noqa: BLE001 - reported per binding, like Kafka
                error = ApiError(ApiErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to store ACLs: {exc}")
                for i in valid:
                    results[i] = AclCreateResult(error)
        return [r if r is not None else AclCreateResult() for r in results]

    async def delete_acls(
        self, context: RequestContext, filters: Sequence[AclBindingFilter]
    ) -> list[AclDeleteResult]:
        """``deleteAcls``: each filter sees the ACLs as they were before the request (KRaft)."""
        async with self._lock():
            before = self._index.bindings
            matched: list[tuple[AclBinding, ...] | ApiError] = []
            for flt in filters:
                if flt.pattern_filter.is_unknown():
                    matched.append(ApiError(ApiErrorCode.INVALID_REQUEST, "Unknown patternFilter."))
                elif flt.entry_filter.is_unknown():
                    matched.append(ApiError(ApiErrorCode.INVALID_REQUEST, "Unknown entryFilter."))
                else:
                    matched.append(
                        tuple(sorted((b for b in before if flt.matches(b)), key=sort_key))
                    )
            doomed = frozenset(b for m in matched if not isinstance(m, ApiError) for b in m)
            error: ApiError | None = None
            if doomed:
                try:
                    await self._persist(frozenset(), doomed)
                except Exception as exc:  # noqa: BLE001 - reported per binding, like Kafka
                    error = ApiError(
                        ApiErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to remove ACLs: {exc}"
                    )
        out = []
        for m in matched:
            if isinstance(m, ApiError):
                out.append(AclDeleteResult(error=m))
            else:
                out.append(AclDeleteResult(tuple(AclBindingDeleteResult(b, error) for b in m)))
        return out
