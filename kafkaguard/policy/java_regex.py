"""Java regular expressions (``java.util.regex.Pattern``/``Matcher``) on top of Python's ``re``.

Kafka's principal-mapping rules (``SslPrincipalMapper``, ``KerberosRule``) are Java regexes,
matched with ``Matcher.matches()`` and applied with ``replaceAll``/``replaceFirst`` and Java's
replacement syntax (``$n``, ``${name}``, ``\\x``). The principal they produce is the identity
every ACL is matched against, so a pattern must mean here exactly what it means in Java.

:func:`java_compile` therefore parses the Java syntax itself (following ``Pattern``'s own
parser: ``sequence``, ``closure``, ``clazz``, ``range``, ``escape``) and writes an equivalent
Python pattern in which nothing is left to Python's interpretation: ``\\w \\d \\s``, the POSIX
classes and ``.`` become explicit sets (Java's defaults are US-ASCII, without
``UNICODE_CHARACTER_CLASS``); case-insensitivity (ASCII-only without ``UNICODE_CASE``) is
spelled out per character; ``[a-z&&[^e]]`` intersections are computed; ``^ $ \\Z`` follow
Java's line terminators (``\\n \\r\\n \\r \\u0085 \\u2028 \\u2029``). A construct that cannot be
reproduced exactly is refused with :class:`UnsupportedJavaRegexError` (fail closed), a pattern
Java itself rejects with :class:`JavaPatternSyntaxError`. Whatever remains different is listed
in docs/deviations.md (principal mapping).

Two cases are decided per subject, raising :class:`UndecidableSubjectError` (the caller fails
the name closed): ``\\b``/``\\B`` on a subject with a non-ASCII character (Java 17 counts every
Unicode letter and digit as a word character there, Java 19+ only ASCII ones, JDK-8264160, and
both a combining mark after a letter; on all-ASCII subjects every Java agrees with Python's
ASCII ``\\b``), and ``replaceAll`` resuming after an empty match inside a surrogate pair.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


class JavaReplacementError(ValueError):
    """What Java throws from ``appendReplacement`` (bad ``$`` reference, dangling ``\\``)."""


class JavaPatternSyntaxError(ValueError):
    """Java's ``PatternSyntaxException``: ``Pattern.compile`` rejects the pattern too."""


class UnsupportedJavaRegexError(ValueError):
    """A construct Java accepts but kafkaguard cannot reproduce exactly: refused at load."""


class UndecidableSubjectError(ValueError):
    """The answer depends on the JVM's version (``\\b`` next to a non-ASCII character)."""


# -- code point sets --------------------------------------------------------------------------
_MAX = 0x10FFFF
_Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent, inclusive


def _norm(ranges: Iterable[tuple[int, int]]) -> _Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(a: _Ranges) -> _Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in a:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX:
        out.append((nxt, _MAX))
    return tuple(out)


def _intersect(a: _Ranges, b: _Ranges) -> _Ranges:
    return _complement(_norm(_complement(a) + _complement(b)))


def _ascii_case_closure(a: _Ranges) -> _Ranges:
    """Java's ``CASE_INSENSITIVE`` without ``UNICODE_CASE``: only US-ASCII letters fold."""
    extra: list[tuple[int, int]] = []
    for lo, hi in a:
        for base, other in ((0x41, 0x61), (0x61, 0x41)):  # A-Z <-> a-z
            s, e = max(lo, base), min(hi, base + 25)
            if s <= e:
                extra.append((s - base + other, e - base + other))
    return _norm(a + tuple(extra))


def _cp(c: int) -> str:
    return chr(c) if chr(c).isascii() and chr(c).isalnum() else f"\\U{c:08x}"


def _emit_set(a: _Ranges) -> str:
    if not a:
        return "(?!)"
    if len(a) == 1 and a[0][0] == a[0][1]:
        return _cp(a[0][0])
    body = "".join(_cp(lo) if lo == hi else f"{_cp(lo)}-{_cp(hi)}" for lo, hi in a)
    return f"[{body}]"


def _r(*pairs: tuple[str, str]) -> _Ranges:
    return _norm((ord(lo), ord(hi)) for lo, hi in pairs)


