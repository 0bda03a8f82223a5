"""SCRAM credentials in a compacted topic on the protected cluster (``_kafkaguard-users``).

``scram_credentials: kafka``: the SCRAM users of a fleet of proxies on a cluster without
ZooKeeper, in their own topic (not the ACL topic: its readers, retention and access differ),
read and written as :mod:`kafkaguard.topic_table` does for the Kafka-topic ACL store
(docs/acl-store.md#scram-users). One record per (user, mechanism), as Kafka's controller keeps
one ``UserScramCredentialRecord`` per ``ScramCredentialKey``:

* key: ``{"user":"alice","mechanism":"SCRAM-SHA-512"}`` (compact JSON, this order);
* value: ``{"version":1,"user":…,"mechanism":…,"credential":"salt=…,stored_key=…,
  server_key=…,iterations=…"}``, the credential in ``ScramCredentialUtils`` form: salted
  hashes only, never a password;
* a tombstone deletes that mechanism of that user.

AlterUserScramCredentials and DescribeUserScramCredentials are answered by the proxy from this
store (``ScramControlManager.alterCredentials``, ``ScramImage.describe``:
kafkaguard/proxy/handlers/cluster_admin.py); ``kafkaguard users --config`` writes it too.
PLAIN (which Kafka never keeps with the SCRAM users) still comes from the credentials file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.credentials import CredentialStore
from kafkaguard.proxy.sasl.scram import CredentialFormatError, ScramCredential
from kafkaguard.topic_table import Changes, TopicSettings, TopicTable, TopicTableError

log = logging.getLogger("kafkaguard.sasl")

DEFAULT_TOPIC: Final = "_kafkaguard-users"
VERSION: Final = 1
CLIENT_ID: Final = "kafkaguard-users"


class KafkaCredentialError(RuntimeError):
    """The credential topic cannot be reached or written."""


def _json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def credential_key(user: str, mechanism: str) -> bytes:
    return _json({"user": user, "mechanism": mechanism})


def encode_credential(user: str, mechanism: str, credential: ScramCredential) -> bytes:
    return _json(
        {
            "version": VERSION,
            "user": user,
            "mechanism": mechanism,
            "credential": credential.to_kafka_string(),
        }
    )


def decode_credential(value: bytes) -> tuple[str, str, ScramCredential]:
    """(user, mechanism, credential) of a record value; raises ValueError."""
    document = json.loads(value.decode("utf-8"))
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} credential record")
    user, mechanism, text = (
        document.get("user"),
        document.get("mechanism"),
        document.get("credential"),
    )
    if not isinstance(user, str) or not user or mechanism not in scram.MECHANISMS:
        raise ValueError("a credential record needs a user and a SCRAM mechanism")
    if not isinstance(text, str):
        raise ValueError("a credential record needs a credential string")
    return user, str(mechanism), ScramCredential.from_kafka_string(text)


class KafkaTopicCredentialStore:
    """A :class:`~kafkaguard.proxy.sasl.credentials.LiveCredentialStore` over the topic; the
    SCRAM lookups read an in-memory map (no I/O on the authentication path)."""

    def __init__(
        self,
        connection: Mapping[str, Any],
        settings: TopicSettings,
        *,
        plain_store: CredentialStore | None = None,
    ) -> None:
        self.table = TopicTable(connection, settings, client_id=CLIENT_ID, on_change=self._changed)
        self.plain_store = plain_store
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._by_key: dict[bytes, tuple[str, str]] = {}

    @property
    def description(self) -> str:
        return f"kafka {self.table.description}"

    # CredentialStore
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def plain_credential(self, user: str) -> plain.PlainCredential | None:
        return self.plain_store.plain_credential(user) if self.plain_store is not None else None

    def users(self) -> dict[str, list[str]]:
        """User → its SCRAM mechanisms (``kafkaguard users list``; never the hashes)."""
        return {name: sorted(creds) for name, creds in self._users.items()}

    def iterations(self, user: str) -> dict[str, int]:
        """Mechanism → iterations of one user (DescribeUserScramCredentials)."""
        return {m: c.iterations for m, c in self._users.get(user, {}).items()}

    # lifecycle
    async def start(self) -> None:
        try:
            await self.table.start()
        except TopicTableError as exc:
            raise KafkaCredentialError(str(exc)) from exc
        log.info("loaded SCRAM credentials of %d users from %s", len(self._users), self.description)

    async def close(self) -> None:
        await self.table.close()

    def not_ready(self) -> Iterator[str]:
        return self.table.not_ready()

    def _changed(self, changes: Changes) -> None:
        users = {name: dict(creds) for name, creds in self._users.items()}  # copy on write
        for key, value in changes.items():
            previous = self._by_key.pop(key, None)
            if previous is not None:
                users.get(previous[0], {}).pop(previous[1], None)
            if value is None:
                continue
            try:
                user, mechanism, credential = decode_credential(value)
            except (ValueError, UnicodeDecodeError, CredentialFormatError) as exc:
                log.error("%s: record %r left out: %s", self.description, key, exc)
                continue
            users.setdefault(user, {})[mechanism] = credential
            self._by_key[key] = (user, mechanism)
        self._users = {name: creds for name, creds in users.items() if creds}

    # writes
    async def alter(
        self,
        upsertions: Sequence[tuple[str, str, ScramCredential]],
        deletions: Sequence[tuple[str, str]],
    ) -> None:
        """Write every upsertion and deletion (acknowledged by ``acks=all`` before this
        returns, then in force here). Raises :class:`KafkaCredentialError`."""
        records: list[tuple[bytes, bytes | None]] = [
            (credential_key(u, m), encode_credential(u, m, c)) for u, m, c in upsertions
        ]
        doomed = set(deletions)
        records += [(key, None) for key, um in self._by_key.items() if um in doomed]
        try:
            await self.table.write(records)
        except TopicTableError as exc:
            raise KafkaCredentialError(str(exc)) from exc
