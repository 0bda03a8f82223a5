"""Kafka's ACL vocabulary: enums with wire codes, principals, patterns, entries, bindings, filters.

This module owns the *data* of an ACL and Kafka's rules for comparing it (filter matching,
binding validation). It must not decide authorization (that is :mod:`.acl_index`) and must not
do I/O. Names, codes and ``str()`` forms follow ``org.apache.kafka.common.acl`` and
``org.apache.kafka.common.resource`` so that output can be compared with ``kafka-acls.sh``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

CLUSTER_NAME = "kafka-cluster"
"""``Resource.CLUSTER_NAME``: the only name a CLUSTER resource can have."""
WILDCARD_RESOURCE = "*"
"""``ResourcePattern.WILDCARD_RESOURCE``: a LITERAL ACL with this name matches every name."""
WILDCARD_HOST = "*"
"""``AclEntry.WILDCARD_HOST``."""


class InvalidAclBindingError(ValueError):
    """A binding that Kafka would refuse with INVALID_REQUEST (42) in CreateAcls."""


_E = TypeVar("_E", bound="_KafkaEnum")


def _squash(text: str) -> str:
    return text.replace("_", "").replace("-", "").upper()


_NAME_TABLES: dict[type, dict[str, Any]] = {}


def _names(cls: type[_E]) -> dict[str, _E]:
    table = _NAME_TABLES.get(cls)
    if table is None:
        table = _NAME_TABLES[cls] = {_squash(m.name): m for m in cls}
    return table


class _KafkaEnum(enum.IntEnum):
    """An enum whose value is the Kafka wire code and whose name is the Java enum name."""

    @classmethod
    def from_code(cls: type[_E], code: int) -> _E:
        """``fromCode``: unknown codes decode to UNKNOWN rather than failing the request."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @classmethod
    def from_string(cls: type[_E], text: str) -> _E:
        """Lenient ``fromString``: case-insensitive, ``_``/``-`` optional, UNKNOWN if unknown.

        Accepts both the enum name (``DESCRIBE_CONFIGS``, which ``AclOperation.fromString``
        takes) and the PascalCase name (``DescribeConfigs``, which ``SecurityUtils.operation``
        and kafka-acls.sh take).
        """
        found = _names(cls).get(_squash(text.strip()))
        return found if found is not None else cls(0)  # cls(0) is slow: only when needed

    @classmethod
    def parse(cls: type[_E], text: str) -> _E:
        """Like :meth:`from_string` but refuses UNKNOWN, for operator input (files, CLI)."""
        value = cls.from_string(text)
        if value == 0:
            names = ", ".join(m.pascal_name for m in cls if m.value > 0)
            raise ValueError(f"unknown {cls.__name__} {text!r}; expected one of {names}")
        return value

    @property
    def pascal_name(self) -> str:
        """``SecurityUtils.operationName``-style text: ``DescribeConfigs``, ``TransactionalId``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    def __str__(self) -> str:  # Java's Enum.toString: the constant name
        return self.name


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939, Kafka 4.1+


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        """``PatternType.isSpecific``: only LITERAL and PREFIXED can be stored."""
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    # AclEntry.supportedOperations (KIP-430 bitfields, kafka-acls.sh validation).
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (
        AclOperation.DESCRIBE,
        AclOperation.WRITE,
        AclOperation.TWO_PHASE_COMMIT,
    ),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``KafkaPrincipal``: (type, name), both compared case-sensitively."""

    principal_type: str
    name: str
    text: str = field(init=False, repr=False, compare=False)
    """``toString()``, cached: super-user checks compare it on every request."""

    ANONYMOUS: ClassVar[KafkaPrincipal]
    WILDCARD: ClassVar[KafkaPrincipal]
    USER_TYPE: ClassVar[str] = "User"

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", f"{self.principal_type}:{self.name}")

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``SecurityUtils.parseKafkaPrincipal``: split at the *first* colon; none is an error."""
        if not text:
            raise ValueError(
                f"expected a string in format principalType:principalName but got {text!r}"
            )
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(
                f"expected a string in format principalType:principalName but got {text!r}"
            )
        return cls(kind, name)

    @property
    def key(self) -> tuple[str, str]:
        return (self.principal_type, self.name)

    def __str__(self) -> str:
        return self.text


KafkaPrincipal.ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
KafkaPrincipal.WILDCARD = KafkaPrincipal("User", "*")


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """``ResourcePattern``: what a binding protects. Stored bindings are LITERAL or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """``AccessControlEntry``: who, from where, which operation, allow or deny.

    The principal stays a string, like Kafka's, because filters compare it as a string
    (``User:*`` in a filter matches only the literal ``User:*`` entry).
    """

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(
            self.principal, self.host, self.operation, self.permission_type
        )

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """``AclBinding``: one ACL. Construction never fails; :meth:`validate` applies Kafka's rules."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """Refuse what ``AclApis.handleCreateAcls`` + ``AclControlManager.validateNewAcl`` refuse.

        The messages are Kafka's, in Kafka's order. One check goes beyond Kafka: a PREFIXED
        pattern named ``*``. Kafka stores it as an ordinary one-character prefix (names that
        start with ``*``), which is never what an operator means; a DENY written that way
        silently denies nothing, so kafkaguard refuses it and points to LITERAL ``*``.

        Raises:
            InvalidAclBindingError: with a message fit for an INVALID_REQUEST error string.
        """
        pattern, entry = self.pattern, self.entry
        if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
            raise InvalidAclBindingError(
                f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )
        if not pattern.name:
            raise InvalidAclBindingError("Invalid empty resource name")
        if not pattern.pattern_type.is_specific:
            raise InvalidAclBindingError(f"Invalid patternType {pattern.pattern_type.name}")
        if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclBindingError(f"Invalid resourceType {pattern.resource_type.name}")
        if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAclBindingError(f"Invalid operation {entry.operation.name}")
        if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclBindingError(f"Invalid permissionType {entry.permission_type.name}")
        if ":" not in entry.principal:
            raise InvalidAclBindingError(
                f"Could not parse principal from `{entry.principal}` (no colon is present "
                "separating the principal type from the principal name)"
            )
        if pattern.pattern_type == PatternType.PREFIXED and pattern.name == WILDCARD_RESOURCE:
            raise InvalidAclBindingError(
                "A PREFIXED pattern named '*' only matches names starting with '*'; "
                "use a LITERAL '*' pattern to match every resource (kafkaguard rule)"
            )

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """``ResourcePatternFilter``: ``name=None`` means any name; ANY/MATCH pattern types allowed."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    ANY: ClassVar[ResourcePatternFilter]

    def is_unknown(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
        )

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``: ANY is exact on the name, MATCH is not."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        ptype = self.pattern_type
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if ptype == PatternType.ANY or ptype == pattern.pattern_type:
            return self.name == pattern.name
        # MATCH: the ACLs that would apply to a resource of this literal name.
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def matches_at_most_one(self) -> bool:
        """``matchesAtMostOne``: no wildcard field, so the filter names one pattern."""
        return (
            self.name is not None
            and self.resource_type != ResourceType.ANY
            and self.pattern_type.is_specific
        )

    def __str__(self) -> str:
        name = "<any>" if self.name is None else self.name
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={name}, "
            f"patternType={self.pattern_type.name})"
        )


