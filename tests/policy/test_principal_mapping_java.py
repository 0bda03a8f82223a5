"""Principal-mapping regexes against Java's own ``Pattern``/``Matcher`` (the differential JVM).

Each vector ``(pattern, subject, replacement)`` is given to the ``kafka_reader`` fixture
(``tests/support/kafka_referee.py``: ``Pattern.compile``, ``matcher.matches()``,
``matcher.replaceAll`` when it matches) and to :func:`java_compile`; the outcomes must be equal.
kafkaguard may refuse a pattern Java accepts only when it is listed in ``REFUSED`` (fail closed,
docs/deviations.md), and may call a subject undecidable only for ``\\b``/``\\B`` next to
non-ASCII characters (Java 17 and 19+ differ there). Subjects are DNs as Kafka sees them
(``X500Principal.getName(RFC2253)``), including its escapes and non-ASCII text.
"""

from __future__ import annotations

import random
from itertools import product
from typing import Any

import pytest

from kafkaguard.policy.java_regex import (
    JavaPatternSyntaxError,
    UndecidableSubjectError,
    UnsupportedJavaRegexError,
    java_compile,
)
from kafkaguard.policy.principal_mapping import NoMatchingRuleError, SslPrincipalMapper
from tests.support.kafka_referee import KafkaReferee

pytestmark = pytest.mark.kafka

ASCII_DNS = (
    "CN=alice,OU=eng",
    "CN=alice_1,OU=eng",
    "CN=Alice Smith,OU=Eng,O=Acme\\, Inc.,C=US",
    "cn=BOB,ou=ENG",
    "CN=kafka-01.example.com,OU=ops",
)
UNICODE_DNS = (
    "CN=ålice,OU=eng",  # å: a Unicode letter, not \w
    "CN=straße,OU=eng",  # ß
    "CN=user\u0663,OU=eng",  # ARABIC-INDIC DIGIT THREE
    "CN=\uff55\uff53\uff45\uff52\uff11,OU=eng",  # fullwidth "user1"
    "CN=e\u0301mile,OU=eng",  # e + COMBINING ACUTE ACCENT
    "CN=\u65e5\u672c,OU=eng",  # CJK
    "CN=\U0001f600,OU=eng",  # outside the BMP
    "CN=a\u00a0b,OU=eng",  # NO-BREAK SPACE
    "CN=\u212aelvin,OU=eng",  # KELVIN SIGN
    "CN=\u0130stanbul,OU=eng",  # I WITH DOT ABOVE
)
LINE_DNS = (
    "CN=alice\n",
    "CN=alice\r\n",
    "CN=alice\r",
    "CN=alice\u0085",
    "CN=alice\u2028",
    "CN=alice\u2029",
    "CN=al\nice",
    "CN=alice\n\n",
    "CN=alice\n\r",
    "",
)
ESCAPED_DNS = (
    "CN=a\\,b,OU=eng",
    "CN=\\#1,OU=eng",
    "CN=a\\+b,OU=eng",
    "CN=a\\\\b,OU=eng",
    "CN=\\ lead,OU=eng",
    'CN=a\\;b\\<c\\>\\"d\\=e,OU=eng',
    "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice",
    "CN=alice+UID=42,OU=eng",
)

