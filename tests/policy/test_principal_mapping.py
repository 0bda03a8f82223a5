"""Ports of SslPrincipalMapperTest and KerberosNameTest, plus the RFC 2253 DN printer."""

from __future__ import annotations

import pytest

from kafkaguard.policy.principal_mapping import (
    KerberosName,
    KerberosShortNamer,
    NoMatchingRuleError,
    SslPrincipalMapper,
)
from kafkaguard.policy.x500 import escape_rfc2253_value, rfc2253, rfc2253_from_peercert


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        "",
        "  \n ",
    ],
)
def test_valid_ssl_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_ssl_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_rule_without_trailing_slash_is_split_at_comma() -> None:
    with pytest.raises(ValueError, match=r"Invalid rule: `RULE:CN=\(\.\*\?\)`"):
        SslPrincipalMapper("RULE:CN=(.*?),OU=x/$1")


MAPPER_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, "
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "expected"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=JavaSoft,dc=example,dc=com", "DUKE@JAVASOFT"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_ssl_principal_mapper(dn: str, expected: str) -> None:
    assert SslPrincipalMapper(MAPPER_RULES).get_name(dn) == expected


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        (
            "RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT",
            "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz",
            "Tkac\\, Adam",
        ),
        ("RULE:(.*)/[$1]/", "CN=a", "[CN=a][]"),  # replaceAll: the empty tail matches too
        (" RULE:.*/x/ ", "CN=a", "xx"),
        ("RULE:^CN=(.)(.*)$/$12/", "CN=ab", "a2"),  # $12 with 2 groups -> $1 then '2'
        ("RULE:^CN=(.*)$/$12/", "CN=ab", "ab2"),
        ("RULE:^CN=(a)(b)(c)$/$1$4/", "CN=abc", "a$4"),  # too-large reference kept literally
        ("RULE:^CN=(.*?)\\/x$/$1/", "CN=a/x", "a"),  # escaped slash inside the pattern
        ("RULE:^CN=(.*)$/\\$1/", "CN=a", "$1"),
        ("RULE:^CN=(.*),O=.*$/$1/U, DEFAULT", "CN=straße,O=x", "STRASSE"),
    ],
)
def test_ssl_mapping_quirks(rules: str, dn: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).get_name(dn) == expected


def test_ssl_no_match_and_replacement_errors() -> None:
    with pytest.raises(NoMatchingRuleError, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=(.*),OU=ServiceUsers.*$/$1/").get_name("CN=x")
    with pytest.raises(NoMatchingRuleError):
        SslPrincipalMapper("").get_name("CN=x")
    with pytest.raises(NoMatchingRuleError):  # 0 groups: $1 is not escaped, Java throws
        SslPrincipalMapper("RULE:^CN=.*$/$1/").get_name("CN=x")
    assert SslPrincipalMapper(None).get_name("CN=x") == "CN=x"
    assert "RULE:^CN=(.*)$/$1/L" in repr(SslPrincipalMapper("RULE:^CN=(.*)$/$1/L"))


KRB_RULES = (
    "RULE:[1:$1](App\\..*)s/App\\.(.*)/$1/g, RULE:[2:$1](App\\..*)s/App\\.(.*)/$1/g, DEFAULT"
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("App.service-name/example.com@REALM.COM", "service-name"),
        ("App.service-name@REALM.COM", "service-name"),
        ("user/host@REALM.COM", "user"),
        ("simple", "simple"),
    ],
)
def test_kerberos_parse_and_short_name(name: str, expected: str) -> None:
    assert KerberosShortNamer(KRB_RULES, "REALM.COM").short_name(name) == expected


LOWER = "RULE:[1:$1]/L, RULE:[2:$1](Test.*)s/ABC///L, RULE:[2:$1](ABC.*)s/ABC/XYZ/g/L, RULE:[2:$1](App\\..*)s/App\\.(.*)/$1/g/L, RULE:[2:$1]/L, DEFAULT"  # noqa: E501


