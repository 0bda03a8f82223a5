"""What a new connection's ApiVersions costs once the broker's answer has been seen:
:class:`AnswerMemo` (``ApiVersionsHandler``, ``kafkaguard/proxy/handlers/api_versions.py``)."""

from __future__ import annotations

from collections.abc import Callable

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ResponsePayload
from kafkaguard.protocol.framing import Frame
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.inflight import ResponseTransform


class AnswerMemo:
    """The client's answers (rewritten by ``ApiVersionsHandler``) to the last
    :data:`SIZE` distinct error-free broker ApiVersions answers, shared by the connections of
    one upstream cluster.

    Why it is exact: the rewrite depends on the broker's answer alone. It records the answer
    first, which sets the broker ranges ``supported_versions`` narrows by, and the rest of
    ``supported_versions`` (handlers, codec) is fixed. So an answer byte-identical to one seen
    (same request version, same bytes after the correlation id: the ApiVersions response
    header is always v0, KIP-511) gets the same bytes, behind its own correlation id. It is
    still recorded (the broker's state, :meth:`HandlerContext.record_broker_api_versions`);
    any other answer is decoded as usual. Keyed by the bytes themselves, not by node or
    listener: nodes answering alike share an entry, and one answering differently cannot be
    confused with another.
    """

    SIZE = 8
    """A cluster's brokers answer alike, or two ways during a rolling upgrade; request versions
    are a few. The oldest entry goes first."""

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        self._answers: dict[tuple[int, bytes], tuple[ResponsePayload, bytes, bytes]] = {}
        """(request version, the broker's frame after its correlation id) → (the decoded broker
        answer, the client's frame's size prefix, the client's frame after its correlation
        id)."""

    def transform(
        self,
        header: RequestHeaderInfo,
        rewrite: Callable[[ResponsePayload], ResponsePayload],
        record: Callable[[ResponsePayload], None],
    ) -> ResponseTransform:
        """``rewrite`` on the broker's answer to ``header``'s request, through the memo;
        ``record`` keeps a remembered answer as ``rewrite`` keeps a decoded one."""
        answers = self._answers
        version = header.api_version

        def transform(frame: Frame) -> Frame:
            key = (version, bytes(frame[8:]))
            known = answers.get(key)
            if known is not None:
                response, size, body = known
                record(response)
                return b"".join((size, frame[4:8], body))
            response = codec.decode_response(frame, header.api_key, version)
            new = rewrite(response)
            if new is response:  # an error answer: as the broker sent it, not kept
                return frame
            encoded = codec.encode_response(new, header.correlation_id)
            if len(answers) >= self.SIZE:
                del answers[next(iter(answers))]
            answers[key] = (response, encoded[:4], encoded[8:])
            return encoded

        return transform