CLASS_PATTERNS = (
    (r"^CN=(\w+),OU=eng$", "$1"),
    (r"CN=(\W+),OU=eng", "$1"),
    (r"CN=([\w.-]+),OU=(.*)", "$1@$2"),
    (r"CN=user(\d),OU=eng", "$1"),
    (r"CN=([^\d,]*)(\d*),OU=eng", "$1|$2"),
    (r"CN=(\S+),OU=eng", "$1"),
    (r"CN=(\w*)\s(\w*),.*", "$2"),
    (r"CN=(\p{Alpha}+),OU=eng", "$1"),
    (r"CN=(\p{Alnum}+),OU=eng", "$1"),
    (r"CN=(\p{Lower}+),OU=\p{Lower}+", "$1"),
    (r"(?i)CN=(\p{Upper}+),OU=eng", "$1"),
    (r"CN=(\P{Alpha}*)(.*)", "$1|$2"),
    (r"CN=([\p{Graph}&&[^,]]+),.*", "$1"),
    (r"CN=(\p{Print}+)", "$1"),
    (r"(\p{ASCII}*)(.*)", "$1|$2"),
    (r"CN=(\h*)(\H*)(\h*)(.*)", "$1|$2|$3|$4"),
    (r"CN=([^\v]*)(\v*)", "$1|$2"),
    (r"CN=(\p{XDigit}*)(\p{Punct}?)(.*)", "$1|$2|$3"),
)
DOT_PATTERNS = (
    (r"CN=(.*)", "$1"),
    (r"CN=(.+)$", "$1"),
    (r"(?s)CN=(.*)", "[$1]"),
    (r"(?s)(.*?)$(.*)", "[$1|$2]"),
    (r"(?s)(.*?)\Z(.*)", "[$1|$2]"),
    (r"(?s)(.*?)\z(.*)", "[$1|$2]"),
    (r"(?ms)(.*?)$(.*)", "[$1|$2]"),
    (r"(?ms)(.+?)^(.*)", "[$1|$2]"),
    (r"(?m)(.*)$\s*", "[$1]"),
    (r"CN=alice$[\s\u0085\u2028\u2029]*", "x"),
    (r"CN=alice\s*", "x"),
    (r"CN=alice[\r\n]?", "x"),
    (r"(.*)", "[$1]"),
    (r"(?s)(.)*", "[$1]"),
    (r"(?s)CN=(.*?)(\R*)", "[$1|$2]"),
    (r"(?s)CN=alice(\R)(\n?)", "[$1|$2]"),
    (r"(?s)(.*?)(\R+?)(.*)", "[$1|$2|$3]"),
)
ANCHOR_PATTERNS = (
    (r"\bCN=(\w+)\b.*", "$1"),
    (r"\B(.*)", "[$1]"),
    (r"(?s)x*.*?", "<$0>"),
    (r".*\Bli\B.*", "x"),
    (r"(?s)(.*?)\b(.*)", "[$1|$2]"),
    (r"\ACN=(.*?),OU=eng\z", "$1"),
    (r"^CN=(.*?),OU=eng\Z", "$1"),
)
QUANTIFIER_SUBJECTS = ("CN=aaa", "CN=aab", "CN=abcd", "CN=", "CN=aaaa,OU=x")
QUANTIFIER_PATTERNS = (
    (r"CN=(a+?)(a*)", "$1|$2"),
    (r"CN=(a{2})(a*)", "$1|$2"),
    (r"CN=(a{2,})(.*)", "$1|$2"),
    (r"CN=(a{1,2}?)(.*)", "$1|$2"),
    (r"CN=(a*+)a", "$1"),
    (r"CN=(?>a*)(.*)", "[$1]"),
    (r"CN=(a|ab)(c|bcd)(d*)", "$1|$2|$3"),
    (r"CN=(a?)(a?)(.*)", "$1|$2|$3"),
    (r"CN=(?:a|b)*(.*)", "[$1]"),
    (r"CN=(a{0})(.*)", "[$1|$2]"),
    (r"CN=((a)|b)*(.*)", "[$1|$2|$3]"),
    (r"a*", "X"),
)
GROUP_VECTORS = (
    (r"CN=(\w)\1(.*)", "CN=aab", "$2"),
    (r"(?i)CN=(\w)\1(.*)", "CN=aAb", "$2"),
    (r"(?i)CN=(\w)\1(.*)", "CN=\u00e5\u00c5b", "$2"),
    (r"CN=(?<user>\w+),OU=(?<ou>\w+)", "CN=alice,OU=eng", "${ou}/${user}"),
    (r"CN=(?<user>\w+),OU=\k<user>", "CN=eng,OU=eng", "${user}"),
    (r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)", "abcdefghijk", "$11-$10-$1-$12"),
    (r"(a)(b)", "ab", "$12\\$1$0"),
    (r"CN=(\w+),OU=(\w+)", "CN=alice,OU=eng", "\\$1 \\\\ $2"),
    (r"CN=(?:(x)|(\w+)),.*", "CN=alice,OU=eng", "[$1][$2]"),
    (r"CN=(\w+)(?=,OU=eng).*", "CN=alice,OU=eng", "$1"),
    (r"CN=(\w+)(?!,OU=eng).*", "CN=alice,OU=eng", "$1"),
    (r".*(?<=,OU=)(\w+)", "CN=alice,OU=eng", "$1"),
    (r".*(?<!CN=)a(\w+)", "CN=alice,OU=eng", "$1"),
    (r"(a)|b", "b", "[$1]"),
    (r"((a)(b))", "ab", "$3$2$1$0"),
)
CASE_VECTORS = (
    (r"(?i)cn=(\w+),ou=ENG", "CN=alice,OU=eng", "$1"),
    (r"(?i)CN=ÅLICE.*", "CN=ålice,OU=eng", "x"),
    (r"(?i)CN=K.*", "CN=\u212aelvin,OU=eng", "x"),
    (r"(?i)CN=I.*", "CN=\u0130stanbul,OU=eng", "x"),
    (r"(?i)CN=SS.*", "CN=\u00df,OU=eng", "x"),
    (r"(?i:cn)=(.*)", "cN=alice", "$1"),
    (r"(?i:cn)=ALICE", "cN=alice", "x"),
    (r"(?i)([a-c]+)(.*)", "AbCd", "$1|$2"),
    (r"(?i)([^a]+)(.*)", "bBAa", "$1|$2"),
    (r"(?i)\x41+", "aA", "x"),
    (r"(?i)CN=(?-i)alice", "cn=alice", "x"),
    (r"(?i)CN=(?-i)alice", "cn=ALICE", "x"),
    (r"((?i)cn)=alice|CN=(.*)", "cn=ALICE", "[$1|$2]"),
    (r"(?i)a|B", "b", "x"),
    (r"(?i)[\p{Lower}]+", "AbC", "x"),
    (r"(?i)\P{Lower}+", "AbC", "x"),
    (r"(?i)[\w&&[^A]]+", "bBa", "x"),
    (r"(?i)\Qab\E+", "ABbB", "x"),
)
INTERSECTION_VECTORS = [
    (pattern, subject, "[$1]")
    for pattern, subject in product(
        (
            r"([a-z&&[^e]]+)",
            r"([a-z&&[^aeiou]]+)",
            r"([\w&&[^\d]]+)",
            r"([a-z&&[def]]+)",
            r"([a-z&&def]+)",
            r"([^a-z&&[aeiou]]+)",
            r"([a-c[x-z]]+)",
            r"([^a[b]]+)",
            r"([a-z&&b-y&&[^m]]+)",
            r"([[a-f]&&[d-k]]+)",
            r"([a-z&&[aeiou]xyz]+)",
            r"([]a]+)",
            r"([a-]+)",
            r"([-a]+)",
            r"([a-[b]]+)",
            r"([\d-z]+)",
            r"([a&b]+)",
        ),
        ("abcde", "xyz", "bcd", "a-b", "m", "b&c", "]a", "1-z"),
    )
]
ESCAPE_VECTORS = (
    (r"CN=\Q.\E(.*)", "CN=.x", "$1"),
    (r"CN=\Q.\E(.*)", "CN=ax", "$1"),
    (r"CN=\Qa.b(.*)", "CN=a.b(.*)", "x"),
    (r"CN=\x41\u00e5\x{1F600}(.*)", "CN=A\u00e5\U0001f600z", "$1"),
    (r"CN=\0101\0141\011(.*)", "CN=Aa\tz", "$1"),
    (r"CN=\t\n\r\f\a\e(.*)", "CN=\t\n\r\f\x07\x1bz", "$1"),
    (r"CN=\cA\c[(.*)", "CN=\x01\x1bz", "$1"),
    (r"CN=a\.b\,c", "CN=a.b,c", "x"),
    (r"CN=([^,]+),.*", "CN=a\\,b,OU=eng", "$1"),
    (r"CN=((?:\\.|[^,\\])+),.*", "CN=a\\,b,OU=eng", "$1"),
    (r"CN=((?:\\.|[^,\\])+),.*", "CN=a\\\\b,OU=eng", "$1"),
    (r"CN=\\#(\d)(.*)", "CN=\\#1,OU=eng", "$1"),
    (r".*=#([0-9a-f]+),CN=(.*)", ESCAPED_DNS[6], "$2:$1"),
    (r"CN=(\w+)\+UID=(\d+),.*", "CN=alice+UID=42,OU=eng", "$2"),
    (r"CN=\é(.*)", "CN=ér", "$1"),
    (r"CN=[\]\[]+", "CN=][", "x"),
    (r"CN=}]+", "CN=}]]", "x"),
)
SYNTAX_ERRORS = (
    "(",
    "[a",
    "a)",
    "a**",
    "a{2}*",
    "{a",
    "*a",
    "a{,2}",
    "a{2,1}",
    "a{x}",
    r"\i",
    "[z-a]",
    "(?<1a>x)",
    r"\k<nope>",
    r"\0",
    r"\08",
    r"\x4",
    r"\u12",
    r"\x{}",
    r"\x{110000}",
    "(?<a>x)(?<a>y)",
    "(?q)",
    "(?$)",
    "[]",
    r"[a-\d]",
    r"[\1]",
    r"\c",
)
REFUSED = (
    r"\p{L}",
    r"\p{IsLatin}",
    r"\p{InGreek}",
    r"\p{javaLowerCase}",
    r"\pL",
    "(?u)a",
    "(?U)a",
    "(?x)a b",
    "(?d)a",
    "(?c)a",
    r"\X",
    r"\Ga",
    r"\b{g}",
    r"\N{LATIN SMALL LETTER A}",
    "(?<=a|bc)b",
    "^*a",
    "(?=a)*a",
    "[&&a]",
    "[a&&]",
    r"(a\1)",
    r"\2(a)(b)",
    r"\1(a)",
    "a{2}{3}",
    "[a-z&&[b]&c]",
    "[a&&[b]&b]",
    r"[\Qab\E]",
    r"\ud83d\ude00",
    "a\x00",
)

