"""deploy/systemd/kafkaguard.service: ``systemd-analyze verify`` accepts it, its hardening
keeps ``systemd-analyze security`` in the "OK" band, its commands are kafkaguard command lines
and its stop timeout outlasts the drain."""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaguard.cli import build_parser
from kafkaguard.proxy.config import ProxyConfig
from tests.support import debian
from tests.support.docs import deploying_commands

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
UNIT = DEPLOY / "kafkaguard.service"
INSTALLED = "/usr/local/bin/kafkaguard"
"""Where the unit expects the command (``pip install`` into /usr/local, or a symlink)."""
EXPOSURE_THRESHOLD = 20
"""``systemd-analyze security`` exposure ×10 the unit must stay under ("OK" ends at 4.9)."""


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT, encoding="utf-8")
    return parser["Service"]


def _here(tmp_path: Path) -> Path:
    """The unit with this environment's kafkaguard for INSTALLED: verify checks that every
    command exists and is executable."""
    kafkaguard = Path(sys.executable).parent / "kafkaguard"
    if not kafkaguard.exists():
        pytest.skip(f"{kafkaguard} is not installed (pip install -e .)")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(INSTALLED, str(kafkaguard)))
    return unit


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """docs/deploying.md's command, on this environment's copy of the unit."""
    tool = debian.require("systemd-analyze", "systemd")
    (command,) = [c for c in deploying_commands("systemd-analyze") if c[1] == "verify"]
    installed = f"/etc/systemd/system/{UNIT.name}"
    assert installed in command
    argv = [str(_here(tmp_path)) if word == installed else word for word in command[1:]]
    done = subprocess.run([tool, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_the_hardening_keeps_the_exposure_low(tmp_path: Path) -> None:
    tool = debian.require("systemd-analyze", "systemd")
    done = subprocess.run(
        [
            tool,
            "security",
            "--offline=yes",
            f"--threshold={EXPOSURE_THRESHOLD}",
            str(_here(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_commands_are_kafkaguard_command_lines() -> None:
    service = _service()
    parsed = {}
    for key in ("ExecStartPre", "ExecStart", "ExecReload"):
        program, *argv = shlex.split(service[key])
        assert program == INSTALLED
        parsed[key] = build_parser().parse_args(
            [a.replace("$MAINPID", "1") for a in argv]  # systemd substitutes it
        )
    assert parsed["ExecStartPre"].command == "check-config"
    assert parsed["ExecStart"].command == "run" and parsed["ExecReload"].command == "reload"
    configs = {args.config for args in parsed.values()}
    assert configs == {Path("/etc/kafkaguard/config.yaml")}
    assert parsed["ExecStart"].pid_file.parent == Path("/run") / service["RuntimeDirectory"]


def test_stop_outlasts_the_drain() -> None:
    service = _service()
    assert service["KillSignal"] == "SIGTERM"
    drain_s = ProxyConfig.__dataclass_fields__["shutdown_timeout_ms"].default / 1000
    assert int(service["TimeoutStopSec"]) > drain_s


def test_the_user_is_the_sysusers_entry() -> None:
    service = _service()
    entry = (DEPLOY / "kafkaguard.sysusers").read_text(encoding="utf-8").splitlines()[-1].split()
    assert entry[:2] == ["u", service["User"]] and service["Group"] == service["User"]
