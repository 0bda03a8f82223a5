"""The commands the documentation shows, run as written: the README's quick start against
``kafkaguard demo``, ``check-config`` on config.example.yaml as a fresh checkout has it, and
the deploying page's systemd and cron lines against the unit they go with."""

from __future__ import annotations

import configparser
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaguard.cli import main
from kafkaguard.cli.serve import prepare_demo
from kafkaguard.tansu import NODE_ID, free_base
from tests.support import docs

QUICK_START = "## Quick start against the demo"
DEMO_ADDRESS = "127.0.0.1:9192"
"""Where the README's clients connect: the demo's listener (kafkaguard/demo/config.yaml)."""
UNIT = docs.ROOT / "deploy" / "systemd" / "kafkaguard.service"
UNIT_PATH = UNIT.relative_to(docs.ROOT)
KCAT = shutil.which("kcat")


def test_check_config_passes_on_the_example_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    """config.example.yaml's first lines say to run this; its ACL file ships beside it."""
    example = docs.ROOT / "config.example.yaml"
    assert f"kafkaguard check-config --config {example.name}" in example.read_text("utf-8")
    assert main(["check-config", "--config", str(example)]) == 0
    assert capsys.readouterr().out.strip() == f"{example}: ok"


def _wait_for(port: int, demo: subprocess.Popen[str], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert demo.poll() is None, f"kafkaguard demo exited: {demo.communicate()[1]}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"kafkaguard demo did not listen on {port} within {timeout_s:.0f} s")


def _sh(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _python_client(address: str, cwd: Path) -> None:
    (client,) = docs.blocks("README.md", QUICK_START, "python")
    (cwd / "demo_client.py").write_text(client.replace(DEMO_ADDRESS, address), encoding="utf-8")
    # `.venv/bin/python demo_client.py`: this environment's Python.
    done = subprocess.run(
        [sys.executable, "demo_client.py"], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "b'hello'", done.stderr


def _kcat_lines(address: str, cwd: Path) -> None:
    (block,) = [b for b in docs.blocks("README.md", QUICK_START, "sh") if "kcat " in b]
    lines = block.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        command, _, expected = line.partition("# → ")
        done = _sh(command.replace(DEMO_ADDRESS, address), cwd)
        if expected:  # the denied produce: kcat reports the broker's error
            assert expected.strip() in done.stdout + done.stderr, done.stderr
        else:
            assert done.returncode == 0, done.stderr
    assert "hello" in _sh(lines[1].replace(DEMO_ADDRESS, address), cwd).stdout


def _acl_lines(cwd: Path) -> None:
    (block,) = [b for b in docs.blocks("README.md", QUICK_START, "sh") if "acls" in b]
    venv_kafkaguard = str(Path(sys.executable).parent / "kafkaguard")
    for line in block.replace("\\\n", " ").strip().splitlines():
        assert line.startswith(".venv/bin/kafkaguard acls")
        done = _sh(line.replace(".venv/bin/kafkaguard", shlex.quote(venv_kafkaguard), 1), cwd)
        assert done.returncode == 0, done.stderr
    listed = _sh(f"{shlex.quote(venv_kafkaguard)} {block.splitlines()[0].split(' ', 1)[1]}", cwd)
    assert "audit-readers" in listed.stdout, listed.stdout


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    """``./dev demo`` (``kafkaguard demo``), then the README's client, kcat and ACL lines.
    The demo's listener is moved off 9192 (its config is copied for editing, as the README
    says) so that the test does not depend on that port being free."""
    port = free_base([0, 1 + NODE_ID])  # the bootstrap port and the node's (base port + 1)
    config = prepare_demo(tmp_path / "kafkaguard-demo")
    text = config.read_text(encoding="utf-8")
    assert "    port: 9192\n" in text
    config.write_text(text.replace("    port: 9192\n", f"    port: {port}\n"), encoding="utf-8")
    demo = subprocess.Popen(
        [str(Path(sys.executable).parent / "kafkaguard"), "demo"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(port, demo)
        address = f"127.0.0.1:{port}"
        _python_client(address, tmp_path)
        if KCAT is not None:  # the README says to install it; ./dev test does
            _kcat_lines(address, tmp_path)
        _acl_lines(tmp_path)
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.communicate()


def test_the_acl_commands_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/acls.md's first lines: add, remove (the ACL on the topic) and list, on a file
    store, leave the group's ACL."""
    config = docs.file_store_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    (block, *_) = docs.blocks(
        "acls.md", "# Managing ACLs: stores, fleets, `acls apply` and `explain`", "sh"
    )
    lines = [shlex.split(line) for line in block.replace("\\\n", " ").strip().splitlines()]
    assert [words[:4] for words in lines] == [["kafkaguard", "acls", "--config", "config.yaml"]] * 3
    for words in lines:
        assert main(words[1:]) == 0, words
    capsys.readouterr()
    assert main(["acls", "--config", str(config), "--list"]) == 0
    listed = capsys.readouterr().out
    assert "name=orders-readers" in listed and "name=orders," not in listed


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT, encoding="utf-8")
    return parser["Service"]


def test_the_systemd_lines_install_the_command_where_the_unit_runs_it() -> None:
    """``systemd-analyze verify`` checks that the unit's commands exist, so the page's lines
    before it must put ``kafkaguard`` at the unit's path (tests/deploy/test_systemd.py runs
    the verify line itself)."""
    unit_command = shlex.split(_service()["ExecStart"])[0]
    block = next(b for b in docs.blocks("deploying.md", "# Deploying", "sh") if "systemd" in b)
    lines = [shlex.split(line, comments=True) for line in block.strip().splitlines()]
    verify = next(i for i, words in enumerate(lines) if words[:2] == ["systemd-analyze", "verify"])
    links = [words for words in lines[:verify] if words[:2] == ["ln", "-s"]]
    assert [words[-1] for words in links] == [unit_command]
    venv = next(words for words in lines if words[:3] == ["python3", "-m", "venv"])
    assert links[0][2] == f"{venv[3]}/bin/kafkaguard"
    installed = [w[-1] for w in lines[:verify] if w[:1] == ["install"] and w[-2] == str(UNIT_PATH)]
    assert [Path(target) for target in installed] == [Path(lines[verify][2]).parent]


def test_the_cron_example_compacts_the_units_audit_directory() -> None:
    """The analytics page's cron line reads the directory the systemd unit lets the proxy
    write (its only writable path) and that the unit says to set ``audit.dir`` to."""
    service = _service()
    (writable,) = service["ReadWritePaths"].split()
    assert f"set audit.dir to {writable}/audit" in UNIT.read_text(encoding="utf-8")
    (cron,) = docs.commands("analytics.md", "# Audit analytics (`kafkaguard analyze`)", "15")
    assert cron[5:8] == ["kafkaguard", "analyze", "compact"]
    assert cron[cron.index("--input") + 1] == f"{writable}/audit"
