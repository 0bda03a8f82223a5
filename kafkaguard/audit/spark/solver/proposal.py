"""The least-privilege ACL set for observed access: pure Python over the distinct grants.

Owns the proposal rules; Spark only supplies the distinct (principal, host, operation,
resource) tuples (few, compared with events). Rules:

* one ALLOW ACL per observed tuple, host ``*`` unless hosts are kept exactly;
* DESCRIBE is dropped where READ, WRITE, DELETE or ALTER on the same resource is proposed, and
  DESCRIBE_CONFIGS where ALTER_CONFIGS is (Kafka's implication, ``AclEntry`` /
  ``StandardAuthorizerData.matchAclRule``: an ALLOW for those implies the describe);
* opt-in prefix consolidation (``prefix_min_topics``): the topics one principal uses with one
  operation that share a prefix ending at ``.``, ``-`` or ``_`` become one PREFIXED ACL when
  there are at least that many, unless the prefix would cover a topic on which the principal
  was *refused* (an enforced denial in the window is evidence it must not have it). The most
  specific qualifying prefix wins; the ACL lists the topics it was derived from;
* opt-in group ACLs (``analyze propose --groups``, :func:`group_proposal`), after the rules
  above: where every observed member of a group (with at least
  :data:`GROUP_MIN_MEMBERS`) holds the same proposed ACL (pattern, host, operation), one
  ``Group:<name>`` ACL replaces the members' copies and names the principals it covers; the
  rest stay user ACLs. A group is not chosen for an ACL where another chosen one covers all
  of its members (the fewest group ACLs that say the same);
* the result is checked with :class:`~kafkaguard.policy.standard.StandardAuthorizer` itself:
  every observed tuple must be allowed by the proposal, each principal holding the groups it
  was seen with (a bug here must not reach an operator).

Rendering: the ACL file (the file store's format, verified with its own parser) with the
recognised client roles as comments, and ``kafka-acls`` commands.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kafkaguard.policy.authorizer import Action, AuthorizationResult, RequestContext
from kafkaguard.policy.authorizer import SecurityProtocol as Protocol
from kafkaguard.policy.model import (
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.acl_file_format import FORMAT_VERSION, parse_acl_text, sort_key

Op = AclOperation
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.ALTER_CONFIGS}),
}
DELIMITERS = ".-_"
GROUP_MIN_MEMBERS = 2
"""The fewest observed members a group needs for a group ACL: a group of one observed member
says nothing a user ACL does not (and a group whose other members were not seen would grant
them what nobody observed them use)."""
Members = Mapping[str, Collection[str]]
"""Group membership seen in the trail: principal -> the ``Group:`` principals it was seen in."""
_RESOURCE_OPTIONS = {
    ResourceType.TOPIC: "--topic",
    ResourceType.GROUP: "--group",
    ResourceType.TRANSACTIONAL_ID: "--transactional-id",
    ResourceType.DELEGATION_TOKEN: "--delegation-token",
    ResourceType.USER: "--user-principal",
}


@dataclass(frozen=True, slots=True)
class ObservedGrant:
    """One distinct access that was allowed (or would have been denied, in log_only)."""

    principal: str
    host: str
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    decisions: int
    sample_host: str = "127.0.0.1"
    """A client address seen for it (to replay it when ``host`` is ``*``)."""
    deny_acl: bool = False
    """Some of them were would-denies by a DENY ACL: the operator denied it on purpose."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """An enforced denial: this principal must not get this operation on this resource."""

    principal: str
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str


@dataclass(frozen=True, slots=True)
class ProposedAcl:
    binding: AclBinding
    decisions: int
    covers: tuple[str, ...]
    """The observed resource names it stands for (one, unless PREFIXED)."""
    notes: tuple[str, ...] = field(default=())


def candidate_prefixes(name: str) -> list[str]:
    """Prefixes of ``name`` that end at a delimiter (and are shorter than the name).

    >>> candidate_prefixes("orders.eu-west.v1")
    ['orders.', 'orders.eu-']
    """
    return [name[: i + 1] for i, ch in enumerate(name[:-1]) if ch in DELIMITERS and i > 0]


def consolidate(
    names: Iterable[str], min_members: int, refused: Iterable[str] = ()
) -> tuple[list[tuple[str, list[str]]], set[str]]:
    """Greedy prefix groups of at least ``min_members`` names; returns (groups, leftovers).

    The longest qualifying prefix is taken first (least privilege); a shorter one chosen
    later absorbs the longer ones it covers. A prefix covering a ``refused`` name is never
    chosen.

    >>> consolidate(["a.x", "a.y", "a.z", "b"], 3)
    ([('a.', ['a.x', 'a.y', 'a.z'])], {'b'})
    >>> consolidate(["a.x", "a.y", "a.z"], 3, refused=["a.secret"])
    ([], {'a.x', 'a.y', 'a.z'})
    """
    remaining = set(names)
    blocked = list(refused)
    chosen: dict[str, list[str]] = {}
    while True:
        members: dict[str, set[str]] = defaultdict(set)
        for name in remaining:
            for prefix in candidate_prefixes(name):
                members[prefix].add(name)
        candidates = [
            (prefix, found)
            for prefix, found in members.items()
            if len(found) >= min_members and not any(b.startswith(prefix) for b in blocked)
        ]
        if not candidates:
            break
        prefix, found = min(candidates, key=lambda c: (-len(c[0]), -len(c[1]), c[0]))
        for longer in [p for p in chosen if p.startswith(prefix)]:
            found |= set(chosen.pop(longer))
        chosen[prefix] = sorted(found)
        remaining -= found
    return sorted(chosen.items()), remaining


def _binding(
    grant: ObservedGrant, name: str, pattern_type: PatternType = PatternType.LITERAL
) -> AclBinding:
    return AclBinding(
        ResourcePattern(grant.resource_type, name, pattern_type),
        AccessControlEntry(grant.principal, grant.host, grant.operation, AclPermissionType.ALLOW),
    )


def drop_implied(grants: Sequence[ObservedGrant]) -> list[ObservedGrant]:
    """Without the DESCRIBE / DESCRIBE_CONFIGS grants another grant on the resource implies."""
    held = {(g.principal, g.host, g.resource_type, g.resource_name, g.operation) for g in grants}
    out = []
    for g in grants:
        implying = IMPLIED_BY.get(g.operation, frozenset())
        key = (g.principal, g.host, g.resource_type, g.resource_name)
        if not any((*key, op) in held for op in implying):
            out.append(g)
    return out


def _refused_names(
    refusals: Iterable[Refusal], principal: str, operation: AclOperation
) -> list[str]:
    # A prefix for WRITE also grants DESCRIBE by implication, so DESCRIBE refusals count too.
    covered = {operation} | {d for d, by in IMPLIED_BY.items() if operation in by}
    return [
        r.resource_name
        for r in refusals
        if r.principal == principal
        and r.resource_type == ResourceType.TOPIC
        and r.operation in covered
    ]


def build_proposal(
    grants: Sequence[ObservedGrant],
    refusals: Sequence[Refusal] = (),
    prefix_min_topics: int = 0,
) -> list[ProposedAcl]:
    """The proposal for ``grants``, in the file format's stable order; verified (see module)."""
    kept = drop_implied(grants)
    out: list[ProposedAcl] = []
    topics: dict[tuple[str, str, AclOperation], list[ObservedGrant]] = defaultdict(list)
    for g in kept:
        if prefix_min_topics > 0 and g.resource_type == ResourceType.TOPIC:
            topics[(g.principal, g.host, g.operation)].append(g)
        else:
            out.append(_literal(g))
    for (principal, _host, operation), group in topics.items():
        by_name = {g.resource_name: g for g in group}
        groups, leftovers = consolidate(
            by_name, prefix_min_topics, _refused_names(refusals, principal, operation)
        )
        for prefix, names in groups:
            first = by_name[names[0]]
            out.append(
                ProposedAcl(
                    _binding(first, prefix, PatternType.PREFIXED),
                    sum(by_name[n].decisions for n in names),
                    tuple(names),
                    (f"prefix of {len(names)} observed topics",),
                )
            )
        out.extend(_literal(by_name[name]) for name in leftovers)
    for acl in out:
        acl.binding.validate()
    out.sort(key=lambda a: (a.binding.entry.principal, sort_key(a.binding)))
    verify(out, grants)
    return out


