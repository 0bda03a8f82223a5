"""AclIndex: an immutable, indexed snapshot of the ACLs and Kafka's matching rules over it.

Theory of operation
-------------------
Kafka's ``StandardAuthorizerData.findAclRule`` keeps ACLs in a set sorted by (type, name
*descending*, ...) and walks from the requested name through its shorter prefixes to the
literal ``*``. The outcome equals the set-based pseudo-code of spec §2.2: gather every ACL of
the resource type that is LITERAL with the exact name or ``*``, or PREFIXED with a prefix of the
name; any matching DENY wins; else any matching ALLOW; else "no ACL applies" (→
``allow.everyone.if.no.acl.found``) or default deny.

Here the same ACLs are found by hashing instead of walking:

* ``literal[type][name]`` holds LITERAL ACLs, including the ``*`` ones;
* ``prefixed[type][prefix]`` holds PREFIXED ACLs; a request for ``orders-eu`` probes
  ``name[:L]`` for the prefix lengths ``L`` in use, shortest first, through a walk dict that
  also holds every ACL prefix's *stems* at those lengths, so the probe stops at the first
  miss (a name no ACL prefix starts like costs one lookup);
* each bucket maps the ACL's principal ``(type, name)`` to its entries, so a request looks up
  its own principal and ``User:*`` and never scans other users' ACLs.

Worked example (request: User:bob READ TOPIC ``alpha`` from 10.0.0.1)::

    literal[TOPIC]["alpha"]  {User:alice: ALLOW READ *}          applicable, no match for bob
    prefixed[TOPIC]["alp"]   {User:bob:   DENY READ *}           DENY  -> DENIED, stop
    literal[TOPIC]["*"]      {User:*:     ALLOW ALL *}           (not reached)

The snapshot is never mutated: a change builds a new ``AclIndex`` (cheaply, by copying the
outer dicts and rebuilding only touched buckets) that the authorizer swaps in whole, so readers
never lock. This module does no I/O and no logging.
"""

from __future__ import annotations

import enum
import ipaddress
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from kafkaguard.policy.model import (
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

PrincipalKey = tuple[str, ...]
USER_WILDCARD_KEY: PrincipalKey = ("User", "*")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Entry(NamedTuple):
    """One ACL, pre-digested for matching."""

    host: str
    operation: AclOperation
    allow: bool
    binding: AclBinding
    network: Network | None  # only with the host_cidr extension


Bucket = dict[PrincipalKey, tuple[Entry, ...]]


class Verdict(enum.IntEnum):
    """Why ``match`` decided as it did; maps onto Kafka's audit-log rule names (spec §9)."""

    DENY_ACL = 0  # MatchingAcl with a DENY
    ALLOW_ACL = 1  # MatchingAcl with an ALLOW
    NO_MATCHING_ACL = 2  # ACLs apply to the resource, none matched: DefaultDeny
    NO_ACL = 3  # nothing applies: DefaultAllow / DefaultDeny per allow.everyone


# StandardAuthorizerData: implication applies to ALLOW ACLs only; ALL matches everything.
_IMPLIES_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
_ALLOW_OPS: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, AclOperation.ALL}) for op in AclOperation
}
_ALLOW_OPS[AclOperation.DESCRIBE] = _IMPLIES_DESCRIBE | {AclOperation.ALL}
_ALLOW_OPS[AclOperation.DESCRIBE_CONFIGS] = _IMPLIES_DESCRIBE_CONFIGS | {AclOperation.ALL}
_DENY_OPS: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, AclOperation.ALL}) for op in AclOperation
}


def principal_key(text: str) -> PrincipalKey:
    """``StandardAcl.kafkaPrincipal``: split at the first ``:``; unparsable never matches."""
    kind, sep, name = text.partition(":")
    return (kind, name) if sep else (text,)


def _parse_network(host: str) -> Network | None:
    if "/" not in host:
        return None
    try:
        return ipaddress.ip_network(host, strict=False)
    except ValueError:
        return None


def _entry(binding: AclBinding, host_cidr: bool) -> Entry:
    e = binding.entry
    return Entry(
        e.host,
        e.operation,
        e.permission_type == AclPermissionType.ALLOW,
        binding,
        _parse_network(e.host) if host_cidr else None,
    )


def _scan(
    entries: tuple[Entry, ...],
    host: str,
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    allow_ops: frozenset[AclOperation],
    deny_ops: frozenset[AclOperation],
) -> Entry | None:
    """``findResult`` over one principal's entries: first matching DENY, else first ALLOW."""
    allow: Entry | None = None
    for entry in entries:
        h = entry.host
        if h != WILDCARD_HOST and h != host:
            net = entry.network
            if net is None or address not in net:
                continue
        if entry.allow:
            if allow is None and entry.operation in allow_ops:
                allow = entry
        elif entry.operation in deny_ops:
            return entry
    return allow


