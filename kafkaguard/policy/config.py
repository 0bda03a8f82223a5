"""The ``authorizer:`` and ``acl_store:`` config sections, and the factories they drive.

Kafka's settings keep Kafka's syntax (``super_users`` is ``super.users``: ``;``-separated
``Type:name``), so values can be copied from ``server.properties``. Everything beyond Kafka
sits under ``authorizer.extensions`` and is off unless configured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kafkaguard.config_tree import ConfigError, ConfigSection, attempt
from kafkaguard.policy.audit_log import DecisionEvent
from kafkaguard.policy.authorizer import Authorizer, load_authorizer
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.policy.stores.base import AclStore, MemoryAclStore
from kafkaguard.topic_table import DEFAULT_DELETE_RETENTION_MS

if TYPE_CHECKING:
    from kafkaguard.topic_table import TopicSettings

DEFAULT_AUTHORIZER_CLASS = "kafkaguard.policy.standard:StandardAuthorizer"
OPA_AUTHORIZER_CLASS = "kafkaguard.policy.opa:OpaAuthorizer"
STORE_TYPES = ("file", "memory", "zookeeper", "kafka")


def parse_super_users(value: str) -> frozenset[str]:
    """``StandardAuthorizer.getConfiguredSuperUsers``: split on ``;``, trim, skip empties.

    Each entry must parse as ``Type:name`` (Kafka fails ``configure`` otherwise); the trimmed
    strings are kept and compared with ``principal.toString()``, case-sensitively.
    """
    users = []
    for raw in value.split(";"):
        text = raw.strip()
        if not text:
            continue
        KafkaPrincipal.parse(text)  # raises ValueError naming the bad entry
        users.append(text)
    return frozenset(users)


@dataclass(frozen=True, slots=True)
class ListenerPolicy:
    """Extension: per-listener replacements (not additions) for the two Kafka settings."""

    super_users: frozenset[str] | None = None
    allow_everyone_if_no_acl_found: bool | None = None


@dataclass(frozen=True, slots=True)
class PolicyInForce:
    """The two settings in force on one listener, and the configuration key each came from
    (the listener's ``authorizer.extensions.listeners`` entry replaces the top-level value
    when it sets one). The authorizer decides with it; doctor and explain report it."""

    super_users: frozenset[str]
    super_users_key: str
    allow_everyone_if_no_acl_found: bool
    allow_everyone_key: str


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    """Extension ``authorizer.extensions.groups``: where a connection's ``Group:`` principals
    come from (kafkaguard/policy/groups.py); all three optional and combinable."""

    file: Path | None = None
    """A file mapping principals to groups, reloaded when it changes and on SIGHUP."""
    oauthbearer_claim: str | None = None
    """The validated token's claim naming the groups (dots descend: ``realm_access.roles``)."""
    ssl_mapping_rules: str | None = None
    """``ssl.principal.mapping.rules`` over the certificate's DN, each match one group."""

    @property
    def configured(self) -> bool:
        return bool(self.file or self.oauthbearer_claim or self.ssl_mapping_rules)


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    class_path: str = DEFAULT_AUTHORIZER_CLASS
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    host_cidr: bool = False
    """Extension: ACL hosts like ``10.0.0.0/8`` match by network (Kafka: string equality)."""
    listeners: Mapping[str, ListenerPolicy] = field(default_factory=lambda: MappingProxyType({}))
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Free-form ``authorizer.options`` for a pluggable authorizer class."""
    internal_topic_principals: frozenset[str] = frozenset()
    """``internal_topics.principals``: who may still touch the proxy's internal topics
    (kafkaguard/policy/internal_topics.py); nobody by default, super users included."""
    groups: GroupsConfig = GroupsConfig()
    """Extension: the group principals of a connection (issue 37)."""

    def in_force(self, listener: str) -> PolicyInForce:
        """The super users and ``allow_everyone_if_no_acl_found`` on ``listener``."""
        override = self.listeners.get(listener)
        own = f"authorizer.extensions.listeners.{listener}."
        users, users_key = self.super_users, "authorizer.super_users"
        if override is not None and override.super_users is not None:
            users, users_key = override.super_users, own + "super_users"
        allow, allow_key = (
            self.allow_everyone_if_no_acl_found,
            "authorizer.allow_everyone_if_no_acl_found",
        )
        if override is not None and override.allow_everyone_if_no_acl_found is not None:
            allow, allow_key = (
                override.allow_everyone_if_no_acl_found,
                own + "allow_everyone_if_no_acl_found",
            )
        return PolicyInForce(users, users_key, allow, allow_key)


@dataclass(frozen=True, slots=True)
class AclStoreConfig:
    type: str = "file"
    path: Path | None = None
    poll_interval_s: float = 1.0
    # type: zookeeper (issue 6) -- Kafka's zookeeper.connect, chroot, digest auth, session
    connect: str | None = None
    chroot: str = ""
    digest_auth_file: Path | None = None
    session_timeout_s: float = 18.0
    # type: kafka (issue 26) -- a compacted topic on the protected cluster (docs/acl-store.md)
    topic: str = "_kafkaguard-acls"
    replication_factor: int = -1
    """-1: min(3, brokers)."""
    min_insync_replicas: int = -1
    """-1: min(2, replication factor)."""
    topic_configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    write_timeout_ms: int = 10_000
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    """``delete.retention.ms`` at creation, and the least an existing topic may have."""
    max_lag_s: float = 60.0
    """Not ready when the store last read to the end longer ago (0: never)."""
    reread_interval_s: float = 0.0
    """Re-read the topic from the beginning this often as well (0: after gaps only)."""


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    acl_store: AclStoreConfig = field(default_factory=lambda: AclStoreConfig(type="memory"))


def _super_users(section: ConfigSection, key: str) -> frozenset[str] | None:
    value = section.raw(key)
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ";".join(value)
    if not isinstance(value, str):
        raise section.error(
            key, f"must be a string like 'User:admin;User:ops' or a list, got {value!r}"
        )
    try:
        return parse_super_users(value)
    except ValueError as exc:
        raise section.error(key, str(exc)) from exc


def parse_authorizer_config(section: ConfigSection) -> AuthorizerConfig:
    """Parse the ``authorizer:`` section; unknown keys are errors naming file:line."""
    class_path = section.get_str("class", DEFAULT_AUTHORIZER_CLASS)
    if ":" not in class_path:
        raise section.error("class", f"must look like 'package.module:Class', got {class_path!r}")
    super_users = _super_users(section, "super_users") or frozenset()
    allow_everyone = section.get_bool("allow_everyone_if_no_acl_found", False)
    options = section.raw("options", {}) or {}
    if not isinstance(options, dict):
        raise section.error("options", f"must be a mapping, got {options!r}")
    if class_path == OPA_AUTHORIZER_CLASS:  # its options are checked here, with file:line
        options = _opa_options(section, options)
    internal = section.section("internal_topics")
    internal_principals = _super_users(internal, "principals") or frozenset()
    internal.reject_unknown()
    ext = section.section("extensions")
    host_cidr = ext.get_bool("host_cidr", False)
    listeners_section = ext.section("listeners")
    listeners: dict[str, ListenerPolicy] = {}
    for name in list(listeners_section.keys()):
        sub = listeners_section.section(name)
        listeners[name] = ListenerPolicy(
            super_users=_super_users(sub, "super_users"),
            allow_everyone_if_no_acl_found=sub.get_bool("allow_everyone_if_no_acl_found", None),
        )
        sub.reject_unknown()
    listeners_section.reject_unknown()
    groups = _groups(ext.section("groups"))
    ext.reject_unknown()
    section.reject_unknown()
    return AuthorizerConfig(
        class_path=class_path,
        super_users=super_users,
        allow_everyone_if_no_acl_found=allow_everyone,
        host_cidr=host_cidr,
        listeners=MappingProxyType(listeners),
        options=MappingProxyType(options),
        internal_topic_principals=internal_principals,
        groups=groups,
    )


def _opa_options(section: ConfigSection, options: dict[str, Any]) -> dict[str, Any]:
    """The OPA authorizer's options checked (kafkaguard/policy/opa.py), its ``mode: wasm``
    bundle made relative to the config file's directory, read and instantiated: an unknown
    ``entrypoint`` or a policy needing builtins is refused here, with ``file:line``, as the
    authorizer's start would refuse it (``check-config`` passes no bundle ``run`` refuses)."""
    from kafkaguard.policy.opa import OpaOptions
    from kafkaguard.policy.opa_wasm import WasmBundle, WasmPolicy, WasmPolicyError

    try:
        parsed = OpaOptions.parse(options, frozenset())
        if parsed.bundle is not None:
            bundle = _relative_to(section, Path(parsed.bundle))
            WasmPolicy(WasmBundle.read(bundle), parsed.entrypoint)
            options = {**options, "bundle": str(bundle)}
    except WasmPolicyError as exc:
        raise section.error("options", f"bundle: {exc}") from exc
    except ValueError as exc:
        raise section.error("options", str(exc)) from exc
    return options


