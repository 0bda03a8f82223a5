"""The YAML ACL file format: parse with errors that name the entry, and write deterministically.

Format (one mapping per binding; ``principal``, ``operation`` and ``host`` may also be lists,
which expand like kafka-acls.sh's repeatable options). Hand-written files are YAML (edited in
place, comments kept); files the tool creates are JSON with one binding per line (JSON is
YAML, and loads much faster)::

    version: 1
    acls:
      - {principal: "User:alice", host: "*", operation: READ, permission: ALLOW,
         resource_type: TOPIC, pattern_type: LITERAL, name: orders}

Enum values are read case-insensitively, as Kafka's ``fromString`` does (``read``,
``DescribeConfigs``, ``transactional_id``). ``host`` defaults to ``*``, ``pattern_type`` to
``LITERAL``, ``permission`` is required (an omitted "deny" must never turn into an allow).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

from kafkaguard.policy.acl_index import gc_paused
from kafkaguard.policy.model import (
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclBindingError,
    PatternType,
    ResourcePattern,
    ResourceType,
)

FORMAT_VERSION = 1
_KEYS = ("principal", "host", "operation", "permission", "resource_type", "pattern_type", "name")
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class AclFileError(ValueError):
    """The ACL file is not valid; the message names the file, line and entry."""


def _entry_lines(text: str) -> list[int]:
    """Line numbers of the entries, computed only when an error must be reported."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError:
        return []
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == "acls":
                node = value
                break
    if isinstance(node, yaml.SequenceNode):
        return [item.start_mark.line + 1 for item in node.value]
    return []


def _as_list(value: Any, key: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{key} must be a string or a non-empty list of strings, got {value!r}")
    return values


def _required_str(item: dict[str, Any], key: str) -> str:
    if key not in item:
        raise ValueError(f"{key} is required")
    value = item[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r}")
    return value


def parse_entry(item: Any) -> list[AclBinding]:
    """One file entry → its bindings, validated with Kafka's CreateAcls rules."""
    if not isinstance(item, dict):
        raise ValueError(f"must be a mapping, got {item!r}")
    unknown = sorted(set(item) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (expected {', '.join(_KEYS)})")
    if "principal" not in item:
        raise ValueError("principal is required")
    if "operation" not in item:
        raise ValueError("operation is required")
    principals = _as_list(item["principal"], "principal")
    operations = [AclOperation.parse(op) for op in _as_list(item["operation"], "operation")]
    hosts = _as_list(item.get("host", WILDCARD_HOST), "host")
    permission = AclPermissionType.parse(_required_str(item, "permission"))
    resource_type = ResourceType.parse(_required_str(item, "resource_type"))
    pattern_type = PatternType.parse(item.get("pattern_type", "LITERAL"))
    name = item.get("name")
    if not isinstance(name, str):  # YAML turns 2024 or yes into int/bool: insist on quoting
        raise ValueError(f"name is required and must be a string (quote it), got {name!r}")
    pattern = ResourcePattern(resource_type, name, pattern_type)
    out = []
    for principal in principals:
        for host in hosts:
            for operation in operations:
                binding = AclBinding(
                    pattern,
                    AccessControlEntry(principal.strip(), host.strip(), operation, permission),
                )
                binding.validate()
                out.append(binding)
    return out


def parse_acl_text(text: str, file: str) -> frozenset[AclBinding]:
    """Parse a whole file; the first bad entry fails the whole file (no partial policy)."""
    with gc_paused():
        return _parse_acl_text(text, file)


def _parse_acl_text(text: str, file: str) -> frozenset[AclBinding]:
    data = _load_document(text, file)
    if data is None:
        return frozenset()
    items = _acl_items(data, file)
    bindings: list[AclBinding] = []
    for index, item in enumerate(items):
        try:
            bindings.extend(parse_entry(item))
        except (ValueError, InvalidAclBindingError) as exc:
            lines = _entry_lines(text)
            where = f"{file}:{lines[index]}" if index < len(lines) else file
            raise AclFileError(f"{where} acls[{index}]: {exc}") from exc
    return frozenset(bindings)


def _load_document(text: str, file: str) -> Any:
    """The file's document (``None`` when empty). Files written by kafkaguard are JSON (a subset
    of YAML): json is ~50x faster than PyYAML on 100k entries. Anything else (hand-written
    YAML) takes the YAML path."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise AclFileError(f"{file}: not valid YAML: {exc}") from exc


def _acl_items(data: Any, file: str) -> list[Any]:
    """The entries of a document: ``{"version": 1, "acls": [...]}`` or a bare list."""
    if isinstance(data, dict):
        extra = sorted(set(data) - {"version", "acls"})
        if extra:
            raise AclFileError(
                f"{file}: unknown top-level key {extra[0]!r} (expected acls, version)"
            )
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise AclFileError(
                f"{file}: unsupported version {version!r} (expected {FORMAT_VERSION})"
            )
        items = data.get("acls") or []
    else:
        items = data
    if not isinstance(items, list):
        raise AclFileError(f"{file}: 'acls' must be a list of entries")
    return items


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def sort_key(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    p, e = binding.pattern, binding.entry
    return (
        p.resource_type.value,
        p.name,
        p.pattern_type.value,
        e.principal,
        e.host,
        e.operation.value,
        e.permission_type.value,
    )


def acl_line(binding: AclBinding) -> str:
    """One binding as the file writes it: a one-line entry (``kafkaguard acls apply`` prints
    its differences so, in the file's own notation)."""
    p, e = binding.pattern, binding.entry
    return (
        f'{{"principal": {_q(e.principal)}, "host": {_q(e.host)}, '
        f'"operation": "{e.operation.name}", "permission": "{e.permission_type.name}", '
        f'"resource_type": "{p.resource_type.name}", '
        f'"pattern_type": "{p.pattern_type.name}", "name": {_q(p.name)}}}'
    )


def format_acl_text(bindings: Iterable[AclBinding]) -> str:
    """Serialise in a stable order, one binding per line, as JSON (which is also YAML).

    JSON keeps big files fast to load; one entry per line keeps diffs readable. Operators
    may still hand-write the file in plain YAML: the tools then edit it in place, comments
    kept (:mod:`kafkaguard.policy.stores.acl_file_edit`).
    """
    rows = [f"  {acl_line(b)}" for b in sorted(bindings, key=sort_key)]
    body = ",\n".join(rows)
    return (
        f'{{"version": {FORMAT_VERSION}, "acls": [\n{body}\n]}}\n'
        if rows
        else (f'{{"version": {FORMAT_VERSION}, "acls": []}}\n')
    )