_NO_ACL: tuple[Verdict, None] = (Verdict.NO_ACL, None)
_NO_MATCH: tuple[Verdict, None] = (Verdict.NO_MATCHING_ACL, None)
_STEM: Bucket = {}  # a walk entry that is only a stem of longer prefixes (falsy)


def _walk_index(real: dict[str, Bucket]) -> tuple[dict[str, Bucket], tuple[int, ...]]:
    """Prefixes plus their stems at every prefix length in use, for an early-exit walk.

    Probing ``name[:L]`` for ascending lengths ``L`` can stop at the first miss: if no ACL
    prefix has ``name[:L]`` as a stem, none of the longer probes can hit either.
    """
    lengths = tuple(sorted({len(p) for p in real}))
    walk: dict[str, Bucket] = {}
    for prefix in real:
        size = len(prefix)
        for length in lengths:
            if length >= size:
                break
            walk.setdefault(prefix[:length], _STEM)
    walk.update(real)
    return walk, lengths


class AclIndex:
    """A frozen snapshot; build with :meth:`build`, derive changes with :meth:`updated`."""

    __slots__ = (
        "_by_principal",
        "_literal",
        "_prefix_lengths",
        "_prefix_walk",
        "_prefixed",
        "bindings",
        "host_cidr",
    )

    def __init__(
        self,
        bindings: frozenset[AclBinding],
        literal: dict[ResourceType, dict[str, Bucket]],
        prefixed: dict[ResourceType, dict[str, Bucket]],
        by_principal: dict[tuple[ResourceType, PrincipalKey], tuple[Entry, ...]],
        host_cidr: bool,
    ) -> None:
        self.bindings = bindings
        self.host_cidr = host_cidr
        self._literal = literal
        self._prefixed = prefixed
        self._by_principal = by_principal
        self._prefix_walk: dict[ResourceType, dict[str, Bucket]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        for rtype, real in prefixed.items():
            self._prefix_walk[rtype], self._prefix_lengths[rtype] = _walk_index(real)

    def _derive(
        self,
        bindings: frozenset[AclBinding],
        literal: dict[ResourceType, dict[str, Bucket]],
        prefixed: dict[ResourceType, dict[str, Bucket]],
        by_principal: dict[tuple[ResourceType, PrincipalKey], tuple[Entry, ...]],
        touched_types: set[ResourceType],
    ) -> AclIndex:
        """A sibling index that reuses the prefix walks of untouched resource types."""
        new = AclIndex.__new__(AclIndex)
        new.bindings, new.host_cidr = bindings, self.host_cidr
        new._literal, new._prefixed, new._by_principal = literal, prefixed, by_principal
        new._prefix_walk, new._prefix_lengths = {}, {}
        for rtype, real in prefixed.items():
            if rtype in touched_types or rtype not in self._prefix_walk:
                new._prefix_walk[rtype], new._prefix_lengths[rtype] = _walk_index(real)
            else:
                new._prefix_walk[rtype] = self._prefix_walk[rtype]
                new._prefix_lengths[rtype] = self._prefix_lengths[rtype]
        return new

    @classmethod
    def empty(cls, host_cidr: bool = False) -> AclIndex:
        return cls(frozenset(), {}, {}, {}, host_cidr)

    @classmethod
    def build(cls, bindings: Iterable[AclBinding], host_cidr: bool = False) -> AclIndex:
        """Index every binding; only LITERAL/PREFIXED ones (Kafka never stores other types)."""
        frozen = frozenset(bindings)
        grouped: dict[tuple[PatternType, ResourceType, str, PrincipalKey], list[Entry]] = (
            defaultdict(list)
        )
        for binding in frozen:
            p = binding.pattern
            key = principal_key(binding.entry.principal)
            grouped[(p.pattern_type, p.resource_type, p.name, key)].append(
                _entry(binding, host_cidr)
            )
        literal: dict[ResourceType, dict[str, Bucket]] = {}
        prefixed: dict[ResourceType, dict[str, Bucket]] = {}
        by_principal: dict[tuple[ResourceType, PrincipalKey], list[Entry]] = defaultdict(list)
        for (ptype, rtype, name, pkey), entries in grouped.items():
            if ptype == PatternType.LITERAL:
                target = literal
            elif ptype == PatternType.PREFIXED:
                target = prefixed
            else:
                continue
            target.setdefault(rtype, {}).setdefault(name, {})[pkey] = tuple(entries)
            by_principal[(rtype, pkey)].extend(entries)
        return cls(
            frozen,
            literal,
            prefixed,
            {k: tuple(v) for k, v in by_principal.items()},
            host_cidr,
        )

    def updated(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> AclIndex:
        """A new snapshot with a few bindings changed; cost scales with the change, not the total.

        Only the touched buckets are rebuilt (from the new binding set); the outer dicts are
        shallow-copied so this snapshot stays valid for readers still using it.
        """
        # Removals first, then additions: a binding in both ends up present.
        wanted = frozenset(added)
        add = wanted - self.bindings
        rem = (frozenset(removed) - wanted) & self.bindings
        if not add and not rem:
            return self
        bindings = (self.bindings - rem) | add
        touched = add | rem
        literal = {t: dict(d) for t, d in self._literal.items()}
        prefixed = {t: dict(d) for t, d in self._prefixed.items()}
        by_principal = dict(self._by_principal)
        buckets = {
            (b.pattern.pattern_type, b.pattern.resource_type, b.pattern.name) for b in touched
        }
        pkeys = {(b.pattern.resource_type, principal_key(b.entry.principal)) for b in touched}
        for ptype, rtype, name in buckets:
            if ptype == PatternType.LITERAL:
                target = literal
            elif ptype == PatternType.PREFIXED:
                target = prefixed
            else:
                continue
            bucket = target.get(rtype, {}).get(name, {})
            # Rebuild the bucket from the bindings that were in it plus the added ones.
            members = [
                b
                for entries in bucket.values()
                for b in (e.binding for e in entries)
                if b not in rem
            ] + [
                b
                for b in add
                if (b.pattern.pattern_type, b.pattern.resource_type, b.pattern.name)
                == (ptype, rtype, name)
            ]
            new_bucket: dict[PrincipalKey, list[Entry]] = defaultdict(list)
            for b in members:
                new_bucket[principal_key(b.entry.principal)].append(_entry(b, self.host_cidr))
            per_type = target.setdefault(rtype, {})
            if new_bucket:
                per_type[name] = {k: tuple(v) for k, v in new_bucket.items()}
            else:
                per_type.pop(name, None)
                if not per_type:
                    del target[rtype]
        for rtype, pkey in pkeys:
            kept = [e for e in self._by_principal.get((rtype, pkey), ()) if e.binding not in rem]
            kept += [
                _entry(b, self.host_cidr)
                for b in add
                if b.pattern.resource_type == rtype and principal_key(b.entry.principal) == pkey
            ]
            if kept:
                by_principal[(rtype, pkey)] = tuple(kept)
            else:
                by_principal.pop((rtype, pkey), None)
        touched_types = {rtype for ptype, rtype, _ in buckets if ptype == PatternType.PREFIXED}
        return self._derive(bindings, literal, prefixed, by_principal, touched_types)

    def __len__(self) -> int:
        return len(self.bindings)

    # -- matching (the hot path) ---------------------------------------------------------------
    def match(
        self,
        pkey: PrincipalKey,
        host: str,
        address: ipaddress.IPv4Address | ipaddress.IPv6Address,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> tuple[Verdict, Entry | None]:
        """Kafka's ``findAclRule`` + ``findResult`` for one LITERAL resource (spec §2.2).

        Returns the verdict and the deciding entry (the DENY, or the first ALLOW found), so an
        audit listener gets the rule without a second lookup.
        """
        candidates: list[Bucket] = []
        literal = self._literal.get(resource_type)
        if literal is not None:
            bucket = literal.get(name)
            if bucket is not None:
                candidates.append(bucket)
        walk = self._prefix_walk.get(resource_type)
        if walk is not None:
            get = walk.get
            size = len(name)
            for length in self._prefix_lengths[resource_type]:
                if length > size:
                    break
                bucket = get(name[:length])
                if bucket is None:
                    break  # no ACL prefix continues this stem
                if bucket:
                    candidates.append(bucket)
        if literal is not None and name != WILDCARD_RESOURCE:
            bucket = literal.get(WILDCARD_RESOURCE)
            if bucket is not None:
                candidates.append(bucket)
        if not candidates:
            return _NO_ACL
        allow_ops = _ALLOW_OPS[operation]
        deny_ops = _DENY_OPS[operation]
        check_wildcard = pkey != USER_WILDCARD_KEY
        allow: Entry | None = None
        for bucket in candidates:
            entries = bucket.get(pkey)
            if entries is not None:
                found = _scan(entries, host, address, allow_ops, deny_ops)
                if found is not None:
                    if not found.allow:
                        return Verdict.DENY_ACL, found
                    if allow is None:
                        allow = found
            if check_wildcard:
                entries = bucket.get(USER_WILDCARD_KEY)
                if entries is not None:
                    found = _scan(entries, host, address, allow_ops, deny_ops)
                    if found is not None:
                        if not found.allow:
                            return Verdict.DENY_ACL, found
                        if allow is None:
                            allow = found
        if allow is not None:
            return Verdict.ALLOW_ACL, allow
        return _NO_MATCH

    def principal_entries(
        self, resource_type: ResourceType, pkey: PrincipalKey
    ) -> tuple[Entry, ...]:
        """All ACLs of one type for one principal key, for ``authorizeByResourceType``."""
        return self._by_principal.get((resource_type, pkey), ())
