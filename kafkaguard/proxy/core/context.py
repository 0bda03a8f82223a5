"""What one client connection offers its handlers: :class:`ConnectionContext`.

It implements :class:`~kafkaguard.proxy.handlers.support.base.HandlerContext` over the listener's
shared services (authorizer, upstream cluster view, node ports) and the connection's own
:class:`~kafkaguard.proxy.session.Session`. Authorization is asked with the KIP-504
``AuthorizableRequestContext`` of each request, built once per request however many checks
its handler makes. Under ``enforcement: log_only`` the authorizer decides and audits as usual,
then the request is handled as if allowed (``dry_run_results``), except ACL and credential
administration (``ENFORCED_IN_LOG_ONLY``). The mode is read from the listener at each request,
so a configuration reload that switches it applies to connections already open, as a new
super user or ACL does (kafkaguard/proxy/app/reload.py).

No I/O and no asyncio here: :mod:`kafkaguard.proxy.core.exchange` and the handler tests drive it in
memory (docs/design.md#request-path).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from kafkaguard.audit.config import ENFORCED_IN_LOG_ONLY, dry_run_results
from kafkaguard.policy.authorizer import (
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizationResult,
    Authorizer,
    RequestContext,
    operations_bitfield,
)
from kafkaguard.policy.internal_topics import InternalTopicGuard, InternalTopics
from kafkaguard.policy.model import (
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.protocol.answer_memo import AnswerMemo
from kafkaguard.protocol.codec import ResponsePayload
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.proxy.handlers import supported_versions
from kafkaguard.proxy.handlers.support.base import ConnectionState, Request

if TYPE_CHECKING:
    from kafkaguard.proxy.sasl.authenticator import SaslAuthenticator
    from kafkaguard.proxy.session import Session


class ClusterView(Protocol):
    """What handlers learn and ask about the upstream cluster (``UpstreamCluster``)."""

    @property
    def topic_names(self) -> dict[UUID, str]: ...

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None: ...

    def record_broker_api_versions(self, response: ResponsePayload) -> None: ...

    def latest_api_versions(self, version: int) -> ResponsePayload | None: ...

    @property
    def broker_versions(self) -> Mapping[int, range] | None: ...

    @property
    def api_versions_answers(self) -> AnswerMemo: ...


class NodePorts(Protocol):
    """The listener's proxy address for each upstream node (``ListenerRuntime``)."""

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]: ...

    def advertised_node(self, node_id: int) -> tuple[str, int] | None: ...


class Enforcement(Protocol):
    """Where the listener's current enforcement mode is read (``ListenerRuntime``: a reload
    may switch it, and the next decision of every connection follows)."""

    @property
    def log_only(self) -> bool: ...


class FixedEnforcement:
    """An enforcement mode set once (contexts built outside a listener: tests, tools)."""

    __slots__ = ("log_only",)

    def __init__(self, log_only: bool) -> None:
        self.log_only = log_only


ENFORCE = FixedEnforcement(log_only=False)