VECTORS: list[tuple[str, str, str | None]] = [
    *((p, s, r) for (p, r), s in product(CLASS_PATTERNS, ASCII_DNS + UNICODE_DNS)),
    *((p, s, r) for (p, r), s in product(DOT_PATTERNS, LINE_DNS + ASCII_DNS[:1])),
    *((p, s, r) for (p, r), s in product(ANCHOR_PATTERNS, ("", *ASCII_DNS[:3], *UNICODE_DNS))),
    *((p, s, r) for (p, r), s in product(QUANTIFIER_PATTERNS, QUANTIFIER_SUBJECTS)),
    *GROUP_VECTORS,
    *CASE_VECTORS,
    *INTERSECTION_VECTORS,
    *ESCAPE_VECTORS,
    *((p, s, None) for p, s in product(SYNTAX_ERRORS + REFUSED, ("a",))),
]

# Seeded random combinations of the constructs above: interactions no list anticipates.
_ATOMS = (
    *("a", "b", "A", "å", "ß", "1", ".", ",", "=", r"\.", r"\x41", r"\u00e5", r"\t", r"\n"),
    *(r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", r"\h", r"\v", r"\p{Alpha}", r"\P{Lower}"),
    *("[a-c]", "[^ab]", "[a-z&&[^b]]", r"[\w&&[^a]]", "[^a[b]]", "[]a]", "[a-]", r"[^\p{Alpha}a]"),
    *("(?i:a)", "(?i:[^a])", r"(?i:\p{Lower})", r"(?i:[\p{Upper}&&[^B]])", "(?s:.)", r"\1"),
    *("(?=a)", "(?!b)", "(?<=a)", r"(?<!\n)", r"\Qa.\E", "(?m:^)", "(?m:$)", r"\b", r"\B", r"\R"),
)
_ANCHORS = ("^", "$", r"\Z", r"\z", r"\A", "(?m)", "(?s)", "(?i)", "(?-i)")
_QUANTIFIERS = ("", "", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,2}", "{0,}", "*+", "++")
_LETTERS = ("a", "b", "A", "å", "ß", "e\u0301", "1", "\u0663", "\n", "\r\n", ",", "=")
_LETTERS += ("\u2028", "\u0085", " ", "\u00a0", "_", "K", "\u212a", "&", "\U0001f600")


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.12 and depth < 2:
            kind = rng.choice(("(", "(?:", "(?>", "(?<g>"))
            body = _random_pattern(rng, depth + 1)
            parts.append(kind + body + ")" + rng.choice(_QUANTIFIERS))
        elif roll < 0.22:
            parts.append(rng.choice(_ANCHORS))
        elif roll < 0.25 and depth < 2:
            parts.append(_random_pattern(rng, depth + 1) + "|" + _random_pattern(rng, depth + 1))
        else:
            parts.append(rng.choice(_ATOMS) + rng.choice(_QUANTIFIERS))
    return "".join(parts)


def _random_vectors(count: int) -> list[tuple[str, str, str | None]]:
    rng = random.Random(24)
    out: list[tuple[str, str, str | None]] = []
    while len(out) < count:
        pattern = _random_pattern(rng)
        if pattern.count("(?<g>") > 1:
            continue  # Java and kafkaguard both refuse a duplicate name; one vector is enough
        replacement = rng.choice(("<$0>", "x"))
        if rng.random() < 0.3:
            pattern, replacement = f"(?s)(.*?){pattern}(.*)", "[$1|$2]"
        subject = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(0, 6)))
        out.append((pattern, subject, replacement))
    return out


