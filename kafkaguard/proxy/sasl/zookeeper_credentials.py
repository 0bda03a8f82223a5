"""SCRAM credentials from ZooKeeper, in Kafka's own layout (ZooKeeper-era Kafka, <= 3.9).

What ``kafka-configs.sh --zookeeper … --alter --add-config 'SCRAM-SHA-512=[password=…]'
--entity-type users --entity-name alice`` (and a ZooKeeper-mode broker answering
AlterUserScramCredentials) writes, read as it is; ``kafkaguard users add --zookeeper-connect``
writes the same, so both kinds of tooling manage one credential set::

    /config/users/<sanitized user>       {"version":1,"config":{"SCRAM-SHA-512":"salt=…,
                                           stored_key=…,server_key=…,iterations=4096", …}}
    /config/changes/config_change_NNNNNNNNNN   {"version":2,"entity_path":"users/<sanitized>"}

``<sanitized user>`` is ``Sanitizer.sanitize``: Java's ``URLEncoder`` (UTF-8) with ``+`` →
``%20`` and ``*`` → ``%2A``. The user znode may hold other configs of the user (quotas such as
``producer_byte_rate``): they are ignored when reading and preserved when writing.

Theory of operation (the same shape as :mod:`kafkaguard.policy.stores.zookeeper`; the kazoo
plumbing both share is :mod:`kafkaguard.zk`):

* Pure functions for the formats; :class:`ZkUserConfigClient`, a *blocking* kazoo client
  (used by the CLI directly and by the store through worker threads);
  :class:`ZooKeeperCredentialStore`, the asyncio shell that implements
  :class:`~kafkaguard.proxy.sasl.credentials.CredentialStore`.
* Lookups are synchronous and never touch ZooKeeper: they read an in-memory map that is
  replaced as a whole (copy on write) on the event loop.
* kazoo's watch and state callbacks only *signal* the loop (``call_soon_threadsafe``); one
  sync task on the loop reads ZooKeeper in a worker thread and installs the result.
* Change detection: the children of ``/config/changes`` (Kafka's notifications, as a broker's
  ``ZkNodeChangeNotificationListener`` processes them — notifications newer than the last
  seen name the users to re-read) and the children of ``/config/users`` (a user znode created
  or deleted without a notification). Notifications older than 15 minutes are purged, like
  Kafka does. A user znode whose data is changed by hand *without* a notification is picked up
  at the next resync only (Kafka's brokers would not see it either).
* ``start()`` completes after the first full load (the listener opens its port only then) and
  fails if ZooKeeper cannot be reached. Outage: the credentials loaded last stay in force,
  kazoo reconnects on its own, and every reconnection resyncs in full.
* A credential that is not in Kafka's format is logged and left out (that user cannot
  authenticate with that mechanism); it never disables the other users.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.credentials import CredentialStore
from kafkaguard.proxy.sasl.scram import CredentialFormatError, ScramCredential
from kafkaguard.zk import ZkClientBase, ZkSyncShell, ZnodeWrite, sequence_number

log = logging.getLogger("kafkaguard.sasl")

CONFIG_ROOT = "/config"
USERS_PATH = "/config/users"
CHANGES_PATH = "/config/changes"
CHANGE_PREFIX = "config_change_"


class ZooKeeperCredentialError(Exception):
    """ZooKeeper could not be reached or written, or holds something unreadable."""


# -- Kafka's formats (pure) -------------------------------------------------------------------


def sanitize(name: str) -> str:
    """``Sanitizer.sanitize``: the znode name of a user."""
    # quote() keeps [A-Za-z0-9_.-~]; Java's URLEncoder keeps [A-Za-z0-9_.-*] (then '*' becomes
    # %2A) and encodes '~'. Both use upper-case hex.
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(node: str) -> str:
    """``Sanitizer.desanitize`` (``URLDecoder``: ``+`` is a space)."""
    return urllib.parse.unquote_plus(node, errors="strict")


def user_path(name: str) -> str:
    """``ConfigEntityZNode.path("users", sanitize(name))``."""
    if not name:
        raise ValueError("empty user name")
    return f"{USERS_PATH}/{sanitize(name)}"


def encode_user_config(config: Mapping[str, str]) -> bytes:
    """``ConfigEntityZNode.encode``: compact JSON, ``version`` first, UTF-8 unescaped."""
    document = {"version": 1, "config": {k: config[k] for k in sorted(config)}}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_user_config(data: bytes | None, where: str) -> dict[str, str]:
    """``ConfigEntityZNode.decode``: every config of the entity (empty data → none)."""
    if not data:
        return {}
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CredentialFormatError(f"{where}: znode data is not JSON: {exc}") from None
    config = document.get("config") if isinstance(document, dict) else None
    if config is None:
        return {}
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise CredentialFormatError(f"{where}: 'config' must map names to strings")
    return dict(config)


def scram_entries(config: Mapping[str, str], where: str) -> dict[str, ScramCredential]:
    """The SCRAM credentials of a user's config; an invalid one is logged and left out."""
    out: dict[str, ScramCredential] = {}
    for mechanism in scram.MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.from_kafka_string(text)
        except CredentialFormatError as exc:
            log.error("%s: %s credential ignored: %s", where, mechanism, exc)
    return out


