"""The contract between the connection shell and the per-API handlers.

A handler turns one decoded request into a :data:`Verdict`, synchronously and without I/O
(Kroxylicious' ``ApiEnforcement``, made synchronous):

* :class:`Forward` — send the request upstream. With ``request=None`` the client's original
  frame is sent byte for byte; a ``rewrite`` asks the shell to decode the broker's response and
  pass it through the function (an unchanged object returned means the broker's bytes are
  forwarded as they were).
* :class:`Respond` — the proxy answers; nothing reaches the broker.
* :class:`AskFirst` — ask the broker something first (``questions.py``), then decide on its
  answer.
* :class:`Close` — drop the connection (e.g. a denied ``acks=0`` Produce, which has no response).

Handlers are stateless singletons; what a connection knows lives in :class:`HandlerContext`,
and what a handler must remember between requests of one connection (e.g. Fetch's session
mirrors) in its :class:`ConnectionState`.

The hot keys (Produce, Fetch) decide in two phases instead of asking the context for each
check (docs/design.md#two-phase-handlers): ``on_request`` returns :class:`Authorize`, the
actions to authorize and what the handler needs to read their results; the dispatcher
(``core/dispatch.py``) makes one ``authorize`` call for all of them and hands the results to
:meth:`ApiHandler.on_authorized`, which builds the verdict — or returns a further
:class:`Authorize` when Kafka makes a check only once an earlier one passed (a transactional
Produce's topics, after WRITE on its transactional id).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, cast
from uuid import UUID

from mypy_extensions import mypyc_attr
from typing_extensions import TypeVar  # PEP 696 defaults, in typing itself from 3.13

from kafkaguard.policy.authorizer import (
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizationResult,
)
from kafkaguard.policy.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.protocol.codec import (
    ErrorCode,
    RequestPayload,
    ResponsePayload,
    build_error_response,
    codec_versions,
    decode_request,
)
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.inflight import ResponseTransform

if TYPE_CHECKING:
    from kafkaguard.protocol.answer_memo import AnswerMemo
    from kafkaguard.proxy.sasl.authenticator import SaslAuthenticator
    from kafkaguard.proxy.session import Session

ResponseRewrite = Callable[[Any], ResponsePayload]  # Any: below
"""A change of the broker's decoded response. Its argument is the response to the request
the handler forwarded, whose schema only the handler knows: each rewrite names it (a Protocol
over kio's classes of every version), which a ``ResponsePayload`` parameter would not let it."""

_S = TypeVar("_S")

B = TypeVar("B", default=Any)  # Any: below
"""The body a handler reads (:meth:`ApiHandler.read_request`): a Protocol over kio's classes
of its API's versions, or a skim's. Unparameterized (the registry, the dispatcher, which pair a
handler with an API key the type system does not see) it is any body."""

B_co = TypeVar("B_co", covariant=True, default=Any)  # Any: as B's
""":class:`Request`'s ``B``: a request whose body has more fields passes for one with fewer
(a helper reading what ShareFetch and ShareAcknowledge share takes either)."""

St = TypeVar("St", default=Any)  # Any: as B's, for the state of :class:`Authorize`
"""What a two-phase handler hands from :meth:`ApiHandler.on_request` to its
:meth:`ApiHandler.on_authorized` (:class:`Authorize`'s ``state``)."""


class Request(Generic[B_co]):
    """A request as the handler sees it. A plain slots class, not a frozen dataclass: one is
    built for every request, and a frozen dataclass sets each field through
    ``object.__setattr__``. Handlers never change it. Generic only for the type checker:
    ``Request(...)`` is built unparameterized, at no cost."""

    __slots__ = ("body", "frame", "header")

    def __init__(self, header: RequestHeaderInfo, frame: Frame, body: B_co) -> None:
        self.header = header
        self.frame = frame
        """The whole original frame, size prefix included."""
        self.body = body
        """What :meth:`ApiHandler.read_request` made of the frame: decoded by kio when the
        handler asked for it (``decode_request``), a skim of the few fields it needs
        (Produce), or ``None``."""


@dataclass(frozen=True, slots=True)
class Forward:
    request: RequestPayload | None = None
    """A replacement body to encode; ``None`` forwards the original bytes."""
    rewrite: ResponseRewrite | None = None
    expects_response: bool = True
    """False only for ``acks=0`` Produce, which the broker never answers."""
    decode_if: Callable[[Frame], bool] | None = None
    """A cheap look at the broker's raw response: when it answers False, ``rewrite`` would
    change nothing, so the response is not decoded and its bytes go back as they are."""
    transform: ResponseTransform | None = None
    """The same change as ``rewrite``, made on the broker's raw response without decoding it;
    the exchange applies it instead of ``rewrite`` (the ``node_endpoints`` tail,
    :class:`~kafkaguard.protocol.skim.tails.NodeEndpointsTail`, even while the response streams)."""


@dataclass(frozen=True, slots=True)
class Respond:
    response: ResponsePayload
    close_after: str | None = None
    """Read nothing more; close the connection, with this reason, once every pending response
    has been written (a failed SASL authentication: ``SaslServerAuthenticator`` answers, then
    closes)."""


@dataclass(frozen=True, slots=True)
class RespondLater:
    """The proxy answers after awaiting ``response()`` (e.g. an ACL change persisted to a
    store); later requests still wait behind it for their responses."""

    response: Callable[[], Awaitable[Respond]]


@dataclass(frozen=True, slots=True)
class AskFirst:
    """Send ``question`` (the proxy's own request, e.g. Metadata) to the broker on this client's
    connection; ``then`` gets the broker's decoded answer and returns the verdict for the
    client's request. The answer never reaches the client. Later requests of the connection
    wait until the verdict is applied, so answers keep their order: for rare cases
    (``questions.py``), not the data path's normal flow."""

    question: RequestPayload
    then: Callable[[Any], Verdict]  # Any: the answer to ``question``, as ResponseRewrite's


@dataclass(frozen=True, slots=True)
class Close:
    reason: str


Verdict = Forward | Respond | RespondLater | AskFirst | Close


class Authorize(Generic[St]):
    """Phase one of a two-phase handler: authorize ``actions`` (in this order, in one call),
    then call :meth:`ApiHandler.on_authorized` with ``state`` and the results. A plain slots
    class: one is built per request on the data path."""

    __slots__ = ("actions", "state")

    def __init__(self, actions: Sequence[Action], state: St) -> None:
        self.actions = actions
        self.state = state
        """What the handler needs to read the results (its own type)."""


Checks = Generator[Sequence[Action], Sequence[AuthorizationResult], Verdict]
"""A decision that makes its checks one after another, in Kafka's order, where each depends on
the last (a group, then its topics, group after group): a generator that yields each step's
actions, is sent their results, and returns the verdict. :func:`advance` turns it into
:class:`Authorize` steps, so the dispatcher still makes every ``authorize`` call."""


def advance(
    checks: Checks, results: Sequence[AuthorizationResult] | None = None
) -> Verdict | Authorize:
    """The next step of ``checks`` (its first when ``results`` is None; after a step, the
    results of its actions): an :class:`Authorize` whose state is ``checks``, or the verdict.
    :class:`StepwiseHandler` starts it; ``ApiHandler.on_authorized`` resumes it."""
    try:
        actions = next(checks) if results is None else checks.send(results)
    except StopIteration as done:
        verdict: Verdict = done.value
        return verdict
    return Authorize(actions, checks)


FORWARD = Forward()
"""The verdict for "send the client's own bytes, return the broker's own bytes"."""


class ConnectionState:
    """Handler state that lives as long as one client connection: one instance per type,
    created with ``kind()`` the first time a handler asks for it."""

    __slots__ = ("_slots",)

    def __init__(self) -> None:
        self._slots: dict[type[object], object] = {}

    def get(self, kind: type[_S]) -> _S:
        state = self._slots.get(kind)
        if state is None:
            state = self._slots[kind] = kind()
        return cast(_S, state)


_K = TypeVar("_K")
_V = TypeVar("_V")


def remember_newest(entries: dict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Put ``key`` last in ``entries``' order, then evict the oldest entries past ``limit``:
    the bound of a connection's session mirrors (Fetch, ShareFetch), which a client could
    otherwise grow without end."""
    entries.pop(key, None)
    entries[key] = value
    while len(entries) > limit:
        del entries[next(iter(entries))]


class HandlerContext(Protocol):
    """What a handler may ask of the proxy about the connection it serves."""

    @property
    def session(self) -> Session: ...

    @property
    def connection_state(self) -> ConnectionState:
        """What handlers keep for this connection between its requests."""
        ...

    @property
    def sasl(self) -> SaslAuthenticator | None:
        """The connection's SASL state machine; None on listeners without SASL."""
        ...

    def authorize(self, request: Request, actions: Sequence[Action]) -> list[AuthorizationResult]:
        """The authorizer's decisions, in order, for this request's KIP-504 context."""
        ...

    def authorize_by_resource_type(
        self, request: Request, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult: ...

    def authorized_operations(self, request: Request, resource: ResourcePattern) -> int:
        """KIP-430 bitfield of the operations allowed on ``resource``."""
        ...

    def internal_topic(self, request: Request, name: str) -> bool:
        """``name`` is one of the proxy's internal topics, out of this request's principal's
        reach whatever it may do on the cluster (kafkaguard/policy/internal_topics.py): for
        the checks on the whole cluster that authorize every topic without naming one."""
        ...

    # ACL administration (DescribeAcls/CreateAcls/DeleteAcls are answered by the proxy).
    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """``Authorizer.acls``: every stored binding ``acl_filter`` matches."""
        ...

    def create_acls(
        self, request: Request, bindings: Sequence[AclBinding]
    ) -> Awaitable[list[AclCreateResult]]:
        """``Authorizer.createAcls`` with this request's context (await it in a RespondLater)."""
        ...

    def delete_acls(
        self, request: Request, filters: Sequence[AclBindingFilter]
    ) -> Awaitable[list[AclDeleteResult]]:
        """``Authorizer.deleteAcls`` with this request's context (await it in a RespondLater)."""
        ...

    def topic_name(self, topic_id: UUID) -> str | None:
        """The name of a topic id seen in a broker response, ``None`` if never seen."""
        ...

    def learn_topic_names(self, topics: Iterable[tuple[UUID, str]]) -> None: ...

    @property
    def listener_name(self) -> str: ...

    def advertise_node(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Record a broker's real address; return the proxy address clients must use."""
        ...

    def advertised_node(self, node_id: int) -> tuple[str, int] | None:
        """The proxy address of a node learned earlier, ``None`` if unknown."""
        ...

    @property
    def upstream_deferred(self) -> bool:
        """True while the connection has no broker connection by design: a SASL listener's
        client that has not authenticated yet, whose requests must not reach a broker (what
        would be forwarded is answered by the proxy)."""
        ...

    def record_broker_api_versions(self, response: ResponsePayload) -> None:
        """Keep the broker's error-free ApiVersions ``response``: its ranges bound
        :meth:`supported_versions`, and later clients may be answered from it."""
        ...

    def latest_api_versions(self, version: int) -> ResponsePayload | None:
        """The broker's latest ApiVersions response to build a ``version`` answer from (that
        version's if seen, else a newer one's, else an older one's); None before any."""
        ...

    def broker_versions(self) -> Mapping[int, range] | None:
        """The broker's version range of each API key (its latest ApiVersions answer); None
        before any. The dispatcher's version gate reads it as data."""
        ...

    def supported_versions(self, api_key: int) -> range:
        """What the proxy advertises: handler ∩ codec ∩ broker
        (``handlers.supported_versions``)."""
        ...

    @property
    def api_versions_answers(self) -> AnswerMemo:
        """The upstream cluster's rewritten ApiVersions answers (shared by its connections)."""
        ...


# Compiled (kafkaguard/protocol/build.py) with the Produce, Fetch and Metadata handlers; every
# other handler, and the tests' own, subclass it in Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class ApiHandler(Generic[B, St]):
    """Base of the per-API handlers. It forwards nothing: a handler that does not decide
    closes the connection (docs/design.md#fail-closed), so every API key is handled
    explicitly. ``B`` is the body it reads, ``St`` the state of its :class:`Authorize`."""

    api_key: ClassVar[int]
    max_version: ClassVar[int | None] = None
    """Cap below what kio knows, for versions the handler cannot reason about yet."""
    decode_request: ClassVar[bool] = False
    answered_by_proxy: ClassVar[bool] = False
    """True for APIs the proxy answers itself (never forwarded): advertised whatever the
    broker supports."""

    def __init__(self) -> None:
        known = codec_versions(self.api_key)
        cap = self.max_version
        self.versions: range = (
            known if cap is None else range(known.start, min(known.stop, cap + 1))
        )
        """handler ∩ kio, computed once per handler: the dispatcher's version gate reads it on
        every request (an instance attribute: a cheaper read than any property)."""

    def read_request(self, header: RequestHeaderInfo, frame: Frame) -> B:
        """The body :meth:`on_request` reads: kio's decode when ``decode_request``, else
        ``None``. A data-path handler reads only the fields it authorizes instead."""
        # kio's class for this API key and version, which ``B`` describes; passed on as B
        # through an untyped name, as a cast would cost a call per request (Fetch's included).
        body: Any = None  # Any: kio's decode, whichever schema B is
        if self.decode_request:
            body = decode_request(frame, header.api_key, header.api_version)
        typed: B = body
        return typed

    def on_request(self, request: Request[B], ctx: HandlerContext) -> Verdict | Authorize[St]:
        return Close(f"{type(self).__name__} does not decide api key {self.api_key}")

    def on_authorized(
        self,
        request: Request[B],
        ctx: HandlerContext,
        state: St,
        results: Sequence[AuthorizationResult],
    ) -> Verdict | Authorize[St]:
        """Phase two: the verdict once the actions of :class:`Authorize` are decided
        (``results`` in their order). Only handlers that return :class:`Authorize` get here;
        a step of :data:`Checks` (:class:`StepwiseHandler`) is resumed with its results."""
        if isinstance(state, Generator):
            return advance(state, results)
        return Close(f"{type(self).__name__} asked for authorization it does not read")

    def topic_ids(self, request: Request[B]) -> Iterable[UUID]:
        """The topic ids the request names (id-keyed versions). Ids the proxy has not seen yet
        are resolved with the broker before :meth:`on_request` runs (``core/dispatch.decide``)."""
        return ()

    def unsupported_version(self, header: RequestHeaderInfo, ctx: HandlerContext) -> Verdict:
        """Kafka answers an unsupported version with the API's UNSUPPORTED_VERSION error when
        the version can be parsed at all; otherwise the connection is closed."""
        if header.api_version in codec_versions(self.api_key):
            return Respond(
                build_error_response(
                    self.api_key, header.api_version, ErrorCode.unsupported_version
                )
            )
        return Close(f"unsupported version {header.api_version} of api key {self.api_key}")


@mypyc_attr(allow_interpreted_subclasses=True)  # as ApiHandler
class StepwiseHandler(ApiHandler[B]):
    """A handler whose decision is one generator, :meth:`checks`: it reads as the
    ``KafkaApis.handleXxx`` it mirrors, each ``authorize`` call a ``yield`` of the actions that
    receives their results, and returns the verdict. The dispatcher makes the calls
    (:func:`advance` turns each ``yield`` into an :class:`Authorize` step). Generic over the
    body it reads, as :class:`ApiHandler` is."""

    def checks(self, request: Request[B], ctx: HandlerContext) -> Checks:
        raise NotImplementedError

    def on_request(self, request: Request[B], ctx: HandlerContext) -> Verdict | Authorize:
        return advance(self.checks(request, ctx))
