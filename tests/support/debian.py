"""Debian-packaged peers the tests run for real (``./dev test`` installs them when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def require(tool: str, package: str) -> str:
    """The path of ``tool`` (on PATH, or in /usr/sbin as Debian installs daemons); without it
    the calling test skips, or fails under ``CI`` (where ``./dev test`` must have installed
    it), saying how to install it."""
    path = shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}",) if os.access(p, os.X_OK)), None
    )
    if path is None:
        reason = (
            f"`{tool}` is not installed (Debian's {package} package; "
            f"`./dev test` installs it: apt-get install {package})"
        )
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """Terminate a peer process, killing it if it does not exit within 10 s."""
    if process is None:
        return
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
