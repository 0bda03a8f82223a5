"""Principal mapping as Kafka 4.3.1 maps, without a JVM: values measured with Kafka's own classes.

Every expected name below was produced by ``SslPrincipalMapper.fromRules(rules).getName(dn)``
or ``KerberosShortNamer.fromUnparsedRules("EXAMPLE.COM", rules).shortName(..)`` on Kafka 4.3.1
(Java 17); ``tests/policy/test_principal_mapping_java.py`` checks the regex vectors live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaguard.certs.tls import parse_tls_config
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.java_regex import (
    JavaPatternSyntaxError,
    UndecidableSubjectError,
    UnsupportedJavaRegexError,
    java_compile,
)
from kafkaguard.policy.principal_mapping import (
    KerberosShortNamer,
    NoMatchingRuleError,
    SslPrincipalMapper,
)


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        # \w \d \s are US-ASCII in Java: the rule does not apply, DEFAULT does
        (r"RULE:^CN=(\w+),OU=eng$/$1/, DEFAULT", "CN=ålice,OU=eng", "CN=ålice,OU=eng"),
        (r"RULE:^CN=(\w+),OU=eng$/$1/", "CN=alice,OU=eng", "alice"),
        (r"RULE:^CN=user(\d+),OU=eng$/u$1/, DEFAULT", "CN=user٣,OU=eng", "CN=user٣,OU=eng"),
        (r"RULE:^CN=user(\d+),OU=eng$/u$1/, DEFAULT", "CN=user１,OU=eng", "CN=user１,OU=eng"),
        (r"RULE:^CN=(\S+),OU=eng$/$1/", "CN=a\u00a0b,OU=eng", "a\u00a0b"),
        (
            r"RULE:^CN=(\w+)\s(\w+),OU=eng$/$1.$2/, DEFAULT",
            "CN=a\u00a0b,OU=eng",
            "CN=a\u00a0b,OU=eng",
        ),
        (r"RULE:^CN=(\p{Alpha}+),.*$/$1/, DEFAULT", "CN=ålice,OU=eng", "CN=ålice,OU=eng"),
        (r"RULE:^CN=(\p{Alpha}+),.*$/$1/, DEFAULT", "CN=alice,OU=eng", "alice"),
        (r"RULE:^CN=(\p{Alpha}+),.*$/$1/L, DEFAULT", "CN=ALICE,OU=eng", "alice"),
        # character-class intersection
        (r"RULE:^CN=([a-z&&[^e]]+),OU=eng$/$1/, DEFAULT", "CN=bob,OU=eng", "bob"),
        (r"RULE:^CN=([a-z&&[^e]]+),OU=eng$/$1/, DEFAULT", "CN=eve,OU=eng", "CN=eve,OU=eng"),
        (r"RULE:^CN=([a-z&&[^e]]+),OU=eng$/$1/, DEFAULT", "CN=b&ob,OU=eng", "CN=b&ob,OU=eng"),
        # '.' stops at Java's line terminators; '$' matches before a final one
        (r"RULE:^CN=(.*),OU=eng$/$1/, DEFAULT", "CN=a\u2028b,OU=eng", "CN=a\u2028b,OU=eng"),
        (r"RULE:^CN=(.*),OU=eng$/$1/, DEFAULT", "CN=a\u0085b,OU=eng", "CN=a\u0085b,OU=eng"),
        (r"RULE:(?s)^CN=(.*?)$(.*)/$1|$2/", "CN=alice\r\n", "alice|\r\n"),
        (r"RULE:(?s)^CN=(.*?)$(.*)/$1|$2/", "CN=alice\u2029", "alice|\u2029"),
        # (?i) folds US-ASCII only
        (r"RULE:(?i)^CN=ÅLICE,.*$/matched/, DEFAULT", "CN=ålice,OU=eng", "CN=ålice,OU=eng"),
        (r"RULE:(?i)^CN=ALICE,.*$/matched/, DEFAULT", "CN=alice,OU=eng", "matched"),
        (r"RULE:(?i)^CN=K.*$/matched/, DEFAULT", "CN=\u212aelvin,OU=eng", "CN=\u212aelvin,OU=eng"),
        # replaceAll's find loop, replacement syntax, the case suffixes, escaped DNs
        (r"RULE:^(.*)$/[$1]/", "CN=a", "[CN=a]"),
        (r"RULE:^CN=([^,]+),.*$/$1/U", "CN=straße,OU=eng", "STRASSE"),
        (r"RULE:^CN=([^,]+),.*$/$1/L", "CN=\u0130STANBUL,OU=eng", "i\u0307stanbul"),
        (r"RULE:^CN=([^,]+),.*$/$1/L", "CN=ΟΔΟΣ,OU=eng", "οδος"),
        (r"RULE:^CN=((?:\\.|[^,\\])+),.*$/$1/", "CN=a\\,b,OU=eng", "a\\,b"),
        (r"RULE:^CN=(?<user>\w+),OU=(?<ou>\w+)$/${ou}-${user}/", "CN=alice,OU=eng", "eng-alice"),
        (r"RULE:^CN=(\w+),OU=(\w+)$/$2-$1-$3/", "CN=alice,OU=eng", "eng-alice-$3"),
        (r"RULE:\bCN=(\w+)\b.*/$1/, DEFAULT", "CN=alice,OU=eng", "alice"),
    ],
)
def test_ssl_mapping_as_kafka(rules: str, dn: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).get_name(dn) == expected


def test_ascii_word_class_falls_through_to_no_rule() -> None:
    """Kafka: ``No rules apply to CN=ålice,OU=eng, rules [RULE:^CN=(\\w+),OU=eng$/$1]``."""
    with pytest.raises(NoMatchingRuleError, match="No rules apply to CN=ålice,OU=eng"):
        SslPrincipalMapper(r"RULE:^CN=(\w+),OU=eng$/$1/").get_name("CN=ålice,OU=eng")


def test_word_boundary_next_to_non_ascii_fails_closed() -> None:
    """Java 17 gives ``CN=straße,OU=eng`` (DEFAULT), Java 25 ``stra``: no name is safe."""
    mapper = SslPrincipalMapper(r"RULE:\bCN=(\w+)\b.*/$1/, DEFAULT")
    with pytest.raises(NoMatchingRuleError, match="Java 17 and Java 19"):
        mapper.get_name("CN=straße,OU=eng")
    with pytest.raises(UndecidableSubjectError):
        java_compile(r"(?s)(.*?)\b(.*)").matches("é")


def test_case_depending_on_the_jvm_unicode_version_fails_closed() -> None:
    """U+2C2F: Java 17 (Unicode 13) keeps it in lower case, Java 25 and Python map it."""
    mapper = SslPrincipalMapper(r"RULE:^CN=([^,]+),.*$/$1/L")
    with pytest.raises(NoMatchingRuleError, match="Unicode version"):
        mapper.get_name("CN=\u2c2f,OU=eng")
    assert mapper.get_name("CN=\u2c00,OU=eng") == "\u2c30"  # GLAGOLITIC AZU: Unicode 4.1


def test_empty_match_before_a_supplementary_character_fails_closed() -> None:
    """Kafka's name is ``[][]\\uD83D[]\\uDE00[]``: replaceAll splits the surrogate pair."""
    with pytest.raises(NoMatchingRuleError, match="surrogate pair"):
        SslPrincipalMapper(r"RULE:(?:CN=)?(.*?)/[$1]/").get_name("CN=\U0001f600")
    assert SslPrincipalMapper(r"RULE:(?:CN=)?(.*?)/[$1]/").get_name("CN=é") == "[][]é[]"


