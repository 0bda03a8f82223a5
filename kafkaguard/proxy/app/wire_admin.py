"""Admin reads the tools make over the wire themselves: DescribeAcls and a Metadata lookup.

Why not librdkafka: its ``describe_acls`` drops DescribeAcls' top-level error code (31
CLUSTER_AUTHORIZATION_FAILED for a principal without DESCRIBE on the cluster, Kafka's
``AclApis.handleDescribeAcls``) and answers an empty list, so ``acls apply`` took "refused" for
"no ACLs" (issue 38). Here every error code of the answer is looked at: a refused or failed
read raises :class:`~kafkaguard.policy.stores.base.AclStoreError` naming the code and the
principal the request was made as, never an empty snapshot.

The connection is described by librdkafka settings (``bootstrap.servers``,
``security.protocol``, ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.endpoint.identification.algorithm``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password``): what ``--command-config`` becomes
(:func:`kafkaguard.policy.acls_apply.client_properties`) and what the proxy's upstream becomes
(:func:`kafkaguard.proxy.app.server.audit_connection`), so both ways keep their TLS and SASL
settings. The framing, TLS context and SASL exchange are the proxy's own towards its brokers
(:mod:`kafkaguard.proxy.net.cluster`, :mod:`kafkaguard.proxy.sasl.client`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography import x509

from kafkaguard.certs.tls import UpstreamTlsConfig, build_client_context
from kafkaguard.policy.model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    acl_binding,
)
from kafkaguard.policy.stores.base import AclStoreError, Snapshot
from kafkaguard.policy.x500 import rfc2253
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import FrameBuffer
from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.net.cluster import ask, ask_api_versions, open_connection, version_ranges
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.client import (
    SASL_AUTHENTICATE,
    UpstreamAuthenticationError,
    UpstreamSaslExchange,
    authenticate_stream,
    authenticate_version,
    mechanism_client,
)

DESCRIBE_ACLS: Final = 29
METADATA: Final = 3
_NAMES: Final = {DESCRIBE_ACLS: "DescribeAcls", METADATA: "Metadata"}
"""Kafka's names of the requests sent here (``ApiKeys``), for messages."""
_ANY: Final = 1
"""The ANY code of ResourceTypeFilter, PatternTypeFilter, Operation and PermissionType."""
TIMEOUT_S: Final = 30.0
CLIENT_ID: Final = "kafkaguard-tools"


Build = Callable[[type[Any]], dict[str, Any]]
"""The fields of a request, given the schema of the version chosen (nested entities differ
by version)."""


class WireAdminError(AclStoreError):
    """A read over the wire failed or was refused; the message names what to fix."""


def _servers(text: str) -> tuple[HostPort, ...]:
    """``host:port[,host:port]`` (IPv6 hosts in brackets)."""
    if not text.strip():
        raise WireAdminError("no bootstrap server given")
    out = []
    for item in (s.strip() for s in text.split(",")):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise WireAdminError(f"bootstrap server {item!r} is not host:port")
        out.append(HostPort(host.strip("[]"), int(port)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class WireConnection:
    """Where and how to connect, from librdkafka settings (see the module docstring)."""

    servers: tuple[HostPort, ...]
    ssl_context: ssl.SSLContext | None
    mechanism: str | None
    username: str
    password: str = field(repr=False)
    principal: str = "User:ANONYMOUS"
    """The principal the cluster sees, as Kafka's DefaultKafkaPrincipalBuilder names it:
    ``User:<SASL user>``, ``User:<certificate subject>`` under mutual TLS, else
    ``User:ANONYMOUS`` (a proxy's principal mapping rules may rename it)."""
    from_certificate: bool = False

    @property
    def named(self) -> str:
        """The principal as messages name it: a certificate's subject says that the
        listener's ``ssl.principal.mapping.rules`` may make another name of it."""
        note = " (the certificate's subject, before principal mapping rules)"
        return self.principal + (note if self.from_certificate else "")

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, object], bootstrap: str | None = None
    ) -> WireConnection:
        servers = _servers(bootstrap or str(settings.get("bootstrap.servers", "")))
        protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise WireAdminError(f"security.protocol {protocol!r} is not a Kafka security protocol")
        context, subject = _tls(settings) if protocol.endswith("SSL") else (None, None)
        mechanism = None
        username = password = ""
        principal = f"User:{subject}" if subject else "User:ANONYMOUS"
        if protocol.startswith("SASL_"):
            mechanism = str(settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "")))
            if mechanism not in (plain.MECHANISM, *scram.MECHANISMS):
                raise WireAdminError(
                    f"sasl.mechanism {mechanism or '(none)'!r}: only PLAIN, SCRAM-SHA-256 and "
                    "SCRAM-SHA-512 can be used here"
                )
            username = str(settings.get("sasl.username", ""))
            password = str(settings.get("sasl.password", ""))
            if not username:
                raise WireAdminError(f"{protocol} needs sasl.username and sasl.password")
            principal = f"User:{username}"
        from_certificate = principal != "User:ANONYMOUS" and mechanism is None
        return cls(servers, context, mechanism, username, password, principal, from_certificate)

    def _sasl(self, versions: dict[int, range]) -> UpstreamSaslExchange | None:
        if self.mechanism is None:
            return None
        client = mechanism_client(self.mechanism, self.username, self.password)
        version = authenticate_version(versions.get(SASL_AUTHENTICATE))
        return UpstreamSaslExchange(self.mechanism, client, version)

    async def ask(self, api_key: int, wanted: range, build: Build) -> Any:
        """One request (``build(version)``'s fields) of the newest version in ``wanted`` that
        the server and kio both know, on a fresh connection to the first server that answers
        (after TLS and SASL)."""
        last: Exception | None = None
        for server in self.servers:
            try:
                return await asyncio.wait_for(
                    self._ask_one(server, api_key, wanted, build), TIMEOUT_S
                )
            except (OSError, TimeoutError, ProtocolError) as exc:
                last = exc
        name = _NAMES[api_key]
        where = ",".join(map(str, self.servers))
        raise WireAdminError(f"{name} at {where} as {self.named}: no answer ({last})")

    async def _ask_one(self, server: HostPort, api_key: int, wanted: range, build: Build) -> Any:
        reader, writer = await open_connection(server, self.ssl_context)
        try:
            frames = FrameBuffer()
            versions = version_ranges(await ask_api_versions(reader, writer, frames, 3, CLIENT_ID))
            exchange = self._sasl(versions)
            if exchange is not None:
                try:
                    await authenticate_stream(exchange, reader, writer, frames)
                except UpstreamAuthenticationError as exc:
                    raise WireAdminError(
                        f"{server} refused SASL {self.mechanism} for {self.username!r}: {exc}"
                    ) from None
            broker = versions.get(api_key, range(0))
            common = [v for v in wanted if v in broker and v in codec.codec_versions(api_key)]
            if not common:
                name = _NAMES[api_key]
                raise WireAdminError(f"{server} answers no {name} version this tool sends")
            version = common[-1]
            schema = codec.request_schema(api_key, version)
            request = codec.make_entity(schema, **build(schema))
            return await ask(reader, writer, frames, request, version, CLIENT_ID)
        finally:
            writer.close()


