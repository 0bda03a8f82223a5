"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

The proxy is the authorizer, so these are answered from its own ACLs and never forwarded (the
broker behind it has no security; its ACLs, if any, would be meaningless). The logic is
Kafka's ``AclApis`` (the same code serves brokers and controllers):

1. Request parsing. ``DescribeAclsRequest``/``CreateAclsRequest``/``DeleteAclsRequest`` throw
   while parsing when a resource type, pattern type, operation or permission type is the
   wire code 0 (UNKNOWN); Kafka then closes the connection. The proxy closes it too. Other
   unrecognised codes decode to UNKNOWN (``fromCode``) and reach the checks below.
2. ``authHelper.authorizeClusterOperation``: DESCRIBE CLUSTER for DescribeAcls (ALTER
   implies it), ALTER CLUSTER for Create/DeleteAcls. Denied → CLUSTER_AUTHORIZATION_FAILED
   (31) for the whole request as ``getErrorResponse`` builds it: DescribeAcls top-level, one
   result per creation, one filter result per filter.
3. CreateAcls: ``CreateAclsRequest.aclBinding`` builds Java ``ResourcePattern`` and
   ``AccessControlEntry`` objects, whose constructors throw ``IllegalArgumentException`` for
   resource type ANY, pattern type ANY/MATCH, operation ANY or permission ANY. That escapes
   ``handleCreateAcls`` and becomes UNKNOWN_SERVER_ERROR (-1, no message) on every creation;
   nothing is created. Otherwise each binding is validated (42 INVALID_REQUEST with Kafka's
   message — CLUSTER name, empty name, UNKNOWN elements, principal without ``:``) and the
   valid ones are stored, all by :meth:`Authorizer.create_acls`.
4. DeleteAcls: per filter, the bindings it matched *before* the request (KRaft), or 42 for a
   filter with UNKNOWN elements (``AclControlManager.validateFilter``) —
   :meth:`Authorizer.delete_acls`.
5. DescribeAcls: ``Authorizer.acls(filter)`` grouped by resource pattern
   (``DescribeAclsResponse.aclsResources``). It returns every principal's ACLs: DESCRIBE on
   the cluster is all Kafka asks for (spec §5.3).

Create/Delete change the store, which may await I/O: they answer with :class:`RespondLater`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from kafkaguard.policy.authorizer import AclsNotManagedError, ApiError
from kafkaguard.policy.model import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, ResponsePayload
from kafkaguard.proxy.handlers.support.authz import CLUSTER, is_allowed
from kafkaguard.proxy.handlers.support.base import (
    ApiHandler,
    Close,
    HandlerContext,
    Request,
    Respond,
    RespondLater,
    Verdict,
)

_DENIED = ErrorCode.cluster_authorization_failed
_NOT_MANAGED = ErrorCode.security_disabled
_UNKNOWN_CODE = 0


# What the handlers read of kio's classes (any version of each schema).
class _AclFilter(Protocol):
    """A DescribeAcls request, or a DeleteAcls filter: the same fields."""

    @property
    def resource_type_filter(self) -> int: ...
    @property
    def resource_name_filter(self) -> str | None: ...
    @property
    def pattern_type_filter(self) -> int: ...
    @property
    def principal_filter(self) -> str | None: ...
    @property
    def host_filter(self) -> str | None: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


