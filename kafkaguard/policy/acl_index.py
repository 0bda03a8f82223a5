"""AclIndex: an immutable, indexed snapshot of the ACLs and Kafka's matching rules over it.

Theory of operation
-------------------
Kafka's ``StandardAuthorizerData.findAclRule`` keeps ACLs in a set sorted by (type, name
*descending*, ...) and walks from the requested name through its shorter prefixes to the
literal ``*``. The outcome equals the set-based rule ZooKeeper's ``AclAuthorizer`` states
directly (``isSuperUser || (acls.isEmpty && allowEveryone) || (!denyExists && allowExists)``):
gather every ACL of the resource type that is LITERAL with the exact name or ``*``, or PREFIXED
with a prefix of the name; any matching DENY wins; else any matching ALLOW; else "no ACL
applies" (→ ``allow.everyone.if.no.acl.found``) or default deny.

Only ACLs of the requesting principal and of ``User:*`` can *match*, and only those from host
``*`` or the request's own host, so the ACLs are indexed per (resource type, principal key)
first (a :class:`_Principal`), then per host key: one :class:`_View` for host ``*`` (with
``host_cidr``, the network ACLs too) and one per specific host. A request reads at most four
views (its principal's and ``User:*``'s, each for ``*`` and its host), however many hosts the
ACLs name: Kafka's JMH ``AuthorizerBenchmark`` gives one principal 20,000 ``*`` ACLs from as
many hosts, which ``StandardAuthorizerData.findAclRule`` scans on every call. In a view:

* ``literal[name]`` holds the principal's LITERAL ACLs, including the ``*`` ones (also kept as
  ``star``);
* ``walk[prefix]`` holds its PREFIXED ACLs; a request for ``orders-eu`` probes ``name[:L]`` for
  the prefix lengths ``L`` this principal uses, shortest first. The walk dict also holds every
  prefix's *stems* at those lengths (as empty tuples), so the probe stops at the first miss.

A request therefore costs a few hash probes in a few small views, however many other
principals hold prefixes of the same name. Principals are keyed by the ACL's principal text
(see :func:`principal_key`), and a view's ``*`` ACLs, when none has a specific host, are also
decided once per operation (``star_by_op``).

``authorizeByResourceType`` (KIP-679) reads the same views through a summary per view and
operation (:class:`_Grants`: the ALLOW and DENY names of that operation or ALL, and the ALLOW
names no DENY of the view itself dominates), made on the view's first such question; Kafka's
default method lists every ACL of the resource type on each call.

Whether *any* ACL (of anybody) applies to the resource only matters when nothing matched: it
separates "no ACL" (``allow.everyone.if.no.acl.found``) from "ACLs apply, none matched". That
is answered afterwards, and only when asked for, from per-type counts: a LITERAL ``*`` ACL
applies to every name; else the literal name is looked up, then the prefixes through a walk like
the one above, over all principals' prefixes, stopping at the first hit.

The deciding entry reported to audit listeners is the one a plain scan ``literal name →
prefixes shortest first → literal *`` (own principal before ``User:*`` at each step) meets
first: the first DENY, else the first ALLOW. Across the two views it is picked by the entry's
rank (its step in that scan).

Worked example (request: User:bob READ TOPIC ``alpha`` from 10.0.0.1)::

    views[TOPIC][User:bob].any_host.literal["alpha"]   (none)
    views[TOPIC][User:bob].any_host.walk["alp"]        DENY READ *        DENY  -> DENIED
    views[TOPIC][User:bob].by_host["10.0.0.1"]         (none)
    views[TOPIC][User:*]                               scanned too; reported only if its DENY
                                                       ranks before "alp" (a LITERAL "alpha")

A connection with groups (``Group:`` principals, kafkaguard/policy/groups.py) is decided as
for a subject holding all of its principals (:meth:`AclIndex.match` with ``groups``): any
matching DENY on any of them denies, else any matching ALLOW allows. Its principal's and
groups' host-``*`` views are merged into one view per subject, made on the subject's first
request and cached in the type's index (:meth:`_TypeIndex.subject_view`), so a request reads
one view for all of them (plus ``User:*``'s and the host views, as above), not one per
principal.

The snapshot is never mutated (the by-type summaries are derived from it and cached in the
views): a change builds a new ``AclIndex`` (cheaply, by copying the per-type dicts, rebuilding
only the touched principals' views and patching the per-type prefix walk) that the authorizer
swaps in whole, so readers never lock. This module does no I/O and no logging.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import ipaddress
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from kafkaguard.policy.model import (
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourceType,
)

PrincipalKey = str
"""An ACL's principal text as stored, e.g. ``User:alice``; see :func:`principal_key`."""
USER_WILDCARD_KEY: PrincipalKey = "User:*"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_LITERAL = PatternType.LITERAL
_PREFIXED = PatternType.PREFIXED


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building large acyclic structures.

    Building an index of 100,000 ACLs allocates millions of small containers and triggers
    repeated full collections that find nothing (measured: ~0.5 s of a ~1 s build). Reference
    counting still frees everything; the collector resumes afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Entry(NamedTuple):
    """One ACL, pre-digested for matching."""

    host: str
    operation: AclOperation
    allow: bool
    binding: AclBinding
    network: Network | None  # only with the host_cidr extension


