"""``kafkaguard explain``: why the configured authorizer allows or denies one request, read
from the same ACL store and settings the proxy would use."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from kafkaguard.audit.config import LOG_ONLY
from kafkaguard.config_tree import ConfigError
from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import build_authorizer
from kafkaguard.policy.explain import (
    Explanation,
    decision_context,
    explain,
    explanation_json,
    render_text,
)
from kafkaguard.policy.model import CLUSTER_NAME, AclOperation, ResourcePattern, ResourceType
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.base import AclStoreError
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
    )
    return listener, context, Action(operation, ResourcePattern(resource_type, name))


async def _explain_decision(
    config: ProxyConfig, listener: str, context: RequestContext, action: Action
) -> Explanation:
    """Load the authorizer and ACL store as ``kafkaguard run`` does, decide once, close."""
    authorizer = build_authorizer(config.policy)
    try:
        if not isinstance(authorizer, StandardAuthorizer):
            class_path = config.policy.authorizer.class_path
            raise ValueError(f"explain needs kafkaguard's StandardAuthorizer, not {class_path}")
        ready = authorizer.start([listener])
        await asyncio.wait_for(ready[listener], _EXPLAIN_LOAD_TIMEOUT_S)
        return explain(authorizer, context, action)
    finally:
        await authorizer.close()


def run(args: argparse.Namespace) -> int:
    """Exit 0 if the request would be allowed, 1 if denied, 2 on errors."""
    try:
        config = load_config(args.config)
        listener, context, action = _explain_request(config, args)
        explanation = asyncio.run(_explain_decision(config, listener.name, context, action))
    except (ConfigError, ValueError, AclStoreError, OSError, TimeoutError) as exc:
        print(f"kafkaguard explain: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    enforcement = config.listener_enforcement(listener)
    if args.json:
        document = explanation_json(explanation, context, action)
        document["listener_enforcement"] = enforcement
        print(json.dumps(document, indent=2))  # noqa: T201
    else:
        for line in render_text(explanation, context, action, config.policy.authorizer):
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
    return 0 if explanation.result is AuthorizationResult.ALLOWED else 1