RANDOM_VECTORS = _random_vectors(600)


def _ours(pattern: str, subject: str, replacement: str | None) -> dict[str, Any] | str:
    """kafkaguard's answer in the referee's shape, or why it gave none."""
    try:
        compiled = java_compile(pattern)
    except UnsupportedJavaRegexError:
        return "refused"
    except JavaPatternSyntaxError as exc:
        return {"compiles": False, "error": str(exc), "matches": False, "result": None}
    try:
        matches = compiled.matches(subject)
        result = compiled.replace(subject, replacement) if matches and replacement else None
    except UndecidableSubjectError as exc:
        return f"undecidable: {exc}"
    return {"compiles": True, "error": None, "matches": matches, "result": result}


def _vector_id(vector: tuple[str, str, str | None]) -> str:
    return ascii(vector)[:80]


def _check(referee: KafkaReferee, vector: tuple[str, str, str | None], *, may_refuse: bool) -> None:
    pattern, subject, replacement = vector
    java = referee.regex(pattern, subject, replacement)
    ours = _ours(pattern, subject, replacement)
    if ours == "refused":
        assert may_refuse or pattern in REFUSED, f"refused, not listed: {pattern!r} ({java})"
        return
    assert pattern not in REFUSED, f"listed as refused but accepted: {pattern!r}"
    if isinstance(ours, str):  # undecidable: Java 17 and 19+ differ, or Java splits a pair
        assert not subject.isascii(), ours
        assert ("\\b" in pattern or "\\B" in pattern) or "surrogate pair" in ours, ours
        return
    assert ours["compiles"] == java["compiles"], (java, ours)
    if java["compiles"]:
        assert ours["matches"] == java["matches"], (java, ours)
        if replacement is not None and java["matches"]:
            assert ours["result"] == java["result"], (java, ours)


