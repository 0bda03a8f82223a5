"""Java ``Matcher.find``/``replaceAll`` semantics on top of Python's ``re``.

Kafka's principal-mapping rules are Java regexes applied with Java's replacement syntax
(``$n``, ``${name}``, ``\\x``) and Java's find loop. Python's ``re.sub`` differs in the
replacement syntax and in how it restarts after an empty match, so these helpers replay
``java.util.regex.Matcher`` step by step. The regex *syntax* is Python's: patterns that use
Java-only constructs (possessive quantifiers, ``\\p{Lower}``) fail at configuration time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator


class JavaReplacementError(ValueError):
    """What Java throws from ``appendReplacement`` (bad ``$`` reference, dangling ``\\``)."""


def java_find_iter(pattern: re.Pattern[str], text: str, start: int = 0) -> Iterator[re.Match[str]]:
    """``while (matcher.find())``: after an empty match the search resumes one char later."""
    pos = start
    while pos <= len(text):
        match = pattern.search(text, pos)
        if match is None:
            return
        yield match
        pos = match.end() + 1 if match.end() == match.start() else match.end()


def _expand(replacement: str, match: re.Match[str]) -> str:  # noqa: C901 - Java's replacement syntax: a branch per form/error
    """``Matcher.appendExpandedReplacement`` for one match."""
    groups = match.re.groups
    out: list[str] = []
    i = 0
    n = len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\":
            i += 1
            if i >= n:
                raise JavaReplacementError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i >= n:
                raise JavaReplacementError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise JavaReplacementError("named capturing group is missing trailing '}'")
                name = replacement[i + 1 : end]
                if name not in match.re.groupindex:
                    raise JavaReplacementError(f"No group with name {{{name}}}")
                out.append(match.group(name) or "")
                i = end + 1
                continue
            if not replacement[i].isdigit() or not replacement[i].isascii():
                raise JavaReplacementError("Illegal group reference")
            ref = int(replacement[i])
            i += 1
            # Java: later digits join the reference only while it stays a valid group number.
            while i < n and replacement[i].isascii() and replacement[i].isdigit():
                candidate = ref * 10 + int(replacement[i])
                if candidate > groups:
                    break
                ref = candidate
                i += 1
            if ref > groups:
                raise JavaReplacementError(f"No group {ref}")
            out.append(match.group(ref) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def java_replace(
    pattern: re.Pattern[str], text: str, replacement: str, *, first_only: bool = False
) -> str:
    """``String.replaceAll`` / ``Matcher.replaceFirst`` with Java's replacement syntax."""
    out: list[str] = []
    last = 0
    for match in java_find_iter(pattern, text):
        out.append(text[last : match.start()])
        out.append(_expand(replacement, match))
        last = match.end()
        if first_only:
            break
    out.append(text[last:])
    return "".join(out)


_JAVA_DOT = "[^\\n\\r\\u0085\\u2028\\u2029]"


def java_compile(pattern: str) -> re.Pattern[str]:
    """Compile a rule regex; raises ``ValueError`` (Java: ``PatternSyntaxException``)."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


def java_dot(pattern: str) -> str:
    """Rewrite a *fixed* pattern of ours so ``.`` excludes Java's line terminators too."""
    return pattern.replace(".", _JAVA_DOT)