def _groups(section: ConfigSection) -> GroupsConfig:
    """``extensions.groups``: ``file`` (relative to the config file's directory, read and
    checked here), ``oauthbearer_claim``, ``ssl_mapping_rules`` (parsed here)."""
    from kafkaguard.policy.groups import GroupsError, GroupsFile, SslGroupMapper

    raw_file = section.get_str("file", None)
    claim = section.get_str("oauthbearer_claim", None)
    rules = section.get_str("ssl_mapping_rules", None)
    section.reject_unknown()
    path: Path | None = None
    if raw_file:
        path = _relative_to(section, Path(raw_file))
        try:
            GroupsFile(path).load()
        except GroupsError as exc:
            raise section.error("file", str(exc)) from exc
    if claim is not None and (not claim.strip() or "" in claim.split(".")):
        raise section.error(
            "oauthbearer_claim", f"must be a claim name or dotted path, got {claim!r}"
        )
    if rules is not None:
        try:
            SslGroupMapper.parse(rules)
        except ValueError as exc:
            raise section.error("ssl_mapping_rules", str(exc)) from exc
    return GroupsConfig(file=path, oauthbearer_claim=claim or None, ssl_mapping_rules=rules)


def _relative_to(section: ConfigSection, path: Path) -> Path:
    """A relative path is relative to the config file's directory (not for in-memory text)."""
    if not path.is_absolute() and not section.file.startswith("<"):
        return Path(section.file).resolve().parent / path
    return path