class AclMatch(enum.IntEnum):
    """Why ``match`` decided as it did; maps onto ``buildAuditMessage``'s rule names."""

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


def principal_key(principal: KafkaPrincipal) -> PrincipalKey | None:
    """The key under which the ACLs that name this (request) principal are indexed.

    Kafka compares ``(type, name)`` with the ACL principal split at its *first* ``:``
    (``StandardAcl.kafkaPrincipal``); ACLs are indexed by their principal text, which is that
    split joined again. For a principal whose type has no ``:`` the two comparisons agree, so
    its key is its text (a str key hashes and compares far faster than a tuple). A type with a
    ``:`` can equal no ACL's split (nor can an ACL text without ``:`` equal any principal):
    ``None``, which only ``User:*`` ACLs then match.
    """
    return None if ":" in principal.principal_type else principal.text


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
    entries: Sequence[Entry],
    host: str,
    address: Address,
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


def _rank(entry: Entry, name: str) -> int:
    """Position of the entry's bucket in the scan order: literal name, prefixes, literal '*'."""
    pattern = entry.binding.pattern
    if pattern.pattern_type == _PREFIXED:
        return len(pattern.name)  # >= 1: names are never empty
    return 0 if pattern.name == name else sys.maxsize


def _before(entry: Entry, found: Entry, name: str, pkey: PrincipalKey | None) -> bool:
    """Does ``entry`` decide before ``found``: a DENY before any ALLOW, else the earlier bucket
    in scan order, else (same bucket) the requester's own ACL before ``User:*``'s?"""
    if entry.allow is not found.allow:
        return found.allow
    rank, other = _rank(entry, name), _rank(found, name)
    if rank != other:
        return rank < other
    return entry.binding.entry.principal == pkey != found.binding.entry.principal


def _host_find(
    host_views: dict[PrincipalKey, dict[str, _View]],
    pkey: PrincipalKey | None,
    host: str,
    address: Address,
    operation: AclOperation,
    name: str,
    found: Entry | None,
    groups: tuple[PrincipalKey, ...] = (),
) -> Entry | None:
    """``found`` (from the host-'*' views) or what the request's own host's views of its
    principal, its ``groups`` and ``User:*`` decide before it (the subject's principals, each
    once)."""
    allow_ops = _ALLOW_OPS[operation]
    deny_ops = _DENY_OPS[operation]
    keys = (pkey,) if pkey == USER_WILDCARD_KEY else (pkey, USER_WILDCARD_KEY)
    for key in keys + groups if groups else keys:
        per_host = host_views.get(key) if key is not None else None
        view = per_host.get(host) if per_host is not None else None
        if view is not None:
            other = _find(view, operation, name, host, address, allow_ops, deny_ops)
            if other is not None and (found is None or _before(other, found, name, pkey)):
                found = other
    return found