def _literal(g: ObservedGrant) -> ProposedAcl:
    notes = ("observed as a would-deny by a DENY ACL: review",) if g.deny_acl else ()
    return ProposedAcl(_binding(g, g.resource_name), g.decisions, (g.resource_name,), notes)


def verify(
    acls: Sequence[ProposedAcl], grants: Iterable[ObservedGrant], members: Members | None = None
) -> None:
    """Replay every grant against the proposal with the authorizer the proxy uses, each
    principal holding its ``members`` groups."""
    authorizer = StandardAuthorizer()
    authorizer.load_snapshot(a.binding for a in acls)
    held = members or {}
    for g in grants:
        host = g.host if g.host != WILDCARD_HOST else g.sample_host
        context = RequestContext(
            listener_name="",
            security_protocol=Protocol.PLAINTEXT,
            principal=KafkaPrincipal.parse(g.principal),
            client_address=ipaddress.ip_address(host),
            host=host,
            api_key=0,
            api_version=0,
            groups=tuple(KafkaPrincipal.parse(name) for name in sorted(held.get(g.principal, ()))),
        )
        action = Action(g.operation, ResourcePattern(g.resource_type, g.resource_name))
        if authorizer.authorize(context, [action])[0] is not AuthorizationResult.ALLOWED:
            raise AssertionError(f"proposal does not allow observed access {g}")


