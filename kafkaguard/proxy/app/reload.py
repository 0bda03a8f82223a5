"""Configuration reload without a restart (issue 14): what a new configuration changes, which
of it the running proxy applies and which needs a restart.

A reload is asked with SIGHUP, or with ``kafkaguard reload --config F`` (which checks ``F`` as
``check-config`` does, then sends SIGHUP to the process named by ``--pid`` or ``--pid-file``;
``kafkaguard run --pid-file P`` writes it). The process then re-reads the ACL store, as SIGHUP
always did, and the configuration file it was started with. :meth:`ProxyServer.reload_config
<kafkaguard.proxy.app.server.ProxyServer.reload_config>` parses and validates the whole file first
(``load_config``: the same checks and the same error as ``check-config``); an invalid file is
rejected, logged and counted (``kafkaguard_config_reloads_total{result="rejected"}``), and the
running configuration stays. Otherwise :func:`plan_reload` compares it with the running one,
setting by setting, and the server applies the plan at once, between two events of the loop,
so no request is handled under half of it.

Applied (each setting named as in the file):

* ``authorizer.super_users``, ``authorizer.allow_everyone_if_no_acl_found``,
  ``authorizer.extensions.listeners``, ``authorizer.extensions.host_cidr``,
  ``authorizer.internal_topics.principals``: from the next
  decision, on every connection (as an ACL change is: Kafka authorizes every request).
* ``enforcement``, ``listeners[N].enforcement``: from the next decision, on every connection.
* ``limits.*`` and ``listeners[N].limits.*`` (not the two authentication pool settings): the
  connection quotas at the next accept, and everything else for connections accepted from then
  on; open connections keep their frame size, in-flight and idle settings.
* ``logging.level``, ``logging.format``; ``shutdown_timeout_ms``.
* Listeners added (opened, then accepting) or removed (drained for up to
  ``shutdown_timeout_ms``, as at shutdown, then closed). Connections on other listeners stay.
  A listener is known by its name. An added listener cannot take the port of one removed in
  the same reload (that one still holds it while draining): the reload is rejected; remove
  it in one reload and add the new one in the next.

Not applied: a WARNING per reload names each changed setting below; it keeps its running value
until a restart. ``upstream.*``; a listener's ``security_protocol``, ``bind_host``, ``port``,
``advertised_host``, ``broker_ports``, ``ssl`` and ``sasl`` sections (or rename it, on
another port: it is removed and added); ``admin``, ``metrics``, ``audit``, ``acl_store``,
``workers``;
``authorizer.class``, ``authorizer.options`` (except the options a pluggable authorizer names
in its ``reloadable_options``, such as the OPA authorizer's ``super_users``: applied as
``authorizer.options.<name>``) and ``authorizer.extensions.groups`` (the groups file's contents
need no reload); ``limits.authentication_threads`` and
``limits.authentication_queue_size``. Certificate, key and CA files, and SASL credential
files, need no reload: they are re-read when they change (kafkaguard/certs/tls.py,
kafkaguard/proxy/sasl/credentials.py).

This module does no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final

from kafkaguard.policy.config import PolicyConfig
from kafkaguard.proxy.config import LimitsConfig, ListenerConfig, ProxyConfig, UpstreamConfig

PROCESS_LIMITS: Final = ("authentication_threads", "authentication_queue_size")
"""Limits of the process-wide SASL hashing pool (``executor_for``): fixed until a restart."""
_LISTENER_RELOADABLE: Final = ("name", "enforcement", "limits")
"""ListenerConfig fields a kept listener takes from the new file (the name identifies it)."""
_AUTHORIZER_KEYS: Final = {
    "class_path": "class",
    "host_cidr": "extensions.host_cidr",
    "listeners": "extensions.listeners",
    "internal_topic_principals": "internal_topics.principals",
    "groups": "extensions.groups",
}
"""AuthorizerConfig fields whose file key differs from the field name."""
_AUTHORIZER_FIXED: Final = (
    "authorizer.class",
    "authorizer.options",
    "authorizer.extensions.groups",
)
"""They choose and configure the authorizer itself, or the group sources every listener
authenticates with (the groups file itself is re-read when it changes): a restart."""
_APPLIED_SETTINGS: Final = {
    "log_level": "logging.level",
    "log_format": "logging.format",
    "shutdown_timeout_ms": "shutdown_timeout_ms",
    "enforcement": "enforcement",
}
"""Top-level ProxyConfig fields applied as they are, and their file keys."""


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload does: the configuration to run with, and what changed."""

    config: ProxyConfig
    """New values of the reloadable settings, running values of the others: the proxy's
    configuration once the plan is applied (and what the next reload compares with)."""
    applied: tuple[str, ...]
    """Changed settings the running proxy takes on."""
    restart_needed: tuple[str, ...]
    """Changed settings kept at their running value until a restart."""
    added: tuple[ListenerConfig, ...]
    removed: tuple[str, ...]
    """Names of the listeners to drain and close."""


