"""Errors raised by the sans-I/O protocol core.

Why a hierarchy: the connection shell needs to tell a client's malformed input (log, answer if
possible, close that one connection) from a fault of the proxy itself. Each error carries the
short reason that goes into the log line and the connection's close reason.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The peer sent something that is not a valid Kafka frame or message."""


class FrameTooLarge(ProtocolError):
    """A length prefix exceeds the configured maximum (checked before any allocation)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class MalformedFrame(ProtocolError):
    """A frame is too short, has a negative length, or its contents cannot be decoded."""


class UnknownApiKey(ProtocolError):
    """The request names an API key that the codec does not know."""


class UnsupportedVersion(ProtocolError):
    """The request's version is outside what the codec can decode."""
