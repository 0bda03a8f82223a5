"""Replaying the window's decisions against an ACL set: the shared core of ``unused``/``whatif``.

Theory of operation: Spark reduces the window to its *distinct decision tuples* (principal,
its groups, client host, listener, security protocol, operation, resource, optionally the
recorded result, with summed counts) — few compared with events. Each tuple is then decided by
:func:`kafkaguard.policy.explain.explain` over a
:class:`~kafkaguard.policy.standard.StandardAuthorizer` holding the ACL set, i.e. the very code
the proxy authorizes with (no second matcher). That runs inside ``mapPartitions`` on the
executors, so it scales with the cluster; each Python worker builds the authorizer once per
ACL set (broadcast) and reuses it for every partition it processes. kafkaguard must therefore
be installed on the executors (``pip install kafkaguard[analytics]`` or ``--py-files``); in
local mode they run the driver's interpreter.

Replay covers what was audited: decisions Kafka logs (``log_if_allowed``/``log_if_denied``),
not KIP-430 probes or silent list filtering, unless the proxy ran with
``audit.include_unlogged``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kafkaguard.config_tree import ConfigSection
from kafkaguard.policy.authorizer import Action, SecurityProtocol
from kafkaguard.policy.config import (
    DEFAULT_AUTHORIZER_CLASS,
    AuthorizerConfig,
    ListenerPolicy,
    parse_policy_config,
)
from kafkaguard.policy.explain import acl_text, decision_context, explain
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.standard import StandardAuthorizer
from kafkaguard.policy.stores.acl_file_format import sort_key
from kafkaguard.policy.stores.base import Snapshot
from kafkaguard.policy.stores.file import read_acl_file

TUPLE_KEYS = (
    "principal",
    "client_host",
    "listener",
    "security_protocol",
    "operation",
    "resource_type",
    "resource_name",
)
GROUPS = "groups"
"""The tuples' key beside :data:`TUPLE_KEYS`: the connection's groups (none in a version 1
record), which a replayed decision holds as the proxy's did (a ``Group:`` ACL applies to a
member)."""


def decision_tuples(events: DataFrame, *, with_result: bool) -> DataFrame:
    """Distinct decisions with summed ``count`` (and the recorded ``result`` if asked)."""
    keys = [*TUPLE_KEYS, GROUPS, "result"] if with_result else [*TUPLE_KEYS, GROUPS]
    return events.groupBy(*keys).agg(F.sum("count").alias("count"))


@dataclass(frozen=True, slots=True)
class AuthorizerSpec:
    """The authorizer settings, in a form that pickles (``AuthorizerConfig`` holds mapping
    proxies, which do not) so executors can rebuild the same authorizer."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    host_cidr: bool = False
    listeners: tuple[tuple[str, frozenset[str] | None, bool | None], ...] = ()

    @classmethod
    def of(cls, config: AuthorizerConfig) -> AuthorizerSpec:
        if config.class_path != DEFAULT_AUTHORIZER_CLASS:
            raise ValueError(
                f"authorizer.class is {config.class_path}: replay implements the "
                "StandardAuthorizer's semantics only"
            )
        return cls(
            config.super_users,
            config.allow_everyone_if_no_acl_found,
            config.host_cidr,
            tuple(
                (name, p.super_users, p.allow_everyone_if_no_acl_found)
                for name, p in sorted(config.listeners.items())
            ),
        )

    def config(self) -> AuthorizerConfig:
        from types import MappingProxyType

        return AuthorizerConfig(
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
            host_cidr=self.host_cidr,
            listeners=MappingProxyType({n: ListenerPolicy(s, a) for n, s, a in self.listeners}),
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """An ACL set in a fixed order (results refer to ACLs by position) plus the settings."""

    acls: tuple[AclBinding, ...]
    spec: AuthorizerSpec
    source: str

    @classmethod
    def of(cls, acls: Iterable[AclBinding], spec: AuthorizerSpec, source: str) -> Policy:
        return cls(tuple(sorted(acls, key=sort_key)), spec, source)


def load_policy(acl_file: str | None, config_file: str | None) -> Policy:
    """ACLs from ``acl_file``, else from the store ``config_file`` configures (file or
    ZooKeeper, read as ``kafkaguard acls`` reads it); settings from ``config_file``.

    Raises:
        ValueError: neither is given, or the configured store cannot be read offline.
        ConfigError, AclStoreError: as the proxy would report them.
    """
    if acl_file is None and config_file is None:
        raise ValueError("give --acls <ACL file> or --config <proxy config>")
    authorizer = AuthorizerConfig()
    store = None
    if config_file is not None:
        policy = parse_policy_config(ConfigSection.from_file(Path(config_file)))
        authorizer, store = policy.authorizer, policy.acl_store
    spec = AuthorizerSpec.of(authorizer)
    if acl_file is not None:
        return Policy.of(read_acl_file(Path(acl_file))[0], spec, f"file {acl_file}")
    assert store is not None
    if store.type == "file" and store.path is not None:
        return Policy.of(read_acl_file(store.path)[0], spec, f"file {store.path}")
    if store.type == "zookeeper" and store.connect:
        return Policy.of(_zookeeper_snapshot(store), spec, f"zookeeper {store.connect}")
    raise ValueError(f"{config_file}: acl_store.type {store.type!r} holds no ACLs to replay")


def _zookeeper_snapshot(store: Any) -> Snapshot:
    from kafkaguard.policy.stores.zookeeper import ZkAclClient, read_digest_auth

    digest = read_digest_auth(store.digest_auth_file) if store.digest_auth_file else None
    client = ZkAclClient(
        store.connect,
        chroot=store.chroot,
        digest_auth=digest,
        session_timeout_s=store.session_timeout_s,
    )
    client.start()
    try:
        return client.snapshot()
    finally:
        client.stop()


def replay_schema(keys: Sequence[str]) -> StructType:
    fields = [
        StructField(k, ArrayType(StringType(), False) if k == GROUPS else StringType())
        for k in keys
    ]
    return StructType(
        [
            *fields,
            StructField("count", LongType()),
            StructField("predicted", StringType()),
            StructField("reason", StringType()),
            StructField("implied", BooleanType()),
            StructField("deciding_acl", StringType()),
            StructField("deciding_acl_index", IntegerType()),
            StructField("matching_acl_indexes", ArrayType(IntegerType(), False)),
            StructField("error", StringType()),
        ]
    )


_AUTHORIZERS: dict[str, tuple[StandardAuthorizer, dict[AclBinding, int]]] = {}
"""Per Python worker: the authorizer built for a broadcast ACL set (one kept)."""


def _authorizer(
    token: str, policy: Broadcast[Policy]
) -> tuple[StandardAuthorizer, dict[AclBinding, int]]:
    cached = _AUTHORIZERS.get(token)
    if cached is None:
        value = policy.value
        authorizer = StandardAuthorizer(value.spec.config())
        authorizer.load_snapshot(value.acls)
        positions = {binding: i for i, binding in enumerate(value.acls)}
        _AUTHORIZERS.clear()
        cached = _AUTHORIZERS[token] = (authorizer, positions)
    return cached


def _decide(
    authorizer: StandardAuthorizer, positions: dict[AclBinding, int], row: Any
) -> tuple[Any, ...]:
    try:
        context = decision_context(
            row["principal"],
            row["client_host"],
            row["listener"] or "",
            SecurityProtocol(row["security_protocol"] or "PLAINTEXT"),
            tuple(KafkaPrincipal.parse(g) for g in row[GROUPS] or ()),
        )
        action = Action(
            AclOperation.parse(row["operation"]),
            ResourcePattern(ResourceType.parse(row["resource_type"]), row["resource_name"]),
        )
        found = explain(authorizer, context, action)
    except (ValueError, TypeError) as exc:  # a tuple Kafka could not have decided
        return (row["count"], None, None, None, None, None, [], f"{type(exc).__name__}: {exc}")
    deciding = found.deciding_acl
    return (
        row["count"],
        found.result.value,
        found.reason.value,
        found.implied,
        None if deciding is None else acl_text(deciding),
        None if deciding is None else positions.get(deciding),
        [positions[b] for b in found.matching_acls if b in positions],
        None,
    )


def _evaluate_partition(
    token: str, policy: Broadcast[Policy], keys: Sequence[str], rows: Iterable[Any]
) -> Iterator[tuple[Any, ...]]:
    authorizer, positions = _authorizer(token, policy)
    for row in rows:
        yield (*(row[k] for k in keys), *_decide(authorizer, positions, row))


def evaluate(tuples: DataFrame, policy: Policy) -> DataFrame:
    """Decide every tuple under ``policy``: adds predicted result, reason, the deciding ACL
    and the positions (in ``policy.acls``) of every matching ACL; ``error`` names a tuple
    that could not be replayed (e.g. a principal without ``Type:``)."""
    spark = tuples.sparkSession
    keys = [c for c in tuples.columns if c != "count"]
    shared = spark.sparkContext.broadcast(policy)
    work = functools.partial(_evaluate_partition, uuid.uuid4().hex, shared, keys)
    return spark.createDataFrame(tuples.rdd.mapPartitions(work), replay_schema(keys))
