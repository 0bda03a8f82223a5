"""Group principals: the groups a connection's principal belongs to (issue 37).

Kafka has no group principals (KAFKA-16707 closed unmerged); Confluent's RBAC and Redpanda's
group-based access control have them as ``Group:<name>``. kafkaguard takes a connection's
groups from any of three sources, all optional and combinable (``authorizer.extensions.groups``):

* a file mapping principals to groups (:class:`GroupsFile`), reloaded when it changes; an
  invalid file is refused with its ``file:line`` and the mapping in force is kept, as the ACL
  file is (:mod:`kafkaguard.policy.stores.file`);
* a claim of the validated OAUTHBEARER token (:func:`claim_groups`), named as Kafka names
  ``sasl.oauthbearer.sub.claim.name``, a dotted path for nested claims (``realm_access.roles``);
* rules in ``ssl.principal.mapping.rules`` syntax over the client certificate's distinguished
  name (:class:`SslGroupMapper`), each rule that matches giving one group.

A source that cannot say what the groups are fails the connection's authentication rather than
giving no groups: a group may be named by a DENY ACL, and a connection whose groups were
silently dropped would escape it (fail closed). No I/O here but the file's read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import yaml

from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.policy.principal_mapping import NoMatchingRuleError, SslPrincipalMapper
from kafkaguard.policy.stores.file import FileStamp, file_stamp

if TYPE_CHECKING:
    from kafkaguard.policy.config import GroupsConfig

GROUP_TYPE: Final = "Group"
"""The principal type of a group, as Confluent's and Redpanda's ``Group:<name>``."""

FILE_FORMAT_VERSION: Final = 1

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class GroupsError(ValueError):
    """A source cannot say which groups a principal belongs to; the message says where."""


def group_principals(names: Iterable[str]) -> tuple[KafkaPrincipal, ...]:
    """``Group:<name>`` for each name, in first-seen order without repeats; a blank name is an
    error (Kafka refuses a blank principal name in an ACL, so it could never be granted)."""
    out: dict[str, KafkaPrincipal] = {}
    for name in names:
        if not name.strip():
            raise GroupsError(f"blank group name {name!r}")
        out.setdefault(name, KafkaPrincipal(GROUP_TYPE, name))
    return tuple(out.values())


# -- the file -----------------------------------------------------------------------------------

GroupMap = Mapping[str, tuple[KafkaPrincipal, ...]]
"""Principal (``User:alice``, as ``KafkaPrincipal.toString``) → its groups."""


def _principal_lines(text: str) -> dict[str, int]:
    """Line of each principal key under ``groups:``, computed only to report an error."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    for key, value in node.value:
        if key.value == "groups" and isinstance(value, yaml.MappingNode):
            return {k.value: k.start_mark.line + 1 for k, _ in value.value}
    return {}


def parse_groups_text(text: str, source: str) -> GroupMap:
    """The mapping of a groups file (``version: 1``, ``groups: {"User:alice": [eng]}``); any
    error names ``source`` and the line of the entry at fault."""
    try:
        document = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise GroupsError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != FILE_FORMAT_VERSION:
        raise GroupsError(f"{source}:1: expected a mapping with version: {FILE_FORMAT_VERSION}")
    unknown = sorted(str(k) for k in document if k not in ("version", "groups"))
    if unknown:
        raise GroupsError(f"{source}: unknown keys {unknown} (expected version and groups)")
    entries = document.get("groups") or {}
    if not isinstance(entries, dict):
        raise GroupsError(f"{source}: groups must be a mapping of principal to a list of groups")
    mapping: dict[str, tuple[KafkaPrincipal, ...]] = {}
    for principal, names in entries.items():
        try:
            mapping[_principal_key(principal)] = group_principals(_names(names))
        except (GroupsError, ValueError) as exc:
            line = _principal_lines(text).get(str(principal))
            raise GroupsError(f"{source}:{line or 1}: {principal!r}: {exc}") from None
    return mapping


def _principal_key(principal: object) -> str:
    if not isinstance(principal, str):
        raise GroupsError("a principal must be a string like 'User:alice'")
    return KafkaPrincipal.parse(principal).text


def _names(names: object) -> list[str]:
    if isinstance(names, str):
        return [names]
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return names
    raise GroupsError(f"groups must be a string or a list of strings, got {names!r}")