def parse_acl_store_config(section: ConfigSection) -> AclStoreConfig:
    """Parse ``acl_store:``; a relative ``path`` is relative to the config file's directory."""
    kind = section.choice("type", STORE_TYPES, "file")
    raw_path = section.get_str("path", None)
    poll = section.get_float("poll_interval_s", 1.0)
    if poll < 0:
        raise section.error("poll_interval_s", f"must be >= 0 (0 disables polling), got {poll}")
    zk = _zookeeper_options(section, kind)
    kafka = _kafka_options(section, kind)
    section.reject_unknown()
    path: Path | None = None
    if kind == "file":
        if not raw_path:
            raise section.error("path", "is required for a file store")
        path = _relative_to(section, Path(raw_path))
    return AclStoreConfig(type=kind, path=path, poll_interval_s=poll, **zk, **kafka)


def _kafka_options(section: ConfigSection, kind: str) -> dict[str, Any]:
    """``type: kafka`` keys: ``topic``, ``replication_factor``, ``min_insync_replicas``,
    ``topic_configs`` (more configs of a topic the proxy creates), ``write_timeout_ms``,
    ``delete_retention_ms``, ``max_lag_s``, ``reread_interval_s`` (docs/acl-store.md)."""
    topic = section.get_str("topic", "_kafkaguard-acls") or ""
    replication = section.get_int("replication_factor", -1)
    min_isr = section.get_int("min_insync_replicas", -1)
    raw_configs = section.raw("topic_configs", {}) or {}
    write_timeout = section.get_int("write_timeout_ms", 10_000)
    retention = section.get_int("delete_retention_ms", DEFAULT_DELETE_RETENTION_MS, minimum=0)
    max_lag = section.get_float("max_lag_s", 60.0)
    reread = section.get_float("reread_interval_s", 0.0)
    if kind != "kafka":
        return {}
    if not topic or len(topic) > 249 or not all(c.isalnum() or c in "._-" for c in topic):
        raise section.error(
            "topic", f"must be a Kafka topic name ([a-zA-Z0-9._-], 1-249), got {topic!r}"
        )
    if replication == 0 or replication < -1:
        raise section.error(
            "replication_factor", f"must be >= 1 (or -1: min(3, brokers)), got {replication}"
        )
    if min_isr == 0 or min_isr < -1:
        raise section.error(
            "min_insync_replicas", f"must be >= 1 (or -1: min(2, replication)), got {min_isr}"
        )
    if replication > 0 and min_isr > replication:
        raise section.error(
            "min_insync_replicas",
            f"must not exceed replication_factor ({replication}), got {min_isr}",
        )
    if not isinstance(raw_configs, dict) or not all(isinstance(k, str) for k in raw_configs):
        raise section.error("topic_configs", "must map topic config names to values")
    if write_timeout < 1:
        raise section.error("write_timeout_ms", f"must be >= 1, got {write_timeout}")
    if max_lag < 0 or reread < 0:
        key, value = ("max_lag_s", max_lag) if max_lag < 0 else ("reread_interval_s", reread)
        raise section.error(key, f"must be >= 0, got {value}")
    return {
        "topic": topic,
        "replication_factor": replication,
        "min_insync_replicas": min_isr,
        "topic_configs": MappingProxyType({k: str(v) for k, v in raw_configs.items()}),
        "write_timeout_ms": write_timeout,
        "delete_retention_ms": retention,
        "max_lag_s": max_lag,
        "reread_interval_s": reread,
    }