@pytest.mark.parametrize("vector", VECTORS, ids=_vector_id)
def test_vector_as_java(kafka_reader: KafkaReferee, vector: tuple[str, str, str | None]) -> None:
    _check(kafka_reader, vector, may_refuse=False)


@pytest.mark.parametrize("vector", RANDOM_VECTORS, ids=_vector_id)
def test_random_vector_as_java(
    kafka_reader: KafkaReferee, vector: tuple[str, str, str | None]
) -> None:
    """Refusing is allowed here (a quantified anchor, say), answering differently is not."""
    _check(kafka_reader, vector, may_refuse=True)


def test_random_vectors_are_mostly_decided() -> None:
    undecided = [v for v in RANDOM_VECTORS if isinstance(_ours(*v), str)]
    assert len(undecided) < len(RANDOM_VECTORS) // 3


def test_every_refusal_is_exercised() -> None:
    """The refused list holds only patterns kafkaguard really refuses (it cannot drift)."""
    for pattern in REFUSED:
        with pytest.raises(UnsupportedJavaRegexError, match="not supported"):
            java_compile(pattern)


def test_enough_vectors() -> None:
    assert len(VECTORS) >= 200


# -- the mapper's rule list: first matching rule wins, DEFAULT, fallthrough ------------------
RULE_LISTS = (
    ((r"^CN=(\w+),OU=eng$", "$1", ""), None),
    ((r"^CN=(\w+),OU=eng$", "$1", ""), (r"^CN=([^,]+),OU=(.*)$", "$2:$1", "U")),
    ((r"(?i)^cn=([a-z&&[^e]]+),.*$", "$1", "L"), (r"^CN=(.*?),.*$", "other-$1", "")),
    ((r"^CN=(\p{Alnum}+),OU=eng$", "$1", "U"), (r"^(.*)$", "raw:$1", "L")),
    ((r"^CN=(.*?),OU=ops$", "ops-$1", ""),),
    ((r"^CN=(\S+?)(\d*),OU=(\w+)$", "$3:$1:$2", ""), None),
)
RULE_DNS = (*ASCII_DNS, *UNICODE_DNS[:6], *ESCAPED_DNS[:4])


