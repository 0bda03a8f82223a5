"""The PROXY protocol (v1 and v2) on kafkaguard's listeners (issue #15 part 2).

* The parser (kafkaguard/proxy/edge/proxy_protocol.py), without I/O: every form the spec defines
  (haproxy's doc/proxy-protocol.txt), byte by byte, and hostile input.
* The ``proxy_protocol`` listener keys.
* End to end against Tansu: a real HAProxy in TCP mode with ``send-proxy-v2`` in front of a
  PLAINTEXT and an SSL listener, clients bound to 127.0.0.2 and 127.0.0.3: an ACL on host
  127.0.0.2 lets only the first see the topic, the audit trail records each real address;
  a direct connection without a header is closed and counted. Hand-written headers from raw
  sockets: v1 (IPv4 and IPv6), v2 LOCAL, per-address limits keyed by the header's address,
  the header and the first bytes after it (a Kafka request, a TLS ClientHello) in one segment,
  untrusted peers and malformed headers refused, on asyncio's loop and on uvloop.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaguard.audit.config import INDIVIDUAL, AuditConfig
from kafkaguard.certs import tooling
from kafkaguard.certs.tls import TlsConfig
from kafkaguard.cli import main
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.protocol import codec
from kafkaguard.protocol.framing import FrameBuffer
from kafkaguard.proxy.app.metrics import ProxyCollector
from kafkaguard.proxy.config import LimitsConfig, ListenerConfig, parse_config
from kafkaguard.proxy.edge.proxy_protocol import (
    MAX_HEADER_BYTES,
    MAX_V2_LENGTH,
    V2_SIGNATURE,
    Command,
    Endpoint,
    Family,
    ProxyHeader,
    ProxyProtocolError,
    Transport,
    client_endpoint,
    crc32c,
    parse,
)
from kafkaguard.proxy.log_limit import RateLimitedLog
from kafkaguard.tansu import TansuBroker
from tests.support import docs
from tests.support.haproxy import HAProxy
from tests.support.haproxy import require as require_haproxy
from tests.support.proxy_fixture import (
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient, build_request, schema_module

V1, V2, ANY = frozenset({1}), frozenset({2}), frozenset({1, 2})
METADATA = 3


# == the parser, without I/O ====================================================================
def v2(
    command: int = 1,
    family: int = 0x11,
    block: bytes | None = None,
    *,
    tlvs: bytes = b"",
    version: int = 2,
    length: int | None = None,
) -> bytes:
    """A v2 header (§2.2); by default PROXY, TCP over IPv4, 10.0.0.7:5555 → 10.0.0.1:9092."""
    if block is None:  # by the family's high nibble, for either transport
        block = {
            0x10: bytes([10, 0, 0, 7, 10, 0, 0, 1]) + struct.pack(">HH", 5555, 9092),
            0x20: ipaddress.IPv6Address("2001:db8::7").packed
            + ipaddress.IPv6Address("2001:db8::1").packed
            + struct.pack(">HH", 5555, 9092),
            0x30: b"/run/client.sock".ljust(108, b"\0") + b"/run/kafka.sock".ljust(108, b"\0"),
        }.get(family & 0xF0, b"")
    body = block + tlvs
    size = len(body) if length is None else length
    return V2_SIGNATURE + bytes([version << 4 | command, family]) + struct.pack(">H", size) + body


def tlv(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + struct.pack(">H", len(value)) + value


def with_crc32c(header: bytes, offset: int) -> bytes:
    """Fill the CRC32C TLV value at ``offset`` (4 zero bytes there) as §2.2.3 says."""
    checksum = crc32c(header)
    return header[:offset] + struct.pack(">I", checksum) + header[offset + 4 :]


def test_v1_tcp4() -> None:
    line = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    header = parse(line + b"GET / HTTP/1.1\r\n", V1)
    assert header == ProxyHeader(
        1, len(line), Command.PROXY, Family.INET, Transport.STREAM,
        Endpoint(ipaddress.IPv4Address("192.168.0.1"), 56324),
        Endpoint(ipaddress.IPv4Address("192.168.0.11"), 443),
    )  # fmt: skip
    assert client_endpoint(header) == Endpoint(ipaddress.IPv4Address("192.168.0.1"), 56324)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("2001:db8::7", "2001:db8::7"),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ("::ffff:10.1.2.3", "::ffff:a01:203"),  # what inet_ntop prints for a mapped address
    ],
)
def test_v1_tcp6(source: str, expected: str) -> None:
    line = f"PROXY TCP6 {source} ::1 65535 0\r\n".encode()
    header = parse(line, ANY)
    assert header is not None and header.length == len(line) <= 107
    assert header.family is Family.INET6
    assert header.source == Endpoint(ipaddress.IPv6Address(expected), 65535)
    assert header.destination == Endpoint(ipaddress.IPv6Address("::1"), 0)


@pytest.mark.parametrize(
    "line",
    [
        b"PROXY UNKNOWN\r\n",
        b"PROXY UNKNOWN ffff:f::f ffff:f::f 65535 65535\r\n",  # "ignore anything ... before CRLF"
        b"PROXY UNKNOWN \x01\x02 whatever\r\n",
    ],
)
def test_v1_unknown_parses_but_names_no_client(line: bytes) -> None:
    header = parse(line + b"\x00\x00\x00\x10", V1)
    assert header is not None and header.length == len(line)
    assert (header.family, header.source) == (Family.UNSPEC, None)
    with pytest.raises(ProxyProtocolError, match="no TCP client address"):
        client_endpoint(header)


V1_FULL = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ::1 65535 65535\r\n"
V2_FULL = v2(0x1, 0x21, tlvs=tlv(0x02, b"kafka.example.com") + tlv(0x04, b"\0" * 5))


@pytest.mark.parametrize("whole", [V1_FULL, b"PROXY UNKNOWN\r\n", V2_FULL, v2(0, 0)])
def test_every_prefix_needs_more_and_never_overreads(whole: bytes) -> None:
    """Byte by byte: each strict prefix asks for more (so a reader may take it off the socket),
    the whole header parses to its exact length whatever follows it."""
    versions = ANY
    for end in range(len(whole)):
        assert parse(whole[:end], versions) is None, end
    for tail in (b"", b"\x16\x03\x01\x02\x00", b"\r\n", bytes(600)):
        header = parse(whole + tail, versions)
        assert header is not None and header.length == len(whole)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "LF without CR"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "CR not before LF"),
        (b"PROXY TCP4 1.2.3.4\n", "LF without CR"),
        (b"PROXY " + b"1" * 101, "no CRLF in the first 107 bytes"),
        (b"PROXY TCP4 " + b"1" * 200 + b"\r\n", "no CRLF in the first 107 bytes"),
        (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "bad INET address"),
        (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", "bad INET address"),
        (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "bad INET address"),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "bad INET6 address"),
        (b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", "bad INET6 address"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", "bad port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "bad port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "bad port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 \xd9\xa1 2\r\n", "not ASCII"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "malformed"),
        (b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "malformed"),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "malformed"),
        (b"PROXY UNKNOWNX\r\n", "malformed"),
        (b"PROXY\r\n", "not a PROXY protocol v1 header"),
        (b"PROXYX", "not a PROXY protocol v1 header"),
        (b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "no PROXY protocol header"),
    ],
)
def test_v1_malformed(data: bytes, message: str) -> None:
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data, ANY)


def test_v2_tcp4_tcp6_and_authority() -> None:
    header = parse(v2() + b"\x00\x00\x00\x2a", V2)
    assert header == ProxyHeader(
        2, 28, Command.PROXY, Family.INET, Transport.STREAM,
        Endpoint(ipaddress.IPv4Address("10.0.0.7"), 5555),
        Endpoint(ipaddress.IPv4Address("10.0.0.1"), 9092),
    )  # fmt: skip
    six = parse(V2_FULL, ANY)
    assert six is not None and six.length == len(V2_FULL) == 16 + 36 + 20 + 8
    assert client_endpoint(six) == Endpoint(ipaddress.IPv6Address("2001:db8::7"), 5555)
    assert six.authority == "kafka.example.com"


def test_v2_local_uses_the_real_peer_and_ignores_its_block() -> None:
    """§2.2: LOCAL "must" be accepted, its block (any family, any length) discarded."""
    for family, block in ((0x00, b""), (0x11, None), (0x31, None), (0x7F, b"junk")):
        data = v2(0, family, block)
        header = parse(data, V2)
        assert header is not None and header.length == len(data)
        assert header.command is Command.LOCAL and client_endpoint(header) is None


@pytest.mark.parametrize(
    ("family", "message"),
    [(0x00, "UNSPEC/UNSPEC"), (0x31, "UNIX/STREAM"), (0x12, "INET/DGRAM"), (0x32, "UNIX/DGRAM")],
)
def test_v2_proxy_without_a_tcp_client_is_refused(family: int, message: str) -> None:
    header = parse(v2(1, family), V2)
    assert header is not None
    with pytest.raises(ProxyProtocolError, match=message):
        client_endpoint(header)


def test_v2_tlvs_are_walked() -> None:
    tlvs = (
        tlv(0x01, b"h2")  # ALPN
        + tlv(0x04, b"")  # NOOP, empty
        + tlv(0x05, b"u" * 128)  # UNIQUE_ID
        + tlv(0x20, b"\x07\0\0\0\0" + tlv(0x21, b"TLSv1.3") + tlv(0x22, b"alice"))  # SSL
        + tlv(0x30, b"netns")
        + tlv(0xE0, b"custom")
        + tlv(0x02, "bücher.example".encode())
    )
    header = parse(v2(tlvs=tlvs), V2)
    assert header is not None and header.authority == "bücher.example"
    assert header.length == 16 + 12 + len(tlvs)


def test_v2_crc32c() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720's check value for CRC32c
    raw = v2(tlvs=tlv(0x02, b"sni.example") + tlv(0x03, b"\0\0\0\0"))
    good = with_crc32c(raw, len(raw) - 4)
    header = parse(good, V2)
    assert header is not None and header.authority == "sni.example"
    bad = good[:-1] + bytes([good[-1] ^ 1])
    with pytest.raises(ProxyProtocolError, match="CRC32C does not match"):
        parse(bad, V2)
    tampered = good[:20] + b"\x63" + good[21:]  # another source address, same checksum
    with pytest.raises(ProxyProtocolError, match="CRC32C does not match"):
        parse(tampered, V2)
    with pytest.raises(ProxyProtocolError, match="not 4 bytes"):
        parse(v2(tlvs=tlv(0x03, b"\0\0\0")), V2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\r\n\r\n\x00\r\nQUIX\n" + bytes(4), "not a PROXY protocol v2 signature"),
        (b"\r\n\r\n\x01", "not a PROXY protocol v2 signature"),
        (b"\r\r", "not a PROXY protocol v2 signature"),
        (v2(version=1), "version 1"),
        (v2(version=3), "version 3"),
        (v2(command=2), "command 2"),
        (v2(command=0xF), "command 15"),
        (v2(family=0x13), "family byte 0x13"),
        (v2(family=0x41), "family byte 0x41"),
        (v2(family=0x10, block=bytes(12)), "family byte 0x10"),
        (v2(family=0x11, block=bytes(8)), "8 bytes of addresses"),
        (v2(family=0x21, block=bytes(12)), "12 bytes of addresses"),
        (v2(tlvs=b"\x02\x00"), "TLV cut short"),
        (v2(tlvs=tlv(0x02, b"a")[:-1] + b""), "TLV longer than the header"),
        (v2(tlvs=tlv(0x02, b"a") + tlv(0x02, b"b")), "two AUTHORITY"),
        (v2(tlvs=tlv(0x02, b"")), "AUTHORITY of 0 bytes"),
        (v2(tlvs=tlv(0x02, b"a" * 256)), "AUTHORITY of 256 bytes"),
        (v2(tlvs=tlv(0x02, b"\xff\xfe")), "not UTF-8"),
        (v2(tlvs=tlv(0x02, b"evil\nhost")), "control characters"),
    ],
)
def test_v2_malformed(data: bytes, message: str) -> None:
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data, ANY)


@pytest.mark.parametrize("claimed", [MAX_V2_LENGTH + 1, 4096, 65535])
def test_v2_oversized_is_refused_from_its_fixed_part(claimed: int) -> None:
    """The claimed length is refused with only the 16 fixed bytes present: nothing waits
    for (or holds) the bytes it claims."""
    with pytest.raises(ProxyProtocolError, match=f"{claimed} bytes after the fixed part"):
        parse(v2(length=claimed)[:16], V2)


def test_v2_largest_accepted() -> None:
    tlvs = tlv(0x04, bytes(MAX_V2_LENGTH - 12 - 3))
    data = v2(tlvs=tlvs)
    assert len(data) == MAX_HEADER_BYTES
    header = parse(data, V2)
    assert header is not None and header.length == MAX_HEADER_BYTES


@pytest.mark.parametrize(
    ("data", "versions", "message"),
    [
        (v2(), V1, "v2 header, but the listener accepts v1"),
        (b"PROXY UNKNOWN\r\n", V2, "v1 header, but the listener accepts v2"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03", ANY, "starts 16 03 01 02 00 01 00 01 …"),
        (b"\x00\x00\x00\x1f\x00\x12", ANY, "starts 00 00 00 1f 00 12"),
        (b"GET / HTTP/1.1\r\n", ANY, "no PROXY protocol header"),
    ],
)
def test_wrong_version_or_no_header(data: bytes, versions: frozenset[int], message: str) -> None:
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data, versions)


def test_nothing_yet() -> None:
    assert parse(b"", ANY) is None


def _check_any(data: bytes) -> None:
    try:
        header = parse(data, ANY)
    except ProxyProtocolError:
        return
    if header is not None:
        assert 0 < header.length <= min(len(data), MAX_HEADER_BYTES)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=700))
def test_hostile_bytes_only_parse_or_raise_protocol_errors(data: bytes) -> None:
    _check_any(data)


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from([V2_SIGNATURE + b"\x21", V2_SIGNATURE + b"\x20", b"PROXY ", b"PROXY TCP"]),
    st.binary(max_size=700),
)
def test_hostile_bytes_after_a_valid_start(start: bytes, rest: bytes) -> None:
    _check_any(start + rest)


# == listener configuration =======================================================================
LISTENER = """
upstream: {{bootstrap_servers: ['127.0.0.1:9092']}}
listeners:
  - name: EXTERNAL
    port: 9192
{keys}
"""


def _listener_config(keys: str) -> Any:
    text = LISTENER.format(keys="\n".join(f"    {line}" for line in keys.splitlines()))
    (listener,) = parse_config(ConfigSection.from_text(text, "c.yaml")).listeners
    return listener


def test_config_default_is_off() -> None:
    listener = _listener_config("")
    assert listener.proxy_protocol == "off" and listener.proxy_protocol_versions is None
    assert _listener_config("proxy_protocol: off").proxy_protocol == "off"  # YAML's false


@pytest.mark.parametrize(("mode", "versions"), [("v1", V1), ("v2", V2), ("any", ANY)])
def test_config_modes(mode: str, versions: frozenset[int]) -> None:
    listener = _listener_config(
        f"proxy_protocol: {mode}\nproxy_protocol_trusted_cidrs: [10.0.0.0/24, '2001:db8::/64', "
        "192.0.2.9]"
    )
    assert listener.proxy_protocol_versions == versions
    assert listener.proxy_protocol_trusted_cidrs == (
        ipaddress.ip_network("10.0.0.0/24"),
        ipaddress.ip_network("2001:db8::/64"),
        ipaddress.ip_network("192.0.2.9/32"),
    )
    assert listener.proxy_protocol_trusts("10.0.0.200")
    assert listener.proxy_protocol_trusts("::ffff:10.0.0.1")  # a dual-stack listener's IPv4 peer
    assert listener.proxy_protocol_trusts("2001:db8::1234")
    assert listener.proxy_protocol_trusts("192.0.2.9")
    assert not listener.proxy_protocol_trusts("10.0.1.1")
    assert not listener.proxy_protocol_trusts("192.0.2.10")
    assert not listener.proxy_protocol_trusts("not-an-ip")


TRUSTED = "\nproxy_protocol_trusted_cidrs: "


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("proxy_protocol: v2", r"c.yaml:\d+ listeners\[0\].proxy_protocol_trusted_cidrs: is requ"),
        ("proxy_protocol: v2" + TRUSTED + "[]", "is required"),
        ("proxy_protocol: v3" + TRUSTED + "[10.0.0.0/8]", "one of off, v1, v2, any, got 'v3'"),
        ("proxy_protocol: true" + TRUSTED + "[10.0.0.0/8]", "got True"),
        ("proxy_protocol_trusted_cidrs: [10.0.0.0/8]", "only for listeners with proxy_protocol"),
        ("proxy_protocol: v1" + TRUSTED + "[10.0.0.1/8]", "has host bits set"),
        ("proxy_protocol: v1" + TRUSTED + "[lb.example]", "'lb.example' is not an address block"),
        ("proxy_protocol: v1" + TRUSTED + "10.0.0.0/8", "must be a list of strings"),
    ],
)  # fmt: skip
def test_config_errors(keys: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _listener_config(keys)


# == end to end (Tansu upstream, the proxy on a thread, blocking raw clients) ======================
def _topic_acl(topic: str, host: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", host, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    )


@pytest.fixture
def start(tansu: TansuBroker, tmp_path: Path) -> Iterator[Callable[..., RunningProxy]]:
    """``start(mode, trusted, acls=..., ...)``: an enforcing proxy whose one listener takes
    PROXY protocol headers; stopped at teardown."""
    started: list[RunningProxy] = []

    def run(
        mode: str = "v2",
        trusted: Iterable[str] = ("127.0.0.0/8",),
        *,
        acls: Iterable[AclBinding] = (),
        limits: LimitsConfig | None = None,
        tls: TlsConfig | None = None,
        audit: bool = False,
        loop_factory: Any = None,
    ) -> RunningProxy:
        acl_file = tmp_path / f"acls-{len(started)}.yaml"
        acl_file.write_text(format_acl_text(list(acls)), encoding="utf-8")
        policy = PolicyConfig(
            authorizer=AuthorizerConfig(), acl_store=AclStoreConfig(type="file", path=acl_file)
        )
        config = proxy_config(tansu.address, policy=policy, limits=limits, name="EXTERNAL")
        listener = replace(
            config.listeners[0],
            proxy_protocol=mode,
            proxy_protocol_trusted_cidrs=tuple(map(ipaddress.ip_network, trusted)),
            security_protocol="SSL" if tls is not None else "PLAINTEXT",
            ssl=tls,
        )
        config = replace(config, listeners=(listener,))
        if audit:
            audit_dir = tmp_path / f"audit-{len(started)}"
            config = replace(
                config,
                audit=AuditConfig(
                    enabled=True, dir=audit_dir, allowed=INDIVIDUAL, denied=INDIVIDUAL
                ),
            )
        running = start_proxy_thread(config, loop_factory)
        started.append(running)
        return running

    try:
        yield run
    finally:
        for running in started:
            if not running.loop.is_closed():  # a test may stop one itself (audit flushed)
                stop_proxy_thread(running)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TlsConfig]:
    root = tmp_path_factory.mktemp("pki")
    tooling.init_ca(root)
    server = tooling.issue_server(root, hosts=["localhost"], ips=["127.0.0.1"])
    return root / tooling.CA_CERT, TlsConfig(cert_file=server.cert_path, key_file=server.key_path)


def _bootstrap(running: RunningProxy) -> tuple[str, int]:
    host, port = running.bootstrap.rsplit(":", 1)
    return host, int(port)


def _counter(running: RunningProxy, cause: str) -> int:
    return running.server.listeners[0].counters[cause]


def _wait_for(predicate: Callable[[], bool], what: str, wait_s: float = 5.0) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _metadata_error(client: RawKafkaClient, topic: str) -> int:
    """The error code of ``topic`` in a Metadata v12 answer on ``client``."""
    mod = schema_module(METADATA, 12)
    _, response = client.request(
        build_request(
            METADATA,
            12,
            topics=(mod.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    (entry,) = response.topics
    assert entry.name == topic
    return int(entry.error_code)


def _api_versions_frame() -> bytes:
    schema = codec.request_schema(18, 3)
    body = schema(client_software_name="raw", client_software_version="0")
    return codec.encode_request(body, 1, "raw")


def _wait_logged(caplog: pytest.LogCaptureFixture, *fragments: str) -> None:
    """Wait for a log line holding every fragment (the proxy logs on its own thread, after
    counting)."""
    _wait_for(
        lambda: any(all(f in r.getMessage() for f in fragments) for r in list(caplog.records)),
        f"a log line with {fragments}: {caplog.messages}",
    )


def _read_frame(sock: socket.socket) -> bytes:
    frames = FrameBuffer()
    while True:
        data = sock.recv(65536)
        assert data, "closed before an answer"
        if ready := frames.feed(data):
            return bytes(ready[0])


def _closed_without_answer(sock: socket.socket, wait_s: float = 5.0) -> None:
    """The proxy closes the connection and sends nothing."""
    sock.settimeout(wait_s)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    assert received == b""


def _create_topic(tansu: TansuBroker, name: str) -> None:
    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    admin = confluent_admin.AdminClient({"bootstrap.servers": str(tansu.address), "log_level": 3})
    admin.create_topics([confluent_admin.NewTopic(name, 1, 1)])[name].result(15)


def _audit(directory: Path, topic: str) -> set[tuple[str, str]]:
    return {
        (record["client_host"], record["result"])
        for path in sorted(directory.rglob("*.jsonl"))
        for record in map(json.loads, path.read_text().splitlines())
        if record["resource_name"] == topic
    }


def _closed_count(running: RunningProxy, reason: str) -> float:
    """``kafkaguard_connections_closed{listener="EXTERNAL",reason=...}`` as /metrics shows it."""
    for family in ProxyCollector(running.server, None).collect():
        if family.name == "kafkaguard_connections_closed":
            for sample in family.samples:
                if sample.labels == {"listener": "EXTERNAL", "reason": reason}:
                    return sample.value
    raise AssertionError(f"no kafkaguard_connections_closed sample for {reason}")


@pytest.mark.integration
@pytest.mark.timeout(90)
@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_haproxy_send_proxy_v2(
    start: Callable[..., RunningProxy],
    tansu: TansuBroker,
    tmp_path: Path,
    pki: tuple[Path, TlsConfig],
    caplog: pytest.LogCaptureFixture,
    protocol: str,
) -> None:
    """HAProxy (TCP mode, ``send-proxy-v2``) in front of the listener: each client's own
    address reaches the authorizer, the audit trail and the connection's log fields."""
    ca, tls_config = pki
    topic = unique_name("pp")
    _create_topic(tansu, topic)
    running = start(
        "v2", acls=[_topic_acl(topic, "127.0.0.2")], audit=True,
        tls=tls_config if protocol == "SSL" else None,
    )  # fmt: skip
    tls = ssl.create_default_context(cafile=str(ca)) if protocol == "SSL" else None
    listener = running.server.listeners[0]
    with HAProxy(tmp_path / "haproxy", [_bootstrap(running)]) as haproxy:
        front = ("127.0.0.1", haproxy.ports[0])
        with (
            RawKafkaClient(*front, source="127.0.0.2", tls=tls) as allowed,
            RawKafkaClient(*front, source="127.0.0.3", tls=tls) as denied,
        ):
            assert allowed.api_versions() and denied.api_versions()
            assert _metadata_error(allowed, topic) == codec.ErrorCode.none
            assert _metadata_error(denied, topic) == codec.ErrorCode.topic_authorization_failed
            peers = sorted(c.peer.rsplit(":", 1)[0] for c in listener.connections)
            assert peers == ["127.0.0.2", "127.0.0.3"]
            ports = {c.peer.rsplit(":", 1)[1] for c in listener.connections}
            assert ports == {str(allowed.sock.getsockname()[1]), str(denied.sock.getsockname()[1])}
            fields = [c.log_fields() for c in listener.connections]
            assert {f["client_address"] for f in fields} == {
                f"127.0.0.2:{allowed.sock.getsockname()[1]}",
                f"127.0.0.3:{denied.sock.getsockname()[1]}",
            }
    assert _counter(running, "proxy_protocol") == 0

    # Skipping the balancer: no header, closed and counted (and /metrics shows it).
    with caplog.at_level(logging.WARNING, logger="kafkaguard.proxy"):
        with socket.create_connection(_bootstrap(running), timeout=5) as direct:
            direct.sendall(_api_versions_frame())
            _closed_without_answer(direct)
        _wait_for(lambda: _counter(running, "proxy_protocol") == 1, "the close is counted")
        _wait_logged(caplog, "closing connection from 127.0.0.1", "no PROXY protocol header")
    assert _closed_count(running, "proxy_protocol") == 1

    audit_dir = running.server.config.audit.dir
    stop_proxy_thread(running)  # flushes the audit trail
    assert _audit(audit_dir, topic) == {("127.0.0.2", "ALLOWED"), ("127.0.0.3", "DENIED")}


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_v1_header_names_the_client(
    start: Callable[..., RunningProxy], tansu: TansuBroker, loop: str
) -> None:
    """Hand-written v1 headers, each sent in one segment with the first request after it: the
    header's address is the client's (IPv4, and IPv6 as Java prints it for ACL hosts)."""
    loop_factory = pytest.importorskip("uvloop").new_event_loop if loop == "uvloop" else None
    topic = unique_name("pp1")
    _create_topic(tansu, topic)
    running = start(
        "any",
        acls=[_topic_acl(topic, "10.1.2.3"), _topic_acl(topic, "2001:db8:0:0:0:0:0:7")],
        loop_factory=loop_factory,
    )
    host, port = _bootstrap(running)
    denied = codec.ErrorCode.topic_authorization_failed
    cases = [
        (f"PROXY TCP4 10.1.2.3 192.0.2.1 40000 {port}", codec.ErrorCode.none),
        (f"PROXY TCP4 10.9.9.9 192.0.2.1 40001 {port}", denied),
        (f"PROXY TCP6 2001:db8::7 2001:db8::1 40002 {port}", codec.ErrorCode.none),
        (f"PROXY TCP6 2001:db8::8 2001:db8::1 40003 {port}", denied),
    ]
    for line, expected in cases:
        with RawKafkaClient(host, port) as client:
            client.sock.sendall(f"{line}\r\n".encode() + _api_versions_frame())
            frame = client.read_frame()
            assert struct.unpack_from(">i", frame, 4)[0] == 1  # ApiVersions answered
            client._correlation_id = 1
            assert _metadata_error(client, topic) == expected, line
            (connection,) = running.server.listeners[0].connections
            source = line.split()[2]
            assert connection.peer == f"{source}:{line.split()[4]}"
            assert f"-{source}:{line.split()[4]}-" in connection.connection_id
    assert _counter(running, "proxy_protocol") == 0


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_v2_local_is_the_balancers_own_connection(start: Callable[..., RunningProxy]) -> None:
    running = start("v2")
    with RawKafkaClient(*_bootstrap(running), source="127.0.0.5", preamble=v2(0, 0)) as client:
        assert client.api_versions()
        (connection,) = running.server.listeners[0].connections
        assert connection.peer == f"127.0.0.5:{client.sock.getsockname()[1]}"


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_per_address_limit_counts_the_headers_address(start: Callable[..., RunningProxy]) -> None:
    """``max_connections_per_ip`` (Kafka's ConnectionQuotas) counts the client the header
    names, not the balancer: every connection here comes from 127.0.0.1."""
    running = start("v1", limits=LimitsConfig(max_connections_per_ip=1))
    host, port = _bootstrap(running)
    header = "PROXY TCP4 {} 192.0.2.1 40000 9092\r\n"
    with RawKafkaClient(host, port, preamble=header.format("10.0.0.1").encode()) as first:
        assert first.api_versions()
        with socket.create_connection((host, port), timeout=5) as second:
            second.sendall(header.format("10.0.0.1").encode() + _api_versions_frame())
            _closed_without_answer(second)
        _wait_for(lambda: _counter(running, "max_connections_per_ip") == 1, "refusal counted")
        with RawKafkaClient(host, port, preamble=header.format("10.0.0.2").encode()) as other:
            assert other.api_versions()
    assert _counter(running, "proxy_protocol") == 0


