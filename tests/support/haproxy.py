"""A real HAProxy (Debian's ``haproxy`` package) for tests: TCP mode, on loopback.

:class:`HAProxy` gives each target (a kafkaguard port) a frontend on a free loopback port of
its own, whose server line sends the PROXY protocol (``send-proxy-v2``, or ``send-proxy``
for v1) — the set-up of docs/listeners.md's "Behind a load balancer". It runs
``haproxy -db`` (in the foreground) with its configuration in a temporary directory, is
ready once its stats socket answers (every listener is bound by then), and is stopped by its
own pid.
:func:`require` finds the binary or skips the calling test (fails it in CI).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from kafkaguard.tansu import free_port
from tests.support import debian


def require() -> str:
    """The path of ``haproxy``; skip (fail in CI) without it."""
    return debian.require("haproxy", "haproxy")


class HAProxyError(AssertionError):
    """HAProxy did not start."""


class HAProxy:
    """One HAProxy process: ``ports[i]`` on 127.0.0.1 forwards to ``targets[i]``."""

    def __init__(
        self, directory: Path, targets: Sequence[tuple[str, int]], *, send_proxy: str = "v2"
    ) -> None:
        self.directory = directory
        self.targets = list(targets)
        self.send_proxy = {"v1": "send-proxy", "v2": "send-proxy-v2"}[send_proxy]
        self.ports = [free_port() for _ in self.targets]
        self.stats_socket = directory / "haproxy.sock"
        self.log_path = directory / "haproxy.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def config_text(self) -> str:
        lines = [
            "global",
            "    maxconn 256",
            f"    stats socket {self.stats_socket} mode 600 level admin",
            "defaults",
            "    mode tcp",
            "    timeout connect 5s",
            "    timeout client 60s",
            "    timeout server 60s",
        ]
        for index, ((host, port), listen) in enumerate(zip(self.targets, self.ports, strict=True)):
            lines += [
                f"frontend kafka{index}",
                f"    bind 127.0.0.1:{listen}",
                f"    default_backend kafkaguard{index}",
                f"backend kafkaguard{index}",
                f"    server kafkaguard {host}:{port} {self.send_proxy}",
            ]
        return "\n".join(lines) + "\n"

    def start(self, timeout_s: float = 15.0) -> HAProxy:
        binary = require()
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "haproxy.cfg"
        config.write_text(self.config_text(), encoding="utf-8")
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [binary, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise HAProxyError(f"haproxy did not start:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        """The stats socket answers ``show info`` (HAProxy serves it from its main loop)."""
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(1.0)
                sock.connect(str(self.stats_socket))
                sock.sendall(b"show info\n")
                return b"Pid:" in sock.recv(65536)
        except OSError:
            return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        debian.stop(proc)

    def __enter__(self) -> HAProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
