"""Loopback ports in a known state, held for the block: one another socket listens on (what a
bind failure says: tests/proxy/app/test_start_errors.py, docs/troubleshooting.md's line), and
one that refuses connections (an unreachable server: tests/cli/doctor/)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on while the block runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        yield blocker.getsockname()[1]


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound, not listening
    (Linux answers a SYN to it with RST), so no other process on a shared machine can take
    it meanwhile, as it could a port bound and released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]
