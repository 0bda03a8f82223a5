"""``kafkaguard explain``: why the configured authorizer allows or denies one request, read
from the same ACL store and settings the proxy would use, with every check Kafka makes for it:
a topic that does not exist is auto-created only with CREATE
(:func:`kafkaguard.policy.explain.auto_creation`). ``--ask-upstream`` asks the config's
upstream, as the proxy reaches it, whether the topic exists; without it both outcomes are
printed and, when they differ, the exit status is 3. The principal's groups are the configured
groups file's (``authorizer.extensions.groups.file``) and any ``--member-of``; the output names
the principal whose ACL decided."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from kafkaguard.audit.config import LOG_ONLY
from kafkaguard.config_tree import ConfigError
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    DecisionPendingError,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import build_authorizer
from kafkaguard.policy.explain import (
    AutoCreation,
    Explanation,
    auto_creation,
    auto_creation_json,
    decision_context,
    explain,
    explain_event,
    explanation_json,
    overall_result,
    render_auto_creation,
    render_text,
)
from kafkaguard.policy.groups import GroupsFile, group_principals, merged
from kafkaguard.policy.model import (
    CLUSTER_NAME,
    AclOperation,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.opa import OpaAuthorizer
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.proxy.app.server import audit_connection
from kafkaguard.proxy.app.wire_admin import topic_exists
from kafkaguard.proxy.config import (
    ListenerConfig,
    ProxyConfig,
    load_config,
)

_EXPLAIN_RESOURCES: tuple[tuple[str, ResourceType], ...] = (
    ("topic", ResourceType.TOPIC),
    ("group", ResourceType.GROUP),
    ("cluster", ResourceType.CLUSTER),
    ("transactional_id", ResourceType.TRANSACTIONAL_ID),
    ("delegation_token", ResourceType.DELEGATION_TOKEN),
    ("user", ResourceType.USER),
)
_EXPLAIN_LOAD_TIMEOUT_S = 60.0
_EXPLAIN_ANY_HOST = "0.0.0.0"
"""The host ``explain`` assumes without ``--host``: no client has it, so only ACLs whose host is
``*`` match it (most ACLs are)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="the proxy's configuration")
    parser.add_argument("--principal", required=True, help="e.g. User:alice")
    parser.add_argument(
        "--member-of",
        action="append",
        default=[],
        metavar="GROUP",
        help="a group of the principal (Group:GROUP), repeatable; added to those the configured "
        "groups file gives it (a token's or certificate's groups are known only to a connection)",
    )
    parser.add_argument(
        "--host",
        default=None,
        help=f"the client's IP address (default {_EXPLAIN_ANY_HOST}: only ACLs for host * match)",
    )
    parser.add_argument("--listener", help="listener name (default: the first configured)")
    parser.add_argument("--operation", required=True, help="e.g. READ, WRITE, DescribeConfigs")
    resource = parser.add_mutually_exclusive_group(required=True)
    resource.add_argument("--topic")
    resource.add_argument("--group")
    resource.add_argument("--cluster", action="store_const", const=CLUSTER_NAME)
    resource.add_argument("--transactional-id")
    resource.add_argument("--delegation-token")
    resource.add_argument("--user")
    parser.add_argument(
        "--ask-upstream",
        action="store_true",
        help="ask the config's upstream cluster (its TLS and SASL settings) whether the topic "
        "exists: a missing one is auto-created only with CREATE; without it both outcomes "
        "are printed",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _explain_request(
    config: ProxyConfig, args: argparse.Namespace
) -> tuple[ListenerConfig, RequestContext, Action]:
    """The listener, KIP-504 context and action the arguments describe (ValueError if bad)."""
    listener = config.listeners[0]
    if args.listener is not None:
        names = [ls.name for ls in config.listeners]
        if args.listener not in names:
            raise ValueError(f"no listener {args.listener!r} (configured: {', '.join(names)})")
        listener = config.listeners[names.index(args.listener)]
    operation = AclOperation.parse(args.operation)
    if operation in (AclOperation.ANY, AclOperation.ALL):
        raise ValueError(f"{operation.name} is not an operation a request performs")
    resource_type, name = next(
        (kind, getattr(args, attr)) for attr, kind in _EXPLAIN_RESOURCES if getattr(args, attr)
    )
    context = decision_context(
        args.principal,
        args.host or _EXPLAIN_ANY_HOST,
        listener.name,
        SecurityProtocol(listener.security_protocol),
        _groups(config, args),
    )
    return listener, context, Action(operation, ResourcePattern(resource_type, name))


def _groups(config: ProxyConfig, args: argparse.Namespace) -> tuple[KafkaPrincipal, ...]:
    """The principal's groups as a connection of it would hold them from the configured groups
    file (read now; an unreadable one is an error, never no groups), then ``--member-of``."""
    sources = config.policy.authorizer.groups
    found: tuple[KafkaPrincipal, ...] = ()
    if sources.file is not None:
        groups_file = GroupsFile(sources.file)
        groups_file.load()  # GroupsError: a ValueError naming file:line
        found = groups_file.groups_of(KafkaPrincipal.parse(args.principal))
    return merged(found, group_principals(args.member_of))


async def _explain_decision(
    config: ProxyConfig, listener: str, context: RequestContext, action: Action
) -> tuple[Explanation, AutoCreation | None]:
    """Load the authorizer and ACL store as ``kafkaguard run`` does, decide (the request's
    check, then the CREATE checks a missing topic adds), close."""
    authorizer = build_authorizer(config.policy)
    try:
        if isinstance(authorizer, OpaAuthorizer):  # OPA decides: asked now, no ACLs to show
            return await _ask_opa(authorizer, context, action), None
        if not isinstance(authorizer, StandardAuthorizer):
            class_path = config.policy.authorizer.class_path
            raise ValueError(f"explain needs kafkaguard's StandardAuthorizer, not {class_path}")
        ready = authorizer.start([listener])
        await asyncio.wait_for(ready[listener], _EXPLAIN_LOAD_TIMEOUT_S)
        return explain(authorizer, context, action), auto_creation(authorizer, context, action)
    finally:
        await authorizer.close()


async def _ask_opa(
    authorizer: OpaAuthorizer, context: RequestContext, action: Action
) -> Explanation:
    """The OPA authorizer's decision, as the proxy would get it (cached there, asked here)."""
    events: list[DecisionEvent] = []
    authorizer.decision_listener = events.append
    try:
        authorizer.authorize(context, [action])
    except DecisionPendingError as pending:
        await pending.ready
        authorizer.authorize(context, [action])
    return explain_event(events[-1])


def _exists(
    config: ProxyConfig, args: argparse.Namespace, creation: AutoCreation | None
) -> bool | None:
    """Whether the topic exists, when asked to find out and it matters (else None)."""
    if not args.ask_upstream or creation is None:
        return None
    return asyncio.run(topic_exists(audit_connection(config.upstream), creation.topic))


def run(args: argparse.Namespace) -> int:
    """Exit 0 if the request would be allowed, 1 if denied, 3 if that depends on whether the
    topic exists (not checked: no ``--ask-upstream``), 2 on errors."""
    try:
        config = load_config(args.config)
        listener, context, action = _explain_request(config, args)
        explanation, creation = asyncio.run(
            _explain_decision(config, listener.name, context, action)
        )
        exists = _exists(config, args, creation)
    except (ConfigError, ValueError, AclStoreError, OSError, TimeoutError) as exc:
        print(f"kafkaguard explain: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    result = overall_result(explanation, creation, exists)
    enforcement = config.listener_enforcement(listener)
    if args.json:
        document = explanation_json(explanation, context, action)
        document["listener_enforcement"] = enforcement
        document["auto_creation"] = auto_creation_json(creation, exists)
        document["overall_result"] = "UNDECIDED" if result is None else result.value
        print(json.dumps(document, indent=2))  # noqa: T201
    else:
        authorizer_config = config.policy.authorizer
        lines = render_text(explanation, context, action, authorizer_config)
        if creation is not None and explanation.result is AuthorizationResult.ALLOWED:
            lines += render_auto_creation(creation, exists, context, authorizer_config)
        for line in lines:
            print(line)  # noqa: T201
        if args.host is None:
            print(  # noqa: T201
                f"No --host given: assumed {_EXPLAIN_ANY_HOST}, which only ACLs for host * match"
            )
        if enforcement == LOG_ONLY:
            print(  # noqa: T201
                f"Listener {listener.name} is in log_only mode: the proxy forwards the request "
                "even when denied (audited with would_deny)"
            )
    if result is None:
        return 3
    return 0 if result is AuthorizationResult.ALLOWED else 1
