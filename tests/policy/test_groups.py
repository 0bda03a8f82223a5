"""Group sources (kafkaguard/policy/groups.py): the file, a token's claim, certificate rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkaguard.policy.config import GroupsConfig
from kafkaguard.policy.groups import (
    GroupResolver,
    GroupsError,
    GroupsFile,
    SslGroupMapper,
    claim_groups,
    merged,
    parse_groups_text,
)
from kafkaguard.policy.model import KafkaPrincipal

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")


def names(groups: tuple[KafkaPrincipal, ...]) -> list[str]:
    return [g.text for g in groups]


GOOD = """\
version: 1
groups:
  "User:alice": [eng, oncall, eng]
  "User:bob": contractors
"""


def test_file_maps_principals_to_groups_in_order_without_repeats() -> None:
    mapping = parse_groups_text(GOOD, "groups.yaml")
    assert names(mapping["User:alice"]) == ["Group:eng", "Group:oncall"]
    assert names(mapping["User:bob"]) == ["Group:contractors"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('version: 1\ngroups:\n  "User:alice": [eng]\n  "User:bob": [1]\n', "groups.yaml:4:"),
        ('version: 1\ngroups:\n  "alice": [eng]\n', "groups.yaml:3: 'alice'"),
        ('version: 1\ngroups:\n  "User:alice": ["  "]\n', "groups.yaml:3: 'User:alice': blank"),
        ("version: 2\ngroups: {}\n", "groups.yaml:1: expected a mapping with version: 1"),
        ("version: 1\ngroups: {}\nextra: 1\n", "unknown keys ['extra']"),
        ("version: 1\ngroups: [a]\n", "groups must be a mapping"),
        ("version: 1\ngroups: {a: [\n", "groups.yaml:"),
    ],
)
def test_an_invalid_file_names_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(GroupsError) as info:
        parse_groups_text(text, "groups.yaml")
    assert str(info.value).startswith(expected) or expected in str(info.value)


def _rewrite(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def test_file_reloads_on_change_and_keeps_the_old_mapping_when_invalid(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(GOOD, encoding="utf-8")
    groups = GroupsFile(path)
    groups.load()
    assert (names(groups.groups_of(ALICE)), groups.generation) == (
        ["Group:eng", "Group:oncall"],
        1,
    )
    assert groups.refresh() is None and groups.generation == 1  # unchanged: not re-read

    _rewrite(path, 'version: 1\ngroups:\n  "User:alice": [sre]\n')
    assert groups.refresh() is None
    assert (names(groups.groups_of(ALICE)), groups.groups_of(BOB), groups.generation) == (
        ["Group:sre"],
        (),
        2,
    )

    _rewrite(path, 'version: 1\ngroups:\n  "User:alice": {x: 1}\n')
    error = groups.refresh()
    assert error is not None and str(error).startswith(f"{path}:3:")
    assert names(groups.groups_of(ALICE)) == ["Group:sre"] and groups.generation == 2
    assert groups.refresh() is None  # the same invalid file is not reported twice


def test_a_missing_file_is_an_error_at_start(tmp_path: Path) -> None:
    with pytest.raises(GroupsError, match="cannot read"):
        GroupsFile(tmp_path / "absent.yaml").load()


@pytest.mark.parametrize(
    ("claims", "path", "expected"),
    [
        ({"groups": ["eng", "oncall"]}, "groups", ["Group:eng", "Group:oncall"]),
        ({"groups": "eng"}, "groups", ["Group:eng"]),
        ({"sub": "alice"}, "groups", []),
        ({"realm_access": {"roles": ["admin"]}}, "realm_access.roles", ["Group:admin"]),
        ({"realm_access": {}}, "realm_access.roles", []),
    ],
)
def test_token_claim_groups(claims: dict[str, object], path: str, expected: list[str]) -> None:
    assert names(claim_groups(claims, path)) == expected


@pytest.mark.parametrize(
    ("claims", "path"),
    [
        ({"groups": [1, "eng"]}, "groups"),
        ({"groups": {"eng": True}}, "groups"),
        ({"realm_access": ["roles"]}, "realm_access.roles"),
        ({"groups": [""]}, "groups"),
    ],
)
def test_a_claim_that_cannot_say_the_groups_is_an_error(
    claims: dict[str, object], path: str
) -> None:
    with pytest.raises(GroupsError):
        claim_groups(claims, path)


def test_certificate_rules_each_give_a_group() -> None:
    mapper = SslGroupMapper.parse(
        r"RULE:^.*OU=([^,]+).*$/$1/L, RULE:^.*O=([^,]+).*$/org-$1/, RULE:^CN=nomatch$/x/"
    )
    dn = "CN=alice,OU=Payments,O=Acme,C=GB"
    assert names(mapper.groups_of(dn)) == ["Group:payments", "Group:org-Acme"]
    assert mapper.groups_of("CN=bob") == ()


def test_certificate_rules_refuse_default() -> None:
    with pytest.raises(ValueError, match="DEFAULT"):
        SslGroupMapper.parse(r"RULE:^.*OU=([^,]+).*$/$1/, DEFAULT")


def test_the_resolver_combines_the_configured_sources(tmp_path: Path) -> None:
    assert GroupResolver.from_config(GroupsConfig()) is None  # nothing per request then
    path = tmp_path / "groups.yaml"
    path.write_text('version: 1\ngroups:\n  "User:alice": [eng]\n')
    resolver = GroupResolver.from_config(
        GroupsConfig(
            file=path, oauthbearer_claim="roles", ssl_mapping_rules="RULE:^.*OU=([^,]+).*$/$1/"
        )
    )
    assert resolver is not None and resolver.generation == 1
    alice = KafkaPrincipal("User", "alice")
    assert resolver.of_principal(alice) == (KafkaPrincipal("Group", "eng"),)
    assert resolver.of_token({"roles": "ops"}) == (KafkaPrincipal("Group", "ops"),)
    assert resolver.of_token(None) == ()  # PLAIN, SCRAM: no claims
    assert resolver.of_certificate("CN=a,OU=sre,O=x") == (KafkaPrincipal("Group", "sre"),)
    assert resolver.of_certificate(None) == ()  # no client certificate
    only_file = GroupResolver.from_config(GroupsConfig(file=path))
    assert only_file is not None
    assert only_file.of_token({"roles": "ops"}) == only_file.of_certificate("OU=sre") == ()
    assert merged((KafkaPrincipal("Group", "a"),), (KafkaPrincipal("Group", "a"),)) == (
        KafkaPrincipal("Group", "a"),
    )