@pytest.mark.parametrize(
    ("rules", "name", "expected"),
    [
        (r"RULE:[1:$1@$0](\w+@EXAMPLE\.COM)s/@.*//", "alice@EXAMPLE.COM", "alice"),
        ("RULE:[1:$1@$0](\\w+@EXAMPLE\\.COM)s/@.*//,RULE:[1:$1]/L", "ÅLICE@EXAMPLE.COM", "ålice"),
        (r"RULE:[2:$1@$0]([a-z&&[^x]]+@EXAMPLE\.COM)s/@.*//", "kafka/host@EXAMPLE.COM", "kafka"),
    ],
)
def test_kerberos_rules_as_kafka(rules: str, name: str, expected: str) -> None:
    assert KerberosShortNamer(rules, "EXAMPLE.COM").short_name(name) == expected


@pytest.mark.parametrize(
    ("rules", "name"),
    [
        (r"RULE:[1:$1@$0](\w+@EXAMPLE\.COM)s/@.*//", "ålice@EXAMPLE.COM"),
        (r"RULE:[2:$1@$0]([a-z&&[^k]]+@EXAMPLE\.COM)s/@.*//", "kafka/host@EXAMPLE.COM"),
    ],
)
def test_kerberos_rules_not_applying_as_kafka(rules: str, name: str) -> None:
    with pytest.raises(NoMatchingRuleError, match="No rules apply"):
        KerberosShortNamer(rules, "EXAMPLE.COM").short_name(name)


