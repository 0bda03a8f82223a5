"""Shared builders for the policy tests."""

from __future__ import annotations

import ipaddress

from kafkaguard.policy.authorizer import Action, RequestContext, SecurityProtocol
from kafkaguard.policy.config import AuthorizerConfig, ListenerPolicy, parse_super_users
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.standard import StandardAuthorizer

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
Op = AclOperation


def ctx(
    principal: str = "User:alice",
    host: str = "192.168.0.1",
    listener: str = "PLAINTEXT",
    api_key: int = 1,
    groups: tuple[str, ...] = (),
) -> RequestContext:
    """``groups``: group names (``eng``), the connection's ``Group:`` principals."""
    return RequestContext(
        listener_name=listener,
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal=KafkaPrincipal.parse(principal),
        client_address=ipaddress.ip_address(host),
        api_key=api_key,
        api_version=0,
        client_id="test",
        correlation_id=7,
        groups=tuple(KafkaPrincipal("Group", g) for g in groups),
    )


def acl(
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    name: str = "foo",
    rtype: ResourceType = TOPIC,
    ptype: PatternType = LITERAL,
    host: str = "*",
) -> AclBinding:
    return acl_binding(rtype, name, principal, op, perm, host=host, pattern_type=ptype)


def authorizer(
    acls: list[AclBinding] | tuple[AclBinding, ...] = (),
    super_users: str = "",
    allow_everyone: bool = False,
    host_cidr: bool = False,
    listeners: dict[str, ListenerPolicy] | None = None,
) -> StandardAuthorizer:
    config = AuthorizerConfig(
        super_users=parse_super_users(super_users),
        allow_everyone_if_no_acl_found=allow_everyone,
        host_cidr=host_cidr,
        listeners=listeners or {},
    )
    auth = StandardAuthorizer(config)
    auth.load_snapshot(acls)
    return auth


def allowed(
    auth: StandardAuthorizer,
    context: RequestContext,
    op: AclOperation,
    name: str = "foo",
    rtype: ResourceType = TOPIC,
) -> bool:
    action = Action(op, ResourcePattern(rtype, name, LITERAL))
    return auth.authorize(context, [action])[0].name == "ALLOWED"