_new_entry = tuple.__new__  # Entry's own __new__ is a Python function: 2x slower at load
_DENY_ACL = AclMatch.DENY_ACL
_ALLOW_ACL = AclMatch.ALLOW_ACL
_ANY_ADDRESS = ipaddress.IPv4Address(0)  # for scans where every host is '*'
_NO_ACL: tuple[AclMatch, None] = (AclMatch.NO_ACL, None)
_NO_MATCH: tuple[AclMatch, None] = (AclMatch.NO_MATCHING_ACL, None)
_STEM: tuple[Entry, ...] = ()  # a walk entry that is only a stem of longer prefixes (falsy)


def _stems(prefixes: Iterable[str]) -> tuple[dict[str, bool], tuple[int, ...]]:
    """Stems of the prefixes at every prefix length in use (False), plus the prefixes (True).

    Probing ``name[:L]`` for ascending lengths ``L`` can stop at the first miss: if no prefix
    has ``name[:L]`` as a stem, none of the longer probes can hit either.
    """
    real = list(prefixes)
    lengths = tuple(sorted({len(p) for p in real}))
    walk: dict[str, bool] = {}
    if len(lengths) > 1:
        setdefault = walk.setdefault
        for prefix in real:
            size = len(prefix)
            for length in lengths:
                if length >= size:
                    break
                setdefault(prefix[:length], False)
    walk.update(dict.fromkeys(real, True))
    return walk, lengths


def _patched_walk(
    walk: dict[str, bool], lengths: tuple[int, ...], appeared: list[str], vanished: list[str]
) -> tuple[dict[str, bool], tuple[int, ...]] | None:
    """The applicability walk after prefixes appeared/vanished, or None to rebuild it.

    A vanished prefix stays as a stem (a stem only lets the walk go on, so a stale one costs a
    probe, never a decision); an appeared prefix of a length already in use adds its stems. A
    new length would need stems of every longer prefix: rebuild then.
    """
    if not appeared and not vanished:
        return walk, lengths
    if any(len(p) not in lengths for p in appeared):
        return None
    walk = dict(walk)
    for prefix in vanished:
        walk[prefix] = False
    for prefix in appeared:
        size = len(prefix)
        for length in lengths:
            if length >= size:
                break
            walk.setdefault(prefix[:length], False)
        walk[prefix] = True
    return walk, lengths


class _Grants(NamedTuple):
    """What one view's ACLs grant for one operation to ``authorizeByResourceType`` (KIP-679):
    the names its ALLOW and DENY ACLs of that operation or ALL carry, per pattern type.

    ``open_*`` are the ALLOW names no DENY of the *same* view dominates (a DENY literal of the
    same name, or a DENY prefix of it): only they can survive the DENYs of all views together.
    ``open_stem`` is their longest common prefix: another view's DENY prefix of it dominates
    them all at once (a team's prefix DENY from one host, over its names ALLOWed from ``*``).
    """

    deny_star: bool
    allow_star: bool
    deny_literal: frozenset[str]
    deny_prefix: frozenset[str]
    deny_lengths: tuple[int, ...]
    open_literal: tuple[str, ...]
    open_prefix: tuple[str, ...]
    open_stem: str


def _dominated(name: str, grants: _Grants) -> bool:
    """Is the name under one of the view's DENY prefixes (``Authorizer.authorizeByResourceType``
    tries every prefix ``name[:1]`` … ``name``; only the lengths in use can hit)?"""
    prefixes = grants.deny_prefix
    size = len(name)
    for length in grants.deny_lengths:
        if length > size:
            return False
        if name[:length] in prefixes:
            return True
    return False