ResourcePatternFilter.ANY = ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """``AccessControlEntryFilter``: ``None`` principal/host and ANY op/permission match all."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    ANY: ClassVar[AccessControlEntryFilter]

    def is_unknown(self) -> bool:
        return (
            self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        )

    def matches(self, entry: AccessControlEntry) -> bool:
        """Exact comparisons: ``User:*`` and host ``*`` are not wildcards here, nor is ALL."""
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation == AclOperation.ANY or self.operation == entry.operation)
            and (
                self.permission_type == AclPermissionType.ANY
                or self.permission_type == entry.permission_type
            )
        )

    def __str__(self) -> str:
        principal = "<any>" if self.principal is None else self.principal
        host = "<any>" if self.host is None else self.host
        return (
            f"(principal={principal}, host={host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


AccessControlEntryFilter.ANY = AccessControlEntryFilter(
    None, None, AclOperation.ANY, AclPermissionType.ANY
)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """``AclBindingFilter``: DescribeAcls/DeleteAcls selection of stored bindings."""

    pattern_filter: ResourcePatternFilter
    entry_filter: AccessControlEntryFilter

    ANY: ClassVar[AclBindingFilter]

    def is_unknown(self) -> bool:
        """``isUnknown``: the controller refuses such filters with INVALID_REQUEST (42)."""
        return self.pattern_filter.is_unknown() or self.entry_filter.is_unknown()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(
            binding.entry
        )

    def __str__(self) -> str:
        return f"(patternFilter={self.pattern_filter}, entryFilter={self.entry_filter})"


AclBindingFilter.ANY = AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter.ANY)


def acl_binding(
    resource_type: ResourceType,
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    *,
    host: str = WILDCARD_HOST,
    pattern_type: PatternType = PatternType.LITERAL,
) -> AclBinding:
    """Shorthand for tests, the CLI and the benchmark; performs no validation."""
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type),
        AccessControlEntry(principal, host, operation, permission),
    )