class _AclCreation(Protocol):
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def resource_pattern_type(self) -> int: ...
    @property
    def principal(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


class _CreateAclsBody(Protocol):
    @property
    def creations(self) -> Sequence[_AclCreation]: ...


class _DeleteAclsBody(Protocol):
    @property
    def filters(self) -> Sequence[_AclFilter]: ...


def _has_unknown_code(*codes: int) -> bool:
    """The parse-time check of the three ``XxxAclsRequest`` classes: a raw 0 anywhere."""
    return any(int(code) == _UNKNOWN_CODE for code in codes)


def _filter_has_unknown_code(f: _AclFilter) -> bool:
    """:func:`_has_unknown_code` for a DescribeAcls request or a DeleteAcls filter."""
    return _has_unknown_code(
        f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type
    )


_SCHEMA_DEFAULT = ""
"""Kafka's generated message classes start a nullable string without a ``"default"`` in its
JSON schema as ``""``: the ``errorMessage`` of a successful DescribeAcls response and of a
successful ``AclCreationResult`` stays so on the wire (the DeleteAcls results declare
``"default": "null"``)."""


def _error_fields(
    error: ApiError | None, success_message: str | None = None
) -> dict[str, ErrorCode | str | None]:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": success_message}
    return {"error_code": ErrorCode(int(error.code)), "error_message": error.message}


def acl_filter(f: _AclFilter) -> AclBindingFilter:
    """``DescribeAclsRequest.filter`` / ``DeleteAclsRequest.aclBindingFilter``: ``f`` is a
    DescribeAcls request or a DeleteAcls filter (the same fields)."""
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType.from_code(f.resource_type_filter),
            f.resource_name_filter,
            PatternType.from_code(f.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            f.principal_filter,
            f.host_filter,
            AclOperation.from_code(f.operation),
            AclPermissionType.from_code(f.permission_type),
        ),
    )


def acl_binding(c: _AclCreation) -> AclBinding:
    """``CreateAclsRequest.aclBinding`` (without the Java constructors' checks)."""
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(c.resource_type),
            c.resource_name,
            PatternType.from_code(c.resource_pattern_type),
        ),
        AccessControlEntry(
            c.principal,
            c.host,
            AclOperation.from_code(c.operation),
            AclPermissionType.from_code(c.permission_type),
        ),
    )


class DescribeAclsHandler(ApiHandler[_AclFilter]):
    answered_by_proxy = True
    api_key = 29
    decode_request = True

    def on_request(self, request: Request[_AclFilter], ctx: HandlerContext) -> Verdict:
        body = request.body
        if _filter_has_unknown_code(body):
            return Close("DescribeAclsRequest contains UNKNOWN elements")
        schema = codec.response_schema(self.api_key, request.header.api_version)
        if not is_allowed(ctx, request, AclOperation.DESCRIBE, CLUSTER):
            return Respond(codec.make_entity(schema, _DENIED, resources=()))
        try:
            found = ctx.describe_acls(acl_filter(body))
        except AclsNotManagedError as exc:  # OPA decides: Kafka's answer without ACLs (54)
            return Respond(
                codec.make_entity(schema, _NOT_MANAGED, error_message=str(exc), resources=())
            )
        return Respond(
            codec.make_entity(
                schema,
                error_message=_SCHEMA_DEFAULT,
                resources=self._resources(schema, found),
            )
        )

    @staticmethod
    def _resources(
        schema: type[ResponsePayload], bindings: Iterable[AclBinding]
    ) -> tuple[Entity, ...]:
        """``DescribeAclsResponse.aclsResources``: one resource per pattern, its entries."""
        resource_type = codec.nested_type(schema, "resources")
        description_type = codec.nested_type(resource_type, "acls")
        grouped: dict[ResourcePattern, dict[AccessControlEntry, None]] = {}
        for binding in bindings:
            grouped.setdefault(binding.pattern, {})[binding.entry] = None
        return tuple(
            resource_type(
                resource_type=int(pattern.resource_type),
                resource_name=pattern.name,
                pattern_type=int(pattern.pattern_type),
                acls=tuple(
                    description_type(
                        principal=entry.principal,
                        host=entry.host,
                        operation=int(entry.operation),
                        permission_type=int(entry.permission_type),
                    )
                    for entry in entries
                ),
            )
            for pattern, entries in grouped.items()
        )


_NOT_CONSTRUCTIBLE_PATTERN = (PatternType.ANY, PatternType.MATCH)