_DIGIT = _r(("0", "9"))
_WORD = _r(("a", "z"), ("A", "Z"), ("0", "9"), ("_", "_"))
_SPACE = _r(("\t", "\r"), (" ", " "))  # \t \n \x0B \f \r and space
_HORIZ = _r(
    (" ", " "), ("\t", "\t"), ("\xa0", "\xa0"), ("\u1680", "\u1680"), ("\u180e", "\u180e"),
    ("\u2000", "\u200a"), ("\u202f", "\u202f"), ("\u205f", "\u205f"), ("\u3000", "\u3000"),
)  # fmt: skip
_VERT = _r(("\n", "\r"), ("\x85", "\x85"), ("\u2028", "\u2029"))
_LINE_TERMINATORS = _r(("\n", "\n"), ("\r", "\r"), ("\x85", "\x85"), ("\u2028", "\u2029"))
_PUNCT = _r(("!", "/"), (":", "@"), ("[", "`"), ("{", "~"))
_ALPHA = _r(("a", "z"), ("A", "Z"))
# CharPredicates.forProperty: the POSIX classes, US-ASCII only (Lower/Upper: Alpha with (?i)).
_POSIX: dict[str, _Ranges] = {
    "Lower": _r(("a", "z")),
    "Upper": _r(("A", "Z")),
    "ASCII": _r(("\x00", "\x7f")),
    "Alpha": _ALPHA,
    "Digit": _DIGIT,
    "Alnum": _norm(_ALPHA + _DIGIT),
    "Punct": _PUNCT,
    "Graph": _r(("!", "~")),
    "Print": _r((" ", "~")),
    "Blank": _r((" ", " "), ("\t", "\t")),
    "Cntrl": _r(("\x00", "\x1f"), ("\x7f", "\x7f")),
    "XDigit": _r(("0", "9"), ("a", "f"), ("A", "F")),
    "Space": _SPACE,
}
# Predefined classes: escape letter -> (set, negated)
_PREDEFINED: dict[str, tuple[_Ranges, bool]] = {
    "d": (_DIGIT, False),
    "D": (_DIGIT, True),
    "w": (_WORD, False),
    "W": (_WORD, True),
    "s": (_SPACE, False),
    "S": (_SPACE, True),
    "h": (_HORIZ, False),
    "H": (_HORIZ, True),
    "v": (_VERT, False),
    "V": (_VERT, True),
}
_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "a": 0x07, "e": 0x1B}
# Java's '$' (Dollar) and '^' (Caret with MULTILINE), written with Python's absolute \A \Z.
_DOLLAR = r"(?:\Z|(?=\r\n\Z)|(?<!\r)(?=\n\Z)|(?=[\r\x85\u2028\u2029]\Z))"
_DOLLAR_MULTILINE = r"(?:\Z|(?<!\r)(?=\n)|(?=[\r\x85\u2028\u2029]))"
_CARET_MULTILINE = r"(?!\Z)(?:\A|(?<=[\n\x85\u2028\u2029])|(?<=\r)(?!\n))"
_JAVA_DOT = _emit_set(_complement(_LINE_TERMINATORS))  # '.' without DOTALL
_UNSUPPORTED_FLAGS = {
    "d": "UNIX_LINES",
    "u": "UNICODE_CASE",
    "c": "CANON_EQ",
    "x": "COMMENTS",
    "U": "UNICODE_CHARACTER_CLASS",
}