class ConnectionContext:
    """The :class:`HandlerContext` of one client connection."""

    __slots__ = (
        "_authorizer",
        "_cluster",
        "_context",
        "_context_header",
        "_enforcement",
        "_nodes",
        "connection_id",
        "connection_state",
        "listener_name",
        "peer",
        "sasl",
        "session",
    )

    def __init__(
        self,
        listener_name: str,
        session: Session,
        authorizer: Authorizer,
        cluster: ClusterView,
        nodes: NodePorts,
        *,
        enforcement: Enforcement = ENFORCE,
        sasl: SaslAuthenticator | None = None,
        peer: str = "?",
        connection_id: str = "?",
    ) -> None:
        self.listener_name = listener_name
        self.session = session
        self.sasl = sasl
        """The SASL state machine on SASL_PLAINTEXT/SASL_SSL listeners; gates every request."""
        self.peer = peer
        """``host:port`` of the client, for log lines."""
        self.connection_id = connection_id
        """Kafka's ``Selector`` connection id: ``local:port-peer:port-index``."""
        self.connection_state = ConnectionState()
        self._authorizer = (
            authorizer
            if isinstance(authorizer, InternalTopicGuard)
            else InternalTopicGuard(authorizer, InternalTopics())
        )
        """Every question passes the internal-topics rule (``_kafkaguard-*`` at least)."""
        self._cluster = cluster
        self._nodes = nodes
        self._enforcement = enforcement
        self._context_header: RequestHeaderInfo | None = None
        self._context: RequestContext | None = None

    def log_fields(self) -> dict[str, object]:
        """The structured fields of this connection's log lines (``logging.format: json``)."""
        return {
            "listener": self.listener_name,
            "connection_id": self.connection_id,
            "client_address": self.peer,
            "principal": str(self.session.principal),
        }

    @property
    def upstream_deferred(self) -> bool:
        """No broker connection yet by design: SASL not completed (a KIP-368
        re-authentication in progress counts as authenticated)."""
        sasl = self.sasl
        return sasl is not None and not (sasl.complete or sasl.reauthenticating)

    def _request_context(self, request: Request) -> RequestContext:
        """KIP-504 context of ``request``, built once per request however many checks run."""
        header = request.header
        if self._context_header is not header or self._context is None:
            self._context = self.session.request_context(header)
            self._context_header = header
        return self._context

    def _dry_run(self, request: Request) -> bool:
        return self._enforcement.log_only and request.header.api_key not in ENFORCED_IN_LOG_ONLY

    # -- authorization -----------------------------------------------------------------------
    def authorize(self, request: Request, actions: Sequence[Action]) -> list[AuthorizationResult]:
        context = self._request_context(request)
        results = self._authorizer.authorize(context, actions)
        if self._dry_run(request):  # as if allowed, but never the proxy's own topics
            return self._authorizer.refusing(context, actions, dry_run_results(actions, results))
        return results

    def authorize_by_resource_type(
        self, request: Request, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        result = self._authorizer.authorize_by_resource_type(
            self._request_context(request), operation, resource_type
        )
        return AuthorizationResult.ALLOWED if self._dry_run(request) else result

    def authorized_operations(self, request: Request, resource: ResourcePattern) -> int:
        context = self._request_context(request)
        operations = self._authorizer.authorized_operations(context, resource)
        if self._dry_run(request) and not (
            resource.resource_type is ResourceType.TOPIC
            and self._authorizer.refused(context, resource.name)
        ):  # as if allowed: every operation the resource supports
            operations = set(SUPPORTED_OPERATIONS.get(resource.resource_type, ()))
        return operations_bitfield(operations)

    def internal_topic(self, request: Request, name: str) -> bool:
        return self._authorizer.refused(self._request_context(request), name)

    # -- ACL administration ------------------------------------------------------------------
    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return self._authorizer.acls(acl_filter)

    def create_acls(
        self, request: Request, bindings: Sequence[AclBinding]
    ) -> Awaitable[list[AclCreateResult]]:
        return self._authorizer.create_acls(self._request_context(request), bindings)

    def delete_acls(
        self, request: Request, filters: Sequence[AclBindingFilter]
    ) -> Awaitable[list[AclDeleteResult]]:
        return self._authorizer.delete_acls(self._request_context(request), filters)

    # -- the upstream cluster ----------------------------------------------------------------
    def topic_name(self, topic_id: UUID) -> str | None:
        return self._cluster.topic_names.get(topic_id)

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None:
        self._cluster.learn_topic_names(topics)

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self._nodes.advertise_node(node_id, host, port)

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        return self._nodes.advertised_node(node_id)

    def record_broker_api_versions(self, response: ResponsePayload) -> None:
        self._cluster.record_broker_api_versions(response)

    def latest_api_versions(self, version: int) -> ResponsePayload | None:
        return self._cluster.latest_api_versions(version)

    def broker_versions(self) -> Mapping[int, range] | None:
        return self._cluster.broker_versions

    def supported_versions(self, api_key: int) -> range:
        return supported_versions(api_key, self._cluster.broker_versions)

    @property
    def api_versions_answers(self) -> AnswerMemo:
        return self._cluster.api_versions_answers