def encode_change(name: str) -> bytes:
    """``ConfigEntityChangeNotificationSequenceZNode.encode("users/<sanitized>")``."""
    document = {"version": 2, "entity_path": f"users/{sanitize(name)}"}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_change(data: bytes) -> str | None:
    """The sanitized user a config change notification names; ``None`` for other entities
    (topics, brokers, clients, ``users/<u>/clients/<c>`` quotas). Raises ValueError on a
    payload Kafka could not process either. Versions 1 and 2 (``ConfigChangeListener``)."""
    document = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"config change notification is not an object: {data!r}")
    version = document.get("version")
    if version == 1:
        if document.get("entity_type") != "users":
            return None
        name = document.get("entity_name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"config change notification without entity_name: {data!r}")
        return name
    if version == 2:
        entity_path = document.get("entity_path")
        if not isinstance(entity_path, str):
            raise ValueError(f"config change notification without entity_path: {data!r}")
        parts = entity_path.split("/")
        if len(parts) == 2 and parts[0] == "users" and parts[1]:
            return parts[1]
        return None
    raise ValueError(f"config change notification of unsupported version {version!r}")


def change_seq(child: str) -> int:
    return sequence_number(CHANGE_PREFIX, child)


Users = dict[str, dict[str, ScramCredential]]
"""user → mechanism → credential"""


# -- blocking client --------------------------------------------------------------------------

_MAX_WRITE_ATTEMPTS = 30


class ZkUserConfigClient(ZkClientBase):
    """Blocking access to ``/config/users``; see the module docstring. Not thread-safe for
    concurrent calls (the store serialises them)."""

    error = ZooKeeperCredentialError
    log = log
    read_label = "read user znodes"
    watch_missing = True

    def _init_state(self, digest_auth: str | None) -> None:
        self._sensitive_acl: list[Any] | None = None
        if digest_auth is not None:
            from kazoo.security import CREATOR_ALL_ACL

            # Kafka's ZkData.defaultAcls: /config/users is a sensitive path, the world may
            # not read it.
            self._sensitive_acl = list(CREATOR_ALL_ACL)
        self.last_seq = -1
        self.known: set[str] = set()
        """Sanitized names of the user znodes seen at the last listing."""

    def ensure_paths(self) -> None:
        """Kafka's broker creates ``/config/changes`` and ``/config/users`` at startup; so do
        we (a read-only ZooKeeper identity that may not create them is fine: the existence
        watch in :meth:`_children` covers their later creation)."""
        from kazoo.exceptions import NodeExistsError

        for path, acl in (
            (self.chroot, self._acl),
            (self._p(CONFIG_ROOT), self._acl),
            (self._p(CHANGES_PATH), self._acl),
            (self._p(USERS_PATH), self._acl),
        ):
            if not path:
                continue
            try:
                if self.zk.exists(path) is None:
                    with contextlib.suppress(NodeExistsError):
                        self.zk.create(path, b"", acl=acl, makepath=True)
            except Exception as exc:  # noqa: BLE001 - a permission problem is not fatal here
                log.warning("%s: cannot create %s: %s", self.description, path, exc)

    # reads
    def read_users(self, nodes: Iterable[str]) -> dict[str, dict[str, ScramCredential] | None]:
        """Sanitized node names → that user's SCRAM credentials (``None``: no znode)."""
        names = list(nodes)
        out: dict[str, dict[str, ScramCredential] | None] = {}
        paths = [f"{USERS_PATH}/{n}" for n in names]
        for node, path, (data, stat) in zip(names, paths, self._get_many(paths), strict=True):
            if stat is None:
                out[node] = None
                continue
            try:
                out[node] = scram_entries(decode_user_config(data, path), path)
            except CredentialFormatError as exc:
                log.error("%s", exc)
                out[node] = {}
        return out

    def load_all(self, watch: Callable[[Any], None] | None = None) -> Users:
        """Every user's credentials; the watches are armed first so nothing falls between."""
        changes = self._children(CHANGES_PATH, watch)
        self.last_seq = max((change_seq(c) for c in changes), default=-1)
        nodes = self._children(USERS_PATH, watch)
        self.known = set(nodes)
        return _by_user(self.read_users(nodes))

    def poll_changes(
        self, watch: Callable[[Any], None] | None
    ) -> dict[str, dict[str, ScramCredential] | None]:
        """Users changed since the last call (user → credentials, ``None`` = gone); re-arms
        the watches. Raises :class:`ZooKeeperCredentialError` on a notification that cannot
        be decoded (the caller resyncs)."""
        affected: set[str] = set()
        children = self._children(CHANGES_PATH, watch)
        now = time.time()
        for seq, child, data in self._notifications(
            CHANGES_PATH, children, self.last_seq, change_seq
        ):
            self.last_seq = max(self.last_seq, seq)
            if data is None:
                continue  # purged meanwhile; a resync after a gap covers it
            try:
                node = decode_change(data)
            except (ValueError, UnicodeDecodeError) as exc:
                raise ZooKeeperCredentialError(
                    f"{CHANGES_PATH}/{child}: bad config change notification: {exc}"
                ) from exc
            if node is not None:
                affected.add(node)
        nodes = set(self._children(USERS_PATH, watch))
        affected |= nodes ^ self.known
        self.known = nodes
        self._purge(now)
        changed = self.read_users(sorted(affected))
        return {_user_name(node): creds for node, creds in changed.items()}

    def list_users(self) -> dict[str, list[str]]:
        """User → the SCRAM mechanisms it has (CLI; never the credentials)."""
        users = self.load_all()
        return {name: sorted(creds) for name, creds in users.items() if creds}

    # writes
    def update_user(self, name: str, updates: Mapping[str, str | None]) -> dict[str, str]:
        """Set (string) or remove (``None``) config entries of one user, keeping the others
        (quotas); conditional on the znode version, plus Kafka's change notification, in one
        transaction. A user left with no config at all loses its znode. Returns the new
        config."""
        from kazoo.exceptions import NoNodeError

        path = user_path(name)
        if not self.connected:
            raise ZooKeeperCredentialError(f"{self.description} is not connected")
        for _ in range(_MAX_WRITE_ATTEMPTS):
            ((data, stat),) = self._get_many([path])
            config = decode_user_config(data, path) if stat is not None else {}
            new = _updated(config, updates)
            if new == config and (stat is not None or not new):
                return new
            write = ZnodeWrite(
                path,
                encode_user_config(new) if new else None,
                None if stat is None else stat.version,
                self._sensitive_acl,
            )
            notification = (f"{CHANGES_PATH}/{CHANGE_PREFIX}", encode_change(name))
            failures = self.commit([write], [notification], what=f"writing {path}")
            if not failures:
                return new
            if any(isinstance(f, NoNodeError) for f in failures):
                # the user znode vanished meanwhile, or a parent (/config/users,
                # /config/changes) is missing: recreate the parents, then retry
                self.ensure_paths()
            time.sleep(random.uniform(0.005, 0.05))
        raise ZooKeeperCredentialError(
            f"gave up writing {path} after {_MAX_WRITE_ATTEMPTS} attempts (concurrent writers)"
        )


def _updated(config: Mapping[str, str], updates: Mapping[str, str | None]) -> dict[str, str]:
    """``config`` with ``updates`` applied: a string sets the entry, ``None`` removes it."""
    new = dict(config)
    for key, value in updates.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    return new


def _user_name(node: str) -> str:
    try:
        return desanitize(node)
    except UnicodeDecodeError:
        return node


def _by_user(read: Mapping[str, dict[str, ScramCredential] | None]) -> Users:
    return {_user_name(node): creds for node, creds in read.items() if creds}


# -- the asyncio store ------------------------------------------------------------------------


class ZooKeeperCredentialStore(ZkSyncShell[ZkUserConfigClient]):
    """SCRAM credentials from ZooKeeper; PLAIN (which Kafka never kept in ZooKeeper) from an
    optional second store, normally the listener's credentials file."""

    error = ZooKeeperCredentialError
    log = log
    contents = "SCRAM credentials"

    def __init__(
        self,
        connect: str,
        *,
        chroot: str = "",
        digest_auth_file: str | Path | None = None,
        session_timeout_s: float = 18.0,
        plain_store: CredentialStore | None = None,
    ) -> None:
        self._init_shell(
            connect, chroot, digest_auth_file, session_timeout_s, ZkUserConfigClient.split
        )
        self.plain_store = plain_store
        self._users: Users = {}

    # CredentialStore
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def plain_credential(self, user: str) -> plain.PlainCredential | None:
        return self.plain_store.plain_credential(user) if self.plain_store is not None else None

    def users(self) -> dict[str, list[str]]:
        return {name: sorted(creds) for name, creds in self._users.items()}

    def _log_disconnected(self, state: str) -> None:
        log.warning(
            "%s: connection %s; keeping the SCRAM credentials of %d users in force",
            self.description, state, len(self._users),
        )  # fmt: skip

    # lifecycle
    async def start(self) -> None:
        """Connect and load every user; the listener opens only after this returns."""
        if self.client is not None:
            return
        self._closed.clear()
        client = await self._connect(ZkUserConfigClient)
        try:
            self._users = await asyncio.to_thread(client.load_all, self._watch)
        except BaseException:
            await self.close()
            raise
        log.info("loaded SCRAM credentials of %d users from %s", len(self._users), self.description)
        self._start_sync("scram-zk")

    async def _resync(self, client: ZkUserConfigClient) -> None:
        self._users = await asyncio.to_thread(client.load_all, self._watch)
        log.info(
            "resynced SCRAM credentials of %d users from %s", len(self._users), self.description
        )

    async def _poll(self, client: ZkUserConfigClient) -> None:
        changed = await asyncio.to_thread(client.poll_changes, self._watch)
        if changed:
            users = dict(self._users)
            for name, creds in changed.items():
                if creds:
                    users[name] = creds
                else:
                    users.pop(name, None)
            self._users = users
            log.info(
                "SCRAM credentials updated from %s: %s",
                self.description, ", ".join(sorted(changed)),
            )  # fmt: skip