class _Translator:
    """One pass over a Java pattern, in the order ``Pattern``'s parser reads it."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.flags: frozenset[str] = frozenset()
        self.groups = 0  # capturing groups opened so far (Java: capturingGroupCount - 1)
        self.closed: set[int] = set()
        self.names: dict[str, int] = {}
        self.word_boundary = False

    # -- errors and reading
    def syntax(self, desc: str) -> JavaPatternSyntaxError:
        return JavaPatternSyntaxError(f"{desc} near index {self.i}: {self.p}")

    def unsupported(self, what: str, hint: str = "") -> UnsupportedJavaRegexError:
        return UnsupportedJavaRegexError(
            f"{what} is not supported (at index {self.i} of {self.p!r}): kafkaguard cannot "
            f"reproduce its Java meaning exactly{hint} (docs/deviations.md, principal mapping)"
        )

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def take(self) -> str:
        c = self.peek()
        if not c:
            raise self.syntax("Unexpected end of pattern")
        self.i += 1
        return c

    # -- structure
    def translate(self) -> str:
        out = self.alternation()
        if self.i < len(self.p):  # only a ')' stops an alternation at top level
            raise self.syntax("Unmatched closing ')'")
        return out

    def alternation(self) -> str:
        parts = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            parts.append(self.sequence())
        return "|".join(parts)

    def sequence(self) -> str:
        out: list[str] = []
        while self.i < len(self.p) and self.peek() not in "|)":
            c = self.peek()
            if c in "?*+":
                self.i += 1
                raise self.syntax(f"Dangling meta character '{c}'")
            if c == "{":
                raise self.syntax("Illegal repetition")
            prefix = ""
            if c == "(":
                node = self.group()
                if node is None:
                    continue  # inline flags only
                text, quantifiable = node
            elif c == "\\" and self.peek(1) == "Q":
                prefix, text, quantifiable = self.quotation()
            else:
                text, quantifiable = self.atom()
            quantifier = self.quantifier()
            if quantifier:
                if not quantifiable:
                    raise self.unsupported("a quantifier on an anchor, boundary or lookaround")
                text = f"(?:{text}){quantifier}"
            out.append(prefix + text)
        return "".join(out)

    def quantifier(self) -> str:
        """``Pattern.closure``: ``? * + {n} {n,} {n,m}``, then ``?`` (lazy) or ``+``."""
        c = self.peek()
        if c in ("?", "*", "+"):
            self.i += 1
            q = c
        elif c == "{":
            if not ("0" <= self.peek(1) <= "9"):
                raise self.syntax("Illegal repetition")
            self.i += 1
            cmin = self.number()
            cmax: int | None = cmin
            if self.peek() == ",":
                self.i += 1
                cmax = self.number() if "0" <= self.peek() <= "9" else None
            if self.peek() != "}":
                raise self.syntax("Unclosed counted closure")
            self.i += 1
            if cmax is not None and cmax < cmin:
                raise self.syntax("Illegal repetition range")
            q = f"{{{cmin}}}" if cmax == cmin else f"{{{cmin},{'' if cmax is None else cmax}}}"
        else:
            return ""
        if self.peek() in ("?", "+"):
            q += self.take()
        if self.peek() and self.peek() in "?*+":
            raise self.syntax(f"Dangling meta character '{self.peek()}'")
        if self.peek() == "{":
            raise self.unsupported("a counted repetition after a quantifier")
        return q

    def number(self) -> int:
        start = self.i
        while "0" <= self.peek() <= "9":
            self.i += 1
        value = int(self.p[start : self.i])
        if value > 2**31 - 1:
            raise self.unsupported("a repetition count above Integer.MAX_VALUE")
        return value

    def group(self) -> tuple[str, bool] | None:  # noqa: C901 - Pattern.group0: a branch per kind
        """``Pattern.group0``; flags set inside a group end with it (``flags0 = save``)."""
        self.i += 1  # (
        save = self.flags
        prefix = "(?:"
        capture: int | None = None
        quantifiable = True
        if self.peek() == "?":
            self.i += 1
            c = self.take()
            if c == ":":
                pass
            elif c in "=!":
                prefix, quantifiable = f"(?{c}", False
            elif c == ">":
                prefix = "(?>"
            elif c == "<":
                if self.peek() in ("=", "!"):
                    prefix, quantifiable = f"(?<{self.take()}", False
                else:
                    name = self.group_name()
                    if name in self.names:
                        raise self.syntax(f"Named capturing group <{name}> is already defined")
                    self.groups += 1
                    capture = self.groups
                    self.names[name] = capture
                    prefix = f"(?P<{name}>"
            elif c in "$@":
                raise self.syntax("Unknown group type")
            else:
                self.i -= 1
                self.inline_flags()
                c = self.take()
                if c == ")":
                    return None  # (?i): the flags stay until the enclosing group ends
                if c != ":":
                    raise self.syntax("Unknown inline modifier")
        else:
            self.groups += 1
            capture = self.groups
            prefix = "("
        body = self.alternation()
        if self.peek() != ")":
            raise self.syntax("Unclosed group")
        self.i += 1
        self.flags = save
        if capture is not None:
            self.closed.add(capture)
        return f"{prefix}{body})", quantifiable

    def group_name(self) -> str:
        start = self.i
        while self.peek().isascii() and self.peek().isalnum():
            self.i += 1
        name = self.p[start : self.i]
        if not name or not name[0].isalpha():
            raise self.syntax("capturing group name does not start with a Latin letter")
        if self.peek() != ">":
            raise self.syntax("named capturing group is missing trailing '>'")
        self.i += 1
        return name

    def inline_flags(self) -> None:
        """``addFlag``/``subFlag``: ``i m s`` are reproduced; ``d u c x U`` are refused."""
        flags = set(self.flags)
        on = True
        while True:
            c = self.peek()
            if c == "-" and on:
                on = False
            elif c in ("i", "m", "s"):
                (flags.add if on else flags.discard)(c)
            elif c in _UNSUPPORTED_FLAGS:
                if on:
                    raise self.unsupported(f"the inline flag ({c}) {_UNSUPPORTED_FLAGS[c]}")
            else:
                break
            self.i += 1
        self.flags = frozenset(flags)

    # -- atoms
    def atom(self) -> tuple[str, bool]:
        c = self.take()
        if c == "[":
            self.i -= 1
            return _emit_set(self.char_class(consume=True)), True
        if c == ".":
            return (_emit_set(((0, _MAX),)) if "s" in self.flags else _JAVA_DOT), True
        if c == "^":
            return (_CARET_MULTILINE if "m" in self.flags else r"\A"), False
        if c == "$":
            return (_DOLLAR_MULTILINE if "m" in self.flags else _DOLLAR), False
        if c == "\\":
            return self.escape_atom()
        if c == "\x00":
            raise self.unsupported("a NUL character")
        return _emit_set(self.literal(ord(c))), True

    def escape_atom(self) -> tuple[str, bool]:
        c = self.peek()
        if c in "123456789":
            return self.back_reference(), True
        if c == "k":
            return self.named_back_reference(), True
        zero_width = {"A": r"\A", "z": r"\Z", "Z": _DOLLAR}
        if c in zero_width:
            self.i += 1
            return zero_width[c], False
        if c in ("b", "B"):
            self.i += 1
            if c == "b" and self.peek() == "{":
                raise self.unsupported("\\b{g}")
            self.word_boundary = True
            # Python's \B fails on the empty string, where Java's (and (?!\b)) succeeds
            return (r"\b" if c == "b" else r"(?!\b)"), False
        if c == "R":  # LineEnding: \r\n first, then backtracks to \r alone
            self.i += 1
            return r"(?:\r\n|[\n\x0b\x0c\r\x85\u2028\u2029])", True
        if c in ("G", "X", "N"):
            raise self.unsupported(f"\\{c}")
        value = self.escape_value(is_range=False)
        return _emit_set(self.literal(value) if isinstance(value, int) else value), True

    def quotation(self) -> tuple[str, str, bool]:
        """``\\Q...\\E`` (``RemoveQEQuoting``): literal characters; no ``\\E`` quotes to the end.

        Returns the characters before the last one apart: a quantifier after ``\\E`` applies
        to the last quoted character only.
        """
        self.i += 2
        end = self.p.find("\\E", self.i)
        quoted = self.p[self.i :] if end < 0 else self.p[self.i : end]
        self.i = len(self.p) if end < 0 else end + 2
        if not quoted:
            return "", "", False
        parts = [_emit_set(self.literal(ord(ch))) for ch in quoted]
        return "".join(parts[:-1]), parts[-1], True

    def back_reference(self) -> str:
        """``Pattern.ref``: more digits join while the number stays an opened group."""
        ref = int(self.take())
        while "0" <= self.peek() <= "9" and ref * 10 + int(self.peek()) <= self.groups:
            ref = ref * 10 + int(self.take())
        if ref not in self.closed:
            raise self.unsupported(f"\\{ref}, a back reference to a group not closed before it")
        return self.backref_text(ref)

    def named_back_reference(self) -> str:
        """``\\k<name>``: the group must exist (Java) and be closed (else refused)."""
        self.i += 1
        if self.take() != "<":
            raise self.syntax("\\k is not followed by '<' for named capturing group")
        name = self.group_name()
        if name not in self.names:
            raise self.syntax(f"named capturing group <{name}> does not exist")
        if self.names[name] not in self.closed:
            raise self.unsupported("a back reference inside the group it refers to")
        return self.backref_text(self.names[name])

    def backref_text(self, ref: int) -> str:
        # Java's CIBackRef without UNICODE_CASE folds US-ASCII only, as re.ASCII's IGNORECASE.
        return f"(?i:\\{ref})" if "i" in self.flags else f"(?:\\{ref})"

    def literal(self, c: int) -> _Ranges:
        """``Pattern.newSingle``: with ``(?i)`` an ASCII letter matches both cases."""
        single = ((c, c),)
        return _ascii_case_closure(single) if "i" in self.flags else single

    def escape_value(self, *, is_range: bool) -> int | _Ranges:  # noqa: C901 - a branch per letter
        """``Pattern.escape`` after the backslash: one character or a set (``\\d``, ``\\p``)."""
        c = self.take()
        if c in ("p", "P"):
            return self.family(negate=c == "P")
        if c == "v" and is_range:
            return 0x0B
        if c in _PREDEFINED:
            base, negate = _PREDEFINED[c]
            return _complement(base) if negate else base
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "0":
            return self.octal()
        if c == "x":
            return self.hex_escape()
        if c == "u":
            return self.unicode_escape()
        if c == "c":
            if not self.peek():
                raise self.syntax("Illegal control escape sequence")
            return ord(self.take()) ^ 64
        if c.isascii() and c.isalnum():
            if c in "NQ":
                raise self.unsupported(f"\\{c} here")
            raise self.syntax("Illegal/unsupported escape sequence")
        return ord(c)

    def family(self, *, negate: bool) -> _Ranges:
        """``Pattern.family``: only the US-ASCII POSIX classes are reproduced."""
        if self.peek() == "{":
            end = self.p.find("}", self.i)
            if end < 0:
                raise self.syntax("Unclosed character family")
            name = self.p[self.i + 1 : end]
            self.i = end + 1
        else:
            name = self.take()
        if name not in _POSIX:
            raise self.unsupported(
                f"\\p{{{name}}}", f"; the US-ASCII POSIX classes are: {', '.join(_POSIX)}"
            )
        base = _POSIX[name]
        if "i" in self.flags:
            base = _ascii_case_closure(base)
        return _complement(base) if negate else base

    def octal(self) -> int:
        """``Pattern.o``: ``\\0n``, ``\\0nn``, ``\\0mnn`` (m <= 3)."""
        digits = ""
        while len(digits) < 3 and "0" <= self.peek() <= "7":
            if len(digits) == 2 and digits[0] > "3":
                break
            digits += self.take()
        if not digits:
            raise self.syntax("Illegal octal escape sequence")
        return int(digits, 8)

    def hex_digits(self, count: int, desc: str) -> int:
        digits = self.p[self.i : self.i + count]
        if len(digits) != count or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise self.syntax(desc)
        self.i += count
        return int(digits, 16)

    def hex_escape(self) -> int:
        """``Pattern.x``: ``\\xhh`` or ``\\x{h...h}``."""
        if self.peek() != "{":
            return self.hex_digits(2, "Illegal hexadecimal escape sequence")
        end = self.p.find("}", self.i)
        if end <= self.i + 1:
            raise self.syntax("Unclosed hexadecimal escape sequence")
        self.i += 1
        value = self.hex_digits(end - self.i, "Illegal hexadecimal escape sequence")
        if value > _MAX:
            raise self.syntax("Hexadecimal codepoint is too big")
        self.i += 1
        return value

    def unicode_escape(self) -> int:
        value = self.hex_digits(4, "Illegal Unicode escape sequence")
        if 0xD800 <= value <= 0xDFFF:
            raise self.unsupported("a \\u surrogate escape")
        return value

    # -- character classes
    def char_class(self, *, consume: bool) -> _Ranges:  # noqa: C901 - Pattern.clazz, verbatim
        """``Pattern.clazz``: items unite; ``&&`` intersects with what follows up to ``]``."""
        opened_at = self.i
        self.i += 1  # '[' (or, with consume false, the char before the operand)
        negate = False
        if consume and self.peek() == "^":
            negate = True
            self.i += 1
        acc: _Ranges | None = None
        while True:
            c = self.peek()
            if not c:
                self.i = opened_at
                raise self.syntax("Unclosed character class")
            if c == "[":
                inner = self.char_class(consume=True)
                acc = inner if acc is None else _norm(acc + inner)
                continue
            if c == "&" and self.peek(1) == "&":
                if acc is None:
                    raise self.unsupported("'&&' with nothing before it")
                self.i += 2
                right: _Ranges | None = None
                while self.peek() not in ("]", "&", ""):
                    if self.peek() == "[":
                        part = self.char_class(consume=True)
                    else:
                        self.i -= 1
                        part = self.char_class(consume=False)
                    right = part if right is None else _norm(right + part)
                if right is None:
                    raise self.unsupported("'&&' with nothing after it")
                acc = _intersect(acc, right)
                if self.peek() != "]" and self.p[self.i : self.i + 2] != "&&":
                    # Java would add these to a bit set already captured by the intersection
                    raise self.unsupported("characters after a '&&' operand's class")
                continue
            if c == "]" and acc is not None:
                if consume:
                    self.i += 1
                return _complement(acc) if negate else acc
            item = self.class_item()
            acc = item if acc is None else _norm(acc + item)

    def class_item(self) -> _Ranges:
        """``Pattern.range``: one character, escape, property or ``a-z`` range."""
        if self.peek() == "\\":
            self.i += 1
            value = self.escape_value(is_range=self.peek(1) == "-")
            if not isinstance(value, int):
                return value
            low = value
        else:
            if self.peek() == "\x00":
                raise self.unsupported("a NUL character")
            low = ord(self.take())
        if self.peek() == "-" and self.peek(1) not in ("[", "]", ""):
            self.i += 1
            if self.peek() == "\\":
                self.i += 1
                if self.peek() in ("p", "P"):
                    raise self.syntax("Illegal/unsupported escape sequence")
                high = self.escape_value(is_range=True)
                if not isinstance(high, int):
                    raise self.syntax("Illegal character range")
            else:
                high = ord(self.take())
            if high < low:
                raise self.syntax("Illegal character range")
            rng = ((low, high),)
            return _ascii_case_closure(rng) if "i" in self.flags else rng
        return self.literal(low)


@dataclass(frozen=True, slots=True)
class JavaPattern:
    """A compiled Java pattern: its source, its exact Python translation and how to apply it."""

    pattern: str
    regex: re.Pattern[str]
    word_boundary: bool  # \b or \B: only all-ASCII subjects are decidable

    @property
    def groups(self) -> int:
        return self.regex.groups

    def _check(self, text: str) -> None:
        if self.word_boundary and not text.isascii():
            raise UndecidableSubjectError(
                f"{self.pattern!r} uses \\b or \\B, which Java 17 and Java 19+ read differently "
                f"next to non-ASCII characters, on {text!r}"
            )

    def matches(self, text: str) -> bool:
        """``Matcher.matches()``: the whole input."""
        self._check(text)
        return self.regex.fullmatch(text) is not None

    def replace(self, text: str, replacement: str, *, first_only: bool = False) -> str:
        """``Matcher.replaceAll`` (or ``replaceFirst``) with Java's replacement syntax."""
        self._check(text)
        return java_replace(self.regex, text, replacement, first_only=first_only)

    def __str__(self) -> str:
        return self.pattern