def _grants(entries: Iterable[Entry], operation: AclOperation, networks: bool = False) -> _Grants:
    """The summary of the entries of one host key: those from host ``*`` or one host (a
    view's), or those naming a network (``networks``, with ``host_cidr``)."""
    deny_star = allow_star = False
    deny_literal: set[str] = set()
    deny_prefix: set[str] = set()
    allow_literal: dict[str, None] = {}  # insertion-ordered sets
    allow_prefix: dict[str, None] = {}
    for entry in entries:
        if entry.operation is not operation and entry.operation is not AclOperation.ALL:
            continue
        if (entry.network is not None) is not networks:
            continue
        pattern = entry.binding.pattern
        literal = pattern.pattern_type is _LITERAL
        if literal and pattern.name == WILDCARD_RESOURCE:
            if entry.allow:
                allow_star = True
            else:
                deny_star = True
        elif entry.allow:
            (allow_literal if literal else allow_prefix)[pattern.name] = None
        else:
            (deny_literal if literal else deny_prefix).add(pattern.name)
    own = _Grants(
        deny_star,
        allow_star,
        frozenset(deny_literal),
        frozenset(deny_prefix),
        tuple(sorted({len(p) for p in deny_prefix})),
        (),
        (),
        "",
    )
    open_literal = tuple(
        n for n in allow_literal if n not in deny_literal and not _dominated(n, own)
    )
    open_prefix = tuple(n for n in allow_prefix if not _dominated(n, own))
    return own._replace(
        open_literal=open_literal,
        open_prefix=open_prefix,
        open_stem=os.path.commonprefix([*open_literal, *open_prefix]),
    )


class _View:
    """One principal's ACLs on one resource type from one host key, indexed for :func:`_find`.

    Buckets are lists built here and never changed afterwards (a list is as fast to scan as a
    tuple and skips a copy per bucket at load).
    """

    __slots__ = ("entries", "grants", "lengths", "literal", "star", "star_by_op", "walk")

    def __init__(self, entries: list[Entry]) -> None:
        literal: dict[str, list[Entry]] = {}
        prefixed: dict[str, list[Entry]] = {}
        for entry in entries:
            pattern = entry.binding.pattern
            target = literal if pattern.pattern_type is _LITERAL else prefixed
            bucket = target.get(pattern.name)
            if bucket is None:
                target[pattern.name] = [entry]
            else:
                bucket.append(entry)
        self.entries = entries
        self.literal = literal
        self.star = literal.get(WILDCARD_RESOURCE)
        # The principal's '*' ACLs are consulted by nearly every request, and pile up (one per
        # operation, permission and host): when no host is specific, decide them per operation
        # once, here, so a request does one lookup instead of a scan.
        self.star_by_op: dict[AclOperation, Entry] | None = None
        star = self.star
        if star is not None and len(star) > 1 and all(e.host == WILDCARD_HOST for e in star):
            self.star_by_op = {}
            for op in AclOperation:
                found = _scan(star, WILDCARD_HOST, _ANY_ADDRESS, _ALLOW_OPS[op], _DENY_OPS[op])
                if found is not None:
                    self.star_by_op[op] = found
        self.walk: dict[str, Sequence[Entry]] = {}
        self.lengths: tuple[int, ...] = ()
        if prefixed:
            stems, self.lengths = _stems(prefixed)
            self.walk = {k: prefixed[k] if real else _STEM for k, real in stems.items()}
        self.grants: dict[AclOperation, _Grants] = {}
        """``authorizeByResourceType``'s summary per operation, made on its first use: derived
        from the (immutable) entries only, so a concurrent first use computes the same value."""

    def grants_for(self, operation: AclOperation) -> _Grants:
        found = self.grants.get(operation)
        if found is None:
            found = self.grants[operation] = _grants(self.entries, operation)
        return found