class BioTls:
    """TLS through memory BIOs on a blocking socket, so the test decides what each write
    holds: here the PROXY header and the ClientHello leave in one segment."""

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, hostname: str, preamble: bytes
    ) -> None:
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._in, self._out, server_hostname=hostname)
        first = preamble
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                out, first = first + self._out.read(), b""
                if out:
                    sock.sendall(out)
                self._fill()
        self._flush()

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("closed during the TLS handshake")
        self._in.write(data)

    def _flush(self) -> None:
        if data := self._out.read():
            self.sock.sendall(data)

    def sendall(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def recv(self, size: int) -> bytes:
        while True:
            try:
                return self.tls.read(size)
            except ssl.SSLWantReadError:
                self._fill()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_tls_starts_on_the_byte_after_the_header(
    start: Callable[..., RunningProxy], pki: tuple[Path, TlsConfig], loop: str
) -> None:
    """The v2 header and the ClientHello arrive in one segment: the proxy takes exactly the
    header off the socket and the TLS layer gets the ClientHello whole."""
    ca, tls_config = pki
    loop_factory = pytest.importorskip("uvloop").new_event_loop if loop == "uvloop" else None
    running = start("v2", tls=tls_config, loop_factory=loop_factory)
    host, port = _bootstrap(running)
    context = ssl.create_default_context(cafile=str(ca))
    header = v2(tlvs=tlv(0x02, b"kafka-1.example"))
    with RawKafkaClient(host, port) as client:
        client.sock = BioTls(client.sock, context, host, header)  # type: ignore[assignment]
        assert client.api_versions()
        (connection,) = running.server.listeners[0].connections
        assert connection.peer == "10.0.0.7:5555"
        assert connection.exchange is not None
        session = connection.exchange.context.session
        assert (session.client_host, session.authority) == ("10.0.0.7", "kafka-1.example")


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_untrusted_peer_is_closed_at_accept(
    start: Callable[..., RunningProxy], caplog: pytest.LogCaptureFixture
) -> None:
    running = start("v1", trusted=("127.0.0.2/32",))
    listener = running.server.listeners[0]
    header = b"PROXY TCP4 10.0.0.1 192.0.2.1 40000 9092\r\n"
    with caplog.at_level(logging.WARNING, logger="kafkaguard.proxy"):
        with socket.create_connection(_bootstrap(running), timeout=5) as intruder:
            intruder.sendall(header + _api_versions_frame())
            _closed_without_answer(intruder)
        _wait_for(lambda: _counter(running, "proxy_protocol") == 1, "the refusal is counted")
        _wait_logged(
            caplog, "refused connection from 127.0.0.1", "not in proxy_protocol_trusted_cidrs"
        )
    assert listener.stats.accepted == 0  # refused before ConnectionQuotas saw it
    with RawKafkaClient(*_bootstrap(running), source="127.0.0.2", preamble=header) as balancer:
        assert balancer.api_versions()
    assert listener.stats.accepted == 1


BAD_HEADERS = [
    ("a Kafka client skipping the balancer", _api_versions_frame(), "no PROXY protocol header"),
    ("a TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc", "starts 16 03 01"),
    ("a forged v2 version", v2(version=1), "signature with version 1"),
    ("a v2 length of 65535", v2(length=65535)[:16], "at most 536 accepted"),
    ("v2 AF_UNIX", v2(1, 0x31), "no TCP client address"),
    ("v1 UNKNOWN", b"PROXY UNKNOWN\r\n", "no TCP client address"),
    ("v1 without CRLF", b"PROXY TCP4 " + b"1" * 120, "no CRLF in the first 107 bytes"),
    ("a v1 bad address", b"PROXY TCP4 1.2.3.400 1.2.3.4 1 2\r\n", "bad INET address"),
    ("a truncated v2 header, then silence", v2()[:10], "within 1000 ms"),
    ("a truncated v1 header, then EOF", b"PROXY TCP4 10.0.0.1 ", "closed after 20 bytes"),
]


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_bad_headers_are_closed_and_counted(
    start: Callable[..., RunningProxy], caplog: pytest.LogCaptureFixture
) -> None:
    running = start("any", limits=LimitsConfig(authentication_timeout_ms=1000))
    listener = running.server.listeners[0]
    # One line per case: without the once-a-second limit (set before any connection exists).
    listener.admission.rate_log = RateLimitedLog(
        logging.getLogger("kafkaguard.proxy"), interval_s=0.0
    )
    caplog.set_level(logging.WARNING, logger="kafkaguard.proxy")
    for count, (what, data, message) in enumerate(BAD_HEADERS, 1):
        with socket.create_connection(_bootstrap(running), timeout=5) as sock:
            sock.sendall(data)
            if what.endswith("EOF"):
                sock.shutdown(socket.SHUT_WR)
            _closed_without_answer(sock)
        _wait_for(lambda n=count: _counter(running, "proxy_protocol") == n, what)  # type: ignore[misc]
        _wait_logged(caplog, "closing connection from 127.0.0.1", message)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], what
        caplog.clear()
    assert listener.stats.accepted == 0 and not listener.connections
    # A connection that leaves without a byte (a plain TCP health check) is not a bad header.
    socket.create_connection(_bootstrap(running), timeout=5).close()
    _wait_for(lambda: _counter(running, "client_closed") == 1, "counted as client_closed")
    time.sleep(0.2)  # a line would follow the count at once
    assert _counter(running, "proxy_protocol") == len(BAD_HEADERS)
    assert not caplog.records
    with RawKafkaClient(*_bootstrap(running), preamble=v2()) as good:  # the listener still serves
        assert good.api_versions()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_header_in_pieces(start: Callable[..., RunningProxy]) -> None:
    """A header split over several segments (the spec recommends tolerance) is read whole."""
    running = start("any")
    header = v2(tlvs=tlv(0x02, b"split.example"))
    with socket.create_connection(_bootstrap(running), timeout=5) as sock:
        for piece in (header[:5], header[5:14], header[14:17], header[17:]):
            sock.sendall(piece)
            time.sleep(0.05)
        sock.sendall(_api_versions_frame())
        frame = _read_frame(sock)
        assert struct.unpack_from(">i", frame, 4)[0] == 1  # ApiVersions answered
        response = codec.decode_response(frame, 18, 3)
        assert response.error_code == codec.ErrorCode.none
    assert running.server.listeners[0].stats.accepted == 1


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_connections_awaiting_their_header_count_against_max_connections(
    start: Callable[..., RunningProxy],
) -> None:
    """Silent connections from a trusted address hold no quota slot of their own yet, but
    ``max_connections`` still bounds them; shutdown closes them."""
    running = start("v2", limits=LimitsConfig(max_connections=2, authentication_timeout_ms=30000))
    silent = [socket.create_connection(_bootstrap(running), timeout=5) for _ in range(2)]
    try:
        _wait_for(
            lambda: running.server.listeners[0].acceptor.awaiting_header == 2, "both accepted"
        )
        with socket.create_connection(_bootstrap(running), timeout=5) as third:
            third.sendall(v2())
            _closed_without_answer(third)
        _wait_for(lambda: _counter(running, "max_connections") == 1, "the refusal is counted")
        stop_proxy_thread(running)
        for sock in silent:
            _closed_without_answer(sock, wait_s=5)
    finally:
        for sock in silent:
            sock.close()


