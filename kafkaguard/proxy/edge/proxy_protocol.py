"""The PROXY protocol, receiving side, without I/O: bytes in, a header (or "need more") out.

A load balancer in TCP mode (HAProxy ``send-proxy``/``send-proxy-v2``, AWS NLB, …) hides the
client's address: kafkaguard's TCP peer is the balancer. With the PROXY protocol the balancer
prepends one header to the connection naming the client's address, and that address becomes
the connection's client address everywhere (KIP-504 request context, audit, per-address
limits, SASL failure throttling, log lines). Spec: haproxy's ``doc/proxy-protocol.txt``
("The PROXY protocol, Versions 1 & 2", revision 2020/03/05); section numbers below are its.

:func:`parse` takes the bytes received so far and returns the :class:`ProxyHeader` (with its
length on the wire), or None when the header is not complete yet; it raises
:class:`ProxyProtocolError` as soon as the bytes cannot be the start of a valid header.
Because it also says how long the header is, the listener can peek at the socket
(``MSG_PEEK``) and take *exactly* the header off it: the bytes after it (a TLS ClientHello,
a Kafka request) stay in the socket for the TLS layer or the connection (§9 reads with
``MSG_PEEK`` for the same reason). When the header is incomplete, every byte seen so far
belongs to it (v1 ends at the first CRLF, v2 at ``16 + length``), so the listener may take
those bytes off and wait for more. :func:`client_endpoint` turns a header into the address
to use (policy: fail closed, see its docstring).

Why not PyPI's ``proxy-protocol``: it reads the header through an ``asyncio.StreamReader``,
so bytes after the header land in the reader's buffer instead of reaching the TLS layer of
an SSL listener, and it offers a "detect" mode (guess whether a header is there), which §5
forbids. This parser is small, bounded and tested on its own
(tests/proxy/edge/test_proxy_protocol.py).

Bounds (every byte from a client is hostile, docs/design.md): a v1 header is at most 107
bytes (§2.1); a v2 header's claimed length is checked against :data:`MAX_V2_LENGTH` before
anything waits for those bytes, so nothing is allocated in proportion to a claimed length.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

V1_PREFIX: Final = b"PROXY "
V1_MAX_BYTES: Final = 107
"""§2.1: the longest v1 line, CRLF included ("PROXY UNKNOWN" + two full IPv6 addresses)."""
V2_SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED_BYTES: Final = 16
"""§2.2: signature, version/command, family/transport, 2-byte length."""
MAX_V2_LENGTH: Final = 536
"""Largest v2 address block + TLVs accepted (the spec allows 65535). §2: both formats are
designed to fit in 536 bytes, the smallest TCP segment every host must accept; HAProxy's
addresses, AUTHORITY, UNIQUE_ID (≤ 128 bytes) and SSL TLVs fit."""
MAX_HEADER_BYTES: Final = V2_FIXED_BYTES + MAX_V2_LENGTH
"""The most bytes a header this module accepts can take (v1's 107 is less)."""

PP2_TYPE_AUTHORITY: Final = 0x02
PP2_TYPE_CRC32C: Final = 0x03
_AUTHORITY_MAX_BYTES: Final = 255
"""A host name is at most 253 bytes (RFC 1035); more in an AUTHORITY TLV is malformed."""


class ProxyProtocolError(ValueError):
    """Not a valid PROXY protocol header (or one this listener does not accept): §2.1, "any
    sequence which does not exactly match the protocol must be discarded and cause the
    receiver to abort the connection"."""


class Command(enum.IntEnum):
    """§2.2, the low nibble of the 13th byte (v1 headers are always PROXY)."""

    LOCAL = 0
    """The balancer's own connection (a health check): use the real connection's peer."""
    PROXY = 1
    """Relayed on behalf of a client: the header's source address is the client's."""


class Family(enum.IntEnum):
    """§2.2, the high nibble of the 14th byte; v1's TCP4/TCP6/UNKNOWN map to INET/INET6/UNSPEC."""

    UNSPEC = 0
    INET = 1
    INET6 = 2
    UNIX = 3


class Transport(enum.IntEnum):
    """§2.2, the low nibble of the 14th byte (v1 is always STREAM, or UNSPEC for UNKNOWN)."""

    UNSPEC = 0
    STREAM = 1
    DGRAM = 2


_V2_FAMILIES: Final = {
    0x00: (Family.UNSPEC, Transport.UNSPEC, 0),
    0x11: (Family.INET, Transport.STREAM, 12),
    0x12: (Family.INET, Transport.DGRAM, 12),
    0x21: (Family.INET6, Transport.STREAM, 36),
    0x22: (Family.INET6, Transport.DGRAM, 36),
    0x31: (Family.UNIX, Transport.STREAM, 216),
    0x32: (Family.UNIX, Transport.DGRAM, 216),
}
"""§2.2's "protocol bytes expected in practice": family, transport, address block size. Every
other value "must be rejected as invalid by receivers"."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An IP address and TCP port named by a header."""

    address: IPAddress
    port: int

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """A complete, valid header."""

    version: int
    """1 (text) or 2 (binary)."""
    length: int
    """Bytes the header takes on the wire: what the listener removes from the socket."""
    command: Command
    family: Family
    transport: Transport
    source: Endpoint | None = None
    """The client (INET/INET6 only; None for LOCAL, UNSPEC, UNIX)."""
    destination: Endpoint | None = None
    """The address the client connected to (the balancer's frontend)."""
    authority: str | None = None
    """v2 PP2_TYPE_AUTHORITY (§2.2.2): the host name the client asked for, over TLS the
    ``server_name`` (SNI) the balancer saw. Kept on the session; nothing is decided on it
    (``routing: sni`` reads the ClientHello itself, kafkaguard/proxy/edge/sni.py)."""


def parse(data: bytes | bytearray | memoryview, versions: frozenset[int]) -> ProxyHeader | None:
    """The header at the start of ``data``, None when more bytes are needed.

    ``versions``: the versions the listener accepts ({1}, {2} or {1, 2}); the listener never
    guesses whether a header is there (§5), so anything else raises
    :class:`ProxyProtocolError`, as does a header that is malformed or too long, as early as
    the bytes present show it."""
    data = bytes(data[:MAX_HEADER_BYTES])  # never more than one header's worth is looked at
    if not data:
        return None
    if data[0] == V2_SIGNATURE[0]:
        if 2 not in versions:
            raise ProxyProtocolError("a PROXY protocol v2 header, but the listener accepts v1")
        return _parse_v2(data)
    if data[0] == V1_PREFIX[0]:
        if 1 not in versions:
            raise ProxyProtocolError("a PROXY protocol v1 header, but the listener accepts v2")
        return _parse_v1(data)
    raise ProxyProtocolError(f"no PROXY protocol header (the connection starts {_show(data)})")


def client_endpoint(header: ProxyHeader) -> Endpoint | None:
    """The client address a header stands for: None means the TCP peer's own (the LOCAL
    command, §2.2: "the receiver must accept this connection as valid and must use the real
    connection endpoints"; only the trusted balancer can send it, for its health checks).

    Fail closed on a PROXY header that carries no IP address: v1 ``UNKNOWN`` and v2
    ``AF_UNSPEC`` (the spec lets the receiver accept them with the real endpoints — here
    that would authorize, count and throttle every such client as the balancer itself),
    ``AF_UNIX`` (no IP for ACL hosts) and datagram transports (this is a TCP service).
    Raises :class:`ProxyProtocolError` for those."""
    if header.command is Command.LOCAL:
        return None
    if header.transport is not Transport.STREAM or header.source is None:
        raise ProxyProtocolError(
            f"a PROXY protocol v{header.version} header for {header.family.name}/"
            f"{header.transport.name}: no TCP client address to authorize"
        )
    return header.source


# -- version 1 (§2.1) ----------------------------------------------------------------------------
def _parse_v1(data: bytes) -> ProxyHeader | None:
    if not data.startswith(V1_PREFIX[: len(data)]):
        raise ProxyProtocolError(f"not a PROXY protocol v1 header ({_show(data)})")
    end = _v1_line_end(data)
    if end is None:
        return None
    try:
        line = data[:end].decode("ascii")
    except UnicodeDecodeError:
        raise ProxyProtocolError("a PROXY protocol v1 header that is not ASCII") from None
    fields = line.split(" ")
    length = end + 2
    if fields[1:2] == ["UNKNOWN"]:  # "the receiver must ignore anything presented before the CRLF"
        return ProxyHeader(1, length, Command.PROXY, Family.UNSPEC, Transport.UNSPEC)
    if len(fields) != 6 or fields[1] not in ("TCP4", "TCP6"):
        raise ProxyProtocolError(f"a malformed PROXY protocol v1 header: {line[:60]!r}")
    family = Family.INET if fields[1] == "TCP4" else Family.INET6
    source = Endpoint(_v1_address(fields[2], family), _v1_port(fields[4]))
    destination = Endpoint(_v1_address(fields[3], family), _v1_port(fields[5]))
    return ProxyHeader(1, length, Command.PROXY, family, Transport.STREAM, source, destination)


def _v1_line_end(data: bytes) -> int | None:
    """Where the CRLF starts, None when it has not arrived; a lone CR or LF is an error
    ("the receiver must not tolerate a single CR or LF character to end the line")."""
    for index, byte in enumerate(data[:V1_MAX_BYTES]):
        if byte == 0x0A:
            raise ProxyProtocolError("a PROXY protocol v1 line ending in LF without CR")
        if byte == 0x0D:
            if index + 1 == len(data):
                return None
            if data[index + 1] != 0x0A:
                raise ProxyProtocolError("a PROXY protocol v1 line with a CR not before LF")
            return index
    if len(data) >= V1_MAX_BYTES:
        raise ProxyProtocolError(f"no CRLF in the first {V1_MAX_BYTES} bytes of a v1 header")
    return None


def _v1_address(text: str, family: Family) -> IPAddress:
    """§2.1: IPv4 as four decimal numbers without leading zeros (Python's parser refuses
    them too), IPv6 in colon-hex form; no zone index."""
    try:
        if family is Family.INET:
            return ipaddress.IPv4Address(text)
        if "%" not in text:
            return ipaddress.IPv6Address(text)
    except ValueError:
        pass
    raise ProxyProtocolError(f"a PROXY protocol v1 header with a bad {family.name} address")


def _v1_port(text: str) -> int:
    """§2.1: decimal 0..65535, no leading zeros."""
    if (
        not text.isascii()
        or not text.isdigit()
        or len(text) > 5
        or (text[0] == "0" and text != "0")
        or int(text) > 65535
    ):
        raise ProxyProtocolError("a PROXY protocol v1 header with a bad port")
    return int(text)


# -- version 2 (§2.2) ----------------------------------------------------------------------------
def _parse_v2(data: bytes) -> ProxyHeader | None:
    signature = data[: len(V2_SIGNATURE)]
    if not V2_SIGNATURE.startswith(signature):
        raise ProxyProtocolError(f"not a PROXY protocol v2 signature ({_show(data)})")
    if len(data) < V2_FIXED_BYTES:
        return None
    version, command = data[12] >> 4, data[12] & 0x0F
    if version != 2:
        raise ProxyProtocolError(f"PROXY protocol v2 signature with version {version}")
    if command not in (Command.LOCAL, Command.PROXY):
        raise ProxyProtocolError(f"a PROXY protocol v2 header with command {command}")
    length = int.from_bytes(data[14:16], "big")
    if length > MAX_V2_LENGTH:  # before waiting for (or holding) any of those bytes
        raise ProxyProtocolError(
            f"a PROXY protocol v2 header of {length} bytes after the fixed part "
            f"(at most {MAX_V2_LENGTH} accepted)"
        )
    if len(data) < V2_FIXED_BYTES + length:
        return None
    block = data[V2_FIXED_BYTES : V2_FIXED_BYTES + length]
    if command == Command.LOCAL:  # "discard the protocol block including the family"
        return ProxyHeader(
            2, V2_FIXED_BYTES + length, Command.LOCAL, Family.UNSPEC, Transport.UNSPEC
        )
    kind = _V2_FAMILIES.get(data[13])
    if kind is None:
        raise ProxyProtocolError(f"a PROXY protocol v2 header with family byte {data[13]:#04x}")
    family, transport, size = kind
    if length < size:
        raise ProxyProtocolError(
            f"a PROXY protocol v2 {family.name} header with {length} bytes of addresses "
            f"({size} needed)"
        )
    source, destination = _v2_endpoints(family, block)
    authority = _v2_tlvs(data[: V2_FIXED_BYTES + length], V2_FIXED_BYTES + size)
    return ProxyHeader(
        2, V2_FIXED_BYTES + length, Command.PROXY, family, transport, source, destination, authority
    )


def _v2_endpoints(family: Family, block: bytes) -> tuple[Endpoint | None, Endpoint | None]:
    """§2.2's ``proxy_addr``: source, destination, source port, destination port."""
    if family is Family.INET:
        return (
            Endpoint(ipaddress.IPv4Address(block[0:4]), int.from_bytes(block[8:10], "big")),
            Endpoint(ipaddress.IPv4Address(block[4:8]), int.from_bytes(block[10:12], "big")),
        )
    if family is Family.INET6:
        return (
            Endpoint(ipaddress.IPv6Address(block[0:16]), int.from_bytes(block[32:34], "big")),
            Endpoint(ipaddress.IPv6Address(block[16:32]), int.from_bytes(block[34:36], "big")),
        )
    return None, None  # AF_UNIX paths: no IP address (client_endpoint refuses them)


def _v2_tlvs(header: bytes, offset: int) -> str | None:
    """Walk the TLVs after the addresses (§2.2): each must fit in the header. Returns the
    AUTHORITY; verifies CRC32C when present (§2.2.3: a receiver that supports it "MUST treat
    the TCP connection providing the header as invalid" on a mismatch); skips the rest."""
    authority: str | None = None
    while offset < len(header):
        if offset + 3 > len(header):
            raise ProxyProtocolError("a PROXY protocol v2 TLV cut short by the header length")
        kind, size = header[offset], int.from_bytes(header[offset + 1 : offset + 3], "big")
        start, offset = offset + 3, offset + 3 + size
        if offset > len(header):
            raise ProxyProtocolError("a PROXY protocol v2 TLV longer than the header")
        value = header[start:offset]
        if kind == PP2_TYPE_AUTHORITY:
            authority = _authority(value, authority)
        elif kind == PP2_TYPE_CRC32C:
            _check_crc32c(header, start, value)
    return authority


def _authority(value: bytes, seen: str | None) -> str:
    if seen is not None:
        raise ProxyProtocolError("a PROXY protocol v2 header with two AUTHORITY TLVs")
    if not value or len(value) > _AUTHORITY_MAX_BYTES:
        raise ProxyProtocolError(f"a PROXY protocol v2 AUTHORITY of {len(value)} bytes")
    try:
        text = value.decode("utf-8")  # §2.2.2: "an UTF8-encoded string"
    except UnicodeDecodeError:
        raise ProxyProtocolError("a PROXY protocol v2 AUTHORITY that is not UTF-8") from None
    if not text.isprintable():
        raise ProxyProtocolError("a PROXY protocol v2 AUTHORITY with control characters")
    return text


def _check_crc32c(header: bytes, start: int, value: bytes) -> None:
    if len(value) != 4:
        raise ProxyProtocolError("a PROXY protocol v2 CRC32C TLV that is not 4 bytes")
    zeroed = header[:start] + b"\x00\x00\x00\x00" + header[start + 4 :]
    if crc32c(zeroed) != int.from_bytes(value, "big"):
        raise ProxyProtocolError("a PROXY protocol v2 header whose CRC32C does not match")


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE: Final = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32c (Castagnoli, RFC 4960 appendix B), as §2.2.3 asks; at most 552 bytes here."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _show(data: bytes) -> str:
    """The first bytes, in hex, for a log line (never the client's bytes as text)."""
    return data[:8].hex(" ") + (" …" if len(data) > 8 else "")
