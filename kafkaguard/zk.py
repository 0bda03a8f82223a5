"""kazoo plumbing shared by the ZooKeeper ACL store and the ZooKeeper SCRAM credential store.

:mod:`kafkaguard.policy.stores.zookeeper` (ACLs) and
:mod:`kafkaguard.proxy.sasl.zookeeper_credentials` (SCRAM credentials) read and write
different znodes in the same way; what they share lives here. The module sits below both
``kafkaguard.policy`` and ``kafkaguard.proxy`` and imports neither (``[tool.importlinter]`` in
pyproject.toml keeps it so): each store names its own error type (:attr:`ZkClientBase.error`)
and :class:`ZooKeeperError` from the helpers here is re-raised as that type.

* :func:`split_connect` / :func:`read_digest_auth`: Kafka's ``zookeeper.connect`` (with an
  optional chroot) and the digest auth file (JAAS ``Client`` section or ``user:password``).
* :class:`ZkClientBase`: a *blocking* kazoo client — connection with chroot and digest auth
  (Kafka's ``zookeeper.set.acl=true`` ACLs), error wrapping, pipelined reads, child listings
  with watches, the tracking and purging of change notifications older than 15 minutes
  (``ZkNodeChangeNotificationListener``), and :meth:`ZkClientBase.commit`: one transaction of
  version-conditional writes plus their change notifications, telling a lost race (retry on
  fresh data) from a real failure. Subclasses name their error type and paths.
* :class:`ZkSyncShell`: the asyncio side — kazoo's watch and state callbacks only *signal*
  the loop (``call_soon_threadsafe``); one sync task re-reads on notifications and resyncs in
  full on every reconnection, keeping what is in force while ZooKeeper is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

CHANGE_EXPIRATION_S = 15 * 60.0
"""``ZkNodeChangeNotificationListener.changeExpirationMs``."""

T = TypeVar("T")


class ZooKeeperError(RuntimeError):
    """A ZooKeeper setting (connect string, digest auth file) or operation failed.

    Only the helpers of this module raise it as such; the stores re-raise it as their own
    :attr:`ZkClientBase.error` (``AclStoreError``, ``ZooKeeperCredentialError``), the type their
    callers and command lines already report.
    """


def split_connect(connect: str, chroot: str = "") -> tuple[str, str]:
    """``zookeeper.connect`` may carry the chroot (``h1:2181,h2:2181/kafka``); both is an error."""
    hosts, sep, path = connect.partition("/")
    if sep:
        if chroot:
            raise ZooKeeperError("give the chroot in `connect` or in `chroot`, not both")
        chroot = "/" + path
    chroot = chroot.rstrip("/")
    if chroot and not chroot.startswith("/"):
        raise ZooKeeperError(f"chroot {chroot!r} must start with '/'")
    if not hosts.strip():
        raise ZooKeeperError("the ZooKeeper connect string is empty")
    return hosts.strip(), chroot


_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"([^"]*)"')


def read_digest_auth(path: str | Path) -> str:
    """``user:password`` for ZooKeeper digest auth, from a JAAS file (the ``Client`` section's
    ``username``/``password``, as Kafka reads it) or a file holding one ``user:password`` line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ZooKeeperError(f"{path}: cannot read digest auth file: {exc.strerror}") from exc
    fields = dict(_JAAS_FIELD.findall(text))
    if "username" in fields and "password" in fields:
        return f"{fields['username']}:{fields['password']}"
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and ":" in line:
            return line
    raise ZooKeeperError(
        f"{path}: expected 'user:password' or a JAAS Client section with username/password"
    )


def sequence_number(prefix: str, child: str) -> int:
    """The sequence number of a sequential znode ``<prefix>0000000042``; -1 for others."""
    if not child.startswith(prefix):
        return -1
    try:
        return int(child[len(prefix) :])
    except ValueError:
        return -1


@dataclass(frozen=True)
class ZnodeWrite:
    """One version-conditional change of a znode, for :meth:`ZkClientBase.commit`.

    The condition is what makes a read-modify-write safe against concurrent writers (other
    proxies, Kafka's own tools): the transaction fails if the znode changed since it was read.
    """

    path: str
    """Below the chroot."""
    data: bytes | None
    """The new data; ``None`` deletes the znode."""
    version: int | None
    """The version read: ``setData``/``delete`` fail if it changed. ``None``: the znode was
    absent, so it is created (failing if someone created it meanwhile); ``data`` must be set."""
    acl: Sequence[Any] | None = None
    """The ACL of a created znode; ``None``: the client's default ACL (see
    :class:`ZkClientBase`)."""