def _changed(old: Any, new: Any, prefix: str, keys: Mapping[str, str] | None = None) -> list[str]:
    """The file keys (``prefix`` + field) of the dataclass fields that differ."""
    names = keys or {}
    return [
        f"{prefix}{names.get(f.name, f.name)}"
        for f in dataclasses.fields(old)
        if getattr(old, f.name) != getattr(new, f.name)
    ]


def _section_changed(old: Any, new: Any, prefix: str) -> list[str]:
    """An optional section (None when absent): named whole when added or removed."""
    if old is None or new is None:
        return [] if old is new else [prefix]
    return _changed(old, new, f"{prefix}.")


def _limits(running: LimitsConfig, new: LimitsConfig) -> tuple[LimitsConfig, list[str], list[str]]:
    """Top-level ``limits:``: (limits to run with, applied, restart needed)."""
    changed = _changed(running, new, "limits.")
    fixed = [f"limits.{key}" for key in PROCESS_LIMITS]
    kept = {key: getattr(running, key) for key in PROCESS_LIMITS}
    return (
        replace(new, **kept),
        [name for name in changed if name not in fixed],
        [name for name in changed if name in fixed],
    )


def _kept_listener(
    running: ProxyConfig, new: ProxyConfig, old: ListenerConfig, changed: ListenerConfig
) -> tuple[ListenerConfig, list[str], list[str]]:
    """A listener in both files: (its config to run with, applied, restart needed)."""
    prefix = f"listeners[{old.name}]."
    restart = [
        name
        for name in _changed(old, changed, prefix)
        if name[len(prefix) :] not in _LISTENER_RELOADABLE
    ]
    applied = [f"{prefix}enforcement"] if old.enforcement != changed.enforcement else []
    # Effective limits: a top-level change is named once, as limits.<key>.
    top = set(_changed(running.limits, new.limits, ""))
    applied += [
        f"{prefix}limits.{key}"
        for key in _changed(running.listener_limits(old), new.listener_limits(changed), "")
        if key not in top and key not in PROCESS_LIMITS
    ]
    return replace(old, enforcement=changed.enforcement, limits=changed.limits), applied, restart


def _listeners(
    running: ProxyConfig, new: ProxyConfig
) -> tuple[tuple[ListenerConfig, ...], list[str], list[str], list[ListenerConfig], list[str]]:
    """(listeners to run with, in the new file's order; applied; restart needed; added;
    removed names)."""
    before = {ls.name: ls for ls in running.listeners}
    after = {ls.name for ls in new.listeners}
    listeners: list[ListenerConfig] = []
    applied: list[str] = []
    restart: list[str] = []
    added: list[ListenerConfig] = []
    for listener in new.listeners:
        old = before.get(listener.name)
        if old is None:
            added.append(listener)
            applied.append(f"listeners[{listener.name}] (added)")
            listeners.append(listener)
            continue
        kept, now, later = _kept_listener(running, new, old, listener)
        listeners.append(kept)
        applied += now
        restart += later
    removed = [name for name in before if name not in after]
    applied += [f"listeners[{name}] (removed)" for name in removed]
    return tuple(listeners), applied, restart, added, removed


def _options(
    running: Mapping[str, Any], new: Mapping[str, Any], reloadable: frozenset[str]
) -> tuple[Mapping[str, Any], list[str], bool]:
    """``authorizer.options``: (options to run with: the running ones with the ``reloadable``
    keys as the new file has them; the reloadable options that changed; whether any other
    did)."""
    changed = {key for key in {*running, *new} if running.get(key) != new.get(key)}
    kept = {key: value for key, value in running.items() if key not in reloadable}
    kept.update((key, value) for key, value in new.items() if key in reloadable)
    applied = [f"authorizer.options.{key}" for key in sorted(changed & reloadable)]
    return MappingProxyType(kept), applied, bool(changed - reloadable)