@pytest.mark.parametrize(
    ("name", "lower", "upper"),
    [
        ("User@REALM.COM", "user", "USER"),
        ("TestABC/host@FOO.COM", "test", "TEST"),
        ("ABC_User_ABC/host@FOO.COM", "xyz_user_xyz", "XYZ_USER_XYZ"),
        ("App.SERVICE-name/example.com@REALM.COM", "service-name", "SERVICE-NAME"),
        ("User/root@REALM.COM", "user", "USER"),
    ],
)
def test_kerberos_case_rules(name: str, lower: str, upper: str) -> None:
    assert KerberosShortNamer(LOWER, "REALM.COM").short_name(name) == lower
    assert KerberosShortNamer(LOWER.replace("/L", "/U"), "REALM.COM").short_name(name) == upper


@pytest.mark.parametrize(
    "rule",
    ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/g", "rule:[1:$1]", "rule:[1:$1]/L/U", "rule:[1:$1]/U/L",  # noqa: E501
     "rule:[1:$1]/LU", "RULE:[1:$1/L", "RULE:[1:$1]/l", "RULE:[2:$1](ABC.*)s/ABC/XYZ/L/g", "RULE:[:$1]"],  # noqa: E501
)  # fmt: skip
def test_kerberos_invalid_rules(rule: str) -> None:
    with pytest.raises(ValueError):
        KerberosShortNamer(rule, "REALM.COM")


def test_kerberos_errors() -> None:
    namer = KerberosShortNamer("DEFAULT", "REALM.COM")
    with pytest.raises(NoMatchingRuleError, match="No rules apply"):
        namer.short_name("user@OTHER.COM")
    with pytest.raises(ValueError, match="Malformed Kerberos name"):
        KerberosName.parse("a@b@c")
    with pytest.raises(NoMatchingRuleError, match="Non-simple name"):
        KerberosShortNamer("RULE:[2:$1/$2]", "R").short_name("u/h@R")
    with pytest.raises(NoMatchingRuleError, match="outside of the valid range"):
        KerberosShortNamer("RULE:[1:$2]", "R").short_name("u@R")
    assert KerberosShortNamer("RULE:[2:$1@$0](.*@R)s/@R//", "X").short_name("svc/h@R") == "svc"
    assert KerberosShortNamer("DEFAULT", "REALM.COM").short_name("svc/host@REALM.COM") == "svc"


# RFC 2253 as X500Principal.getName() prints it ------------------------------------------------
def test_peercert_subject_reversed_and_escaped() -> None:
    subject = (
        (("countryName", "US"),),
        (("organizationName", "Org, Inc"),),
        (("organizationalUnitName", "A"), ("organizationalUnitName", "B")),
        (("commonName", " Duke+1 "),),
    )
    assert rfc2253_from_peercert(subject) == "CN=\\ Duke\\+1\\ ,OU=A+OU=B,O=Org\\, Inc,C=US"
    assert rfc2253(subject) == rfc2253_from_peercert(subject)


def test_unknown_oids_as_der_hex() -> None:
    subject = ((("emailAddress", "a@b"),), (("commonName", "x"),))
    assert rfc2253_from_peercert(subject) == "CN=x,1.2.840.113549.1.9.1=#1603614062"
    with pytest.raises(ValueError, match="unknown subject attribute"):
        rfc2253_from_peercert(((("bogusName", "v"),),))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a=b", "a\\=b"),
        ("#1", "\\#1"),
        ('q"<>;', 'q\\"\\<\\>\\;'),
        ("a\\b", "a\\\\b"),
        ("nul\0", "nul\\00"),
        ("é", "é"),
    ],
)
def test_escaping(value: str, expected: str) -> None:
    assert escape_rfc2253_value(value) == expected


def test_cryptography_name() -> None:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.x509.oid import NameOID

    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Org"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "d@x"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Duke"),
        ]
    )
    dn = rfc2253(name)
    assert dn == "CN=Duke,1.2.840.113549.1.9.1=#1603644078,OU=ServiceUsers,O=Org,C=US"
    assert SslPrincipalMapper("RULE:^CN=(.*?),.*OU=ServiceUsers.*$/$1/L").get_name(dn) == "duke"
