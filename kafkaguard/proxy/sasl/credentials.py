"""Where SASL credentials live: a YAML file, or (SCRAM) ZooKeeper's ``/config/users/<name>``.

File format (written by ``kafkaguard users add``; mode 0600; never plaintext passwords)::

    users:
      alice:
        SCRAM-SHA-512: salt=…,stored_key=…,server_key=…,iterations=8192
        SCRAM-SHA-256: salt=…,stored_key=…,server_key=…,iterations=4096
        PLAIN: algorithm=pbkdf2-sha512,salt=…,hash=…,iterations=100000

Per user, the mechanism → credential map is exactly the ``config`` object Kafka keeps in
ZooKeeper at ``/config/users/<name>`` (``{"version":1,"config":{"SCRAM-SHA-512":"salt=…"}}``),
and :mod:`kafkaguard.proxy.sasl.zookeeper_credentials` serves SCRAM from there (lookups stay
synchronous; :func:`kafkaguard.proxy.sasl.stores.build_credential_store` picks the store a
listener configures).

The file is re-read when its modification time changes (checked at most once per second, on
lookup); an invalid new version is logged and the previous credentials stay in force.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import yaml

from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.scram import CredentialFormatError, ScramCredential

log = logging.getLogger("kafkaguard.sasl")

CREDENTIAL_MECHANISMS = (*scram.MECHANISMS, plain.MECHANISM)

Users = Mapping[str, Mapping[str, str]]


class CredentialStore(Protocol):
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def plain_credential(self, user: str) -> plain.PlainCredential | None: ...


@runtime_checkable
class LiveCredentialStore(CredentialStore, Protocol):
    """A store with a connection to keep (ZooKeeper): the listener awaits ``start()`` (the
    first full load) before opening its port and ``close()`` when it closes."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def validate_users(users: Any, where: str) -> dict[str, dict[str, str]]:
    """Check the structure and every credential string; raise ``CredentialFormatError``."""
    if users is None:
        return {}
    if not isinstance(users, dict):
        raise CredentialFormatError(f"{where}: 'users' must map user names to credentials")
    out: dict[str, dict[str, str]] = {}
    for name, entry in users.items():
        if not isinstance(name, str) or not name:
            raise CredentialFormatError(f"{where}: invalid user name {name!r}")
        if not isinstance(entry, dict):
            raise CredentialFormatError(
                f"{where}: user {name!r} must map mechanisms to credentials"
            )
        for mechanism, text in entry.items():
            if mechanism not in CREDENTIAL_MECHANISMS or not isinstance(text, str):
                raise CredentialFormatError(
                    f"{where}: user {name!r}: unknown mechanism {mechanism!r} "
                    f"(expected one of {', '.join(CREDENTIAL_MECHANISMS)})"
                )
            try:
                _parse(mechanism, text)
            except CredentialFormatError as exc:
                raise CredentialFormatError(f"{where}: user {name!r} {mechanism}: {exc}") from None
        out[name] = dict(entry)
    return out


def _parse(mechanism: str, text: str) -> ScramCredential | plain.PlainCredential:
    if mechanism == plain.MECHANISM:
        return plain.PlainCredential.from_string(text)
    return ScramCredential.from_kafka_string(text)


def parse_zookeeper_user_config(data: bytes) -> dict[str, str]:
    """The mechanism → credential map of a ZooKeeper ``/config/users/<name>`` znode."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise CredentialFormatError(f"user config is not JSON: {exc}") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise CredentialFormatError("user config has no 'config' object")
    return {k: v for k, v in config.items() if k in scram.MECHANISMS and isinstance(v, str)}


class MappingCredentialStore:
    """Credentials held in memory (tests, and the cache of a ZooKeeper-backed store)."""

    def __init__(self, users: Users | None = None) -> None:
        self._scram: dict[tuple[str, str], ScramCredential] = {}
        self._plain: dict[str, plain.PlainCredential] = {}
        self.replace(users or {})

    def replace(self, users: Users) -> None:
        scram_creds: dict[tuple[str, str], ScramCredential] = {}
        plain_creds: dict[str, plain.PlainCredential] = {}
        for name, entry in users.items():
            for mechanism, text in entry.items():
                credential = _parse(mechanism, text)
                if isinstance(credential, plain.PlainCredential):
                    plain_creds[name] = credential
                else:
                    scram_creds[(name, mechanism)] = credential
        self._scram, self._plain = scram_creds, plain_creds

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.get((user, mechanism))

    def plain_credential(self, user: str) -> plain.PlainCredential | None:
        return self._plain.get(user)


def read_users_file(path: Path) -> dict[str, dict[str, str]]:
    """The ``users`` map of a credentials file (an absent file has no users)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CredentialFormatError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or set(document) - {"users"}:
        raise CredentialFormatError(f"{path}: expected a mapping with one key, 'users'")
    return validate_users(document.get("users"), str(path))


def write_users_file(path: Path, users: Users) -> None:
    """Write atomically with mode 0600 (the hashes still deserve secrecy)."""
    document = {"users": {name: dict(entry) for name, entry in sorted(users.items())}}
    text = (
        "# kafkaguard SASL credentials (salted hashes; manage with `kafkaguard users`).\n"
        + yaml.safe_dump(document, sort_keys=True, width=1000)
    )
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


class FileCredentialStore:
    """The credentials file, reloaded when it changes."""

    def __init__(self, path: Path, check_interval_s: float = 1.0) -> None:
        self.path = path
        self._interval = check_interval_s
        self._store = MappingCredentialStore(read_users_file(path))
        self._mtime = self._stat()
        self._checked = time.monotonic()

    def _stat(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked < self._interval:
            return
        self._checked = now
        mtime = self._stat()
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            self._store.replace(MappingProxyType(read_users_file(self.path)))
        except CredentialFormatError as exc:
            log.error("credentials file not reloaded, the previous one stays in force: %s", exc)
            return
        log.info("credentials file %s reloaded", self.path)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        self._maybe_reload()
        return self._store.scram_credential(user, mechanism)

    def plain_credential(self, user: str) -> plain.PlainCredential | None:
        self._maybe_reload()
        return self._store.plain_credential(user)
