"""The pure-Python pass of ``./dev test`` covers every compiled module (issue 34).

The whole suite runs on the compiled modules; the second pass, with
``KAFKAGUARD_PURE_PYTHON=1 pytest --pure-python-selection``, runs only the selection of
``tests/support/pure_python.py``. A module added to ``kafkaguard/protocol/build.py`` without a
test in that selection would be tested only compiled: this file fails then.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kafkaguard.protocol.build import COMPILED_MODULES
from tests.support.pure_python import (
    OPTION,
    ROOT,
    SELECTED_DIRECTORIES,
    SELECTED_FILES,
    compiled_imports,
    selected,
)

TESTS = ROOT / "tests"


def selection() -> list[Path]:
    return sorted(path for path in TESTS.rglob("test_*.py") if selected(path))


def test_every_compiled_module_has_a_test_in_the_pure_python_selection() -> None:
    covered: dict[str, list[str]] = {name: [] for name in COMPILED_MODULES}
    for path in selection():
        for name in compiled_imports(path):
            covered[name].append(path.relative_to(ROOT).as_posix())
    uncovered = [name for name, files in covered.items() if not files]
    assert not uncovered, (
        f"compiled modules with no test in the pure-Python selection: {uncovered}; add a test "
        "that imports each, under one of tests/support/pure_python.py's directories"
    )


def test_every_selected_directory_holds_tests() -> None:
    for directory in SELECTED_DIRECTORIES:
        assert any((ROOT / directory).rglob("test_*.py")), f"{directory} holds no test"
    for name in SELECTED_FILES:
        assert (ROOT / name).is_file(), f"{name} is not a test file"


def test_the_selection_is_a_part_of_the_suite() -> None:
    everything = sorted(TESTS.rglob("test_*.py"))
    chosen = selection()
    # The directories, and files elsewhere that import a compiled module themselves.
    assert TESTS / "protocol" / "test_protocol_framing.py" in chosen
    assert TESTS / "proxy" / "test_share_skim.py" in chosen
    assert TESTS / "audit" / "test_writer.py" not in chosen
    assert TESTS / "policy" / "test_acls_apply.py" not in chosen
    # The authorizer's own tests; not every test that builds an authorizer or counts a cause.
    assert TESTS / "policy" / "test_standard_authorizer.py" in chosen
    assert TESTS / "audit" / "test_events.py" not in chosen  # imports StandardAuthorizer
    assert TESTS / "proxy" / "net" / "test_graceful_shutdown.py" not in chosen  # CloseCause
    assert 0 < len(chosen) < len(everything) / 2


def test_imports_are_read_in_every_form(tmp_path: Path) -> None:
    forms = {
        "import kafkaguard.protocol.framing": {"kafkaguard.protocol.framing"},
        "from kafkaguard.protocol import header, codec": {"kafkaguard.protocol.header"},
        "from kafkaguard.protocol.skim import tails as t": {"kafkaguard.protocol.skim.tails"},
        "from kafkaguard.protocol.skim.produce import skim": {"kafkaguard.protocol.skim.produce"},
        "from kafkaguard.protocol.codec import decode": set(),
        "from kafkaguard.policy import model": set(),
        "from kafkaguard.policy.standard import StandardAuthorizer": {"kafkaguard.policy.standard"},
        "from kafkaguard.proxy.core import dispatch": {"kafkaguard.proxy.core.dispatch"},
    }
    for number, (line, expected) in enumerate(forms.items()):
        test = tmp_path / f"test_form_{number}.py"
        test.write_text(line + "\n")
        assert compiled_imports(test) == expected, line


def test_the_option_deselects_the_rest() -> None:
    """``--pure-python-selection`` as ``./dev test`` passes it: a selected file's tests are
    collected, an unselected file's are deselected and counted."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            OPTION,
            "tests/protocol/test_protocol_framing.py",
            "tests/audit/test_writer.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tests/protocol/test_protocol_framing.py::" in result.stdout
    assert "tests/audit/test_writer.py::" not in result.stdout
    assert " deselected" in result.stdout