def _zookeeper_options(section: ConfigSection, kind: str) -> dict[str, Any]:
    """``type: zookeeper`` keys: ``connect`` (required), ``chroot``, ``digest_auth_file``,
    ``session_timeout_s``; a relative ``digest_auth_file`` is relative to the config file."""
    connect = section.get_str("connect", None)
    chroot = section.get_str("chroot", "") or ""
    raw_auth = section.get_str("digest_auth_file", None)
    timeout = section.get_float("session_timeout_s", 18.0)
    if kind != "zookeeper":
        return {}
    if not connect:
        raise section.error("connect", "is required for a zookeeper store (host:port[,...])")
    if chroot and not chroot.startswith("/"):
        raise section.error("chroot", f"must start with '/', got {chroot!r}")
    if "/" in connect and chroot:
        raise section.error("chroot", "the connect string already has a chroot")
    if timeout <= 0:
        raise section.error("session_timeout_s", f"must be > 0, got {timeout}")
    auth: Path | None = None
    if raw_auth:
        auth = _relative_to(section, Path(raw_auth))
    return {
        "connect": connect,
        "chroot": chroot,
        "digest_auth_file": auth,
        "session_timeout_s": timeout,
    }


def parse_policy_config(root: ConfigSection) -> PolicyConfig:
    """Both sections from the top of the proxy config; without ``acl_store`` ACLs are in memory."""
    authorizer_section = root.section("authorizer")
    store_section = root.section("acl_store") if "acl_store" in root else None
    # Both sections are taken before either is parsed: when check-config goes on after an
    # error in one (config_tree.collecting), the other is still a key the top level knows.
    authorizer = attempt(lambda: parse_authorizer_config(authorizer_section), AuthorizerConfig())
    memory = AclStoreConfig(type="memory")
    store = (
        memory
        if store_section is None
        else attempt(lambda: parse_acl_store_config(store_section), memory)
    )
    return PolicyConfig(authorizer=authorizer, acl_store=store)


def build_store(cfg: AclStoreConfig, connection: Mapping[str, Any] | None = None) -> AclStore:
    """The seam for more store types. ``connection``: librdkafka settings reaching the
    protected cluster (the proxy's upstream), which a ``kafka`` store needs."""
    if cfg.type == "memory":
        return MemoryAclStore()
    if cfg.type == "file":
        from kafkaguard.policy.stores.file import FileAclStore

        if cfg.path is None:
            raise ConfigError("acl_store.path is required for a file store")
        return FileAclStore(cfg.path, poll_interval_s=cfg.poll_interval_s)
    if cfg.type == "zookeeper":
        from kafkaguard.policy.stores.zookeeper import ZooKeeperAclStore

        if not cfg.connect:
            raise ConfigError("acl_store.connect is required for a zookeeper store")
        return ZooKeeperAclStore(
            cfg.connect,
            chroot=cfg.chroot,
            digest_auth_file=cfg.digest_auth_file,
            session_timeout_s=cfg.session_timeout_s,
        )
    if cfg.type == "kafka":
        from kafkaguard.policy.stores.kafka_topic import KafkaTopicAclStore

        if connection is None:
            raise ConfigError("acl_store.type kafka needs the upstream connection settings")
        return KafkaTopicAclStore(connection, kafka_topic_settings(cfg))
    raise ConfigError(f"unknown acl_store.type {cfg.type!r}")


def kafka_topic_settings(cfg: AclStoreConfig) -> TopicSettings:
    """The topic of a ``kafka`` store."""
    from kafkaguard.topic_table import TopicSettings

    return TopicSettings(
        cfg.topic,
        cfg.replication_factor,
        cfg.min_insync_replicas,
        dict(cfg.topic_configs),
        cfg.write_timeout_ms,
        delete_retention_ms=cfg.delete_retention_ms,
        max_lag_s=cfg.max_lag_s,
        reread_interval_s=cfg.reread_interval_s,
    )


def build_authorizer(
    cfg: PolicyConfig,
    *,
    store: AclStore | None = None,
    decision_listener: Callable[[DecisionEvent], None] | None = None,
    connection: Mapping[str, Any] | None = None,
) -> Authorizer:
    """Instantiate ``authorizer.class`` as ``Class(config, store, decision_listener=...)``.

    A pluggable class receives the same arguments as :class:`StandardAuthorizer`; it may
    ignore the store. Its ``start()`` must load (or start) the store it was given.
    """
    if store is None:
        store = build_store(cfg.acl_store, connection)
    return load_authorizer(
        cfg.authorizer.class_path, cfg.authorizer, store, decision_listener=decision_listener
    )