def group_members(
    members: Members, min_members: int = GROUP_MIN_MEMBERS
) -> dict[str, frozenset[str]]:
    """Each group with at least ``min_members`` observed members: group -> its members.

    >>> group_members({"User:a": ["Group:eng"], "User:b": ["Group:eng", "Group:ops"]})
    {'Group:eng': frozenset({'User:a', 'User:b'})}
    """
    found: dict[str, set[str]] = defaultdict(set)
    for principal, groups in members.items():
        for group in groups:
            found[group].add(principal)
    return {g: frozenset(m) for g, m in sorted(found.items()) if len(m) >= min_members}


def _fewest(qualifying: Sequence[str], groups: Mapping[str, frozenset[str]]) -> list[str]:
    """The qualifying groups no other one covers (a superset of its members; of equal member
    sets the first name)."""
    return [
        g
        for g in qualifying
        if not any(
            other != g and (groups[g] < groups[other] or (groups[g] == groups[other] and other < g))
            for other in qualifying
        )
    ]


def _group_acl(group: str, members: Sequence[ProposedAcl]) -> ProposedAcl:
    first = members[0].binding
    entry = first.entry
    binding = AclBinding(
        first.pattern,
        AccessControlEntry(group, entry.host, entry.operation, entry.permission_type),
    )
    covers = tuple(sorted({name for a in members for name in a.covers}))
    notes: list[str] = []
    if first.pattern.pattern_type == PatternType.PREFIXED:
        notes.append(f"prefix of {len(covers)} observed topics")
    notes += sorted({n for a in members for n in a.notes if not n.startswith("prefix of ")})
    principals = sorted(a.binding.entry.principal for a in members)
    notes.append(f"group ACL for its {len(principals)} observed members: {', '.join(principals)}")
    return ProposedAcl(binding, sum(a.decisions for a in members), covers, tuple(notes))


def group_proposal(
    acls: Sequence[ProposedAcl],
    grants: Sequence[ObservedGrant],
    members: Members,
    min_members: int = GROUP_MIN_MEMBERS,
) -> list[ProposedAcl]:
    """``acls`` (:func:`build_proposal`'s) with a ``Group:`` ACL wherever every observed
    member of a group holds the same ACL, the members' copies of it dropped (module rules);
    verified against ``grants`` with each principal holding its groups."""
    groups = group_members(members, min_members)
    holders: dict[tuple[ResourcePattern, str, AclOperation], dict[str, ProposedAcl]]
    holders = defaultdict(dict)
    for acl in acls:
        entry = acl.binding.entry
        holders[(acl.binding.pattern, entry.host, entry.operation)][entry.principal] = acl
    out: list[ProposedAcl] = []
    for held in holders.values():
        chosen = _fewest([g for g, m in groups.items() if m <= held.keys()], groups)
        covered: set[str] = set()
        for group in chosen:
            covered |= groups[group]
            out.append(_group_acl(group, [held[p] for p in sorted(groups[group])]))
        out.extend(acl for principal, acl in held.items() if principal not in covered)
    for acl in out:
        acl.binding.validate()
    out.sort(key=lambda a: (a.binding.entry.principal, sort_key(a.binding)))
    verify(out, grants, members)
    return out


