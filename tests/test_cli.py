"""The top-level ``kafkaguard`` command dispatches to its subcommands."""

from __future__ import annotations

import argparse
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest

from kafkaguard.cli import build_parser, main
from kafkaguard.protocol import IMPLEMENTATION
from kafkaguard.proxy.config import load_config
from kafkaguard.tansu import TansuBroker, free_port


def test_acls_subcommand_adds_and_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    acl_file = tmp_path / "acls.yaml"
    acl_file.write_text("acls: []\n", encoding="utf-8")
    add = ["acls", "--acl-file", str(acl_file), "--add", "--allow-principal", "User:alice"]
    assert main([*add, "--operation", "Read", "--topic", "orders"]) == 0
    assert main(["acls", "--acl-file", str(acl_file), "--list"]) == 0
    out = capsys.readouterr().out
    assert "name=orders" in out and "principal=User:alice" in out and "operation=READ" in out


def test_check_config_names_the_bad_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("listeners:\n  - name: A\n    port: nope\n", encoding="utf-8")
    assert main(["check-config", "--config", str(config)]) == 2
    assert f"{config}:3 listeners[0].port" in capsys.readouterr().err


def test_example_config_is_valid(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parent.parent / "config.example.yaml"
    copy = tmp_path / "config.yaml"
    shutil.copyfile(example, copy)
    (tmp_path / "acls.yaml").write_text("acls: []\n", encoding="utf-8")  # its acl_store.path
    assert main(["check-config", "--config", str(copy)]) == 0


def test_run_reports_a_start_failure_in_one_line(
    tmp_path: Path,
    tansu: TansuBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Keep this process on the default event loop policy (uvloop is the production default).
    monkeypatch.setattr("kafkaguard.cli.serve.install_event_loop_policy", lambda: "asyncio")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"upstream:\n  bootstrap_servers: ['{tansu.address}']\n"
        f"listeners:\n  - name: P\n    port: {free_port()}\n"
        "acl_store:\n  type: file\n  path: missing-acls.yaml\n",
        encoding="utf-8",
    )
    assert main(["run", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkaguard: cannot start:") and "missing-acls.yaml" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "check-config"])
def test_a_config_without_upstream_is_refused_naming_the_fix(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"listeners:\n  - name: P\n    port: {free_port()}\n", encoding="utf-8")
    assert main([command, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}:1 upstream: is required" in err and "embedded: true" in err


def test_embedded_and_bootstrap_servers_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream:\n  bootstrap_servers: ['127.0.0.1:9092']\n  embedded: true\n"
        "listeners:\n  - name: P\n    port: 19092\n",
        encoding="utf-8",
    )
    assert main(["check-config", "--config", str(config)]) == 2
    assert f"{config}:3 upstream.embedded: excludes bootstrap_servers" in capsys.readouterr().err


def test_the_demo_config_opts_in_to_the_embedded_broker() -> None:
    demo = Path(__file__).resolve().parent.parent / "kafkaguard" / "demo" / "config.yaml"
    assert load_config(demo).upstream.embedded


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == (
        f"kafkaguard {version('kafkaguard')} (protocol: {IMPLEMENTATION})\n"
    )


def test_every_command_has_help_written_for_users() -> None:
    """Each command's ``--help`` opens with a description for the people running it: no
    command is left with a bare argument list, and no developer docstring markup leaks."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in commands.choices.items():
        assert parser.description and len(parser.description) > 80, name
        help_text = parser.format_help()
        for markup in ("``", ":class:", ":mod:", ":func:", ":data:"):
            assert markup not in help_text, (name, markup)


def test_the_top_level_help_names_every_analyze_job() -> None:
    """``kafkaguard --help`` lists each job of ``kafkaguard analyze`` (watch was missing)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    analyze = commands.choices["analyze"]
    jobs = next(a for a in analyze._actions if isinstance(a, argparse._SubParsersAction))
    (line,) = (a.help for a in commands._choices_actions if a.dest == "analyze")
    assert line is not None
    assert sorted(jobs.choices) == ["compact", "propose", "report", "unused", "watch", "whatif"]
    for job in jobs.choices:
        assert job in line, job
    assert "watch" in " ".join(parser.format_help().split())