def test_example_config_keys() -> None:
    """config.example.yaml's commented proxy_protocol keys, uncommented, are valid."""
    example = (Path(__file__).parents[3] / "config.example.yaml").read_text(encoding="utf-8")
    keys = [
        line.strip()[2:].split("   #")[0]
        for line in example.splitlines()
        if line.strip().startswith(("# proxy_protocol: ", "# proxy_protocol_trusted_cidrs: "))
    ]
    assert len(keys) == 2, keys
    listener = _listener_config("\n".join(keys))
    assert listener.proxy_protocol_versions == V2
    assert listener.proxy_protocol_trusted_cidrs == (ipaddress.ip_network("10.0.0.0/24"),)


def _readme_section() -> list[tuple[str, str]]:
    """docs/listeners.md's "Behind a load balancer" blocks (with its SNI routing part)."""
    section = docs.section("listeners.md", "## Behind a load balancer")
    return re.findall(r"```(\w*)\n(.*?)```", section, re.DOTALL)


def _readme_listener(text: str) -> ListenerConfig:
    upstream = "upstream: {bootstrap_servers: ['10.0.2.1:9092']}\n"
    (listener,) = parse_config(ConfigSection.from_text(upstream + text, "R")).listeners
    return listener


def test_readme_listener_snippets_are_valid() -> None:
    """The HAProxy example's listener, then the SNI example's."""
    proxied, sni = [body for kind, body in _readme_section() if kind == "yaml"]
    listener = _readme_listener(proxied)
    assert listener.proxy_protocol_versions == V2 and listener.ssl is not None
    assert dict(listener.broker_ports.explicit) == {0: 9300, 1: 9301, 2: 9302}
    listener = _readme_listener(sni)
    assert listener.sni is not None and listener.sni.host_for(7) == "broker-7.kafka.example.com"


def test_readme_haproxy_snippet_is_valid(tmp_path: Path) -> None:
    """``haproxy -c``: the documented configuration is one HAProxy accepts."""
    binary = require_haproxy()
    (text,) = [body for kind, body in _readme_section() if kind == ""]
    assert "send-proxy-v2" in text and "mode tcp" in text
    path = tmp_path / "haproxy.cfg"
    path.write_text(text, encoding="utf-8")
    checked = subprocess.run(
        [binary, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_check_config_warns_when_every_address_is_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        LISTENER.format(keys="    proxy_protocol: any\n    proxy_protocol_trusted_cidrs: ['::/0']"),
        encoding="utf-8",
    )
    assert main(["check-config", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "listener EXTERNAL: proxy_protocol_trusted_cidrs trusts every address" in err
