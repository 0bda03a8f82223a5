"""kcat (the README's quick-start tool) through kafkaguard to Tansu; skipped without kcat.

Debian's kcat 1.7.1 (librdkafka 2.0.2) cannot talk to Tansu directly: Tansu's ApiVersions v3
response carries its tagged fields even at their default values, and librdkafka 2.0.2 fails
to skip them ("Protocol read buffer underflow for ApiVersion v3"). Through the proxy the
ApiVersions response is re-encoded by kio, which omits default-valued tagged fields, so the
same kcat works. These tests pin that down.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.support.proxy_fixture import SESSION_TIMEOUT_MS, RunningProxy, unique_name

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(60),
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed"),
]


def kcat(*args: str, stdin: str | None = None, timeout: float = 20) -> str:
    assert KCAT is not None
    done = subprocess.run(
        [KCAT, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"kcat {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def test_kcat_lists_metadata_with_proxy_addresses_only(proxy: RunningProxy) -> None:
    metadata = json.loads(kcat("-b", proxy.bootstrap, "-L", "-J", "-m", "10"))
    node = proxy.server.listeners[0].node_ports.advertised_node(111)
    assert node is not None
    assert [(b["id"], b["name"]) for b in metadata["brokers"]] == [(111, f"{node[0]}:{node[1]}")]


def test_kcat_produce_and_consume(proxy: RunningProxy) -> None:
    topic = unique_name("kcat")
    lines = [f"k{i}:value-{i}" for i in range(5)]
    kcat("-b", proxy.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", stdin="\n".join(lines) + "\n")

    out = kcat(
        "-b", proxy.bootstrap, "-C", "-t", topic, "-p", "0",
        "-o", "beginning", "-e", "-q", "-f", "%o %k:%s\\n",
    )  # fmt: skip
    assert out.splitlines() == [f"{i} {line}" for i, line in enumerate(lines)]

    # a balanced consumer (consumer group) stops after the five records
    out = kcat(
        "-b", proxy.bootstrap, "-C", "-G", unique_name("kcat-group"),
        "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
        "-o", "beginning", "-c", str(len(lines)), "-q", "-f", "%k:%s\\n", topic,
    )  # fmt: skip
    assert out.splitlines() == lines
