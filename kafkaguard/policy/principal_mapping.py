"""Principal names from TLS DNs and Kerberos names, with Kafka's exact rule grammars.

* :class:`SslPrincipalMapper` — ``ssl.principal.mapping.rules`` (Kafka's
  ``SslPrincipalMapper``), applied to the RFC 2253 DN as Java prints it (see :mod:`.x500`).
* :class:`KerberosShortNamer` — ``sasl.kerberos.principal.to.local.rules``
  (Kafka's ``KerberosShortNamer``/``KerberosRule``/``KerberosName``).

Both raise :class:`NoMatchingRuleError` when no rule yields a name; Kafka then fails the
connection's authentication, and so must the proxy. No I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kafkaguard.policy.java_regex import (
    JavaPattern,
    JavaReplacementError,
    UndecidableSubjectError,
    java_compile,
    java_dot,
    java_find_iter,
)


class NoMatchingRuleError(ValueError):
    """``NoMatchingRule``: no rule applies (or a rule produced an unusable name)."""


# SslPrincipalMapper.RULE_PATTERN, verbatim apart from Java's "." (no line terminators).
_SSL_RULE = java_dot(r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)")
_SSL_SPLITTER = re.compile(r"\s*(" + _SSL_RULE + r")\s*(,\s*|$)", re.ASCII)
_SSL_PARSER = re.compile(_SSL_RULE, re.ASCII)
_BACK_REFERENCE = re.compile(r"\$(\d+)", re.ASCII)
_INT_MAX = 2**31 - 1
_JAVA_TRIM = "".join(chr(c) for c in range(33))  # String.trim(): every char <= U+0020
# Characters whose case mapping differs between the JVMs Kafka 4.x runs on (Java 17: Unicode 13,
# Java 21: 15, Java 25: 16) or from Python's (3.11: Unicode 14, 3.12+: 15): the pairs added in
# Unicode 14 and 16. Measured over every code point with String.toLowerCase/toUpperCase
# (Locale.ENGLISH) on Java 17 and 25 against str.lower/str.upper.
_CASE_UNSTABLE = re.compile(
    "[\u019b\u0264\u1c89-\u1c8a\u2c2f\u2c5f\ua7c0-\ua7c1\ua7cb-\ua7cd\ua7d0-\ua7d1"
    "\ua7d6-\ua7dc\U00010570-\U000105bc\U00010d50-\U00010d65\U00010d70-\U00010d85]"
)


def _java_case(rule: str, name: str, *, lower: bool, upper: bool) -> str:
    """``toLowerCase``/``toUpperCase(Locale.ENGLISH)``: no locale-specific mappings, as Python.

    A name holding a character whose mapping depends on the JVM's Unicode version is refused
    (fail closed): the principal would depend on which Java the broker runs.
    """
    if not (lower or upper):
        return name
    if _CASE_UNSTABLE.search(name):
        raise NoMatchingRuleError(
            f"rule {rule}: the case of {name!r} depends on the JVM's Unicode version"
        )
    return name.lower() if lower else name.upper()


def _escape_literal_back_references(unescaped: str, groups: int) -> str:
    """``Rule.escapeLiteralBackReferences`` (from NiFi), including its index drift.

    Java iterates matches over the *original* string but splices into the growing copy, so
    a second escaped reference lands one character early. That is replicated on purpose.
    """
    if groups == 0:
        return unescaped
    value = unescaped
    for match in _BACK_REFERENCE.finditer(unescaped):
        digits = match.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        if index > _INT_MAX:
            raise ValueError(f'For input string: "{digits}"')  # NumberFormatException
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = match.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
    return value


@dataclass(frozen=True, slots=True)
class _SslRule:
    pattern: JavaPattern | None  # None means DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        try:
            if not self.pattern.matches(dn):  # Matcher.matches(): the whole DN
                return None
            replacement = _escape_literal_back_references(self.replacement, self.pattern.groups)
            result = self.pattern.replace(dn, replacement)  # String.replaceAll
        except (JavaReplacementError, UndecidableSubjectError) as exc:
            raise NoMatchingRuleError(f"rule {self} failed on {dn}: {exc}") from exc
        return _java_case(str(self), result, lower=self.lower, upper=self.upper)

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        suffix = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern}/{self.replacement}{suffix}"


def _split_ssl_rules(rules: str) -> list[str]:
    """``splitRules``: ``RULE_SPLITTER.find()`` over the trimmed string, keeping group 1."""
    return [m.group(1) for m in java_find_iter(_SSL_SPLITTER, rules.strip(_JAVA_TRIM))]


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``; default ``DEFAULT`` (the DN itself is the name)."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.rules: tuple[_SslRule, ...] = tuple(self._parse(_split_ssl_rules(rules or "")))
        if rules is None:
            self.rules = (_SslRule(None),)

    @staticmethod
    def _parse(pieces: list[str]) -> list[_SslRule]:
        out: list[_SslRule] = []
        for piece in pieces:
            match = _SSL_PARSER.match(piece)  # lookingAt()
            if match is None:
                raise ValueError(f"Invalid rule: {piece}")
            if match.end() != len(piece):
                raise ValueError(
                    f"Invalid rule: `{piece}`, unmatched substring: `{piece[match.end() :]}`"
                )
            if match.group(1) is not None:
                out.append(_SslRule(None))
            elif match.group(2) is not None:
                try:
                    pattern = java_compile(match.group(2))
                except ValueError as exc:
                    raise ValueError(f"Invalid rule: `{piece}`: {exc}") from exc
                out.append(
                    _SslRule(
                        pattern,
                        match.group(4),
                        match.group(6) == "L",
                        match.group(6) == "U",
                    )
                )
            # an empty piece (third alternative) is ignored
        return out

    def get_name(self, distinguished_name: str) -> str:
        """``getName``: the first rule that applies wins; none → :class:`NoMatchingRuleError`."""
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        rules = "[" + ", ".join(str(r) for r in self.rules) + "]"
        raise NoMatchingRuleError(f"No rules apply to {distinguished_name}, rules {rules}")

    def __repr__(self) -> str:
        return "SslPrincipalMapper(rules = [" + ", ".join(str(r) for r in self.rules) + "])"


# -- Kerberos ---------------------------------------------------------------------------------
_KRB_RULE_PARSER = re.compile(
    r"((DEFAULT)|((RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)))",
    re.ASCII,
)
_KRB_NAME = re.compile(r"([^/@]*)(/([^/@]*))?@([^/@]*)")
_KRB_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?", re.ASCII)
_NON_SIMPLE = re.compile(r"[/@]")
_LIST_SPLIT = re.compile(r"\s*,\s*", re.ASCII)


@dataclass(frozen=True, slots=True)
class KerberosName:
    """``KerberosName``: ``service[/host]@REALM``; a name without ``@`` is simple."""

    service_name: str
    host_name: str | None = None
    realm: str | None = None

    @classmethod
    def parse(cls, principal_name: str) -> KerberosName:
        match = _KRB_NAME.fullmatch(principal_name)
        if match is None:
            if "@" in principal_name:
                raise ValueError(f"Malformed Kerberos name: {principal_name}")
            return cls(principal_name)
        return cls(match.group(1), match.group(3), match.group(4))

    def __str__(self) -> str:
        text = self.service_name
        if self.host_name is not None:
            text += "/" + self.host_name
        if self.realm is not None:
            text += "@" + self.realm
        return text


def _replace_parameters(fmt: str, params: list[str]) -> str:
    """``KerberosRule.replaceParameters``: ``$0`` realm, ``$1`` service, ``$2`` host."""
    out: list[str] = []
    start = 0
    while start < len(fmt):
        match = _KRB_PARAMETER.search(fmt, start)
        if match is None:
            break
        out.append(match.group(1))
        num = match.group(3)
        if num is not None:
            if not num:
                raise NoMatchingRuleError(f"bad format in username mapping in {num}")
            index = int(num)
            if index >= len(params):
                raise NoMatchingRuleError(
                    f"index {index} from {fmt} is outside of the valid range 0 to {len(params) - 1}"
                )
            out.append(params[index])
        start = match.end()
    return "".join(out)


@dataclass(frozen=True, slots=True)
class KerberosRule:
    """One ``RULE:[n:format](match)s/from/to/g/L`` or ``DEFAULT``."""

    default_realm: str | None
    is_default: bool = False
    components: int = 0
    format: str = ""
    match: JavaPattern | None = None
    from_pattern: JavaPattern | None = None
    to: str = ""
    repeat: bool = False
    lower: bool = False
    upper: bool = False
    text: str = "DEFAULT"

    def apply(self, params: list[str]) -> str | None:
        result: str | None = None
        if self.is_default:
            if self.default_realm is not None and self.default_realm == params[0]:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = _replace_parameters(self.format, params)
            try:
                if self.match is None or self.match.matches(base):
                    if self.from_pattern is None:
                        result = base
                    else:
                        result = self.from_pattern.replace(
                            base, self.to, first_only=not self.repeat
                        )
            except (JavaReplacementError, UndecidableSubjectError) as exc:
                raise NoMatchingRuleError(f"rule {self.text} failed: {exc}") from exc
        if result is not None and _NON_SIMPLE.search(result):
            raise NoMatchingRuleError(
                f"Non-simple name {result} after auth_to_local rule {self.text}"
            )
        if result is None:
            return None
        return _java_case(self.text, result, lower=self.lower, upper=self.upper)


class KerberosShortNamer:
    """``sasl.kerberos.principal.to.local.rules`` (a comma-separated LIST, default DEFAULT).

    ``default_realm`` stands in for the krb5.conf default realm Kafka reads at start.
    """

    def __init__(
        self, rules: str | list[str] = "DEFAULT", default_realm: str | None = None
    ) -> None:
        if isinstance(rules, str):
            trimmed = rules.strip()
            rules = _LIST_SPLIT.split(trimmed) if trimmed else []
        self.default_realm = default_realm
        self.rules = tuple(self._parse(rule, default_realm) for rule in rules)

    @staticmethod
    def _parse(rule: str, realm: str | None) -> KerberosRule:
        m = _KRB_RULE_PARSER.fullmatch(rule)  # Matcher.matches()
        if m is None:
            raise ValueError(f"Invalid rule: {rule}")
        if m.group(2) is not None:
            return KerberosRule(realm, is_default=True)
        if not m.group(5):
            raise ValueError(f'For input string: "{m.group(5)}" in rule {rule}')
        try:
            match = java_compile(m.group(8)) if m.group(8) is not None else None
            from_pattern = java_compile(m.group(10)) if m.group(10) is not None else None
        except ValueError as exc:
            raise ValueError(f"Invalid rule: {rule}: {exc}") from exc
        return KerberosRule(
            realm,
            components=int(m.group(5)),
            format=m.group(6),
            match=match,
            from_pattern=from_pattern,
            to=m.group(11) or "",
            repeat=m.group(12) == "g",
            lower=m.group(13) == "L",
            upper=m.group(13) == "U",
            text=rule,
        )

    def short_name(self, name: KerberosName | str) -> str:
        """``shortName``: simple names pass through; first non-null rule result wins."""
        kname = KerberosName.parse(name) if isinstance(name, str) else name
        if kname.host_name is None:
            if kname.realm is None:
                return kname.service_name
            params = [kname.realm, kname.service_name]
        else:
            params = [kname.realm or "", kname.service_name, kname.host_name]
        for rule in self.rules:
            result = rule.apply(params)
            if result is not None:
                return result
        rules = "[" + ", ".join(r.text for r in self.rules) + "]"
        raise NoMatchingRuleError(f"No rules apply to {kname}, rules {rules}")
