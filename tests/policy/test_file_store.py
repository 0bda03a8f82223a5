"""FileAclStore: load, errors naming the entry, reload on change, bad file keeps the old ACLs."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.acl_file_format import format_acl_text, parse_acl_text
from kafkaguard.policy.stores.base import AclStore, AclStoreError
from kafkaguard.policy.stores.file import FileAclStore
from tests.support.policy import DENY, PREFIXED, Op, acl, allowed, ctx

GOOD = """\
version: 1
acls:
  - principal: User:alice
    operation: read
    permission: allow
    resource_type: topic
    name: orders
  - {principal: [User:bob, "User:carol"], operation: [Write, describe], permission: DENY,
     resource_type: Topic, pattern_type: prefixed, name: ord, host: 10.0.0.1}
"""


def test_parse_expands_lists_and_defaults() -> None:
    got = parse_acl_text(GOOD, "acls.yaml")
    assert acl("User:alice", Op.READ, name="orders") in got
    assert acl("User:carol", Op.DESCRIBE, DENY, name="ord", ptype=PREFIXED, host="10.0.0.1") in got
    assert len(got) == 5


def test_round_trip() -> None:
    bindings = parse_acl_text(GOOD, "x")
    text = format_acl_text(bindings)
    assert parse_acl_text(text, "x") == bindings
    assert parse_acl_text(format_acl_text([]), "x") == frozenset()
    odd = acl('User:we"ird: name', Op.READ, name="a: #b\\c\u00e9")
    assert parse_acl_text(format_acl_text([odd]), "x") == {odd}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{principal: User:a, operation: reed, permission: allow, resource_type: topic, name: t}",  # noqa: E501
            "unknown AclOperation 'reed'",
        ),
        (
            "{principal: User:a, operation: read, resource_type: topic, name: t}",
            "permission is required",
        ),
        (
            "{principal: alice, operation: read, permission: allow, resource_type: topic, name: t}",
            "no colon",
        ),
        (
            "{principal: User:a, operation: read, permission: allow, resource_type: topic, name: 2024}",  # noqa: E501
            "quote it",
        ),
        (
            "{principal: User:a, operation: read, permission: allow, resource_type: cluster, name: c}",  # noqa: E501
            "kafka-cluster",
        ),
        (
            "{principal: User:a, operation: read, permission: allow, resource_type: topic, name: t, typo: 1}",  # noqa: E501
            "unknown key 'typo'",
        ),
        (
            "{principal: User:a, operation: any, permission: allow, resource_type: topic, name: t}",
            "Invalid operation ANY",
        ),
    ],
)
def test_errors_name_file_line_and_entry(entry: str, message: str) -> None:
    text = (
        "acls:\n  - {principal: User:ok, operation: read, permission: allow, resource_type: topic, name: t}\n  - "  # noqa: E501
        + entry
        + "\n"
    )
    with pytest.raises(ValueError, match=message) as info:
        parse_acl_text(text, "acls.yaml")
    assert str(info.value).startswith("acls.yaml:3 acls[1]: ")


def test_not_yaml_and_bad_shape() -> None:
    with pytest.raises(ValueError, match="not valid YAML"):
        parse_acl_text("acls: [", "f")
    with pytest.raises(ValueError, match="unknown top-level key 'acl'"):
        parse_acl_text("acl: []", "f")
    with pytest.raises(ValueError, match="unsupported version"):
        parse_acl_text("version: 2\nacls: []", "f")
    assert parse_acl_text("", "f") == frozenset()


async def test_start_fails_on_missing_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(AclStoreError, match="does not exist"):
        await FileAclStore(tmp_path / "nope.yaml", poll_interval_s=0).start()
    bad = tmp_path / "bad.yaml"
    bad.write_text("acls:\n  - {principal: x}\n")
    with pytest.raises(AclStoreError, match=r"bad.yaml:2 acls\[0\]"):
        await FileAclStore(bad, poll_interval_s=0).start()


async def _wait_for(predicate, limit: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_reload_on_change_and_bad_file_keeps_old(tmp_path: Path, caplog) -> None:
    path = tmp_path / "acls.yaml"
    path.write_text(GOOD)
    store = FileAclStore(path, poll_interval_s=0.05)
    assert isinstance(store, AclStore)
    auth = StandardAuthorizer(AuthorizerConfig(), store)
    await auth.start(["L"])["L"]
    assert allowed(auth, ctx("User:alice"), Op.READ, "orders")

    path.write_text(
        "acls:\n  - {principal: User:dave, operation: read, permission: allow, resource_type: topic, name: orders}\n"  # noqa: E501
    )
    os.utime(path, ns=(1, 1))  # make sure the stamp changes even within one mtime tick
    await _wait_for(lambda: allowed(auth, ctx("User:dave"), Op.READ, "orders"))
    assert not allowed(auth, ctx("User:alice"), Op.READ, "orders")

    caplog.set_level(logging.ERROR, logger="kafkaguard.policy.store")
    path.write_text("acls:\n  - {principal: User:eve, operation: reed}\n")
    os.utime(path, ns=(2, 2))
    await _wait_for(lambda: store.last_error is not None)
    assert "acls[0]" in store.last_error
    assert allowed(auth, ctx("User:dave"), Op.READ, "orders")  # old ACLs still in force
    assert any("keeping the 1 ACLs in force" in r.getMessage() for r in caplog.records)

    path.unlink()
    assert await store.reload() is False
    assert allowed(auth, ctx("User:dave"), Op.READ, "orders")
    await auth.close()


async def test_request_reload_and_writes_are_atomic(tmp_path: Path) -> None:
    path = tmp_path / "acls.yaml"
    path.write_text("acls: []\n")
    store = FileAclStore(path, poll_interval_s=0)
    await store.start()
    seen: list[int] = []
    store.subscribe(lambda snap: seen.append(len(snap)))
    a, b = acl("User:a", Op.READ), acl("User:b", Op.WRITE)
    await store.add([a, b])
    assert parse_acl_text(path.read_text(), "x") == {a, b}
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
    await store.remove([a])
    assert store.snapshot() == {b}
    path.write_text(format_acl_text([a]))
    store.request_reload()
    await _wait_for(lambda: store.snapshot() == {a})
    assert seen == [2, 1, 1]
    await store.close()


async def test_add_refuses_to_overwrite_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "acls.yaml"
    path.write_text("acls: []\n")
    store = FileAclStore(path, poll_interval_s=0)
    await store.start()
    path.write_text("acls: [")
    with pytest.raises(AclStoreError, match="not valid YAML"):
        await store.add([acl("User:a", Op.READ)])
    assert path.read_text() == "acls: ["
