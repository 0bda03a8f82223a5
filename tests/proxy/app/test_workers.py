"""``workers: 2``: ``kafkaguard run`` as a real process tree in front of Tansu. Both workers
take connections on the one bootstrap port (``SO_REUSEPORT``), a killed worker is started
again while the other keeps serving, SIGTERM stops everything with exit status 0, and a
worker that cannot start stops the supervisor instead of being restarted for ever."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.proxy.config import parse_config
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.proxy_fixture import TANSU_NODE_ID
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _config(tmp_path: Path, upstream: str, port: int, admin_port: int) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""
upstream: {{bootstrap_servers: ["{upstream}"], connect_timeout_s: 2}}
workers: 2
listeners:
  - name: PLAINTEXT
    port: {port}
    broker_ports: {{base: {free_base([TANSU_NODE_ID])}}}
admin: {{port: {admin_port}}}
authorizer: {{super_users: "User:ANONYMOUS"}}
shutdown_timeout_ms: 2000
""",
        encoding="utf-8",
    )
    return path


def _children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii")
    return {int(child) for child in text.split()}


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def _metric(admin_port: int, sample: str) -> int | None:
    """A sample of the worker's /metrics; None while it does not serve."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return None if match is None else int(float(match.group(1)))


def _accepted(admin_port: int) -> int | None:
    return _metric(admin_port, 'kafkaguard_connections_accepted_total{listener="PLAINTEXT"}')


def _ready(admin_port: int) -> bool:
    """The worker's /readyz answers 200: its listeners are bound (its admin listener answers
    before, during start-up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture
def supervisor(
    tansu: TansuBroker, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    port, admin_port = free_port(), free_base((0, 1))  # worker i: admin_port + i, both free
    config = _config(tmp_path, str(tansu.address), port, admin_port)
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait(lambda: all(_ready(admin_port + i) for i in (0, 1)), "both serve", 90)
        yield process, port, admin_port
    finally:
        if process.poll() is None:
            process.kill()
            for child in _children(process.pid) if os.path.exists(f"/proc/{process.pid}") else ():
                os.kill(child, signal.SIGKILL)
        process.wait(10)


def _api_versions(port: int) -> None:
    with RawKafkaClient("127.0.0.1", port, timeout_s=5) as client:
        assert client.api_versions()


def test_workers_share_the_port_survive_a_crash_and_stop_cleanly(
    supervisor: tuple[subprocess.Popen[str], int, int],
) -> None:
    process, port, admin_port = supervisor
    workers = _children(process.pid)
    assert len(workers) == 2
    for _ in range(40):
        _api_versions(port)
    counts = [_accepted(admin_port + i) for i in (0, 1)]
    assert sum(c or 0 for c in counts) == 40 and all(counts), counts  # both took connections

    killed = max(workers)
    os.kill(killed, signal.SIGKILL)
    _wait(lambda: len(_children(process.pid) - {killed}) == 2, "the killed worker restarted", 60)
    for _ in range(5):  # served meanwhile and after: by the other worker or the new one
        _api_versions(port)
    _wait(lambda: all(_ready(admin_port + i) for i in (0, 1)), "both serve again", 60)

    config = Path(process.args[-1])  # SIGHUP: each worker reloads the file
    config.write_text(config.read_text().replace("workers: 2", "workers: 3"), encoding="utf-8")
    process.send_signal(signal.SIGHUP)
    reloads = 'kafkaguard_config_reloads_total{result="applied"}'
    _wait(lambda: all(_metric(admin_port + i, reloads) == 1 for i in (0, 1)), "both reloaded")

    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "restarting it in 1 s" in output
    assert output.count("configuration reload: workers changed but needs a restart") == 2
    assert "Traceback" not in output
    started = {int(pid) for pid in re.findall(r"worker \d started \(pid (\d+)\)", output)}
    assert len(started) == 3 and workers < started
    assert not any(Path(f"/proc/{pid}").exists() for pid in started)  # none left behind


def test_a_worker_that_cannot_start_stops_the_supervisor(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    with socket.socket() as taken:  # held without SO_REUSEPORT: the workers cannot share it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, str(tansu.address), port, free_port())
        result = subprocess.run(
            [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1, result.stderr
    assert "failed to start" in result.stderr and "cannot start" in result.stderr
    assert "restarting" not in result.stderr


UPSTREAM = "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"


@pytest.mark.parametrize(
    ("setting", "upstream", "expected"),
    [
        (
            "auto",
            "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n",
            len(os.sched_getaffinity(0)),
        ),
        ("3", "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n", 3),
        ("0", "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n", "must be auto or 1 to 256"),
        ("true", "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n", "must be auto or 1 to 256"),
        (
            "2",
            "upstream: {embedded: true}\n",
            "needs upstream.bootstrap_servers",
        ),  # the embedded broker is one process's
    ],
)
def test_workers_setting(setting: str, upstream: str, expected: int | str) -> None:
    text = f"{upstream}workers: {setting}\nlisteners:\n  - {{name: A, port: 9192}}\n"
    if isinstance(expected, int):
        assert parse_config(ConfigSection.from_text(text, "c.yaml")).workers == expected
    else:
        with pytest.raises(ConfigError, match=expected):
            parse_config(ConfigSection.from_text(text, "c.yaml"))
