"""``kafkaguard explain``: every reason kind through the real CLI, and explain == authorize.

The CLI tests write a real config and ACL file and call ``kafkaguard.cli.main`` (which loads
the store exactly as ``kafkaguard run`` does). The property tests check that an explanation
always carries the authorizer's own verdict, and that its list of matching ACLs equals a
direct transcription of Kafka's matching rules (``StandardAuthorizerData.findAclRule``/
``findResult``) and is consistent with the verdict.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaguard.cli import main
from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason
from kafkaguard.policy.authorizer import Action, SecurityProtocol, java_host_address
from kafkaguard.policy.explain import decision_context, explain
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.tansu import TansuBroker
from tests.support.doc_sessions import assert_shown, sessions
from tests.support.policy import ALLOW, DENY, PREFIXED, TOPIC, Op, acl, authorizer, ctx
from tests.support.proxy_fixture import StartEnforcingProxy, unique_name
from tests.support.raw_client import RawKafkaClient, build_request, schema_module

# -- the CLI, one test per reason kind -----------------------------------------------------------


def write_config(
    tmp_path: Path,
    acls: list[AclBinding],
    *,
    allow_everyone: bool = False,
    listener_extra: str = "",
    authorizer_extra: str = "",
    upstream: str = "127.0.0.1:9",
) -> Path:
    (tmp_path / "acls.yaml").write_text(format_acl_text(acls), encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"upstream:\n  bootstrap_servers: ['{upstream}']\n"
        "listeners:\n"
        "  - name: INTERNAL\n    port: 19998\n"
        "  - name: EXTERNAL\n    port: 19999\n    security_protocol: PLAINTEXT\n"
        f"{listener_extra}"
        "authorizer:\n"
        '  super_users: "User:admin"\n'
        f"  allow_everyone_if_no_acl_found: {str(allow_everyone).lower()}\n"
        f"{authorizer_extra}"
        "acl_store:\n  type: file\n  path: acls.yaml\n",
        encoding="utf-8",
    )
    return config


def run_explain(
    config: Path,
    principal: str,
    operation: str,
    *resource: str,
    host: str = "10.1.2.3",
    listener: str = "EXTERNAL",
) -> list[str]:
    args = ["explain", "--config", str(config), "--principal", principal, "--host", host]
    return [*args, "--listener", listener, "--operation", operation, *resource]


ORDERS = ["--topic", "orders"]
ALLOW_ALICE_READ = acl("User:alice", Op.READ, name="orders")


def test_super_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, [acl("User:admin", Op.ALL, DENY, name="orders")])
    assert main(run_explain(config, "User:admin", "Write", *ORDERS)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ALLOWED: User:admin WRITE Topic:LITERAL:orders from host 10.1.2.3 " + (
        "(listener EXTERNAL, PLAINTEXT)"
    )
    assert out[1] == (
        "Reason: SuperUser: User:admin is a super user: every operation is allowed, "
        "ACLs are not consulted"
    )
    assert "Deciding ACL" not in "\n".join(out)


def test_without_host_only_wildcard_host_acls_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from_one_host = acl("User:bob", Op.READ, name="orders", host="10.1.2.3")
    config = write_config(tmp_path, [ALLOW_ALICE_READ, from_one_host])
    args = ["explain", "--config", str(config), "--principal", "User:alice"]
    assert main([*args, "--operation", "READ", *ORDERS]) == 3  # orders may not exist
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ALLOWED: User:alice READ Topic:LITERAL:orders from host 0.0.0.0 ")
    assert out[-1] == "No --host given: assumed 0.0.0.0, which only ACLs for host * match"
    bob = ["explain", "--config", str(config), "--principal", "User:bob"]
    assert main([*bob, "--operation", "READ", *ORDERS]) == 1


def test_deny_acl_wins_over_a_matching_allow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deny = acl("User:alice", Op.READ, DENY, name="ord", ptype=PREFIXED)
    config = write_config(tmp_path, [ALLOW_ALICE_READ, deny])
    assert main(run_explain(config, "User:alice", "READ", *ORDERS)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "DENIED: User:alice READ Topic:LITERAL:orders from host 10.1.2.3 "
        "(listener EXTERNAL, PLAINTEXT)",
        "Reason: DenyAcl: a DENY ACL matched, and DENY takes precedence over any ALLOW "
        "(1 matching ALLOW ACL overridden)",
        "Deciding ACL: DENY READ on Topic:PREFIXED:ord for User:alice from host *",
        "Matching ACLs (2, DENY first):",
        "  DENY READ on Topic:PREFIXED:ord for User:alice from host *  <- deciding",
        "  ALLOW READ on Topic:LITERAL:orders for User:alice from host *",
    ]


def test_allow_acl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other_host = acl("User:alice", Op.READ, DENY, name="orders", host="10.9.9.9")
    config = write_config(tmp_path, [ALLOW_ALICE_READ, other_host])
    assert main(run_explain(config, "User:alice", "read", *ORDERS)) == 3  # if orders exists
    out = capsys.readouterr().out
    assert "ALLOWED: User:alice READ Topic:LITERAL:orders" in out
    assert "Reason: AllowAcl: an ALLOW ACL matched and no DENY ACL did\n" in out
    assert "Deciding ACL: ALLOW READ on Topic:LITERAL:orders for User:alice from host *" in out
    assert "10.9.9.9" not in out  # a DENY for another host does not apply


def test_implied_describe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, [ALLOW_ALICE_READ])
    assert main(run_explain(config, "User:alice", "DESCRIBE", *ORDERS)) == 3  # if it exists
    out = capsys.readouterr().out
    assert "Reason: AllowAcl: an ALLOW ACL matched and no DENY ACL did; DESCRIBE is " in out
    assert "implied by READ" in out


def test_default_allow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, [ALLOW_ALICE_READ], allow_everyone=True)
    assert main(run_explain(config, "User:bob", "WRITE", "--topic", "unguarded")) == 0
    out = capsys.readouterr().out
    assert (
        "Reason: DefaultAllow: no ACL exists for this resource and "
        "allow.everyone.if.no.acl.found=true → allowed"
    ) in out
    assert "Matching ACLs: none" in out


def test_default_deny_with_acls_for_another_principal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, [ALLOW_ALICE_READ], allow_everyone=True)
    assert main(run_explain(config, "User:bob", "READ", *ORDERS)) == 1
    out = capsys.readouterr().out
    assert (
        "Reason: DefaultDeny: ACLs exist for this resource (so allow.everyone.if.no.acl.found "
        "does not apply), but none matches User:bob from host 10.1.2.3 for READ → denied"
    ) in out
    assert "Matching ACLs: none" in out


def test_default_deny_without_any_acl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, [ALLOW_ALICE_READ])
    assert main(run_explain(config, "User:bob", "READ", "--group", "payments")) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("DENIED: User:bob READ Group:LITERAL:payments")
    assert out[1] == (
        "Reason: DefaultDeny: no ACL matched; allow.everyone.if.no.acl.found=false → denied"
    )


def test_listener_override_and_log_only_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        [],
        listener_extra="    enforcement: log_only\n",
        authorizer_extra=(
            "  extensions:\n    listeners:\n"
            '      EXTERNAL: {super_users: "User:ops", allow_everyone_if_no_acl_found: true}\n'
        ),
    )
    # User:admin is no super user on EXTERNAL (replaced by User:ops), but no ACL: DefaultAllow.
    assert main(run_explain(config, "User:admin", "ALTER", "--cluster")) == 0
    out = capsys.readouterr().out
    assert "ALLOWED: User:admin ALTER Cluster:LITERAL:kafka-cluster" in out
    assert "Reason: DefaultAllow" in out
    assert (
        "Listener EXTERNAL overrides: super_users=User:ops, allow_everyone_if_no_acl_found=true"
    ) in out
    assert "Listener EXTERNAL is in log_only mode" in out
    assert main(run_explain(config, "User:admin", "ALTER", "--cluster", listener="INTERNAL")) == 0
    assert "Reason: SuperUser" in capsys.readouterr().out


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, [ALLOW_ALICE_READ])
    args = run_explain(config, "User:alice", "DESCRIBE", *ORDERS, host="::1")
    assert main([*args, "--json"]) == 3
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "result": "ALLOWED",
        "reason": "AllowAcl",
        "implied": True,
        "super_user": False,
        "acls_applied": True,
        "deciding_acl": {
            "resource_type": "TOPIC",
            "pattern_type": "LITERAL",
            "resource_name": "orders",
            "principal": "User:alice",
            "host": "*",
            "operation": "READ",
            "permission_type": "ALLOW",
        },
        "matching_acls": [document["deciding_acl"]],
        "deciding_principal": "User:alice",
        "request": {
            "principal": "User:alice",
            "groups": [],
            "host": "0:0:0:0:0:0:0:1",  # as Java prints it, what ACL hosts are compared with
            "listener": "EXTERNAL",
            "security_protocol": "PLAINTEXT",
            "operation": "DESCRIBE",
            "resource_type": "TOPIC",
            "pattern_type": "LITERAL",
            "resource_name": "orders",
        },
        "listener_enforcement": "enforce",
        "auto_creation": {
            "applies": True,
            "topic_exists": None,
            "create_on_cluster": "DENIED",
            "create_on_topic": "DENIED",
            "allowed": False,
        },
        "overall_result": "UNDECIDED",
    }


def test_groups_from_the_file_and_member_of_name_the_deciding_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "groups.yaml").write_text('version: 1\ngroups:\n  "User:alice": [eng]\n')
    config = write_config(
        tmp_path,
        [
            acl("Group:eng", Op.WRITE, name="orders"),
            acl("Group:contractors", Op.WRITE, DENY, name="orders"),
        ],
        authorizer_extra="  extensions:\n    groups:\n      file: groups.yaml\n",
    )
    assert main(run_explain(config, "User:alice", "WRITE", *ORDERS)) in (0, 3)
    out = capsys.readouterr().out
    assert "ALLOWED: User:alice (groups Group:eng) WRITE Topic:LITERAL:orders" in out
    assert "Deciding ACL: ALLOW WRITE on Topic:LITERAL:orders for Group:eng from host *" in out
    assert "Decided by the ACL of Group:eng, a group of User:alice" in out
    args = run_explain(config, "User:alice", "WRITE", *ORDERS, "--member-of", "contractors")
    assert main([*args, "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["request"]["groups"] == ["Group:eng", "Group:contractors"]
    assert (document["result"], document["deciding_principal"]) == ("DENIED", "Group:contractors")
    assert [a["principal"] for a in document["matching_acls"]] == [
        "Group:contractors",
        "Group:eng",
    ]
    assert main(run_explain(config, "User:bob", "WRITE", *ORDERS)) == 1  # no groups: no ACL
    assert "none matches User:bob from host" in capsys.readouterr().out


def test_an_unreadable_groups_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = tmp_path / "groups.yaml"
    groups.write_text('version: 1\ngroups:\n  "User:alice": [eng]\n')
    config = write_config(
        tmp_path, [], authorizer_extra="  extensions:\n    groups:\n      file: groups.yaml\n"
    )
    groups.write_text("version: 1\ngroups:\n  nobody: [eng]\n")  # after the config was checked
    assert main(run_explain(config, "User:alice", "WRITE", *ORDERS)) == 2
    assert "groups.yaml:3" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"listener": "NOPE"}, "no listener 'NOPE' (configured: INTERNAL, EXTERNAL)"),
        ({"host": "not-an-ip"}, "does not appear to be an IPv4 or IPv6 address"),
        ({"principal": "alice"}, "principalType:principalName"),
        ({"operation": "ALL"}, "ALL is not an operation a request performs"),
        ({"operation": "Fly"}, "unknown AclOperation 'Fly'"),
    ],
)
def test_bad_arguments_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str], message: str
) -> None:
    config = write_config(tmp_path, [])
    values = {"principal": "User:alice", "operation": "READ", "host": "10.0.0.1"}
    values |= change
    args = run_explain(
        config,
        values["principal"],
        values["operation"],
        *ORDERS,
        host=values["host"],
        listener=change.get("listener", "EXTERNAL"),
    )
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kafkaguard explain: ") and message in err


def test_unreadable_acl_store_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, [])
    (tmp_path / "acls.yaml").write_text("acls: [{nonsense: 1}]\n", encoding="utf-8")
    assert main(run_explain(config, "User:alice", "READ", *ORDERS)) == 2
    assert "acls.yaml" in capsys.readouterr().err


def test_zookeeper_store_loaded_once(
    zookeeper: object, chroot: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    connect = zookeeper.connect  # type: ignore[attr-defined]
    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"
        "listeners:\n  - name: EXTERNAL\n    port: 19999\n"
        f"acl_store:\n  type: zookeeper\n  connect: '{connect}'\n  chroot: {chroot}\n",
        encoding="utf-8",
    )
    add = ["acls", "--config", str(config), "--add", "--allow-principal", "User:alice"]
    assert main([*add, "--operation", "Write", "--topic", "orders"]) == 0
    capsys.readouterr()
    assert main(run_explain(config, "User:alice", "WRITE", *ORDERS)) == 3  # if orders exists
    assert "Deciding ACL: ALLOW WRITE on Topic:LITERAL:orders" in capsys.readouterr().out


# -- a topic that does not exist: auto-creation's CREATE (issue 38) -----------------------------

WRITE_NEW = acl("User:alice", Op.WRITE, name="new-", ptype=PREFIXED)


def test_write_on_a_topic_not_checked_names_the_create_it_also_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, [WRITE_NEW])
    assert main(run_explain(config, "User:alice", "WRITE", "--topic", "new-orders")) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ALLOWED: User:alice WRITE Topic:LITERAL:new-orders")
    assert (
        "Topic existence not checked (--ask-upstream asks the cluster); if "
        "Topic:LITERAL:new-orders does not exist:" in out
    )
    assert any("auto-creates it only with CREATE on Cluster:LITERAL:kafka-cluster or on "
               "Topic:LITERAL:new-orders" in line for line in out)  # fmt: skip
    assert any(line.startswith("  CREATE on Cluster:LITERAL:kafka-cluster: DENIED") for line in out)
    assert any(line.startswith("  CREATE on Topic:LITERAL:new-orders: DENIED") for line in out)
    assert (
        "  → DENIED: Metadata answers TOPIC_AUTHORIZATION_FAILED (29) for new-orders, so the "
        "request fails" in out
    )
    assert out[-1].startswith("Result: ALLOWED if new-orders exists, DENIED if it does not")


@pytest.mark.parametrize(
    "create",
    [
        acl("User:alice", Op.CREATE, name="new-", ptype=PREFIXED),
        acl("User:alice", Op.CREATE, name="kafka-cluster", rtype=ResourceType.CLUSTER),
    ],
)
def test_create_on_the_topic_or_the_cluster_allows_auto_creation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], create: AclBinding
) -> None:
    config = write_config(tmp_path, [WRITE_NEW, create])
    assert main(run_explain(config, "User:alice", "WRITE", "--topic", "new-orders")) == 0
    out = capsys.readouterr().out
    assert "→ ALLOWED: the topic is auto-created" in out and "Result:" not in out
    # Kafka asks the topic only when the cluster says no.
    on_topic = "CREATE on Topic:LITERAL:new-orders"
    assert (on_topic in out) is (create.pattern.resource_type is ResourceType.TOPIC)


def test_operations_that_never_auto_create_are_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, [acl("User:alice", Op.ALTER_CONFIGS, name="new-orders")])
    args = run_explain(config, "User:alice", "ALTER_CONFIGS", "--topic", "new-orders")
    assert main(args) == 0
    assert "CREATE" not in capsys.readouterr().out


def test_ask_upstream_decides_from_the_live_cluster(
    tansu: TansuBroker,
    enforcing_proxy: StartEnforcingProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Against Tansu: a missing topic is DENIED (and a client's Metadata through a proxy
    holding the same ACLs is answered 29, as explained); an existing one is ALLOWED."""
    pytest.importorskip("confluent_kafka")
    from tests.support.audit_stream import create_topic

    missing, present = unique_name("new-missing"), unique_name("new-present")
    grants = [acl("User:ANONYMOUS", Op.WRITE, name="new-", ptype=PREFIXED)]
    config = write_config(tmp_path, grants, upstream=str(tansu.address))
    ask = ["--ask-upstream", "--listener", "INTERNAL"]
    assert main([*run_explain(config, "User:ANONYMOUS", "WRITE", "--topic", missing), *ask]) == 1
    out = capsys.readouterr().out
    assert f"Topic:LITERAL:{missing} does not exist (asked the upstream):" in out
    assert "→ DENIED: Metadata answers TOPIC_AUTHORIZATION_FAILED (29)" in out
    running = enforcing_proxy(grants)
    host, port = running.bootstrap.rsplit(":", 1)
    with RawKafkaClient(host, int(port)) as client:
        topic_type = schema_module(3, 12).MetadataRequestTopic
        request = build_request(
            3,
            12,
            topics=(topic_type(topic_id=None, name=missing),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        _, answer = client.request(request)
    assert [(t.name, int(t.error_code)) for t in answer.topics] == [(missing, 29)]
    create_topic({"bootstrap.servers": str(tansu.address)}, present, partitions=1)
    assert main([*run_explain(config, "User:ANONYMOUS", "WRITE", "--topic", present), *ask]) == 0
    assert f"Topic:LITERAL:{present} exists (asked the upstream)" in capsys.readouterr().out


def test_the_docs_explain_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/acl-tools.md's ``explain`` session, replayed (one listener, EXTERNAL)."""
    (session,) = sessions("acl-tools.md", "`explain`")
    config = write_config(tmp_path, [WRITE_NEW])
    text = config.read_text(encoding="utf-8").replace("  - name: INTERNAL\n    port: 19998\n", "")
    (tmp_path / "proxy.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(session.argv) == session.exit_code
    assert_shown(session, capsys.readouterr().out.splitlines())


def test_ask_upstream_that_does_not_answer_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, [WRITE_NEW], upstream="127.0.0.1:1")
    args = [*run_explain(config, "User:alice", "WRITE", "--topic", "new-x"), "--ask-upstream"]
    assert main(args) == 2
    assert "Metadata at 127.0.0.1:1" in capsys.readouterr().err


# -- explain == authorize ------------------------------------------------------------------------

# ACLs are drawn around the request (its principal, host, name and prefixes, related
# operations) so that most examples have several applicable ACLs of different kinds.
OPS = [Op.READ, Op.WRITE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
requests = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "Group:alice", "User:admin"]),
    st.sampled_from(["10.0.0.1", "::1", "10.0.0.3"]),
    st.sampled_from(OPS),
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    st.sampled_from(["abc", "ab", "a", "b", "x"]),
)
Request = tuple[str, str, AclOperation, ResourceType, str]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Request, list[AclBinding]]:
    request = draw(requests)
    principal, host, _, rtype, name = request
    near = st.builds(
        lambda rt, pattern, who, where, op, perm: acl_binding(
            rt, pattern[1], who, op, perm, host=where, pattern_type=pattern[0]
        ),
        st.sampled_from([rtype, rtype, rtype, ResourceType.TOPIC, ResourceType.GROUP]),
        st.sampled_from(
            [(PatternType.LITERAL, name), (PatternType.LITERAL, "*"), (PatternType.LITERAL, "q")]
            + [(PREFIXED, name[:k]) for k in range(1, len(name) + 1)]
        ),
        st.sampled_from([principal, "User:*", "User:alice", "Group:alice"]),
        st.sampled_from(
            ["*", java_host_address(ipaddress.ip_address(host)), "10.0.0.0/30", "10.0.0.2"]
        ),  # fmt: skip
        st.sampled_from([*OPS, AclOperation.ALL]),
        st.sampled_from([ALLOW, ALLOW, DENY]),
    )
    return request, draw(st.lists(near, max_size=10))


