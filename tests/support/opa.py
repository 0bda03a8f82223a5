"""A real Open Policy Agent server for the OPA authorizer's tests (kafkaguard/policy/opa.py).

OPA is built from the Go module proxy (``go install github.com/open-policy-agent/opa@``
:data:`OPA_VERSION`) into ``~/.cache/kafkaguard/go-bin/`` once, as helm is
(tests/support/kubernetes.py); ``./dev test`` builds it in its Go lane (``python -m
tests.support.opa``). A test that needs it and finds it unbuilt builds it then; it skips only
when there is no Go toolchain at all (and fails in CI, ``CI`` set).

:class:`OpaServer` runs ``opa run --server`` on a loopback port with one policy of
:data:`POLICIES`: ``kafka_authz_v0.rego`` (Rego v0, the OPA Kafka plugin's style, loaded with
``--v0-compatible``) or ``kafka_authz_v1.rego`` (Rego v1). It can be stopped and started
again on the same port (OPA gone mid-test, then back). :func:`build_wasm_bundle` compiles a
policy for the authorizer's ``mode: wasm``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaguard.tansu import free_port
from tests.support.debian import stop as stop_process
from tests.support.kubernetes import BIN, GoToolUnavailable, go_binary, go_build

OPA_VERSION = "v1.22.3"
OPA_MODULE = "github.com/open-policy-agent/opa"
POLICIES = Path(__file__).resolve().parent / "opa_policies"
V0_POLICY = POLICIES / "kafka_authz_v0.rego"
V0_URL_PATH = "/v1/data/kafka/authz/allow"
V1_POLICY = POLICIES / "kafka_authz_v1.rego"
V1_URL_PATH = "/v1/data/kafkaguard/authz/allow"
_START_TIMEOUT_S = 30.0


def opa_path() -> Path:
    return BIN / f"opa-{OPA_VERSION}"


def build_opa() -> Path:
    return go_build(opa_path(), ["install", f"{OPA_MODULE}@{OPA_VERSION}"], None)


def require_opa() -> Path:
    """The OPA binary, built now if it is not yet; skip (fail in CI) only without Go."""
    if opa_path().exists():
        return opa_path()
    try:
        go_binary()
    except GoToolUnavailable as exc:
        reason = f"OPA cannot be built: {exc}"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return build_opa()


class OpaServer:
    """``opa run --server`` on ``127.0.0.1:port`` with ``policy``; its output goes to
    ``log``."""

    def __init__(self, policy: Path, log: Path, *, v0: bool) -> None:
        self.binary = require_opa()
        self.policy = policy
        self.v0 = v0
        self.port = free_port()
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def start(self, argv: list[str] | None = None, cwd: Path | None = None) -> None:
        """Start OPA, by default as the class doc says; ``argv``: other arguments of
        ``opa`` (a command a page shows, its address this server's)."""
        if argv is None:
            argv = ["run", "--server", "--addr", f"127.0.0.1:{self.port}", "--log-level", "error"]
            argv += ["--v0-compatible"] if self.v0 else []
            argv.append(str(self.policy))
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                [str(self.binary), *argv], stdout=out, stderr=out, cwd=cwd
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"opa exited with {self._process.returncode}: {self._tail()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"opa did not answer /health within {_START_TIMEOUT_S} s")

    def stop(self) -> None:
        process, self._process = self._process, None
        stop_process(process)

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


@contextlib.contextmanager
def running_opa(policy: Path, directory: Path, *, v0: bool) -> Iterator[OpaServer]:
    """An :class:`OpaServer` of ``policy`` started (its log in ``directory``), stopped after."""
    server = OpaServer(policy, directory / "opa.log", v0=v0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def build_wasm_bundle(policy: Path, entrypoint: str, out: Path, *, v0: bool) -> Path:
    """``opa build -t wasm -e ENTRYPOINT`` over ``policy`` into ``out`` (a ``.tar.gz``): the
    bundle of the OPA authorizer's ``mode: wasm``."""
    argv = [str(require_opa()), "build", "-t", "wasm", "-e", entrypoint, "-o", str(out)]
    argv += ["--v0-compatible"] if v0 else []
    subprocess.run([*argv, str(policy)], check=True, capture_output=True, timeout=120)
    return out


if __name__ == "__main__":
    try:
        print(f"opa: {build_opa()}")
    except (GoToolUnavailable, subprocess.SubprocessError) as exc:
        print(f"OPA tests unavailable: {exc}", file=sys.stderr)
        sys.exit(1)
