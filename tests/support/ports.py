"""A loopback port that is taken, for the tests of what a bind failure says
(tests/proxy/app/test_start_errors.py, and docs/troubleshooting.md's line for it)."""

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