class _Principal:
    """One principal's ACLs on one resource type, split by host: ``any_host`` holds those from
    host ``*`` (and, with ``host_cidr``, those naming a network), ``by_host`` one view per
    specific host. A request looks at ``any_host`` and its own host's view only, however many
    hosts the principal's ACLs name (``AuthorizerBenchmark``: 20,000 on ``*``)."""

    __slots__ = ("any_host", "by_host", "entries", "networked")

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.networked: list[Entry] = []
        any_host: list[Entry] = []
        by_host: dict[str, list[Entry]] = {}
        for entry in entries:
            host = entry.host
            if host == WILDCARD_HOST:
                any_host.append(entry)
            elif entry.network is not None:
                any_host.append(entry)
                self.networked.append(entry)
            else:
                bucket = by_host.get(host)
                if bucket is None:
                    by_host[host] = [entry]
                else:
                    bucket.append(entry)
        self.any_host = _View(any_host) if any_host else None
        self.by_host = {h: _View(e) for h, e in by_host.items()} if by_host else None

    def grants(self, host: str, address: Address, operation: AclOperation) -> Iterator[_Grants]:
        """The summaries of the views a request from ``host`` can match (``any_host``, the
        host's own) and, with ``host_cidr``, of the networks holding the address (per call)."""
        if self.any_host is not None:
            yield self.any_host.grants_for(operation)
        if self.by_host is not None:
            view = self.by_host.get(host)
            if view is not None:
                yield view.grants_for(operation)
        if self.networked:
            inside = [e for e in self.networked if e.network and address in e.network]
            if inside:
                yield _grants(inside, operation, networks=True)


def _open_name(grants: list[_Grants]) -> bool:
    """Is some ALLOW name of one summary dominated by no DENY of the others (its own DENYs
    are already applied: :attr:`_Grants.open_literal`)?"""
    for g in grants:
        others = [o for o in grants if o is not g]
        if g.open_stem and any(_dominated(g.open_stem, o) for o in others):
            continue  # a DENY prefix of the stem every open name starts with: none survives
        for name in g.open_literal:
            if not any(name in o.deny_literal or _dominated(name, o) for o in others):
                return True
        for name in g.open_prefix:
            if not any(_dominated(name, o) for o in others):
                return True
    return False


def _find(  # noqa: C901 - hot path, the literal/prefix/'*' scans inlined on purpose
    view: _View,
    operation: AclOperation,
    name: str,
    host: str,
    address: Address,
    allow_ops: frozenset[AclOperation],
    deny_ops: frozenset[AclOperation],
) -> Entry | None:
    """The first matching DENY in scan order (literal, prefixes shortest first, '*'), else
    the first matching ALLOW, among one principal's ACLs.

    Each bucket is scanned like :func:`_scan`, inlined here: this is the hot path.
    """
    allow: Entry | None = None
    entries: Sequence[Entry] | None = view.literal.get(name)
    if entries is not None:
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
    lengths = view.lengths
    if lengths:
        get = view.walk.get
        size = len(name)
        for length in lengths:
            if length > size:
                break
            entries = get(name[:length])
            if entries is None:
                break  # none of this principal's prefixes continues this stem
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
    by_op = view.star_by_op
    if by_op is not None:
        if name != WILDCARD_RESOURCE:
            found = by_op.get(operation)
            if found is not None and (allow is None or not found.allow):
                return found
        return allow
    entries = view.star
    if entries is not None and name != WILDCARD_RESOURCE:
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


_SUBJECT_VIEWS_MAX = 10_000
"""Subjects (a principal and its groups) whose merged view a type's index keeps; when full the
oldest is dropped (its view is rebuilt from the principals' own views at that subject's next
request), one per new subject, so the others keep theirs (issue 37). Oldest, not least
recently used: a hit costs one lookup, no reordering."""
Subject = tuple[PrincipalKey | None, tuple[PrincipalKey, ...]]