IMPLIERS = {
    AclOperation.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    AclOperation.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
}


def reference_matching(
    acls: list[AclBinding], cidr: bool, principal: str, host: str, op: AclOperation,
    rtype: ResourceType, name: str,
) -> set[AclBinding]:  # fmt: skip
    """``StandardAuthorizerData.findAclRule``/``findResult`` transcribed: applicable pattern,
    principal (or User:*), host, operation."""
    kind, _, pname = principal.partition(":")
    principals = {(kind, pname), ("User", "*")}
    address = ipaddress.ip_address(host)
    found = set()
    for a in acls:
        p, e = a.pattern, a.entry
        if p.resource_type != rtype:
            continue
        if p.pattern_type == PatternType.LITERAL and p.name not in (name, "*"):
            continue
        if p.pattern_type == PatternType.PREFIXED and not name.startswith(p.name):
            continue
        at, _, an = e.principal.partition(":")
        if (at, an) not in principals:
            continue
        in_network = cidr and "/" in e.host and address in ipaddress.ip_network(e.host)
        if e.host not in ("*", java_host_address(address)) and not in_network:
            continue
        allow = e.permission_type == AclPermissionType.ALLOW
        if e.operation not in (op, AclOperation.ALL) and not (
            allow and e.operation in IMPLIERS.get(op, set())
        ):
            continue
        found.add(a)
    return found