class CreateAclsHandler(ApiHandler[_CreateAclsBody]):
    answered_by_proxy = True
    api_key = 30
    decode_request = True

    def on_request(self, request: Request[_CreateAclsBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        if any(
            _has_unknown_code(
                c.resource_type, c.resource_pattern_type, c.operation, c.permission_type
            )
            for c in body.creations
        ):
            return Close("CreatableAcls contain unknown elements")
        schema = codec.response_schema(self.api_key, request.header.api_version)
        result_type = codec.nested_type(schema, "results")
        if not is_allowed(ctx, request, AclOperation.ALTER, CLUSTER):
            return Respond(self._whole(schema, result_type, len(body.creations), _DENIED))
        bindings = [acl_binding(c) for c in body.creations]
        if any(not _constructible(b) for b in bindings):
            return Respond(
                self._whole(schema, result_type, len(bindings), ErrorCode.unknown_server_error)
            )

        async def respond() -> Respond:
            results = await ctx.create_acls(request, bindings)
            return Respond(
                codec.make_entity(
                    schema,
                    results=tuple(
                        result_type(**_error_fields(r.error, _SCHEMA_DEFAULT)) for r in results
                    ),
                )
            )

        return RespondLater(respond)

    @staticmethod
    def _whole(
        schema: type[ResponsePayload],
        result_type: Callable[..., Entity],
        count: int,
        code: ErrorCode,
    ) -> ResponsePayload:
        """``CreateAclsRequest.getErrorResponse``: the same result for every creation."""
        result = result_type(error_code=code, error_message=None)
        return codec.make_entity(schema, results=(result,) * count)


def _constructible(binding: AclBinding) -> bool:
    """Whether Java's ``ResourcePattern``/``AccessControlEntry`` constructors accept it."""
    return not (
        binding.pattern.resource_type == ResourceType.ANY
        or binding.pattern.pattern_type in _NOT_CONSTRUCTIBLE_PATTERN
        or binding.entry.operation == AclOperation.ANY
        or binding.entry.permission_type == AclPermissionType.ANY
    )


class DeleteAclsHandler(ApiHandler[_DeleteAclsBody]):
    answered_by_proxy = True
    api_key = 31
    decode_request = True

    def on_request(self, request: Request[_DeleteAclsBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        if any(_filter_has_unknown_code(f) for f in body.filters):
            return Close("Filters contain UNKNOWN elements")
        schema = codec.response_schema(self.api_key, request.header.api_version)
        filter_result_type = codec.nested_type(schema, "filter_results")
        matching_type = codec.nested_type(filter_result_type, "matching_acls")
        if not is_allowed(ctx, request, AclOperation.ALTER, CLUSTER):
            # DeleteAclsRequest.getErrorResponse: one errored result per filter.
            denied = filter_result_type(error_code=_DENIED, error_message=None, matching_acls=())
            return Respond(codec.make_entity(schema, filter_results=(denied,) * len(body.filters)))
        filters = [acl_filter(f) for f in body.filters]

        async def respond() -> Respond:
            results = await ctx.delete_acls(request, filters)
            # DeleteAclsResponse.filterResult / matchingAcl.
            filter_results = tuple(
                filter_result_type(
                    **_error_fields(result.error),
                    matching_acls=tuple(
                        matching_type(
                            **_error_fields(deleted.error),
                            resource_type=int(deleted.binding.pattern.resource_type),
                            resource_name=deleted.binding.pattern.name,
                            pattern_type=int(deleted.binding.pattern.pattern_type),
                            principal=deleted.binding.entry.principal,
                            host=deleted.binding.entry.host,
                            operation=int(deleted.binding.entry.operation),
                            permission_type=int(deleted.binding.entry.permission_type),
                        )
                        for deleted in result.binding_results
                    ),
                )
                for result in results
            )
            return Respond(codec.make_entity(schema, filter_results=filter_results))

        return RespondLater(respond)


HANDLERS: list[ApiHandler] = [DescribeAclsHandler(), CreateAclsHandler(), DeleteAclsHandler()]