class _TypeIndex:
    """Everything about one resource type: the per-principal views, and what any ACL covers."""

    __slots__ = (
        "any_views",
        "host_views",
        "lengths",
        "literal_count",
        "prefix_count",
        "star",
        "subjects",
        "views",
        "walk",
        "wild",
        "wild_principal",
    )

    def __init__(
        self,
        views: dict[PrincipalKey, _Principal],
        literal_count: dict[str, int],
        prefix_count: dict[str, int],
        walk: tuple[dict[str, bool], tuple[int, ...]] | None = None,
    ) -> None:
        self.views = views
        # What a request reads: each principal's host-'*' view, and the specific hosts' views
        # only where some principal has any (None, the usual case, costs the request nothing).
        self.any_views = {k: p.any_host for k, p in views.items() if p.any_host is not None}
        host_views = {k: p.by_host for k, p in views.items() if p.by_host is not None}
        self.host_views = host_views or None
        self.wild_principal = views.get(USER_WILDCARD_KEY)
        self.wild = self.any_views.get(USER_WILDCARD_KEY)
        self.literal_count = literal_count
        self.prefix_count = prefix_count
        self.star = WILDCARD_RESOURCE in literal_count
        self.walk, self.lengths = walk if walk is not None else _stems(prefix_count)
        self.subjects: dict[Subject, _View | None] = {}
        """Merged host-'*' views of subjects with groups (:meth:`subject_view`)."""

    def subject_view(
        self, pkey: PrincipalKey | None, groups: tuple[PrincipalKey, ...]
    ) -> _View | None:
        """One view of the host-'*' ACLs of the principal and its groups (``User:*``'s stay
        apart, as for a principal alone), the principal's first in each bucket: derived from
        the immutable views only, so a concurrent first use computes the same value."""
        subject = (pkey, groups)
        subjects = self.subjects
        try:
            return subjects[subject]
        except KeyError:
            pass
        views = [
            view
            for key in (pkey, *groups)
            if key is not None
            and key != USER_WILDCARD_KEY
            and (view := self.any_views.get(key)) is not None
        ]
        merged = views[0] if len(views) == 1 else None
        if len(views) > 1:
            merged = _View([entry for view in views for entry in view.entries])
        if len(subjects) >= _SUBJECT_VIEWS_MAX:
            # The oldest made (a dict keeps insertion order); a concurrent caller may have
            # dropped it already.
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                del subjects[next(iter(subjects))]
        subjects[subject] = merged
        return merged

    def applies(self, name: str) -> bool:
        """Does any ACL of this type, of any principal/host/operation, cover the name?"""
        if self.star or name in self.literal_count:
            return True
        get = self.walk.get
        size = len(name)
        for length in self.lengths:
            if length > size:
                break
            real = get(name[:length])
            if real is None:
                return False
            if real:
                return True
        return False


def _count(counts: dict[str, int], name: str, delta: int) -> bool:
    """Adjust a name's ACL count; True if the name appeared or disappeared."""
    before = counts.get(name, 0)
    if before + delta:
        counts[name] = before + delta
    else:
        del counts[name]
    return not before or not before + delta


