"""Helm and a Kubernetes manifest validator for tests/deploy/test_helm.py, built from the Go
module proxy with the Go toolchain (``go install``/``go build``), cached under
``~/.cache/kafkaguard/go-bin/`` by version (helm) or by a hash of the validator's sources,
so later runs build nothing.

- ``helm`` (``helm.sh/helm/v3``, :data:`HELM_VERSION`): ``helm lint --strict`` and
  ``helm template`` of deploy/helm/kafkaguard.
- ``k8s-validate`` (tests/support/k8s_validate/): decodes every rendered object into
  Kubernetes' own API types (``k8s.io/api``, prometheus-operator's for the monitors) with
  strict unmarshalling, so an unknown or misspelt field fails as the API server's strict field
  validation would.

Run as a module (``python -m tests.support.kubernetes``) it builds both; ``./dev test`` does
that before pytest. Without them the tests skip with the reason, except in CI (``CI`` set),
where they fail.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HELM_VERSION = "v3.22.0"
HELM_MODULE = "helm.sh/helm/v3/cmd/helm"
VALIDATOR = Path(__file__).resolve().parent / "k8s_validate"
BIN = Path.home() / ".cache" / "kafkaguard" / "go-bin"


class GoToolUnavailable(Exception):
    """Go is missing or a build failed; the message says which."""


def go_binary() -> str:
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None
    )
    if go is None:
        raise GoToolUnavailable("no Go toolchain (go on PATH or /usr/local/go/bin/go)")
    return go


def helm_path() -> Path:
    return BIN / f"helm-{HELM_VERSION}"


def validator_path() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((VALIDATOR / name).read_bytes())
    return BIN / f"k8s-validate-{digest.hexdigest()[:16]}"


def go_build(target: Path, argv: list[str], cwd: Path | None) -> Path:
    """Run ``go install`` or ``go build`` into a private directory, then move the binary to
    ``target``: a concurrent or killed build never leaves a half-written one there."""
    if target.exists():
        return target
    out = BIN / f".build-{os.getpid()}"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(out), "CGO_ENABLED": "0"}
    verb, *packages = argv
    command = [go_binary(), verb, *(["-o", str(out)] if verb == "build" else []), *packages]
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise GoToolUnavailable(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    (built,) = out.iterdir()
    built.replace(target)
    out.rmdir()
    return target


def build_helm() -> Path:
    return go_build(helm_path(), ["install", f"{HELM_MODULE}@{HELM_VERSION}"], None)


def build_validator() -> Path:
    return go_build(validator_path(), ["build", "."], VALIDATOR)


def require(path: Path, what: str) -> Path:
    """``path`` if built; else skip the calling test (fail it in CI) saying how to build it."""
    if not path.exists():
        reason = f"{what} is not built (`./dev test` or `python -m tests.support.kubernetes`)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


if __name__ == "__main__":
    try:
        print(f"helm: {build_helm()}")
        print(f"validator: {build_validator()}")
    except (GoToolUnavailable, subprocess.SubprocessError) as exc:
        print(f"Kubernetes tests unavailable: {exc}", file=sys.stderr)
        sys.exit(1)
