"""A real ZooKeeper for tests: Debian's ``zookeeper`` package, standalone, on loopback.

``./dev test`` installs the package. The server runs as
``java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.ZooKeeperServerMain
<port> <datadir>`` (the jar's manifest names its dependencies), is ready when it answers
``ruok``, and is stopped by PID. Tests that need it are skipped, with the reason, when the
package is missing (:func:`missing_reason`; the ``zookeeper``, ``zookeeper_factory``,
``chroot`` and ``raw_zk`` fixtures in ``tests/conftest.py`` are built from this module).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.support.kafka_broker import free_port  # below the ephemeral range: survives outages

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


def missing_reason() -> str | None:
    if not ZOOKEEPER_JAR.exists():
        return (
            f"Debian's zookeeper package is not installed ({ZOOKEEPER_JAR} missing; "
            "`./dev test` installs it: apt-get install zookeeper)"
        )
    if shutil.which("java") is None:
        return "no `java` on PATH (Debian's zookeeper package depends on a JRE)"
    return None


class ZooKeeperServer:
    """One standalone server; :meth:`stop` then :meth:`start` restarts it on the same port
    and data directory (sessions and znodes survive, as after a real outage)."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        assert self.proc is None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed in stop()
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.4lw.commands.whitelist=ruok",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                str(ZOOKEEPER_JAR),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(self.port),
                str(self.data_dir / "data"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.proc.returncode}: "
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            # "imok" only says the process runs; a loaded machine has been seen to take longer
            # still to establish a session (kazoo's "socket time-out during read" in CI), so
            # ready means: a client session was established.
            if self.ruok() and self.serves_sessions():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not establish a session within {timeout_s} s")

    def serves_sessions(self) -> bool:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        client = KazooClient(hosts=self.connect, timeout=10)
        try:
            client.start(timeout=10)
            return True
        except KazooTimeoutError:
            return False
        finally:
            client.stop()
            client.close()

    def ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


ZooKeeperFactory = Callable[[], ZooKeeperServer]


def unique_chroot() -> str:
    return f"/kg-{uuid.uuid4().hex[:10]}"