class AclIndex:
    """A frozen snapshot; build with :meth:`build`, derive changes with :meth:`updated`."""

    __slots__ = ("_types", "bindings", "host_cidr")

    def __init__(
        self,
        bindings: frozenset[AclBinding],
        types: dict[ResourceType, _TypeIndex],
        host_cidr: bool,
    ) -> None:
        self.bindings = bindings
        self.host_cidr = host_cidr
        self._types = types

    @classmethod
    def empty(cls, host_cidr: bool = False) -> AclIndex:
        return cls(frozenset(), {}, host_cidr)

    @classmethod
    def build(cls, bindings: Iterable[AclBinding], host_cidr: bool = False) -> AclIndex:
        """Index every binding; only LITERAL/PREFIXED ones (Kafka never stores other types)."""
        with gc_paused():
            return cls._build(bindings, host_cidr)

    @classmethod
    def _build(cls, bindings: Iterable[AclBinding], host_cidr: bool) -> AclIndex:
        given = bindings if isinstance(bindings, (list, tuple)) else None
        frozen = bindings if isinstance(bindings, frozenset) else frozenset(bindings)
        # A list without duplicates is read in its own order, in which its objects were
        # allocated: at 2.4M ACLs, the set's hash order costs a cache miss per binding.
        source = given if given is not None and len(given) == len(frozen) else frozen
        grouped: dict[ResourceType, dict[PrincipalKey, list[Entry]]] = {}
        literal: dict[ResourceType, dict[str, int]] = {}
        prefixed: dict[ResourceType, dict[str, int]] = {}
        new_entry = _new_entry
        allow = AclPermissionType.ALLOW
        for binding in source:
            p = binding.pattern
            ptype = p.pattern_type
            rtype = p.resource_type
            if ptype is _LITERAL:
                counts = literal.get(rtype)
                if counts is None:
                    counts = literal[rtype] = {}
            elif ptype is _PREFIXED:
                counts = prefixed.get(rtype)
                if counts is None:
                    counts = prefixed[rtype] = {}
            else:
                continue
            name = p.name
            counts[name] = counts.get(name, 0) + 1
            e = binding.entry
            host = e.host
            entry = new_entry(
                Entry,
                (
                    host,
                    e.operation,
                    e.permission_type is allow,
                    binding,
                    _parse_network(host) if host_cidr else None,
                ),
            )
            per_type = grouped.get(rtype)
            if per_type is None:
                per_type = grouped[rtype] = {}
            members = per_type.get(e.principal)
            if members is None:
                per_type[e.principal] = [entry]
            else:
                members.append(entry)
        types = {
            rtype: _TypeIndex(
                {key: _Principal(members) for key, members in per_type.items()},
                literal.get(rtype, {}),
                prefixed.get(rtype, {}),
            )
            for rtype, per_type in grouped.items()
        }
        return cls(frozen, types, host_cidr)

    def updated(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> AclIndex:  # noqa: C901 - one copy-on-write pass per resource type
        """A new snapshot with a few bindings changed; cost scales with the change, not the total.

        Only the touched principals' views are rebuilt; the per-type dicts are copied so this
        snapshot stays valid for readers still using it. The result decides exactly like
        ``AclIndex.build`` of the new binding set.
        """
        # Removals first, then additions: a binding in both ends up present.
        wanted = frozenset(added)
        add = wanted - self.bindings
        rem = (frozenset(removed) - wanted) & self.bindings
        if not add and not rem:
            return self
        bindings = (self.bindings - rem) | add
        changes: dict[ResourceType, dict[PrincipalKey, list[tuple[AclBinding, int]]]] = {}
        for binding, delta in [(b, -1) for b in rem] + [(b, 1) for b in add]:
            p = binding.pattern
            if p.pattern_type == _LITERAL or p.pattern_type == _PREFIXED:
                per_type = changes.setdefault(p.resource_type, {})
                per_type.setdefault(binding.entry.principal, []).append((binding, delta))
        types = dict(self._types)
        for rtype, per_key in changes.items():
            old = self._types.get(rtype)
            views = dict(old.views) if old is not None else {}
            literal = old.literal_count if old is not None else {}
            prefixed = old.prefix_count if old is not None else {}
            copied_literal = copied_prefixed = False
            appeared: list[str] = []
            vanished: list[str] = []
            for key, batch in per_key.items():
                gone = {b for b, delta in batch if delta < 0}
                holder = views.get(key)
                kept = [e for e in holder.entries if e.binding not in gone] if holder else []
                for binding, delta in batch:
                    p = binding.pattern
                    if p.pattern_type == _LITERAL:
                        if not copied_literal:
                            literal, copied_literal = dict(literal), True
                        _count(literal, p.name, delta)
                    else:
                        if not copied_prefixed:
                            prefixed, copied_prefixed = dict(prefixed), True
                        if _count(prefixed, p.name, delta):
                            (appeared if delta > 0 else vanished).append(p.name)
                    if delta > 0:
                        kept.append(_entry(binding, self.host_cidr))
                if kept:
                    views[key] = _Principal(kept)
                else:
                    views.pop(key, None)
            if not views:
                types.pop(rtype, None)
                continue
            walk = None
            if old is not None:
                walk = _patched_walk(old.walk, old.lengths, appeared, vanished)
            types[rtype] = _TypeIndex(views, literal, prefixed, walk)
        return AclIndex(bindings, types, self.host_cidr)

    def __len__(self) -> int:
        return len(self.bindings)

    # -- matching (the hot path) ---------------------------------------------------------------
    def match(
        self,
        pkey: PrincipalKey | None,
        host: str,
        address: Address,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        need_applicable: bool = True,
        groups: tuple[PrincipalKey, ...] = (),
    ) -> tuple[AclMatch, Entry | None]:
        """``StandardAuthorizerData.findAclRule`` + ``findResult`` for one LITERAL resource.

        Returns the verdict and the deciding entry (the first DENY in scan order, or the first
        ALLOW), so an audit listener gets the rule without a second lookup. When nothing
        matches, ``NO_ACL`` and ``NO_MATCHING_ACL`` are told apart only if ``need_applicable``
        (they decide alike unless ``allow.everyone.if.no.acl.found``); otherwise
        ``NO_MATCHING_ACL`` may also stand for ``NO_ACL``.

        ``groups``: the ``Group:`` principal keys the requester also holds; decided as for a
        subject holding them all (the first DENY in scan order among all their ACLs, else the
        first ALLOW; at a tie the principal's own, then the groups', then ``User:*``'s), over
        the subject's merged view (:meth:`_TypeIndex.subject_view`).
        """
        index = self._types.get(resource_type)
        if index is None:
            return _NO_ACL
        allow_ops = _ALLOW_OPS[operation]
        deny_ops = _DENY_OPS[operation]
        if groups:
            view = index.subject_view(pkey, groups)
        else:
            view = index.any_views.get(pkey) if pkey is not None else None
        found = None
        if view is not None:
            found = _find(view, operation, name, host, address, allow_ops, deny_ops)
        wild = index.wild
        if wild is not None and wild is not view:
            other = _find(wild, operation, name, host, address, allow_ops, deny_ops)
            if other is not None and (
                found is None
                or (
                    found.allow
                    if found.allow is not other.allow
                    else _rank(other, name) < _rank(found, name)
                )
            ):
                found = other
        if index.host_views is not None:
            found = _host_find(
                index.host_views, pkey, host, address, operation, name, found, groups
            )
        if found is not None:
            return (_ALLOW_ACL if found.allow else _DENY_ACL), found
        if not need_applicable or index.applies(name):
            return _NO_MATCH
        return _NO_ACL

    def any_allowed(
        self,
        pkey: PrincipalKey | None,
        host: str,
        address: Address,
        operation: AclOperation,
        resource_type: ResourceType,
        groups: tuple[PrincipalKey, ...] = (),
    ) -> bool:
        """``Authorizer.authorizeByResourceType``'s ACL part (after its ``"hardcode"`` probe):
        may ``operation`` (itself or ALL, no implication) be done on at least one resource?

        Any matching LITERAL ``*`` DENY denies; else any matching ``*`` ALLOW allows; else an
        ALLOW name that no matching DENY dominates (a DENY literal of the same name, a DENY
        prefix of it) allows. Each view's names are summarised once per operation
        (:class:`_Grants`), so a call looks at its views' summaries, not at every ACL.
        """
        index = self._types.get(resource_type)
        if index is None:
            return False
        grants: list[_Grants] = []
        wild = index.wild_principal
        own = index.views.get(pkey) if pkey is not None else None
        holders = [own, wild if wild is not own else None]
        holders += [index.views.get(g) for g in groups if g != USER_WILDCARD_KEY]
        for holder in holders:
            if holder is not None:
                grants.extend(holder.grants(host, address, operation))
        if any(g.deny_star for g in grants):
            return False
        return any(g.allow_star for g in grants) or _open_name(grants)

    def principal_entries(
        self, resource_type: ResourceType, pkey: PrincipalKey | None
    ) -> tuple[Entry, ...]:
        """All ACLs of one type for one principal key, for ``authorizeByResourceType``."""
        index = self._types.get(resource_type)
        if index is None:
            return ()
        holder = index.views.get(pkey) if pkey is not None else None
        return tuple(holder.entries) if holder is not None else ()
