"""SNI routing (``routing: sni``): every broker of the cluster on a TLS listener's one port.

A client reaches node N by the name ``advertised_host_pattern`` gives it (``broker-$(nodeId)
.kafka.example.com`` → ``broker-3.kafka.example.com``) and the cluster as a whole by
``bootstrap_host``; both resolve to the proxy (one DNS wildcard, or one load balancer
address). The server name of the client's TLS ClientHello (RFC 6066 §3) picks the upstream
broker, as in Kroxylicious's ``SniRoutingClusterNetworkAddressConfigProvider``.

Why the ClientHello is read here rather than in OpenSSL's server name callback: the route must
be known before the connection object exists (it names its upstream node), and a refused name
must cost no handshake. So the listener peeks (``MSG_PEEK``) at the first TLS record and this
module parses it, sans I/O; the TLS handshake then starts on the same, unconsumed bytes. A
ClientHello that does not fit one TLS record is refused (fail closed; OpenSSL's, Java's and Go's
clients send it in one record, up to 16 KiB, post-quantum key shares included).

Refusals (fail closed, never a default broker): no server name, a name that is neither the
bootstrap name nor one of the pattern's, or bytes that are not a TLS ClientHello. They get a
fatal ``unrecognized_name`` alert (RFC 8446 §6.2; RFC 6066 §3) and a close.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

NODE_ID_PLACEHOLDER: Final = "$(nodeId)"
"""Kroxylicious's and Strimzi's spelling of the node id in an advertised host pattern."""
MAX_RECORD_BYTES: Final = 5 + 2**14
"""A TLS plaintext record: 5 header bytes and at most 2^14 of fragment (RFC 8446 §5.1)."""
UNRECOGNIZED_NAME_ALERT: Final = bytes((21, 3, 3, 0, 2, 2, 112))
"""An alert record (content type 21, TLS 1.2 record version, length 2): fatal (2),
unrecognized_name (112)."""
_INT_MAX: Final = 2**31 - 1
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


class ClientHelloError(ValueError):
    """The bytes are not one TLS ClientHello in one record."""


class UnroutableName(ValueError):
    """A server name (or its absence) that routes to no broker."""


def dns_name(text: str) -> str:
    """``text`` as a host name is compared: lower case, without a trailing dot. Raises
    ValueError unless it is a DNS name (letters, digits and hyphens in dot-separated labels)."""
    name = text.lower().removesuffix(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(x) for x in name.split(".")):
        raise ValueError(f"{text!r} is not a DNS name")
    return name


@dataclass(frozen=True, slots=True)
class SniRouting:
    """A listener's ``bootstrap_host`` and ``advertised_host_pattern``."""

    bootstrap_host: str
    advertised_host_pattern: str

    @classmethod
    def parse(cls, bootstrap_host: str, advertised_host_pattern: str) -> SniRouting:
        """Both names checked (ValueError says what is wrong), in the form they are compared."""
        bootstrap = dns_name(bootstrap_host)
        pattern = advertised_host_pattern.lower().removesuffix(".")
        if pattern.count(NODE_ID_PLACEHOLDER.lower()) != 1:
            raise ValueError(f"must contain {NODE_ID_PLACEHOLDER} once, got {pattern!r}")
        pattern = pattern.replace(NODE_ID_PLACEHOLDER.lower(), NODE_ID_PLACEHOLDER)
        routing = cls(bootstrap, pattern)
        dns_name(routing.host_for(0))  # the pattern gives DNS names
        if routing.node_of(bootstrap) is not None:
            raise ValueError(f"bootstrap_host {bootstrap!r} is also one of the pattern's names")
        return routing

    def host_for(self, node_id: int) -> str:
        """The name clients are given for node ``node_id``."""
        return self.advertised_host_pattern.replace(NODE_ID_PLACEHOLDER, str(node_id))

    def node_of(self, name: str) -> int | None:
        """The node id the pattern gives ``name`` (compared as :func:`dns_name`), or None.
        Only the node id's own spelling matches (``broker-03`` is not node 3)."""
        prefix, _, suffix = self.advertised_host_pattern.partition(NODE_ID_PLACEHOLDER)
        if not (name.startswith(prefix) and name.endswith(suffix)):
            return None
        digits = name[len(prefix) : len(name) - len(suffix)]
        if not (digits.isascii() and digits.isdigit()) or str(int(digits)) != digits:
            return None
        node_id = int(digits)
        return node_id if node_id <= _INT_MAX else None

    def route(self, server_name: str | None) -> int | None:
        """The upstream node a ClientHello's server name reaches: None for the bootstrap name
        (any bootstrap server), a node id for a pattern name. Raises :class:`UnroutableName`."""
        if server_name is None:
            raise UnroutableName(
                "no server name (SNI) in the TLS ClientHello: connect by host name "
                f"({self.bootstrap_host}), not by IP address"
            )
        try:
            name = dns_name(server_name)
        except ValueError:
            name = ""
        if name == self.bootstrap_host:
            return None
        node_id = self.node_of(name) if name else None
        if node_id is None:
            raise UnroutableName(
                f"server name {server_name[:255]!r} is neither {self.bootstrap_host} nor a "
                f"name of {self.advertised_host_pattern}"
            )
        return node_id