# -- blocking client --------------------------------------------------------------------------


class ZkClientBase:
    """A blocking kazoo client under a chroot; see the module docstring. Not thread-safe for
    concurrent calls (the stores serialise them). Subclasses set :attr:`error` (what every
    failure is raised as) and implement :meth:`_init_state` and :meth:`ensure_paths`."""

    error: ClassVar[type[Exception]] = ZooKeeperError
    log: ClassVar[logging.Logger] = logging.getLogger("kafkaguard.zookeeper")
    read_label: ClassVar[str] = "read znodes"
    """``what`` of a failed :meth:`_get_many` in the error message."""
    watch_missing: ClassVar[bool] = False
    """:meth:`_children` of an absent znode arms an existence watch (wakes when created)."""

    def __init__(
        self,
        connect: str,
        *,
        chroot: str = "",
        digest_auth: str | None = None,
        session_timeout_s: float = 18.0,
        op_timeout_s: float = 10.0,
    ) -> None:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        self.hosts, self.chroot = self.split(connect, chroot)
        self.session_timeout_s = session_timeout_s
        self.op_timeout_s = op_timeout_s
        auth_data = None
        self._acl: list[Any] | None = None
        if digest_auth is not None:
            from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

            auth_data = [("digest", digest_auth)]
            # Kafka's ZkData.defaultAcls with zookeeper.set.acl=true: the creator has all
            # rights, the world may read.
            self._acl = list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
        self.zk: Any = KazooClient(
            hosts=self.hosts,
            timeout=session_timeout_s,
            auth_data=auth_data,
            default_acl=self._acl,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            randomize_hosts=True,
        )
        self._change_ctime: dict[str, float] = {}
        self._init_state(digest_auth)

    def _init_state(self, digest_auth: str | None) -> None:
        """The subclass's own state (called at the end of ``__init__``)."""

    @classmethod
    def split(cls, connect: str, chroot: str) -> tuple[str, str]:
        """:func:`split_connect`, failing with :attr:`error`."""
        return cls._relabel(split_connect, connect, chroot)

    @classmethod
    def read_digest_auth(cls, path: str | Path) -> str:
        """:func:`read_digest_auth`, failing with :attr:`error`."""
        return cls._relabel(read_digest_auth, path)

    @classmethod
    def _relabel(cls, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` with a :class:`ZooKeeperError` re-raised as :attr:`error`, the type the
        store's callers catch."""
        try:
            return fn(*args)
        except ZooKeeperError as exc:
            if isinstance(exc, cls.error):
                raise
            raise cls.error(str(exc)) from None

    @property
    def description(self) -> str:
        return f"zookeeper {self.hosts}{self.chroot}"

    @property
    def failure_prefix(self) -> str:
        """How :meth:`_call`'s errors start."""
        return self.description

    def _p(self, path: str) -> str:
        return self.chroot + path

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        """``fn()``; absent/existing znodes propagate as kazoo's errors, any other failure as
        :attr:`error`."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        try:
            return fn()
        except (NoNodeError, NodeExistsError):
            raise
        except Exception as exc:
            raise self.error(
                f"{self.failure_prefix}: {what} failed: {type(exc).__name__} {exc}".rstrip()
            ) from exc

    # lifecycle
    def start(self, timeout_s: float | None = None) -> None:
        try:
            self.zk.start(timeout=timeout_s or self.session_timeout_s)
        except Exception as exc:
            self.stop()
            raise self.error(f"cannot connect to ZooKeeper at {self.hosts}: {exc}") from exc
        self.ensure_paths()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.zk.stop()
        with contextlib.suppress(Exception):
            self.zk.close()

    @property
    def connected(self) -> bool:
        return bool(self.zk.connected)

    def ensure_paths(self) -> None:
        """Create the paths the store needs (called by :meth:`start`)."""

    # reads
    def _children(self, path: str, watch: Callable[[Any], None] | None = None) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return list(
                self._call(lambda: self.zk.get_children(self._p(path), watch=watch), f"list {path}")
            )
        except NoNodeError:
            if self.watch_missing and watch is not None:  # wake up when it is created
                self._call(lambda: self.zk.exists(self._p(path), watch=watch), f"watch {path}")
            return []

    def _get_many(self, paths: Sequence[str]) -> list[tuple[bytes | None, Any]]:
        """Pipelined gets: ``(data, stat)``, ``(None, None)`` for absent znodes."""
        from kazoo.exceptions import NoNodeError

        def run() -> list[tuple[bytes | None, Any]]:
            pending = [self.zk.get_async(self._p(p)) for p in paths]
            out: list[tuple[bytes | None, Any]] = []
            for res in pending:
                try:
                    out.append(res.get(timeout=self.op_timeout_s))
                except NoNodeError:
                    out.append((None, None))
            return out

        return list(self._call(run, self.read_label))

    # change notifications
    def _notifications(
        self, root: str, children: Sequence[str], last_seq: int, seq: Callable[[str], int]
    ) -> Iterator[tuple[int, str, bytes | None]]:
        """The notifications under ``root`` newer than ``last_seq``, oldest first, as
        ``(sequence, child, data)`` (``data`` is ``None`` when purged meanwhile); each one is
        remembered for :meth:`_purge`."""
        fresh = sorted((c for c in children if seq(c) > last_seq), key=seq)
        nodes = self._get_many([f"{root}/{c}" for c in fresh])
        for child, (data, stat) in zip(fresh, nodes, strict=True):
            if data is not None:
                self._change_ctime[f"{root}/{child}"] = stat.ctime / 1000.0
            yield seq(child), child, data

    def _purge(self, now: float) -> None:
        """Delete the notifications seen that are older than 15 minutes, like Kafka does."""
        from kazoo.exceptions import NoNodeError, NotEmptyError

        for path, ctime in list(self._change_ctime.items()):
            if ctime + CHANGE_EXPIRATION_S < now:
                del self._change_ctime[path]
                with contextlib.suppress(NoNodeError, NotEmptyError, self.error):
                    self._call(functools.partial(self.zk.delete, self._p(path)), f"purge {path}")

    # writes
    def commit(
        self,
        writes: Sequence[ZnodeWrite],
        notifications: Sequence[tuple[str, bytes]],
        *,
        what: str,
        if_unknown: str = "it may or may not have been applied",
        conflicts: tuple[type[Exception], ...] = (),
    ) -> list[Exception]:
        """Commit ``writes`` and then the change notifications in one ZooKeeper transaction,
        all or nothing.

        ``notifications`` are ``(path prefix, payload)`` pairs, created as sequential znodes
        (``<prefix>0000000042``) the way Kafka's ``ZkNodeChangeNotificationListener`` expects,
        in the same transaction so that no reader sees a change without its notification.

        Returns ``[]`` once committed. A lost race — a version check (``BadVersionError``) or an
        existence check (``NoNodeError``, ``NodeExistsError``, or one of ``conflicts``) failed —
        returns the failures of the transaction's ops: nothing was applied, and the caller
        re-reads and retries. Anything else raises :attr:`error` saying ``what`` failed; when
        the commit itself fails (timeout, connection loss) the outcome is unknown and the
        message ends with ``if_unknown``.
        """
        from kazoo.exceptions import (
            BadVersionError,
            NodeExistsError,
            NoNodeError,
            RolledBackError,
            RuntimeInconsistency,
        )

        txn = self.zk.transaction()
        for write in writes:
            full = self._p(write.path)
            if write.version is None:
                txn.create(full, write.data, acl=None if write.acl is None else list(write.acl))
            elif write.data is None:
                txn.delete(full, version=write.version)
            else:
                txn.set_data(full, write.data, version=write.version)
        for prefix, payload in notifications:
            txn.create(self._p(prefix), payload, acl=self._acl, sequence=True)
        try:
            outcome = txn.commit_async().get(timeout=self.op_timeout_s)
        except Exception as exc:
            raise self.error(
                f"{self.failure_prefix}: {what} failed ({type(exc).__name__} {exc}); {if_unknown}"
            ) from exc
        failures = [r for r in outcome if isinstance(r, Exception)]
        lost_race = (BadVersionError, NoNodeError, NodeExistsError, *conflicts)
        # Besides the failing op, ZooKeeper marks the others rolled back (before it) or
        # RuntimeInconsistency (after it).
        bystander = (RolledBackError, RuntimeInconsistency)
        real = [f for f in failures if not isinstance(f, (*lost_race, *bystander))]
        if real:
            raise self.error(
                f"{self.failure_prefix}: {what} failed: {type(real[0]).__name__} {real[0]}"
            )
        return failures


# -- the asyncio shell ------------------------------------------------------------------------

ClientT = TypeVar("ClientT", bound=ZkClientBase)


class ZkSyncShell(Generic[ClientT]):
    """The asyncio side of a ZooKeeper-backed store; see the module docstring. Subclasses
    call :meth:`_init_shell`, implement :meth:`_resync` and :meth:`_poll`, and may override
    :meth:`_sync_guard` (held around every sync step) and the log hooks."""

    error: ClassVar[type[Exception]] = ZooKeeperError
    log: ClassVar[logging.Logger] = logging.getLogger("kafkaguard.zookeeper")
    contents: ClassVar[str] = "data"
    """What is kept in force, for the log (``ACLs``, ``SCRAM credentials``)."""

    def _init_shell(
        self,
        connect: str,
        chroot: str,
        digest_auth_file: str | Path | None,
        session_timeout_s: float,
        split: Callable[[str, str], tuple[str, str]],
    ) -> None:
        hosts, root = split(connect, chroot)  # fail fast on a bad connect string
        self.connect = connect
        self.chroot = chroot
        self.digest_auth_file = digest_auth_file
        self.session_timeout_s = session_timeout_s
        self._description = f"zookeeper {hosts}{root}"
        self.client: ClientT | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = threading.Event()
        self._need_resync = False
        self.connected = False
        self.resyncs = 0
        """Full loads done after the first (reconnections, undecodable notifications)."""
        self.updates = 0
        """Number of sync steps done (tests wait on it)."""

    @property
    def description(self) -> str:
        return self._description

    # kazoo threads -> loop
    def _signal(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or self._closed.is_set():
            return
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            loop.call_soon_threadsafe(fn, *args)

    def _watch(self, _event: Any) -> None:
        self._signal(self._wake.set)

    def _state_listener(self, state: str) -> None:
        self._signal(self._on_state, str(state))

    def _on_state(self, state: str) -> None:
        if state == "CONNECTED":
            if not self.connected:
                self.log.info("%s: connected; resyncing %s", self.description, self.contents)
            self.connected = True
            self._need_resync = True
            self._wake.set()
        else:
            if self.connected:
                self._log_disconnected(state.lower())
            self.connected = False

    def _log_disconnected(self, state: str) -> None:
        self.log.warning(
            "%s: connection %s; keeping the %s in force", self.description, state, self.contents
        )

    # lifecycle
    async def _connect(self, make_client: Callable[..., ClientT]) -> ClientT:
        """Read the digest auth, connect (creating the paths) and listen to the connection
        state; the caller does the first load."""
        self._loop = asyncio.get_running_loop()
        digest = None
        if self.digest_auth_file is not None:
            try:
                digest = await asyncio.to_thread(read_digest_auth, self.digest_auth_file)
            except ZooKeeperError as exc:
                if isinstance(exc, self.error):
                    raise
                raise self.error(str(exc)) from None
        client = make_client(
            self.connect,
            chroot=self.chroot,
            digest_auth=digest,
            session_timeout_s=self.session_timeout_s,
        )
        await asyncio.to_thread(client.start)
        self.client = client
        client.zk.add_listener(self._state_listener)
        self.connected = True
        return client

    def _start_sync(self, name: str) -> None:
        self._task = asyncio.create_task(self._sync_loop(), name=f"{name}:{self.description}")

    async def close(self) -> None:
        self._closed.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None
        client, self.client = self.client, None
        if client is not None:
            await asyncio.to_thread(client.stop)
        self.connected = False

    # sync
    def _sync_guard(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return contextlib.nullcontext()

    async def _resync(self, client: ClientT) -> None:
        """Load everything (reconnection, or after an error) and install it."""
        raise NotImplementedError

    async def _poll(self, client: ClientT) -> None:
        """Process the change notifications and install what they name."""
        raise NotImplementedError

    async def _sync_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            client = self.client
            if client is None:
                return
            if not self.connected:
                continue  # the reconnection sets _need_resync and wakes us
            try:
                async with self._sync_guard():
                    if self._need_resync:
                        self._need_resync = False
                        await self._resync(client)
                        self.resyncs += 1
                    else:
                        await self._poll(client)
                self.updates += 1
            except self.error as exc:
                self.log.error(
                    "%s: %s; keeping the %s in force, will resync",
                    self.description, exc, self.contents,
                )  # fmt: skip
                self._need_resync = True
                await asyncio.sleep(0.5)
                self._wake.set()
