"""FileAclStore: ACLs in a YAML file, the embedded default store.

Theory of operation
-------------------
* ``start()`` parses the file (in a worker thread: 100k entries take a while) and fails loudly
  if it is missing or invalid — a proxy must not serve with an unknown policy.
* A poll task compares the file's (mtime_ns, size, inode) every ``poll_interval_s``; SIGHUP
  handlers call :meth:`request_reload`. A change is parsed in full; if the new file is invalid
  the ACLs in force are **kept** and the error is logged with the file, line and entry.
* ``add``/``remove`` (CreateAcls/DeleteAcls, the ``kafkaguard acls`` CLI) take an advisory lock
  on ``<file>.lock``, re-read the file (so a concurrent CLI edit is not lost), and replace it
  atomically: write a temp file in the same directory, fsync, ``os.replace``. The file keeps
  its format: JSON written by kafkaguard stays JSON, hand-written YAML keeps its comments,
  order and layout (ruamel.yaml round trip: :mod:`kafkaguard.policy.stores.acl_file_edit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from kafkaguard.policy.model import AclBinding
from kafkaguard.policy.stores.acl_file_edit import edit_acl_text
from kafkaguard.policy.stores.acl_file_format import AclFileError, format_acl_text, parse_acl_text
from kafkaguard.policy.stores.base import AclStoreError, Snapshot, SnapshotPublisher

log = logging.getLogger("kafkaguard.policy.store")

FileStamp = tuple[int, int, int]
"""(mtime_ns, size, inode): a file replaced or rewritten changes it."""


def file_stamp(path: Path) -> FileStamp | None:
    """The file's :data:`FileStamp`, None when it does not exist (also read by the groups
    file, kafkaguard/policy/groups.py)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise writers across processes (proxy + CLI) with ``flock`` on a side file."""
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise AclStoreError(
            f"{path}: ACL file does not exist (create it with `kafkaguard acls --add ...` "
            "or write 'acls: []')"
        ) from exc
    except OSError as exc:
        raise AclStoreError(f"{path}: cannot read ACL file: {exc.strerror}") from exc


def _parse(text: str, path: Path) -> Snapshot:
    try:
        return parse_acl_text(text, str(path))
    except AclFileError as exc:
        raise AclStoreError(str(exc)) from exc


def read_acl_file(path: Path) -> tuple[Snapshot, FileStamp | None]:
    """Parse the file; the stamp is taken before reading so a racing write triggers a reload."""
    stamp = file_stamp(path)
    return _parse(_read_text(path), path), stamp


def write_acl_file(path: Path, bindings: Collection[AclBinding]) -> None:
    """Atomic replace with kafkaguard's format (:func:`format_acl_text`)."""
    _write_text(path, format_acl_text(bindings))


def _write_text(path: Path, text: str) -> None:
    """Atomic replace: readers (and the poller) see the old or the new file, never half."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def modify_acl_file(
    path: Path, change: Callable[[Snapshot], Snapshot], *, create: bool = False
) -> Snapshot:
    """Locked read-modify-write; refuses to overwrite a file it cannot parse. The file keeps
    its format: kafkaguard's JSON stays JSON, a hand-written YAML file keeps its comments,
    order and layout (:func:`~kafkaguard.policy.stores.acl_file_edit.edit_acl_text`)."""
    with _locked(path):
        exists = path.exists()
        text = _read_text(path) if exists or not create else ""
        current = _parse(text, path)
        updated = change(current)
        if updated != current or not exists:
            try:
                _write_text(path, edit_acl_text(text, updated, str(path)))
            except AclFileError as exc:
                raise AclStoreError(str(exc)) from exc
        return updated


class FileAclStore(SnapshotPublisher):
    """ACLs from a YAML file, reloaded on change; see the module docstring."""

    def __init__(
        self, path: str | Path, *, poll_interval_s: float = 1.0, create_if_missing: bool = False
    ) -> None:
        super().__init__()
        self.path = Path(path)
        self.poll_interval_s = poll_interval_s
        self.create_if_missing = create_if_missing
        self._stamp: FileStamp | None = None
        self._poller: asyncio.Task[None] | None = None
        self._reloading: asyncio.Task[bool] | None = None
        self._write_lock = asyncio.Lock()
        self.last_error: str | None = None
        """Why the most recent reload was rejected (None after a good load)."""

    @property
    def description(self) -> str:
        return f"file {self.path}"

    async def start(self) -> None:
        if self.create_if_missing and not self.path.exists():
            await asyncio.to_thread(modify_acl_file, self.path, lambda s: s, create=True)
        snapshot, stamp = await asyncio.to_thread(read_acl_file, self.path)
        self._stamp = stamp
        self.publish(snapshot)
        log.info("loaded %d ACLs from %s", len(snapshot), self.path)
        if self.poll_interval_s > 0 and self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name=f"acl-file-poll:{self.path}")

    async def reload(self) -> bool:
        """Re-read the file now; on error keep the ACLs in force. Returns whether it applied."""
        try:
            snapshot, stamp = await asyncio.to_thread(read_acl_file, self.path)
        except AclStoreError as exc:
            self._stamp = file_stamp(self.path)  # do not retry the same bad file every second
            self.last_error = str(exc)
            log.error(
                "ACL file rejected, keeping the %d ACLs in force: %s", len(self.snapshot()), exc
            )
            return False
        self._stamp = stamp
        self.last_error = None
        if snapshot != self.snapshot():
            log.info("reloaded %d ACLs from %s", len(snapshot), self.path)
        self.publish(snapshot)
        return True

    def request_reload(self) -> None:
        """SIGHUP hook: schedule a reload on the running loop (safe to call from a handler)."""
        if self._reloading is None or self._reloading.done():
            self._reloading = asyncio.get_running_loop().create_task(self.reload())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                if file_stamp(self.path) != self._stamp:
                    await self.reload()
            except OSError as exc:  # e.g. the directory vanished; keep serving
                log.warning("cannot check ACL file %s: %s", self.path, exc)

    async def _modify(self, change: Callable[[Snapshot], Snapshot]) -> None:
        async with self._write_lock:
            try:
                snapshot = await asyncio.to_thread(
                    modify_acl_file, self.path, change, create=self.create_if_missing
                )
            except OSError as exc:
                raise AclStoreError(f"{self.path}: cannot write ACL file: {exc}") from exc
            self._stamp = file_stamp(self.path)
            self.publish(snapshot)

    async def add(self, bindings: Collection[AclBinding]) -> None:
        added = frozenset(bindings)
        await self._modify(lambda current: current | added)

    async def remove(self, bindings: Collection[AclBinding]) -> None:
        removed = frozenset(bindings)
        await self._modify(lambda current: current - removed)

    async def close(self) -> None:
        for task in (self._poller, self._reloading):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._poller = None
