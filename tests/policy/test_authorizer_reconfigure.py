"""``StandardAuthorizer.reconfigure``: a configuration reload swaps super users,
allow-everyone, the per-listener overrides and ``host_cidr`` for the next decision, keeping the
ACLs (kafkaguard/proxy/app/reload.py)."""

from __future__ import annotations

from types import MappingProxyType

from kafkaguard.policy.authorizer import Action, AuthorizationResult
from kafkaguard.policy.config import AuthorizerConfig, ListenerPolicy
from kafkaguard.policy.model import ResourcePattern
from kafkaguard.policy.standard import StandardAuthorizer
from tests.support.policy import TOPIC, Op, acl, ctx

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
WRITE_FOO = Action(Op.WRITE, ResourcePattern(TOPIC, "foo"), 1, True, True)
WRITE_BAR = Action(Op.WRITE, ResourcePattern(TOPIC, "bar"), 1, True, True)


def _decide(authorizer: StandardAuthorizer, principal: str, listener: str = "PLAINTEXT") -> str:
    (result,) = authorizer.authorize(ctx(principal, listener=listener), [WRITE_BAR])
    return result.name


def test_super_users_and_allow_everyone_swap_keeping_the_acls() -> None:
    authorizer = StandardAuthorizer(AuthorizerConfig(super_users=frozenset({"User:admin"})))
    authorizer.load_snapshot([acl("User:alice", Op.WRITE)])
    assert _decide(authorizer, "User:admin") == "ALLOWED"
    assert _decide(authorizer, "User:bob") == "DENIED"

    authorizer.reconfigure(
        AuthorizerConfig(super_users=frozenset({"User:bob"}), allow_everyone_if_no_acl_found=True)
    )
    assert _decide(authorizer, "User:bob") == "ALLOWED"  # the new super user
    assert _decide(authorizer, "User:carol") == "ALLOWED"  # no ACL on "bar": allow everyone
    # "foo" has an ACL: only alice, whatever allow-everyone says.
    assert authorizer.authorize(ctx("User:carol"), [WRITE_FOO]) == [DENIED]
    assert authorizer.authorize(ctx("User:alice"), [WRITE_FOO]) == [ALLOWED]
    assert authorizer.config.super_users == frozenset({"User:bob"})

    authorizer.reconfigure(AuthorizerConfig())
    assert _decide(authorizer, "User:admin") == "DENIED"
    assert _decide(authorizer, "User:bob") == "DENIED"


def test_per_listener_overrides_come_and_go() -> None:
    authorizer = StandardAuthorizer(AuthorizerConfig(super_users=frozenset({"User:admin"})))
    authorizer.load_snapshot([])
    override = MappingProxyType({"INTERNAL": ListenerPolicy(super_users=frozenset({"User:ops"}))})
    authorizer.reconfigure(
        AuthorizerConfig(super_users=frozenset({"User:admin"}), listeners=override)
    )
    assert _decide(authorizer, "User:ops", "INTERNAL") == "ALLOWED"
    assert _decide(authorizer, "User:admin", "INTERNAL") == "DENIED"  # replaced, not added
    assert _decide(authorizer, "User:admin", "PLAINTEXT") == "ALLOWED"
    authorizer.reconfigure(AuthorizerConfig(super_users=frozenset({"User:admin"})))
    assert _decide(authorizer, "User:ops", "INTERNAL") == "DENIED"
    assert _decide(authorizer, "User:admin", "INTERNAL") == "ALLOWED"


def test_host_cidr_rebuilds_the_index_and_class_is_kept() -> None:
    authorizer = StandardAuthorizer(AuthorizerConfig(class_path="x.y:Original"))
    authorizer.load_snapshot([acl("User:alice", Op.WRITE, name="bar", host="10.0.0.0/8")])
    alice_in_net = ctx("User:alice", host="10.1.2.3")
    assert authorizer.authorize(alice_in_net, [WRITE_BAR]) == [DENIED]  # Kafka: string equality
    authorizer.reconfigure(AuthorizerConfig(class_path="x.y:Other", host_cidr=True))
    assert authorizer.authorize(alice_in_net, [WRITE_BAR]) == [ALLOWED]
    assert len(authorizer.acl_index) == 1
    assert authorizer.config.class_path == "x.y:Original"  # a restart changes the class