def _policy(
    running: PolicyConfig,
    new: PolicyConfig,
    *,
    reconfigurable: bool,
    reloadable_options: frozenset[str],
) -> tuple[PolicyConfig, list[str], list[str]]:
    """``authorizer:`` and ``acl_store:``: (policy to run with, applied, restart needed)."""
    old_authorizer, new_authorizer = running.authorizer, new.authorizer
    changed = _changed(old_authorizer, new_authorizer, "authorizer.", _AUTHORIZER_KEYS)
    restart = _changed(running.acl_store, new.acl_store, "acl_store.")
    if not reconfigurable:  # a pluggable authorizer without reconfigure()
        return running, [], changed + restart
    options, applied, others = _options(
        old_authorizer.options, new_authorizer.options, reloadable_options
    )
    authorizer = replace(
        new_authorizer,
        class_path=old_authorizer.class_path,
        options=options,
        groups=old_authorizer.groups,
    )
    fixed = [name for name in changed if name in _AUTHORIZER_FIXED]
    if not others and "authorizer.options" in fixed:  # only reloadable options changed
        fixed.remove("authorizer.options")
    applied = [name for name in changed if name not in _AUTHORIZER_FIXED] + applied
    return PolicyConfig(authorizer, running.acl_store), applied, fixed + restart


def _upstream(
    running: UpstreamConfig, new: UpstreamConfig, *, embedded: bool
) -> tuple[UpstreamConfig, list[str]]:
    """``upstream:`` is never reloaded: (the running one, the settings that changed)."""
    if embedded and new.embedded:  # still the embedded broker of kafkaguard demo
        new = replace(new, bootstrap_servers=running.bootstrap_servers)
    changed = _changed(running, new, "upstream.")
    return running, changed


def _settings(running: ProxyConfig, new: ProxyConfig) -> tuple[list[str], list[str]]:
    """The top-level settings outside listeners, limits, policy and upstream: (applied,
    restart needed)."""
    applied = [
        key
        for field, key in _APPLIED_SETTINGS.items()
        if getattr(running, field) != getattr(new, field)
    ]
    restart = _section_changed(running.admin, new.admin, "admin")
    restart += _changed(running.metrics, new.metrics, "metrics.")
    restart += _changed(running.audit, new.audit, "audit.")
    restart += ["workers"] if running.workers != new.workers else []
    return applied, restart


def plan_reload(
    running: ProxyConfig,
    new: ProxyConfig,
    *,
    reconfigurable_authorizer: bool = True,
    reloadable_options: frozenset[str] = frozenset(),
    embedded_upstream: bool = False,
) -> ReloadPlan:
    """Compare the running configuration with a new, valid one.

    ``reconfigurable_authorizer``: the authorizer can take a new ``authorizer:`` section
    (``StandardAuthorizer.reconfigure``); ``reloadable_options``: the ``authorizer.options``
    its ``reconfigure`` applies (the authorizer's ``reloadable_options``, e.g. the OPA
    authorizer's ``super_users``; the others need a restart); ``embedded_upstream``: the
    proxy runs in front of the embedded broker of ``kafkaguard demo``
    (``upstream.embedded: true``)."""
    upstream, restart = _upstream(running.upstream, new.upstream, embedded=embedded_upstream)
    limits, applied, later = _limits(running.limits, new.limits)
    restart += later
    # The listeners' effective limits fall back to the top-level limits being run with.
    merged = replace(new, limits=limits)
    listeners, now, later, added, removed = _listeners(running, merged)
    applied += now
    restart += later
    policy, now, later = _policy(
        running.policy,
        new.policy,
        reconfigurable=reconfigurable_authorizer,
        reloadable_options=reloadable_options,
    )
    applied += now
    restart += later
    now, later = _settings(running, new)
    applied += now
    restart += later
    config = replace(
        merged,
        listeners=listeners,
        upstream=upstream,
        policy=policy,
        admin=running.admin,
        metrics=running.metrics,
        audit=running.audit,
        workers=running.workers,
    )
    return ReloadPlan(config, tuple(applied), tuple(restart), tuple(added), tuple(removed))


def describe(names: Sequence[str]) -> str:
    """``a, b and c`` for a log line."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


__all__ = ["PROCESS_LIMITS", "ReloadPlan", "describe", "plan_reload"]