def _rules_text(rules: tuple[tuple[str, str, str] | None, ...]) -> str:
    return ", ".join("DEFAULT" if r is None else f"RULE:{r[0]}/{r[1]}/{r[2]}" for r in rules)


def _java_name(
    referee: KafkaReferee, rules: tuple[tuple[str, str, str] | None, ...], dn: str
) -> str | None:
    """``SslPrincipalMapper.getName`` composed from Java's answers for each rule."""
    for rule in rules:
        if rule is None:
            return dn
        pattern, replacement, case = rule
        java = referee.regex(pattern, dn, replacement)
        if java["matches"]:
            result: str = java["result"]
            return result.lower() if case == "L" else result.upper() if case == "U" else result
    return None


@pytest.mark.parametrize("rules", RULE_LISTS, ids=_rules_text)
@pytest.mark.parametrize("dn", RULE_DNS, ids=ascii)
def test_rule_list_as_java(
    kafka_reader: KafkaReferee, rules: tuple[tuple[str, str, str] | None, ...], dn: str
) -> None:
    expected = _java_name(kafka_reader, rules, dn)
    mapper = SslPrincipalMapper(_rules_text(rules))
    if expected is None:
        with pytest.raises(NoMatchingRuleError):
            mapper.get_name(dn)
    else:
        assert mapper.get_name(dn) == expected
