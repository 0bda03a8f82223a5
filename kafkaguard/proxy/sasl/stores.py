"""The credential store a SASL listener configures, built from both kinds of store: kept
apart from them so that the ZooKeeper store, which serves the file store's credential types,
and the file store do not import each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafkaguard.proxy.sasl.credentials import CredentialStore, FileCredentialStore
from kafkaguard.proxy.sasl.zookeeper_credentials import ZooKeeperCredentialStore

if TYPE_CHECKING:
    from kafkaguard.proxy.sasl.config import SaslListenerConfig


def build_credential_store(
    config: SaslListenerConfig, connection: Mapping[str, Any] | None = None
) -> CredentialStore | None:
    """The store of a SASL listener: the credentials file, and for ``scram_credentials:
    zookeeper`` (``kafka``) a ZooKeeper (Kafka topic) store for SCRAM that asks the file (if
    any) for PLAIN. ``connection``: librdkafka settings reaching the protected cluster."""
    file_store = (
        FileCredentialStore(config.credentials_file)
        if config.credentials_file is not None
        else None
    )
    if config.scram_credentials == "kafka" and config.kafka is not None:
        from kafkaguard.proxy.sasl.kafka_credentials import KafkaTopicCredentialStore

        if connection is None:
            raise ValueError("scram_credentials: kafka needs the upstream connection settings")
        return KafkaTopicCredentialStore(
            connection, config.kafka.settings(), plain_store=file_store
        )
    if config.scram_credentials != "zookeeper" or config.zookeeper is None:
        return file_store
    zk = config.zookeeper
    return ZooKeeperCredentialStore(
        zk.connect,
        chroot=zk.chroot,
        digest_auth_file=zk.digest_auth_file,
        session_timeout_s=zk.session_timeout_s,
        plain_store=file_store,
    )
