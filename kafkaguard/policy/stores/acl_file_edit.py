"""Edit an ACL file the way its author wrote it (issue 38).

A file kafkaguard wrote (JSON, one binding per line: :func:`~kafkaguard.policy.stores.
acl_file_format.format_acl_text`) is rewritten in that format. A hand-written YAML file (the
demo's, with its comments) is edited with ruamel.yaml's round trip instead: the entries that
stay are left as they are, with their comments, order, quoting and indentation; an entry whose
bindings are all removed is deleted (the comment lines that follow it, usually the heading of
the next group, are kept); an entry that expands to several bindings (lists of principals,
hosts or operations) of which some are removed is replaced, in place, by one entry per binding
that stays; added bindings are appended as new entries in the style of the last entry (block
or flow mapping). ruamel.yaml cannot keep a flow mapping wrapped over several lines: such an
entry is written on one line.

The edited text is parsed back before it is returned: if it does not hold exactly the bindings
wanted (a construct the round trip reads differently), :class:`AclFileError` is raised and the
file is not written.
"""

from __future__ import annotations

import io
import json
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from kafkaguard.policy.model import WILDCARD_HOST, AclBinding, InvalidAclBindingError, PatternType
from kafkaguard.policy.stores.acl_file_format import (
    FORMAT_VERSION,
    AclFileError,
    format_acl_text,
    parse_acl_text,
    parse_entry,
    sort_key,
)
from kafkaguard.policy.stores.base import Snapshot

_WIDTH = 1 << 16
"""No line wrapping: ruamel.yaml would break long one-line entries where the author did not."""


def is_tool_format(text: str) -> bool:
    """Whether ``text`` is empty or JSON (what kafkaguard writes), not hand-written YAML."""
    if not text.strip():
        return True
    if not text.lstrip().startswith("{"):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def edit_acl_text(text: str, updated: Snapshot, file: str) -> str:
    """``text`` changed to hold exactly ``updated``, its layout kept (see the module doc)."""
    if is_tool_format(text):
        return format_acl_text(updated)
    try:
        _, sequence_indent, offset = load_yaml_guess_indent(text)
        rt = YAML(typ="rt")
        rt.preserve_quotes = True
        rt.width = _WIDTH
        rt.indent(mapping=2, sequence=sequence_indent or 2, offset=offset or 0)
        document = rt.load(text)
    except YAMLError as exc:
        raise AclFileError(f"{file}: not valid YAML: {exc}") from exc
    entries = _entries(document)
    kept = _remove(entries, updated)
    flow = bool(entries) and _is_flow(entries[-1])
    for binding in sorted(updated - kept, key=sort_key):
        entries.append(_entry(binding, flow))
    out = io.StringIO()
    rt.dump(entries if isinstance(document, CommentedSeq) else document, out)
    edited = out.getvalue()
    if parse_acl_text(edited, file) != updated:
        raise AclFileError(
            f"{file}: the edited YAML would not hold the ACLs wanted; not written (edit the "
            "file by hand, or write it as kafkaguard's JSON with an empty file)"
        )
    return edited


def _entries(document: Any) -> CommentedSeq:
    """The ``acls`` sequence of ``{version: 1, acls: [...]}`` or of a bare list."""
    if isinstance(document, CommentedSeq):
        return document
    if not isinstance(document, CommentedMap):
        raise AclFileError("the ACL file is neither a mapping nor a list")
    entries = document.get("acls")
    if entries is None:
        document["acls"] = entries = CommentedSeq()
        document.setdefault("version", FORMAT_VERSION)
    if not isinstance(entries, CommentedSeq):
        raise AclFileError("'acls' must be a list of entries")
    return entries


def _remove(entries: CommentedSeq, updated: Snapshot) -> Snapshot:
    """Delete or split the entries holding bindings not in ``updated``; returns the bindings
    the remaining entries hold."""
    kept: set[AclBinding] = set()
    for index in reversed(range(len(entries))):
        try:
            bindings = parse_entry(entries[index])
        except (ValueError, InvalidAclBindingError) as exc:
            raise AclFileError(f"acls[{index}]: {exc}") from exc
        staying = [b for b in bindings if b in updated]
        kept.update(staying)
        if len(staying) == len(bindings):
            continue
        flow = _is_flow(entries[index])
        tail = _tail(entries, index)
        if not staying:
            _keep_following_comment(entries, index)
        del entries[index]
        replacements = sorted(set(staying), key=sort_key)
        for offset, binding in enumerate(replacements):
            entries.insert(index + offset, _entry(binding, flow))
        if replacements and tail is not None:  # the comments after the entry stay after it
            _set_tail(entries, index + len(replacements) - 1, str(tail[0][tail[1]].value))
    return frozenset(kept)


def _is_flow(entry: Any) -> bool:
    return isinstance(entry, CommentedMap) and bool(entry.fa.flow_style())


def _tail(entries: CommentedSeq, index: int) -> tuple[list[Any], int] | None:
    """Where ruamel.yaml keeps the comment that ends entry ``index`` (its end-of-line comment,
    then the comment lines before the next entry): on a block mapping's last key, else on the
    sequence's item."""
    entry = entries[index]
    if isinstance(entry, CommentedMap) and not _is_flow(entry) and len(entry):
        slot = entry.ca.items.get(list(entry)[-1])
        if slot and len(slot) > 2 and slot[2] is not None:
            return slot, 2
    slot = entries.ca.items.get(index)
    if slot and slot[0] is not None:
        return slot, 0
    return None


def _keep_following_comment(entries: CommentedSeq, index: int) -> None:
    """Entry ``index`` is deleted: the comment lines after it (not its own end-of-line
    comment) move to the end of the entry before it, or before the first entry."""
    tail = _tail(entries, index)
    if tail is None:
        return
    slot, position = tail
    _, _, following = str(slot[position].value).partition("\n")
    if not following.strip():
        return
    if index > 0:
        previous = _tail(entries, index - 1)
        if previous is not None:
            token = previous[0][previous[1]]
            token.value = str(token.value) + following
            return
        _set_tail(entries, index - 1, "\n" + following)
        return
    if entries.ca.comment is None:
        entries.ca.comment = [None, []]
    entries.ca.comment[1].append(CommentToken(following, CommentMark(0), None))


def _set_tail(entries: CommentedSeq, index: int, text: str) -> None:
    token = CommentToken(text, CommentMark(0), None)
    entry = entries[index]
    if isinstance(entry, CommentedMap) and not _is_flow(entry) and len(entry):
        entry.ca.items[list(entry)[-1]] = [None, None, token, None]
    else:
        entries.ca.items[index] = [token, None, None, None]


def _entry(binding: AclBinding, flow: bool) -> CommentedMap:
    """One binding as a new entry: the demo's keys, host and pattern type only when not the
    defaults (``*``, LITERAL); strings that YAML would read as something else are quoted."""
    pattern, acl = binding.pattern, binding.entry
    fields: list[tuple[str, Any]] = [("principal", DoubleQuotedScalarString(acl.principal))]
    if acl.host != WILDCARD_HOST:
        fields.append(("host", DoubleQuotedScalarString(acl.host)))
    fields += [
        ("operation", acl.operation.name),
        ("permission", acl.permission_type.name),
        ("resource_type", pattern.resource_type.name),
    ]
    if pattern.pattern_type is not PatternType.LITERAL:
        fields.append(("pattern_type", pattern.pattern_type.name))
    fields.append(("name", pattern.name))
    entry = CommentedMap(fields)
    if flow:
        entry.fa.set_flow_style()
    return entry
