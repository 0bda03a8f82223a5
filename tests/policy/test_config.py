"""The authorizer/acl_store config sections and the factories."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.authorizer import load_authorizer
from kafkaguard.policy.config import build_authorizer, parse_policy_config, parse_super_users
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.file import FileAclStore
from tests.support.policy import Op, acl, allowed, ctx

SNIPPET = Path(__file__).parents[2] / "kafkaguard" / "policy" / "config.example.snippet.yaml"


def test_parse_full_section(tmp_path: Path) -> None:
    cfg_file = tmp_path / "proxy.yaml"
    cfg_file.write_text(
        """
authorizer:
  class: kafkaguard.policy.standard:StandardAuthorizer
  super_users: "User:admin; User:ops ;"
  allow_everyone_if_no_acl_found: true
  extensions:
    host_cidr: true
    listeners:
      EXTERNAL: {super_users: "User:x", allow_everyone_if_no_acl_found: false}
acl_store:
  type: file
  path: acls.yaml
  poll_interval_s: 0.5
"""
    )
    cfg = parse_policy_config(ConfigSection.from_file(cfg_file))
    assert cfg.authorizer.super_users == {"User:admin", "User:ops"}
    assert cfg.authorizer.allow_everyone_if_no_acl_found is True
    assert cfg.authorizer.host_cidr is True
    assert cfg.authorizer.listeners["EXTERNAL"].super_users == {"User:x"}
    assert cfg.authorizer.listeners["EXTERNAL"].allow_everyone_if_no_acl_found is False
    assert cfg.acl_store.path == tmp_path / "acls.yaml"
    assert cfg.acl_store.poll_interval_s == 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("authorizer:\n  super_user: x\n", "proxy.yaml:2 authorizer.super_user: unknown key"),
        ("authorizer:\n  super_users: 'User:a;bob'\n", "authorizer.super_users"),
        ("authorizer:\n  extensions: {host_cdir: true}\n", "unknown key 'host_cdir'"),
        ("authorizer:\n  class: nope\n", "package.module:Class"),
        ("acl_store:\n  type: zk\n", "must be one of file, memory"),
        ("acl_store:\n  type: file\n", "path: is required"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        parse_policy_config(ConfigSection.from_file(path))


def test_defaults_and_super_user_syntax() -> None:
    cfg = parse_policy_config(ConfigSection.from_text(""))
    assert cfg.acl_store.type == "memory"
    assert cfg.authorizer.super_users == frozenset()
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError):
        parse_super_users("User:a; admin")


async def test_build_authorizer_with_file_store(tmp_path: Path) -> None:
    (tmp_path / "acls.yaml").write_text(
        "acls:\n  - {principal: User:alice, operation: read, permission: allow, resource_type: topic, name: foo}\n"  # noqa: E501
    )
    (tmp_path / "p.yaml").write_text(
        "acl_store: {type: file, path: acls.yaml, poll_interval_s: 0}\n"
    )
    auth = build_authorizer(parse_policy_config(ConfigSection.from_file(tmp_path / "p.yaml")))
    assert isinstance(auth, StandardAuthorizer) and isinstance(auth.store, FileAclStore)
    await auth.start(["PLAINTEXT"])["PLAINTEXT"]
    assert allowed(auth, ctx(), Op.READ)
    await auth.close()


def test_load_authorizer_errors() -> None:
    with pytest.raises(ValueError, match="package.module:Class"):
        load_authorizer("kafkaguard.policy.standard")
    with pytest.raises(ValueError, match="cannot import"):
        load_authorizer("kafkaguard.nope:X")
    with pytest.raises(ValueError, match="has no attribute"):
        load_authorizer("kafkaguard.policy.standard:Nope")
    with pytest.raises(ValueError, match="does not implement"):
        load_authorizer("kafkaguard.policy.model:ResourcePattern", None, "x")
    assert acl("User:a", Op.READ) is not None


def test_example_snippet_parses() -> None:
    cfg = parse_policy_config(ConfigSection.from_file(SNIPPET))
    assert cfg.authorizer.class_path.endswith(":StandardAuthorizer")


def test_groups_section_resolves_the_file_and_checks_every_source(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text('version: 1\ngroups:\n  "User:alice": [eng]\n')
    cfg_file = tmp_path / "proxy.yaml"
    cfg_file.write_text(
        "authorizer:\n  extensions:\n    groups:\n      file: groups.yaml\n"
        "      oauthbearer_claim: realm_access.roles\n"
        "      ssl_mapping_rules: 'RULE:^.*OU=([^,]+).*$/$1/'\n"
    )
    groups = parse_policy_config(ConfigSection.from_file(cfg_file)).authorizer.groups
    assert groups.file == tmp_path / "groups.yaml"
    assert groups.oauthbearer_claim == "realm_access.roles"
    assert groups.ssl_mapping_rules == "RULE:^.*OU=([^,]+).*$/$1/"
    assert groups.configured
    assert not parse_policy_config(ConfigSection.from_text("{}")).authorizer.groups.configured


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ("{fil: g.yaml}", "proxy.yaml:3 authorizer.extensions.groups.fil: unknown key"),
        ("{file: missing.yaml}", "missing.yaml: cannot read"),
        ("{file: bad.yaml}", "bad.yaml:3: 'User:bob'"),
        ("{oauthbearer_claim: 'a..b'}", "groups.oauthbearer_claim: must be a claim name"),
        ("{ssl_mapping_rules: DEFAULT}", "DEFAULT would make the whole distinguished name"),
    ],
)
def test_groups_errors_name_the_key(tmp_path: Path, groups: str, message: str) -> None:
    (tmp_path / "bad.yaml").write_text('version: 1\ngroups:\n  "User:bob": [""]\n')
    path = tmp_path / "proxy.yaml"
    path.write_text(f"authorizer:\n  extensions:\n    groups: {groups}\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_policy_config(ConfigSection.from_file(path))
