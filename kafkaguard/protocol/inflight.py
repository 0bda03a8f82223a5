"""Reply ordering for one client connection, without I/O.

Theory of operation. Kafka clients match each response to their *oldest* outstanding request
and treat anything else as fatal (aiokafka closes with OUT_OF_SYNC; the Java client throws).
The broker answers one connection's requests in order, but the proxy also answers some requests
itself (errors, denials) and those answers must not overtake earlier requests still at the
broker. So every request that expects a response takes a *slot*, in arrival order:

* a slot forwarded upstream waits for the broker's response; responses from the broker fill
  the upstream slots strictly in FIFO order (and must carry the expected correlation id);
* a slot answered locally is filled at once;
* :meth:`InflightQueue.take_ready` releases filled slots from the head only.

Worked example: requests A (forwarded), B (answered locally), C (forwarded) arrive. B is filled
at once but cannot leave before A. The broker answers A → A and B are released; the broker
answers C → C is released.

``acks=0`` Produce requests expect no response and take no slot (Kafka sends none). A
*question* the proxy asks the broker on its own behalf takes an upstream place only: its answer
goes to the proxy (``answer``), never to the client.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkaguard.protocol.errors import ProtocolError
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.skim.tails import NodeEndpointsTail

ResponseTransform = Callable[[Frame], Frame]
"""Turns the broker's response frame into the frame the client receives."""


class OutOfSync(ProtocolError):
    """The broker answered with a correlation id that is not the oldest one outstanding."""


class Slot:
    """One request awaiting its response (upstream or local)."""

    __slots__ = (
        "answer",
        "api_key",
        "api_version",
        "correlation_id",
        "received_at",
        "response",
        "transform",
        "upstream_s",
    )

    def __init__(
        self,
        correlation_id: int,
        api_key: int,
        api_version: int,
        transform: ResponseTransform | None,
        answer: Callable[[Frame], bool] | None = None,
        received_at: float = 0.0,
    ) -> None:
        self.correlation_id = correlation_id
        self.received_at = received_at
        """When the request arrived (the shell's monotonic clock), for latency metrics."""
        self.upstream_s = 0.0
        """Seconds the broker took to answer it (0 for answers of the proxy)."""
        self.api_key = api_key
        self.api_version = api_version
        self.transform = transform
        self.answer = answer
        """Set on a question's slot: receives the broker's answer instead of the client;
        returns False when it closed the connection."""
        self.response: Frame | None = None

    def __repr__(self) -> str:
        state = "ready" if self.response is not None else "waiting"
        return f"Slot(corr={self.correlation_id}, api={self.api_key}v{self.api_version}, {state})"


class InflightQueue:
    """Slots in request order; at most ``limit`` outstanding (the shell pauses reading)."""

    __slots__ = ("_limit", "_slots", "_upstream")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # Lists, not deques: an empty deque holds a 64-item block (~760 B, two per idle
        # connection); at most ``limit`` slots are outstanding, so ``pop(0)`` is a short move.
        self._slots: list[Slot] = []
        self._upstream: list[Slot] = []

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def full(self) -> bool:
        return len(self._slots) >= self._limit

    @property
    def awaiting_upstream(self) -> int:
        return len(self._upstream)

    def forward(
        self,
        correlation_id: int,
        api_key: int,
        api_version: int,
        transform: ResponseTransform | None = None,
        received_at: float = 0.0,
    ) -> None:
        """Reserve a slot that the broker's next unclaimed response will fill."""
        slot = Slot(correlation_id, api_key, api_version, transform, None, received_at)
        self._slots.append(slot)
        self._upstream.append(slot)

    def ask(
        self,
        correlation_id: int,
        api_key: int,
        api_version: int,
        answer: Callable[[Frame], bool],
    ) -> None:
        """Reserve the upstream place of a question; its answer goes to ``answer`` and takes no
        place in the client's order."""
        self._upstream.append(Slot(correlation_id, api_key, api_version, None, answer))

    def respond(
        self,
        correlation_id: int,
        api_key: int,
        api_version: int,
        frame: Frame,
        received_at: float = 0.0,
    ) -> None:
        """Reserve a slot filled by the proxy itself."""
        self.reserve(correlation_id, api_key, api_version, received_at).response = frame

    def reserve(
        self, correlation_id: int, api_key: int, api_version: int, received_at: float = 0.0
    ) -> Slot:
        """Reserve a slot the proxy fills later (an answer computed asynchronously); set its
        ``response`` and call :meth:`take_ready`."""
        slot = Slot(correlation_id, api_key, api_version, None, None, received_at)
        self._slots.append(slot)
        return slot

    def claim(self, correlation_id: int) -> Slot:
        """The slot a broker response with ``correlation_id`` belongs to (oldest upstream)."""
        if not self._upstream:
            raise OutOfSync(f"unexpected response with correlation id {correlation_id}")
        slot = self._upstream[0]
        if slot.correlation_id != correlation_id:
            raise OutOfSync(
                f"response correlation id {correlation_id}, expected {slot.correlation_id}"
            )
        self._upstream.pop(0)
        return slot

    def can_stream(self, correlation_id: int) -> bool:
        """Whether the broker response ``correlation_id`` may go to the client as it arrives:
        it answers the oldest slot of all and its request asked for no rewrite, or for one
        made while it streams (a Fetch response's ``node_endpoints`` tail)."""
        if not self._upstream or not self._slots:
            return False
        slot = self._upstream[0]
        transform = slot.transform
        return (
            slot is self._slots[0]
            and (
                transform is None
                or (isinstance(transform, NodeEndpointsTail) and transform.streamable)
            )
            and slot.correlation_id == correlation_id
        )

    def claim_for_stream(self) -> Slot:
        """Release the head slot, whose response is being streamed (after :meth:`can_stream`)."""
        self._upstream.pop(0)
        return self._slots.pop(0)

    def owed_locally(self) -> bool:
        """Whether the oldest unwritten slot is the proxy's own to fill (answered or being
        computed): it can still be written when the broker is gone."""
        if not self._slots:
            return False
        head = self._slots[0]
        return head.response is not None or all(s is not head for s in self._upstream)

    def take_ready(self) -> list[Slot]:
        """Slots whose responses may be written now, in request order (``response`` set)."""
        out: list[Slot] = []
        slots = self._slots
        while slots and slots[0].response is not None:
            out.append(slots.pop(0))
        return out