@pytest.mark.parametrize(
    ("rules", "reason"),
    [
        (r"RULE:(?x)^CN=(.*)$/$1/", "COMMENTS"),
        (r"RULE:(?u)(?i)^CN=ÅLICE,.*$/matched/", "UNICODE_CASE"),
        (r"RULE:^CN=(\p{L}+),.*$/$1/", r"\\p\{L\}"),
        (r"RULE:^CN=(\h+),.*$/$1/, RULE:^\X$/x/", r"\\X"),
        (r"RULE:^CN=([&&a]+)$/$1/", "'&&' with nothing before it"),
        (r"RULE:^(?<=a|bc)b$/$1/", "look-behind"),
    ],
)
def test_constructs_refused_at_load(rules: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"Invalid rule: `RULE:.*{reason}"):
        SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        (r"RULE:^CN=([a-z&&[b]&c]+),.*$/$1/", "characters after a '&&' operand's class"),
        (r"RULE:(?U)^CN=(\w+),.*$/$1/", "UNICODE_CHARACTER_CLASS"),
        (r"RULE:^CN=(a{,2}),.*$/$1/", "Illegal repetition"),
    ],
)
def test_config_load_error_names_the_rule(tmp_path: Path, rule: str, reason: str) -> None:
    text = f"cert_file: c.pem\nkey_file: k.pem\nprincipal_mapping_rules: '{rule}, DEFAULT'\n"
    with pytest.raises(ConfigError, match="principal_mapping_rules") as error:
        parse_tls_config(ConfigSection.from_text(text, "t.yaml"), tmp_path)
    assert rule in str(error.value) and reason in str(error.value)


def test_kerberos_refusal_names_the_rule() -> None:
    with pytest.raises(
        ValueError, match=r"Invalid rule: RULE:\[1:\$1\]\(\\p\{L\}\+\).*not supported"
    ):
        KerberosShortNamer(r"RULE:[1:$1](\p{L}+)")


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("a**", "Dangling meta character '*'"),
        ("a{,2}", "Illegal repetition"),
        ("[z-a]", "Illegal character range"),
        ("(", "Unclosed group"),
        ("[a", "Unclosed character class"),
        (r"\i", "Illegal/unsupported escape sequence"),
        (r"\k<nope>", "named capturing group <nope> does not exist"),
    ],
)
def test_java_syntax_errors(pattern: str, error: str) -> None:
    with pytest.raises(JavaPatternSyntaxError, match=error):
        java_compile(pattern)


def test_refused_is_not_a_syntax_error() -> None:
    with pytest.raises(UnsupportedJavaRegexError):
        java_compile(r"\p{IsLatin}")
