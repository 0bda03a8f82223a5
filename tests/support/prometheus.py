"""A real Prometheus server for tests (Debian's ``prometheus`` package), on loopback.

:class:`PrometheusServer` writes a one-job config scraping the given targets every second,
starts ``prometheus`` with its storage in a temporary directory and its web listener on a free
loopback port, and answers PromQL through the HTTP API (``/api/v1/query``). :func:`require`
finds ``prometheus`` or ``promtool`` on PATH, or skips the calling test (fails it in CI) saying
how to install them (``./dev test`` does).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kafkaguard.tansu import free_port
from tests.support import debian

JOB = "kafkaguard"
"""The scrape job's name, as deploy/prometheus/alerts.yml expects it (its ``up`` alert)."""


def require(tool: str) -> str:
    """The path of ``prometheus`` or ``promtool``; skip (fail in CI) without it."""
    return debian.require(tool, "prometheus")


class PrometheusError(AssertionError):
    """Prometheus did not start, or its API answered an error."""


class PrometheusServer:
    """One Prometheus process scraping ``targets`` (``host:port``) every ``interval_s``."""

    def __init__(
        self,
        directory: Path,
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        interval_s: int = 1,
    ) -> None:
        self.directory = directory
        self.targets = list(targets)
        self.rule_files = [path.resolve() for path in rule_files]
        self.interval_s = interval_s
        self.port = free_port()
        self.log_path = directory / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        binary = require("prometheus")
        self.directory.mkdir(parents=True, exist_ok=True)
        interval = f"{self.interval_s}s"
        config = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": self.targets}]}],
        }
        config_path = self.directory / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_path}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    "--storage.tsdb.retention.time=1h",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=info",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # One OS thread for Go code: the test machine has two cores to share.
                env={**os.environ, "GOMAXPROCS": "1"},
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with {self._proc.returncode}\n{self.log()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"prometheus not ready within {timeout_s} s\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        debian.stop(proc)

    def log(self, tail: int = 40) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no prometheus log)"
        return "\n".join(lines[-tail:])

    # -- the HTTP API --------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """``data`` of a ``/api/v1/<path>`` answer; raises :class:`PrometheusError` on errors."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": {labels}, "value": [ts, "text"]}, ...]``."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: a {data['resultType']}, not an instant vector")
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float:
        """The single value of ``expr`` (wrap a selector in ``sum(...)`` to add series up)."""
        result = self.query(expr)
        if len(result) != 1:
            raise PrometheusError(f"{expr}: {len(result)} series, expected one: {result}")
        return float(result[0]["value"][1])

    def wait_until_scraping(self, timeout_s: float = 20.0) -> None:
        """Wait for a successful scrape of every target (``up`` 1). Prometheus's service
        discovery hands the targets over about 5 s after start."""
        deadline = time.monotonic() + timeout_s
        while True:
            up = self.query(f'up{{job="{JOB}"}}')
            if len(up) == len(self.targets) and all(s["value"][1] == "1" for s in up):
                return
            if time.monotonic() > deadline:
                raise PrometheusError(f"targets not up within {timeout_s} s: {up}\n{self.log()}")
            time.sleep(0.2)

    def wait_for_scrape_after(self, moment: float, timeout_s: float = 15.0) -> float:
        """Wait until a scrape of every target started after ``moment`` (Unix time) is stored;
        return the oldest of the targets' latest scrape times."""
        expr = f'min(timestamp(up{{job="{JOB}"}}))'
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if result and float(result[0]["value"][1]) > moment:
                up = self.query(f'up{{job="{JOB}"}}')
                if len(up) == len(self.targets):
                    return float(result[0]["value"][1])
            if time.monotonic() > deadline:
                raise PrometheusError(
                    f"no scrape after {moment} within {timeout_s} s: {result}\n{self.log()}"
                )
            time.sleep(0.2)