def _tls(settings: Mapping[str, object]) -> tuple[ssl.SSLContext, str | None]:
    """The TLS context of ``ssl.*`` settings, and the client certificate's subject as Java's
    ``X500Principal.getName()`` prints it (the mTLS principal before mapping rules)."""

    def path(key: str) -> Path | None:
        # librdkafka's ssl.ca.location=probe: the system's CA bundle, which the default
        # context of build_client_context also trusts (audit_connection sets it so).
        value = settings.get(key)
        return Path(str(value)) if value and value != "probe" else None

    cert = path("ssl.certificate.location")
    config = UpstreamTlsConfig(
        ca_file=path("ssl.ca.location"),
        cert_file=cert,
        key_file=path("ssl.key.location"),
        check_hostname=str(settings.get("ssl.endpoint.identification.algorithm", "https"))
        .lower()
        .strip()
        not in ("", "none"),
    )
    try:
        context = build_client_context(config)
        subject = (
            rfc2253(x509.load_pem_x509_certificate(cert.read_bytes()).subject)
            if cert is not None
            else None
        )
    except (OSError, ValueError) as exc:
        raise WireAdminError(f"TLS settings: {exc}") from None
    return context, subject


# -- DescribeAcls ---------------------------------------------------------------------------------


async def describe_acls(settings: Mapping[str, object], bootstrap: str | None = None) -> Snapshot:
    """Every ACL the server holds (DescribeAcls, an ANY filter). A top-level error code is an
    error naming the code and the principal (31: it lacks DESCRIBE on the cluster)."""
    connection = WireConnection.from_settings(settings, bootstrap)
    response = await connection.ask(
        DESCRIBE_ACLS,
        range(1, 4),
        lambda _: {
            "resource_type_filter": _ANY,
            "resource_name_filter": None,
            "pattern_type_filter": _ANY,
            "principal_filter": None,
            "host_filter": None,
            "operation": _ANY,
            "permission_type": _ANY,
        },
    )
    error = ErrorCode(response.error_code)
    if error != ErrorCode.none:
        where = ",".join(map(str, connection.servers))
        message = f": {response.error_message}" if response.error_message else ""
        need = (
            f"; {connection.principal} needs DESCRIBE on Cluster:LITERAL:kafka-cluster"
            if error == ErrorCode.cluster_authorization_failed
            else ""
        )
        raise WireAdminError(
            f"DescribeAcls at {where} as {connection.named} refused: "
            f"{error.name.upper()} ({int(error.value)}){message}{need}"
        )
    try:
        return frozenset(
            acl_binding(
                ResourceType(int(resource.resource_type)),
                str(resource.resource_name),
                str(entry.principal),
                AclOperation(int(entry.operation)),
                AclPermissionType(int(entry.permission_type)),
                host=str(entry.host),
                pattern_type=PatternType(int(resource.pattern_type)),
            )
            for resource in response.resources
            for entry in resource.acls
        )
    except ValueError as exc:
        raise WireAdminError(f"DescribeAcls answered an ACL this tool cannot read: {exc}") from None


# -- Metadata: does a topic exist ------------------------------------------------------------------


async def topic_exists(settings: Mapping[str, object], topic: str) -> bool:
    """Whether ``topic`` exists, asked with auto-creation off (Metadata v4+) so that the
    question creates nothing. Any answer other than "exists" or 3 UNKNOWN_TOPIC_OR_PARTITION
    is an error."""
    connection = WireConnection.from_settings(settings)
    response = await connection.ask(
        METADATA,
        range(4, 13),
        lambda schema: {
            "topics": (codec.make_entity(codec.nested_type(schema, "topics"), name=topic),),
            "allow_auto_topic_creation": False,
        },
    )
    for found in response.topics:
        if found.name == topic:
            error = ErrorCode(found.error_code)
            if error == ErrorCode.none:
                return True
            if error == ErrorCode.unknown_topic_or_partition:
                return False
            raise WireAdminError(
                f"Metadata for topic {topic!r} as {connection.named}: "
                f"{error.name.upper()} ({int(error.value)})"
            )
    raise WireAdminError(f"Metadata answered nothing for topic {topic!r}")
