"""``kafkaguard doctor``'s output: the checklist an operator reads, and the ``--json``
document automation reads (its shape is documented in docs/doctor.md; :data:`FORMAT_VERSION`
changes when a field is removed or changes meaning). Both are built from the same facts and
findings, no I/O."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any, Final

from kafkaguard.cli.doctor.checks import (
    Finding,
    Section,
    Status,
    advertised,
    exit_code,
)
from kafkaguard.cli.doctor.facts import Facts
from kafkaguard.proxy.config import HostPort, ListenerConfig, ProxyConfig

FORMAT_VERSION: Final = 1

_MARK: Final = {Status.PASS: "[ ok ]", Status.FAIL: "[FAIL]", Status.WARN: "[WARN]"}

BROKERS_MUST_BE_UNREACHABLE: Final = (
    "Clients must not be able to reach any of these addresses, only the proxy: a client "
    "that connects to a broker directly bypasses every ACL (block them with security groups, "
    "a NetworkPolicy or a firewall)."
)


def _line(finding: Finding) -> str:
    subject = f"{finding.subject}: " if finding.subject else ""
    return f"  {_MARK[finding.status]} {subject}{finding.message}"


def _section(findings: list[Finding], section: Section) -> Iterator[str]:
    yield from (_line(f) for f in findings if f.section is section)


def render_text(facts: Facts, findings: list[Finding], *, allow_warnings: bool) -> list[str]:
    """The checklist: each section's facts, then its findings, then the verdict."""
    lines = [f"kafkaguard doctor: {facts.config_path}", "", "Configuration"]
    lines += _section(findings, Section.CONFIGURATION)
    config = facts.config
    if config is not None:
        lines += ["", f"Upstream ({_upstream_security(config)})"]
        lines += _section(findings, Section.UPSTREAM)
        lines += ["", "Broker addresses the cluster advertises"]
        lines += [f"  node {b.node_id}: {b.address}" for b in facts.brokers()]
        lines += textwrap.wrap(
            BROKERS_MUST_BE_UNREACHABLE, 98, initial_indent="  ", subsequent_indent="  "
        )
        lines += _section(findings, Section.BROKERS)
        lines += ["", "Listeners (what the proxy advertises to clients)"]
        for listener in config.listeners:
            lines += _listener_lines(config, listener, facts)
        lines += _section(findings, Section.LISTENERS)
        lines += ["", "ACL store and authorizer"]
        lines += _section(findings, Section.ACL_STORE)
        authorizer = config.policy.authorizer
        lines.append(f"  authorizer: {authorizer.class_path}")
        lines.append(f"  super users: {_users(authorizer.super_users)} (authorizer.super_users)")
        lines.append(
            "  allow_everyone_if_no_acl_found: "
            f"{_bool(authorizer.allow_everyone_if_no_acl_found)} (top level; per listener above)"
        )
        lines += _section(findings, Section.AUTHORIZER)
    lines += ["", _verdict(findings, allow_warnings=allow_warnings)]
    return lines


def _verdict(findings: list[Finding], *, allow_warnings: bool) -> str:
    failed = sum(f.status is Status.FAIL for f in findings)
    warned = sum(f.status is Status.WARN for f in findings)
    code = exit_code(findings, allow_warnings=allow_warnings)
    if not failed and not warned:
        return "Result: nothing wrong found; exit 0"
    text = f"Result: {failed} failed, {warned} warning{'' if warned == 1 else 's'}"
    if warned and not failed:
        text += (
            " (allowed by --allow-warnings)"
            if allow_warnings
            else " (--allow-warnings exits 0 on warnings alone)"
        )
    return f"{text}; exit {code}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _users(users: frozenset[str]) -> str:
    return ", ".join(sorted(users)) if users else "none"


def _upstream_security(config: ProxyConfig) -> str:
    upstream = config.upstream
    tls = "TLS" if upstream.ssl is not None else "no TLS"
    sasl = (
        f"SASL {upstream.sasl.mechanism} as {upstream.sasl.username}"
        if upstream.sasl is not None
        else "no SASL"
    )
    return f"each bootstrap server asked as the proxy asks it: {tls}, {sasl}"


