"""The KIP-504 authorizer contract, in Python.

This module owns the types that cross the boundary between the proxy and any authorizer
(``RequestContext``, ``Action``, results) and the ``Authorizer`` protocol itself; it decides
nothing. ``authorize`` is synchronous and answers in request order, "designed for use with
locally cached ACLs" (``org.apache.kafka.server.authorizer.Authorizer``), so the proxy never
awaits on the hot path. ACL changes are coroutines because a store may persist them.
"""

from __future__ import annotations

import enum
import importlib
import ipaddress
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

from kafkaguard.policy.model import (
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
"""KIP-430: ``Int.MinValue`` in a response means "authorized operations were not requested"."""


class SecurityProtocol(enum.Enum):
    """``SecurityProtocol`` of the listener the request arrived on."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


class AuthorizerNotReadyError(RuntimeError):
    """``AuthorizerNotReadyException``: the ACLs have not been loaded yet."""


class DecisionPendingError(Exception):
    """An authorizer whose decisions live elsewhere (OPA: kafkaguard/policy/opa.py) must look
    some up before it can answer, and does not block the event loop meanwhile: it raises this
    from ``authorize`` (or its two siblings) with ``ready``, done when the lookups are. The
    proxy holds the request, and those after it, awaits ``ready`` and asks again; the
    authorizer then answers from what it looked up. No decision of the failed call was made."""

    def __init__(self, ready: Awaitable[object]) -> None:
        super().__init__("authorization decisions are being looked up")
        self.ready = ready
        self.resume: Callable[[], Any] | None = None
        """Set by the caller that can go on from where it stopped (a two-phase handler's
        ``Authorize`` step, kafkaguard/proxy/handlers/support/ask.py): called instead of
        handling the request again from its start, whose earlier steps may have changed
        state (a fetch session's epoch)."""


class AclsNotManagedError(RuntimeError):
    """``acls()`` of an authorizer that keeps no ACLs (OPA): DescribeAcls answers
    SECURITY_DISABLED (54), as Kafka does without an ACL-managing authorizer; an empty list
    would claim there are none."""


class ApiErrorCode(enum.IntEnum):
    """The Kafka error codes an authorizer reports in Create/DeleteAcls results."""

    UNKNOWN_SERVER_ERROR = -1
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_REQUEST = 42
    SECURITY_DISABLED = 54


@dataclass(frozen=True, slots=True)
class ApiError:
    """``ApiError``: a Kafka error code plus the message sent back to the client."""

    code: ApiErrorCode
    message: str


def java_host_address(address: IPAddress) -> str:
    """``InetAddress.getHostAddress()``: the text ``StandardAuthorizerData`` matches ACL hosts to.

    IPv6 is printed as eight lower-case groups without ``::`` compression; an IPv4-mapped
    address is an ``Inet4Address`` in Java and prints as dotted quad.

    >>> java_host_address(ipaddress.ip_address("::1"))
    '0:0:0:0:0:0:0:1'
    >>> java_host_address(ipaddress.ip_address("::ffff:10.0.0.1"))
    '10.0.0.1'
    """
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    mapped = address.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    groups = address.exploded.split("%", 1)[0].split(":")
    text = ":".join(format(int(group, 16), "x") for group in groups)
    return f"{text}%{address.scope_id}" if address.scope_id else text


class _RequestContextFields(NamedTuple):
    listener_name: str
    security_protocol: SecurityProtocol
    principal: KafkaPrincipal
    client_address: IPAddress
    api_key: int
    api_version: int
    client_id: str | None
    correlation_id: int
    host: str
    groups: tuple[KafkaPrincipal, ...]


class RequestContext(_RequestContextFields):
    """``AuthorizableRequestContext`` (KIP-504): who asks, from where, through which listener.

    Immutable, as Kafka's ``RequestContext`` (final fields): an authorizer may keep it, and no
    later request changes it. A named tuple, not a frozen dataclass: the proxy builds one per
    request (the correlation id is in it), and a frozen dataclass sets each of its nine fields
    through ``object.__setattr__`` (≈ 19k instructions per request, bench/RESULTS.md);
    :meth:`of_request` builds it with one ``tuple.__new__``.

    ``host`` is the client address as Java prints it (``getHostAddress()``), computed from
    ``client_address`` when not given; a connection passes the text it computed once.
    ``groups``: the connection's ``Group:`` principals (kafkaguard/policy/groups.py, beyond
    Kafka's context), held with ``principal`` by the subject a decision is made for.
    """

    __slots__ = ()

    def __new__(
        cls,
        *,
        listener_name: str,
        security_protocol: SecurityProtocol,
        principal: KafkaPrincipal,
        client_address: IPAddress,
        api_key: int,
        api_version: int,
        client_id: str | None = None,
        correlation_id: int = 0,
        host: str = "",
        groups: tuple[KafkaPrincipal, ...] = (),
    ) -> RequestContext:
        return cls.of_request(
            listener_name,
            security_protocol,
            principal,
            client_address,
            host or java_host_address(client_address),
            api_key,
            api_version,
            client_id,
            correlation_id,
            groups,
        )

    def __getnewargs_ex__(self) -> tuple[tuple[()], dict[str, Any]]:
        """Copies and pickles are made through the keyword constructor."""
        return (), self._asdict()

    @classmethod
    def of_request(
        cls,
        listener_name: str,
        security_protocol: SecurityProtocol,
        principal: KafkaPrincipal,
        client_address: IPAddress,
        host: str,
        api_key: int,
        api_version: int,
        client_id: str | None,
        correlation_id: int,
        groups: tuple[KafkaPrincipal, ...] = (),
    ) -> RequestContext:
        """The per-request constructor: every field given, ``host`` already computed."""
        return _new_context(
            cls,
            (
                listener_name,
                security_protocol,
                principal,
                client_address,
                api_key,
                api_version,
                client_id,
                correlation_id,
                host,
                groups,
            ),
        )

    def named_in(self, principals: Collection[str]) -> bool:
        """Whether ``principals`` names this context's principal or one of its groups: as
        ``super.users`` names a principal (Kafka's ``AclAuthorizer.isSuperUser``), where a
        group stands for every member (docs/groups.md). With none named (the usual case) the
        groups are not walked."""
        if not principals:
            return False
        return self.principal.text in principals or any(g.text in principals for g in self.groups)


_new_context: Final = tuple.__new__


@dataclass(frozen=True, slots=True)
class Action:
    """``Action``: one operation on one concrete (LITERAL) resource.

    ``log_if_allowed``/``log_if_denied`` carry KIP-504's AuthorizationMode: filtering a list
    (e.g. Metadata for all topics) must not flood the audit log with denials.
    """

    operation: AclOperation
    resource_pattern: ResourcePattern
    resource_reference_count: int = 1
    log_if_allowed: bool = True
    log_if_denied: bool = True


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """``AclCreateResult``: ``error is None`` means the binding was created (or already existed)."""

    error: ApiError | None = None


@dataclass(frozen=True, slots=True)
class AclBindingDeleteResult:
    binding: AclBinding
    error: ApiError | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """``AclDeleteResult``: every binding a filter matched, or a filter-level error."""

    binding_results: tuple[AclBindingDeleteResult, ...] = ()
    error: ApiError | None = None


@runtime_checkable
class Authorizer(Protocol):
    """KIP-504 ``Authorizer``; implementations are configured by ``authorizer.class``."""

    def start(self, listeners: Sequence[str]) -> Mapping[str, Awaitable[None]]:
        """Begin loading; per listener, an awaitable that completes when it may accept clients.

        Must be called from inside the running event loop.
        """
        ...

    def authorize(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]: ...

    def authorize_by_resource_type(
        self, context: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult: ...

    def authorized_operations(
        self, context: RequestContext, resource: ResourcePattern
    ) -> set[AclOperation]: ...

    async def create_acls(
        self, context: RequestContext, bindings: Sequence[AclBinding]
    ) -> list[AclCreateResult]: ...

    async def delete_acls(
        self, context: RequestContext, filters: Sequence[AclBindingFilter]
    ) -> list[AclDeleteResult]: ...

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]: ...

    async def close(self) -> None: ...


def allowed_operations(
    authorizer: Authorizer, context: RequestContext, resource: ResourcePattern
) -> set[AclOperation]:
    """KIP-430 ``AuthHelper.authorizedOperations``: the operations supported on ``resource``'s
    type that ``authorizer`` allows, asked in one ``authorize`` call and not logged."""
    ops = SUPPORTED_OPERATIONS.get(resource.resource_type, ())
    actions = [Action(op, resource, 1, False, False) for op in ops]
    results = authorizer.authorize(context, actions)
    return {
        op for op, result in zip(ops, results, strict=True) if result is AuthorizationResult.ALLOWED
    }


def check_literal(action: Action) -> None:
    """Authorizers reject a non-LITERAL action pattern (``IllegalArgumentException``)."""
    if action.resource_pattern.pattern_type != PatternType.LITERAL:
        raise ValueError(
            "Only literal resources are supported. Got: "
            f"{action.resource_pattern.pattern_type.name}"
        )


def operations_bitfield(operations: set[AclOperation] | frozenset[AclOperation]) -> int:
    """``Utils.to32BitField``: the KIP-430 int32 for ``authorizedOperations`` fields.

    >>> operations_bitfield({AclOperation.DESCRIBE, AclOperation.ALTER})
    384
    """
    bits = 0
    for operation in operations:
        if not 0 <= operation.value < 32:
            raise ValueError(f"operation code {operation.value} does not fit a 32-bit field")
        bits |= 1 << operation.value
    return bits


def load_authorizer(class_path: str, *args: Any, **kwargs: Any) -> Authorizer:
    """Instantiate ``package.module:Class`` (uvicorn-style import string) as the authorizer.

    Sites plug in their own decision point this way; the result is checked against the
    :class:`Authorizer` protocol so a wrong class fails at start, not on the first request.
    """
    module_name, sep, class_name = class_path.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(
            f"authorizer class must look like 'package.module:Class', got {class_path!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import authorizer module {module_name!r}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"module {module_name!r} has no attribute {class_name!r}")
    instance = cls(*args, **kwargs)
    if not isinstance(instance, Authorizer):
        raise ValueError(f"{class_path} does not implement the Authorizer protocol")
    return instance