class GroupsFile:
    """The groups file, read at start (missing or invalid: an error, as for the ACL file) and
    again by :meth:`refresh` when its (mtime, size, inode) changed. ``generation`` counts the
    mappings put in force, so that a session re-evaluates its groups at its next request."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.generation = 0
        self._mapping: GroupMap = {}
        self._stamp: FileStamp | None = None

    def load(self) -> None:
        """Read the file now; :class:`GroupsError` (and the old mapping kept) when invalid."""
        stamp = file_stamp(self.path)
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GroupsError(f"{self.path}: cannot read: {os.strerror(exc.errno or 0)}") from None
        self._mapping = parse_groups_text(text, str(self.path))
        self._stamp = stamp
        self.generation += 1

    def refresh(self) -> GroupsError | None:
        """Re-read the file if it changed; the error of an invalid one (the mapping in force is
        kept, and the same file is not parsed again until it changes)."""
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return None
        try:
            self.load()
        except GroupsError as exc:
            self._stamp = stamp
            return exc
        return None

    def groups_of(self, principal: KafkaPrincipal) -> tuple[KafkaPrincipal, ...]:
        return self._mapping.get(principal.text, ())


# -- the token ----------------------------------------------------------------------------------


def claim_groups(claims: Mapping[str, object], path: str) -> tuple[KafkaPrincipal, ...]:
    """The groups a validated token's claim at ``path`` (dots descend into objects) names: a
    string is one group, a list of strings many; an absent claim none. Any other value is an
    error (the token's groups are unknown, and a DENY on one of them must not be escaped)."""
    value: object = claims
    for step in path.split("."):
        if not isinstance(value, Mapping):
            raise GroupsError(f"claim {path!r}: {step!r} is not inside an object")
        if step not in value:
            return ()
        value = value[step]
    if isinstance(value, str):
        return group_principals([value])
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return group_principals(value)
    raise GroupsError(f"claim {path!r} is neither a string nor a list of strings")


# -- the certificate ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SslGroupMapper:
    """``ssl.principal.mapping.rules`` syntax and engine (:class:`SslPrincipalMapper`, Java-
    exact), but every rule that matches the DN gives a group, not only the first. ``DEFAULT``
    is refused: it would make the whole DN a group."""

    mapper: SslPrincipalMapper

    @classmethod
    def parse(cls, rules: str) -> SslGroupMapper:
        mapper = SslPrincipalMapper(rules)
        if not mapper.rules:
            raise ValueError("no rules")
        if any(str(rule) == "DEFAULT" for rule in mapper.rules):
            raise ValueError("DEFAULT would make the whole distinguished name a group")
        return cls(mapper)

    def groups_of(self, distinguished_name: str) -> tuple[KafkaPrincipal, ...]:
        """The groups of a certificate's DN (RFC 2253 as Java prints it); a rule that fails on
        it (``NoMatchingRuleError`` from a replacement) is an error, not a missing group."""
        names: list[str] = []
        for rule in self.mapper.rules:
            try:
                name = rule.apply(distinguished_name)
            except NoMatchingRuleError as exc:
                raise GroupsError(str(exc)) from None
            if name is not None:
                names.append(name)
        return group_principals(names)


# -- the sources together -----------------------------------------------------------------------


def merged(
    first: tuple[KafkaPrincipal, ...], second: tuple[KafkaPrincipal, ...]
) -> tuple[KafkaPrincipal, ...]:
    """Both tuples' groups, first-seen order, no repeats (no work when one is empty)."""
    if not second:
        return first
    if not first:
        return second
    return tuple(dict.fromkeys(first + second))


@dataclass(frozen=True, slots=True)
class GroupResolver:
    """The configured sources of ``authorizer.extensions.groups``, shared by every listener of
    the process. The file's groups are looked up by principal (never failing: an invalid file
    keeps the mapping in force); a token's claim and a certificate's DN give the credential's
    own groups at authentication, where a :class:`GroupsError` fails it."""

    file: GroupsFile | None = None
    oauthbearer_claim: str | None = None
    ssl_mapper: SslGroupMapper | None = None

    @classmethod
    def from_config(cls, config: GroupsConfig) -> GroupResolver | None:
        """The sources of a configuration (the file read now: :class:`GroupsError` when it
        cannot be); None when none is configured, so that a session pays nothing."""
        if not config.configured:
            return None
        groups_file = GroupsFile(config.file) if config.file is not None else None
        if groups_file is not None:
            groups_file.load()
        rules = config.ssl_mapping_rules
        return cls(
            groups_file,
            config.oauthbearer_claim,
            SslGroupMapper.parse(rules) if rules is not None else None,
        )

    @property
    def generation(self) -> int:
        """Changes when a new groups file is in force (a session then looks again)."""
        return self.file.generation if self.file is not None else 0

    def refresh(self) -> GroupsError | None:
        """Re-read the file if it changed (poll and SIGHUP); the error of an invalid one."""
        return self.file.refresh() if self.file is not None else None

    def of_principal(self, principal: KafkaPrincipal) -> tuple[KafkaPrincipal, ...]:
        """The file's groups of ``principal`` (none without a file)."""
        return self.file.groups_of(principal) if self.file is not None else ()

    def of_token(self, claims: Mapping[str, object] | None) -> tuple[KafkaPrincipal, ...]:
        """The groups a validated OAUTHBEARER token's claim names (PLAIN and SCRAM have no
        claims: none)."""
        if claims is None or self.oauthbearer_claim is None:
            return ()
        return claim_groups(claims, self.oauthbearer_claim)

    def of_certificate(self, distinguished_name: str | None) -> tuple[KafkaPrincipal, ...]:
        """The groups the mapping rules give a client certificate's DN (none without one)."""
        if distinguished_name is None or self.ssl_mapper is None:
            return ()
        return self.ssl_mapper.groups_of(distinguished_name)