def _listener_lines(config: ProxyConfig, listener: ListenerConfig, facts: Facts) -> list[str]:
    view = advertised(listener, facts.brokers())
    policy = config.policy.authorizer.in_force(listener.name)
    sasl = (
        "SASL " + ", ".join(listener.sasl.enabled_mechanisms)
        if listener.sasl is not None
        else "no SASL"
    )
    tls = f"TLS (client_auth {listener.ssl.client_auth})" if listener.ssl is not None else "no TLS"
    lines = [
        f"  {listener.name}: {listener.security_protocol} on "
        f"{HostPort(listener.bind_host, listener.port)}, {tls}, {sasl}, "
        f"enforcement {config.listener_enforcement(listener)}",
        f"    bootstrap: {view.bootstrap}",
        f"    brokers: {view.rule}",
    ]
    lines += [
        f"    node {node}: {address if address is not None else 'no port (fail closed)'}"
        for node, address in view.nodes
    ]
    lines.append(f"    super users: {_users(policy.super_users)} ({policy.super_users_key})")
    lines.append(
        f"    allow_everyone_if_no_acl_found: {_bool(policy.allow_everyone_if_no_acl_found)} "
        f"({policy.allow_everyone_key})"
    )
    return lines


def report_json(facts: Facts, findings: list[Finding], *, allow_warnings: bool) -> dict[str, Any]:
    """The ``--json`` document (docs/doctor.md, "JSON output")."""
    config = facts.config
    return {
        "format_version": FORMAT_VERSION,
        "config": str(facts.config_path),
        "exit_code": exit_code(findings, allow_warnings=allow_warnings),
        "summary": {status.value: sum(f.status is status for f in findings) for status in Status},
        "findings": [
            {
                "section": f.section.value,
                "check": f.check,
                "status": f.status.value,
                "subject": f.subject,
                "message": f.message,
            }
            for f in findings
        ],
        "upstream": None if config is None else _upstream_json(facts),
        "listeners": None
        if config is None
        else [_listener_json(config, listener, facts) for listener in config.listeners],
        "acl_store": None if facts.store is None else _store_json(facts),
        "authorizer": None if config is None else _authorizer_json(config, facts),
    }


def _upstream_json(facts: Facts) -> dict[str, Any]:
    reached = {p.broker.node_id: p.error for p in facts.broker_probes}
    return {
        "error": facts.upstream_error,
        "bootstrap_servers": [
            {
                "address": str(p.address),
                "reachable": p.error is None,
                "error": p.error,
                "metadata_error": p.metadata_error,
                "brokers_listed": None if p.brokers is None else len(p.brokers),
            }
            for p in facts.bootstrap
        ],
        "brokers": [
            {
                "node_id": b.node_id,
                "address": str(b.address),
                "reachable": b.node_id in reached and reached[b.node_id] is None,
                "error": reached.get(b.node_id),
            }
            for b in facts.brokers()
        ],
    }


def _listener_json(config: ProxyConfig, listener: ListenerConfig, facts: Facts) -> dict[str, Any]:
    view = advertised(listener, facts.brokers())
    policy = config.policy.authorizer.in_force(listener.name)
    return {
        "name": listener.name,
        "security_protocol": listener.security_protocol,
        "bind": str(HostPort(listener.bind_host, listener.port)),
        "tls": listener.ssl is not None,
        "sasl_mechanisms": list(listener.sasl.enabled_mechanisms) if listener.sasl else [],
        "routing": "sni" if listener.sni is not None else "ports",
        "enforcement": config.listener_enforcement(listener),
        "advertised_bootstrap": str(view.bootstrap),
        "broker_addresses": view.rule,
        "advertised_brokers": [
            {"node_id": node, "address": None if address is None else str(address)}
            for node, address in view.nodes
        ],
        "super_users": sorted(policy.super_users),
        "allow_everyone_if_no_acl_found": policy.allow_everyone_if_no_acl_found,
    }


def _store_json(facts: Facts) -> dict[str, Any]:
    store = facts.store
    assert store is not None
    return {
        "type": store.kind,
        "source": store.source,
        "acl_count": store.count,
        "error": store.error,
        "note": store.note,
        "topic": None
        if store.topic is None
        else {
            "name": store.topic.name,
            "configs": dict(store.topic.settings),
            "error": store.topic.unsafe,
        },
    }


def _authorizer_json(config: ProxyConfig, facts: Facts) -> dict[str, Any]:
    authorizer = config.policy.authorizer
    opa = facts.opa
    return {
        "class": authorizer.class_path,
        "super_users": sorted(authorizer.super_users),
        "allow_everyone_if_no_acl_found": authorizer.allow_everyone_if_no_acl_found,
        "opa": None
        if opa is None
        else {
            "url": opa.url,
            "health_url": opa.health_url,
            # mode wasm: no server, no health asked; null, not a pass never checked
            "healthy": None if opa.health_url is None else opa.health_error is None,
            "health_error": opa.health_error,
            "decision": opa.decision,
            "decision_error": opa.decision_error,
            "allow_on_error": opa.allow_on_error,
        },
    }