def client_hello_record_size(data: bytes) -> int:
    """The size of the TLS record at the start of ``data`` (header included), once its 5-byte
    header is there (5 before). Raises :class:`ClientHelloError` unless it is a handshake
    record of at most 2^14 bytes."""
    if data[:1] not in (b"", b"\x16") or data[1:2] not in (b"", b"\x03"):
        raise ClientHelloError("not a TLS handshake (a plaintext client on a TLS listener?)")
    if len(data) < 5:
        return 5
    length = int.from_bytes(data[3:5])
    if length > MAX_RECORD_BYTES - 5:
        raise ClientHelloError(f"a TLS record of {length} bytes is over 2^14")
    return 5 + length


def client_hello_server_name(data: bytes) -> str | None:
    """The host name in the ClientHello that ``data``, one whole handshake record
    (:func:`client_hello_record_size` bytes), holds; None when it names none. Raises
    :class:`ClientHelloError` for anything but a ClientHello that fits the record. Nothing is
    allocated for a length before it is checked against the bytes present."""
    size = client_hello_record_size(data)
    if len(data) < size:
        raise ClientHelloError("the TLS record is incomplete")
    return _server_name(_Reader(data, 5, size))


class _Reader:
    """Bounds-checked reads inside one TLS record."""

    __slots__ = ("_data", "_end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self._data = data
        self.pos = pos
        self._end = end

    def take(self, size: int) -> bytes:
        if self.pos + size > self._end:
            raise ClientHelloError("the ClientHello is truncated or split across TLS records")
        chunk = self._data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size))

    def vector(self, length_size: int) -> _Reader:
        """The length-prefixed vector (RFC 8446 §3.4) at the position, as its own reader."""
        length = self.number(length_size)
        start = self.pos
        self.take(length)
        return _Reader(self._data, start, start + length)

    @property
    def left(self) -> int:
        return self._end - self.pos


def _server_name(record: _Reader) -> str | None:
    """The host_name of a ClientHello's server_name extension (RFC 8446 §4.1.2, RFC 6066 §3)."""
    if record.number(1) != 1:
        raise ClientHelloError("the first TLS handshake message is not a ClientHello")
    hello = record.vector(3)
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # legacy_session_id
    hello.vector(2)  # cipher_suites
    hello.vector(1)  # legacy_compression_methods
    if not hello.left:  # TLS 1.2 without extensions (RFC 5246 §7.4.1.2)
        return None
    extensions = hello.vector(2)
    while extensions.left:
        extension_type = extensions.number(2)
        body = extensions.vector(2)
        if extension_type != 0:  # server_name
            continue
        names = body.vector(2)
        while names.left:
            name_type = names.number(1)
            name = names.vector(2)
            if name_type == 0:  # host_name
                raw = name.take(name.left)
                if not raw.isascii():
                    raise ClientHelloError("the server name is not an ASCII host name")
                return raw.decode("ascii")
        return None
    return None