def java_compile(pattern: str) -> JavaPattern:
    """``Pattern.compile`` with default flags; raises a ``ValueError`` subclass when refused."""
    translator = _Translator(pattern)
    source = translator.translate()
    try:
        regex = re.compile(source, re.ASCII)
    except re.error as exc:  # e.g. a lookbehind Java bounds but Python wants fixed-width
        raise UnsupportedJavaRegexError(
            f"{pattern!r} is not supported: kafkaguard cannot reproduce it exactly ({exc})"
        ) from exc
    return JavaPattern(pattern, regex, translator.word_boundary)


def java_find_iter(pattern: re.Pattern[str], text: str, start: int = 0) -> Iterator[re.Match[str]]:
    """``while (matcher.find())``: after an empty match the search resumes one char later.

    Java's "one char" is a UTF-16 unit: after an empty match before a character outside the
    BMP it searches from inside its surrogate pair (and splices replacements between the
    halves), which a Python string cannot reproduce: :class:`UndecidableSubjectError`.
    """
    pos = start
    while pos <= len(text):
        match = pattern.search(text, pos)
        if match is None:
            return
        yield match
        if match.end() != match.start():
            pos = match.end()
            continue
        if match.end() < len(text) and ord(text[match.end()]) > 0xFFFF:
            raise UndecidableSubjectError(
                f"an empty match before U+{ord(text[match.end()]):X}: Java resumes its search "
                "inside the character's surrogate pair"
            )
        pos = match.end() + 1


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
                i += 1
                start = i
                while i < n and replacement[i].isascii() and replacement[i].isalnum():
                    i += 1
                name = replacement[start:i]
                if not name:
                    raise JavaReplacementError("named capturing group has 0 length name")
                if i >= n or replacement[i] != "}":
                    raise JavaReplacementError("named capturing group is missing trailing '}'")
                if name[0].isdigit():
                    raise JavaReplacementError(
                        f"capturing group name {{{name}}} starts with digit character"
                    )
                if name not in match.re.groupindex:
                    raise JavaReplacementError(f"No group with name {{{name}}}")
                out.append(match.group(name) or "")
                i += 1
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


def java_dot(pattern: str) -> str:
    """Rewrite a *fixed* pattern of ours so ``.`` excludes Java's line terminators too."""
    return pattern.replace(".", _JAVA_DOT)
