"""What the sans-I/O core asks its shell to do, and why a connection ends.

:class:`~kafkaguard.proxy.core.exchange.Exchange` returns these commands from every event;
the asyncio shell (:mod:`kafkaguard.proxy.net.connection`) carries them out in order and
never decides anything itself. :class:`CloseCause` names why a connection was refused or
closed: the keys of the listener's counters and of its rate-limited log lines, shared by the
core (which decides a close), the listener (which refuses at accept) and ``/metrics``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

# Imported at run time, not only for the type checker: compiled (kafkaguard/protocol/build.py),
# this module's fields check their values against these classes, which must exist by then.
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.inflight import Slot
from kafkaguard.proxy.handlers.support.base import Respond


class CloseCause(enum.StrEnum):
    """Why a client connection was refused or closed (counter and log keys)."""

    MAX_CONNECTIONS = "max_connections"
    """Refused at accept: the listener holds ``max_connections``."""
    MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
    """Refused at accept: the client's address holds its ``max_connections_per_ip``."""
    CONNECTION_RATE = "max_connection_creation_rate"
    """Refused at accept: more new connections this second than the listener's rate."""
    IP_CONNECTION_RATE = "connection_creation_rate"
    """Refused at accept: the client's address is over its KIP-612 ``connection_creation_rate``
    (held unread for the throttle time, then closed, as Kafka's ``Acceptor`` does)."""
    PROXY_PROTOCOL = "proxy_protocol"
    """A ``proxy_protocol`` listener: the TCP peer is not in ``proxy_protocol_trusted_cidrs``
    (closed at accept), or the PROXY protocol header is missing, malformed, incomplete
    within ``authentication_timeout_ms`` or names no client IP address."""
    SNI = "sni"
    """A ``routing: sni`` listener: the first bytes are not a TLS ClientHello in one record,
    or its server name is missing or routes to no broker (kafkaguard/proxy/edge/sni.py)."""
    AUTHENTICATION_TIMEOUT = "authentication_timeout"
    """TLS handshake and SASL not completed within ``authentication_timeout_ms``."""
    AUTHENTICATION_FAILED = "authentication_failed"
    """TLS handshake failure, unmapped certificate, SASL failure or a request before it."""
    IDLE = "idle"
    """Nothing read or written, nothing in flight, for ``connections_max_idle_ms``."""
    BAD_REQUEST = "bad_request"
    """A frame or request the proxy refuses (size, framing, decoding, API, a handler's Close)."""
    CLIENT_CLOSED = "client_closed"
    """The client disconnected (logged only when requests were left unanswered)."""
    UPSTREAM = "upstream"
    """The broker side failed: cannot connect, closed, bad response, refused credentials."""
    INTERNAL_ERROR = "internal_error"
    """A fault in the proxy itself while handling a request (logged with its traceback)."""
    SHUTDOWN = "shutdown"
    """Closed by the proxy's shutdown (drained or cut)."""


class SendBroker:
    """Write these request frames to the broker, in order.

    This and :class:`SendClient`, built for every read, are slots classes with ``Final``
    attributes, immutable and compared by value as the frozen dataclasses they were: compiled,
    a frozen dataclass's ``__init__`` is still the ``dataclasses`` module's Python
    (docs/design.md#the-compiled-modules)."""

    __slots__ = ("frames",)

    def __init__(self, frames: list[Frame]) -> None:
        self.frames: Final = frames

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SendBroker) and self.frames == other.frames

    def __repr__(self) -> str:
        return f"SendBroker(frames={self.frames!r})"


class SendClient:
    """Write these bytes to the client, in order (whole responses or streamed chunks)."""

    __slots__ = ("data",)

    def __init__(self, data: Sequence[bytes | memoryview]) -> None:
        self.data: Final = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SendClient) and self.data == other.data

    def __repr__(self) -> str:
        return f"SendClient(data={self.data!r})"


@dataclass(frozen=True, slots=True)
class OpenBroker:
    """Open the broker connection; report :meth:`Exchange.broker_connected` (or close)."""


@dataclass(frozen=True, slots=True)
class PauseClient:
    """Stop reading from the client."""


@dataclass(frozen=True, slots=True)
class ResumeClient:
    """Read from the client again."""


@dataclass(frozen=True, slots=True)
class Await:
    """Await ``answer()`` (a :class:`RespondLater`), then report :meth:`Exchange.answered`
    with ``slot`` (or :meth:`Exchange.answer_failed`). ``cancel_on_close``: abandon it when
    the connection closes (a password hash still queued never runs for a client that left)."""

    slot: Slot
    answer: Callable[[], Awaitable[Respond]]
    cancel_on_close: bool


@dataclass(frozen=True, slots=True)
class AwaitDecisions:
    """Await ``ready`` (an authorizer's lookups, ``DecisionPendingError``), then report
    :meth:`Exchange.decisions_ready`: the held request is asked again."""

    ready: Awaitable[object]


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Close both sides after ``after_s`` seconds (at once if the client leaves first). Counted
    under ``cause``; ``reason`` is logged at ``level`` (None: nothing is logged). The exchange
    is closed from this command on: every later event is ignored."""

    reason: str | None
    cause: CloseCause
    level: int = logging.WARNING
    after_s: float = 0.0


Command = (
    SendBroker
    | SendClient
    | OpenBroker
    | PauseClient
    | ResumeClient
    | Await
    | AwaitDecisions
    | CloseConnection
)
