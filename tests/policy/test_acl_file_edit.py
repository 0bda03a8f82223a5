"""``kafkaguard acls --add/--remove`` on a hand-written ACL file keep its comments, order and
layout (ruamel.yaml round trip, issue 38); a file kafkaguard wrote stays JSON, one per line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import kafkaguard
from kafkaguard.cli import main
from kafkaguard.policy.model import AclBinding
from kafkaguard.policy.stores.acl_file_format import format_acl_text, parse_acl_text
from kafkaguard.policy.stores.file import read_acl_file
from tests.support.policy import CLUSTER, GROUP, PREFIXED, Op, acl

DEMO = Path(kafkaguard.__file__).parent / "demo" / "acls.yaml"
ANONYMOUS = "User:ANONYMOUS"


def acls(path: Path, *argv: str) -> None:
    assert main(["acls", "--acl-file", str(path), "--force", *argv]) == 0


def comments(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    path = tmp_path / "acls.yaml"
    shutil.copy(DEMO, path)
    return path


def test_add_keeps_the_demo_file_and_appends_in_its_style(demo: Path) -> None:
    before = demo.read_text(encoding="utf-8")
    acls(demo, "--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "2024")
    after = demo.read_text(encoding="utf-8")
    assert after == before + (
        '  - principal: "User:bob"\n'
        "    operation: READ\n"
        "    permission: ALLOW\n"
        "    resource_type: TOPIC\n"
        "    name: '2024'\n"  # a name YAML would read as a number is quoted
    )
    assert read_acl_file(demo)[0] == parse_acl_text(before, "x") | {
        acl("User:bob", Op.READ, name="2024")
    }


def test_remove_keeps_the_heading_that_follows_the_removed_entry(demo: Path) -> None:
    before = demo.read_text(encoding="utf-8")
    acls(demo, "--remove", "--deny-principal", ANONYMOUS, "--operation", "All",
         "--topic", "demo-secret")  # fmt: skip
    after = demo.read_text(encoding="utf-8")
    assert comments(after) == comments(before)
    removed = (
        '  - principal: "User:ANONYMOUS"\n'
        "    operation: ALL\n"
        "    permission: DENY\n"
        "    resource_type: TOPIC\n"
        "    name: demo-secret\n"
    )
    assert removed in before and after == before.replace(removed, "")


def test_remove_the_first_entry_keeps_the_comments_around_it(demo: Path) -> None:
    before = demo.read_text(encoding="utf-8")
    acls(demo, "--remove", "--allow-principal", ANONYMOUS, "--operation", "All",
         "--topic", "demo", "--resource-pattern-type", "prefixed")  # fmt: skip
    after = demo.read_text(encoding="utf-8")
    assert comments(after) == comments(before)
    assert read_acl_file(demo)[0] == parse_acl_text(before, "x") - {
        acl(ANONYMOUS, Op.ALL, name="demo", ptype=PREFIXED)
    }


def test_an_entry_of_several_bindings_is_split_in_place(tmp_path: Path) -> None:
    path = tmp_path / "acls.yaml"
    path.write_text(
        "acls:\n"
        "  # the readers\n"
        "  - {principal: [User:a, User:b], operation: READ, permission: ALLOW,"
        " resource_type: GROUP, name: g}  # both of them\n"
        "  # the cluster\n"
        "  - {principal: User:a, operation: DESCRIBE, permission: ALLOW,"
        " resource_type: CLUSTER, name: kafka-cluster}\n",
        encoding="utf-8",
    )
    acls(path, "--remove", "--allow-principal", "User:b", "--operation", "Read", "--group", "g")
    after = path.read_text(encoding="utf-8")
    assert after == (
        "acls:\n"
        "  # the readers\n"
        '  - {principal: "User:a", operation: READ, permission: ALLOW, resource_type: GROUP,'
        " name: g} # both of them\n"  # the entry's comment stays with what is left of it
        "  # the cluster\n"
        "  - {principal: User:a, operation: DESCRIBE, permission: ALLOW,"
        " resource_type: CLUSTER, name: kafka-cluster}\n"
    )
    assert read_acl_file(path)[0] == {
        acl("User:a", Op.READ, name="g", rtype=GROUP),
        acl("User:a", Op.DESCRIBE, name="kafka-cluster", rtype=CLUSTER),
    }


def test_a_file_kafkaguard_wrote_stays_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "acls.yaml"
    old = acl("User:a", Op.READ, name="t")
    path.write_text(format_acl_text([old]), encoding="utf-8")
    acls(path, "--add", "--allow-principal", "User:b", "--operation", "Write", "--topic", "t")
    assert path.read_text(encoding="utf-8") == format_acl_text(
        [old, acl("User:b", Op.WRITE, name="t")]
    )


def test_a_missing_file_is_created_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "new.yaml"
    acls(path, "--add", "--allow-principal", "User:b", "--operation", "Write", "--topic", "t")
    added: list[AclBinding] = [acl("User:b", Op.WRITE, name="t")]
    assert path.read_text(encoding="utf-8") == format_acl_text(added)