def principal_roles(acls: Iterable[ProposedAcl]) -> dict[str, list[str]]:
    """Client roles recognised from the ACLs each principal gets (annotations only)."""
    held: dict[str, set[tuple[ResourceType, AclOperation]]] = defaultdict(set)
    for a in acls:
        held[a.binding.entry.principal].add(
            (a.binding.pattern.resource_type, a.binding.entry.operation)
        )
    roles: dict[str, list[str]] = {}
    for principal, ops in sorted(held.items()):
        found = []
        if (ResourceType.TRANSACTIONAL_ID, Op.WRITE) in ops:
            found.append("transactional producer")
        elif (ResourceType.TOPIC, Op.WRITE) in ops:
            idempotent = (ResourceType.CLUSTER, Op.IDEMPOTENT_WRITE) in ops
            found.append("idempotent producer" if idempotent else "producer")
        if (ResourceType.TOPIC, Op.READ) in ops and (ResourceType.GROUP, Op.READ) in ops:
            found.append("consumer")
        roles[principal] = found
    return roles


def _yaml_row(binding: AclBinding) -> str:
    # The key order and quoting of acl_file_format.format_acl_text, one flow mapping per line.
    p, e = binding.pattern, binding.entry
    return (
        f'{{"principal": {json.dumps(e.principal)}, "host": {json.dumps(e.host)}, '
        f'"operation": "{e.operation.name}", "permission": "{e.permission_type.name}", '
        f'"resource_type": "{p.resource_type.name}", "pattern_type": "{p.pattern_type.name}", '
        f'"name": {json.dumps(p.name)}}}'
    )


def _comment(text: str) -> str:
    return " ".join(text.split())  # no line breaks can escape a YAML comment


def _acl_comment(acl: ProposedAcl) -> str:
    parts = [f"{acl.decisions} decisions"]
    if acl.binding.pattern.pattern_type == PatternType.PREFIXED:
        parts.append("covers " + ", ".join(acl.covers))
    parts.extend(acl.notes)
    return _comment("; ".join(parts))


def render_acl_file(acls: Sequence[ProposedAcl], header: Sequence[str] = ()) -> str:
    """The ACL file (YAML; loads with the file store and ``kafkaguard acls``)."""
    roles = principal_roles(acls)
    lines = [f"# {_comment(h)}" for h in header]
    lines += [f"version: {FORMAT_VERSION}", "acls:" if acls else "acls: []"]
    current = None
    for acl in acls:
        principal = acl.binding.entry.principal
        if principal != current:
            current = principal
            role = ", ".join(roles.get(principal, [])) or "no recognised client role"
            lines.append(f"  # {_comment(principal)}: {role}")
        lines.append(f"  - {_yaml_row(acl.binding)}  # {_acl_comment(acl)}")
    text = "\n".join(lines) + "\n"
    if parse_acl_text(text, "<proposal>") != frozenset(a.binding for a in acls):
        raise AssertionError("the rendered ACL file does not parse back to the proposal")
    return text


def kafka_acls_command(binding: AclBinding, bootstrap: str) -> str:
    """``kafka-acls`` (AclCommand) invocation adding ``binding``, Kafka's capitalisation."""
    p, e = binding.pattern, binding.entry
    flag = (
        "--allow-principal" if e.permission_type == AclPermissionType.ALLOW else "--deny-principal"
    )
    words = ["kafka-acls", "--bootstrap-server", bootstrap, "--add", flag, e.principal]
    if e.host != WILDCARD_HOST:
        words += ["--allow-host" if flag == "--allow-principal" else "--deny-host", e.host]
    words += ["--operation", e.operation.pascal_name]
    if p.resource_type == ResourceType.CLUSTER:
        words.append("--cluster")
    else:
        words += [_RESOURCE_OPTIONS[p.resource_type], p.name]
    if p.pattern_type == PatternType.PREFIXED:
        words += ["--resource-pattern-type", "prefixed"]
    return shlex.join(words)


def render_commands(acls: Sequence[ProposedAcl], bootstrap: str) -> str:
    roles = principal_roles(acls)
    lines = [
        "#!/bin/sh",
        "# Generated by kafkaguard analyze propose; review before running.",
        "set -e",
    ]
    current = None
    for acl in acls:
        principal = acl.binding.entry.principal
        if principal != current:
            current = principal
            role = ", ".join(roles.get(principal, [])) or "no recognised client role"
            lines.append(f"# {_comment(principal)}: {role}")
        lines.append(kafka_acls_command(acl.binding, bootstrap) + f"  # {_acl_comment(acl)}")
    return "\n".join(lines) + "\n"