def scan_rank(binding: AclBinding, name: str) -> int:
    """Kafka's scan order: the literal name, prefixes shortest first, the literal '*'."""
    if binding.pattern.pattern_type == PatternType.PREFIXED:
        return len(binding.pattern.name)
    return 0 if binding.pattern.name == name else 1_000


@settings(max_examples=500, deadline=None)
@given(scenarios(), st.booleans(), st.booleans())
def test_explain_equals_authorize_and_matching_is_consistent(
    scenario: tuple[Request, list[AclBinding]], allow_everyone: bool, cidr: bool
) -> None:
    (principal, host, op, rtype, name), acls = scenario
    action = Action(op, ResourcePattern(rtype, name))
    context = ctx(principal, host)
    seen: list[DecisionEvent] = []
    auth = authorizer(acls, "User:admin", allow_everyone=allow_everyone, host_cidr=cidr)
    auth.decision_listener = seen.append
    got = explain(auth, context, action)
    assert seen == []  # the proxy's listener is not fed by an explanation...
    fresh = authorizer(acls, "User:admin", allow_everyone=allow_everyone, host_cidr=cidr)
    fresh.decision_listener = seen.append
    assert fresh.authorize(context, [action]) == [got.result]
    (event,) = seen  # ...and is restored afterwards
    assert (got.result, got.reason, got.deciding_acl, got.implied, got.acls_applied) == (
        event.result, event.reason, event.acl, event.implied, event.acls_applied,
    )  # fmt: skip

    matching = got.matching_acls
    assert set(matching) == reference_matching(acls, cidr, principal, host, op, rtype, name)
    assert len(set(matching)) == len(matching)
    denies = [b for b in matching if b.entry.permission_type == DENY]
    assert matching[: len(denies)] == tuple(denies)  # DENY first, then scan order
    for group in (denies, matching[len(denies) :]):
        ranks = [scan_rank(b, name) for b in group]
        assert ranks == sorted(ranks)
    assert got.super_user is (principal == "User:admin")
    if got.super_user:
        return
    if denies:
        assert got.reason is DecisionReason.DENY_ACL and got.deciding_acl in denies
    elif matching:
        assert got.reason is DecisionReason.ALLOW_ACL and got.deciding_acl in matching
        assert got.implied is (got.deciding_acl.entry.operation not in (op, AclOperation.ALL))
    elif allow_everyone and not got.acls_applied:
        assert got.reason is DecisionReason.DEFAULT_ALLOW
    else:
        assert got.reason is DecisionReason.DEFAULT_DENY and got.deciding_acl is None


@pytest.mark.parametrize("host", ["0:0:0:0:0:0:0:1", "::1", "::ffff:127.0.0.1"])
def test_decision_context_compares_hosts_as_java_prints_them(host: str) -> None:
    context = decision_context("User:alice", host, "EXTERNAL", SecurityProtocol.SSL)
    java = "127.0.0.1" if "ffff" in host else "0:0:0:0:0:0:0:1"
    assert (context.host, context.listener_name) == (java, "EXTERNAL")
    auth = authorizer([acl("User:alice", Op.READ, host=java)])
    action = Action(Op.READ, ResourcePattern(TOPIC, "foo"))
    assert explain(auth, context, action).reason is DecisionReason.ALLOW_ACL
