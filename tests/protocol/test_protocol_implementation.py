"""Which implementation of the protocol modules runs: the compiled extensions or their pure-Python
source (kafkaguard/protocol/__init__.py; docs/design.md#the-compiled-protocol-modules).

``./dev test`` runs the whole suite with ``KAFKAGUARD_REQUIRE_COMPILED=1`` and then the
pure-Python selection (tests/support/pure_python.py) with ``KAFKAGUARD_PURE_PYTHON=1``: the
first test fails a pass that loaded the other implementation, so CI cannot test one path
twice. The others run the selection in a fresh interpreter: the
switch, and a build whose sources changed since (stale) falling back, or failing when required.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kafkaguard import protocol
from kafkaguard.protocol.build import COMPILED_MODULES, MANIFEST

PACKAGE = Path(protocol.__file__).parent

built = pytest.mark.skipif(
    not (PACKAGE / MANIFEST).exists(), reason="the compiled protocol modules are not built here"
)


def is_extension(module: ModuleType) -> bool:
    return isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader) and any(
        str(module.__file__).endswith(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def test_the_pass_runs_the_implementation_it_names() -> None:
    loaded = {name: is_extension(importlib.import_module(name)) for name in COMPILED_MODULES}
    # All or nothing, and what COMPILED says.
    assert loaded == dict.fromkeys(COMPILED_MODULES, protocol.COMPILED)
    if os.environ.get(protocol.REQUIRE_COMPILED_ENV) == "1":
        assert protocol.COMPILED
        assert protocol.IMPLEMENTATION == "compiled"
    if os.environ.get(protocol.PURE_PYTHON_ENV) == "1":
        assert not protocol.COMPILED
        assert protocol.IMPLEMENTATION == "python"


PROBE = """
import sys, kafkaguard.protocol as p
from kafkaguard.protocol.build import COMPILED_MODULES
import importlib
files = [importlib.import_module(n).__file__ for n in COMPILED_MODULES]
print(p.COMPILED, sorted({f.rsplit(".", 1)[1] for f in files}))
"""


def probe(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Import the compiled modules of the ``kafkaguard`` package under ``root`` in a fresh
    interpreter; prints COMPILED and the suffixes of the files loaded."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in (protocol.PURE_PYTHON_ENV, protocol.REQUIRE_COMPILED_ENV)
    }
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", PROBE],
        env={**clean, "PYTHONPATH": str(root), **env},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@built
def test_the_switch_loads_the_python_source_beside_the_extensions() -> None:
    root = PACKAGE.parent.parent
    compiled = probe(root)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout.split(maxsplit=1) == ["True", "['so']\n"]
    pure = probe(root, KAFKAGUARD_PURE_PYTHON="1")
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout.split(maxsplit=1) == ["False", "['py']\n"]


@built
def test_a_stale_build_falls_back_to_python_and_says_so(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE.parent, tmp_path / "kafkaguard")
    edited = tmp_path / "kafkaguard" / "protocol" / "skim" / "tails.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    stale = probe(tmp_path)
    assert stale.returncode == 0, stale.stderr
    assert stale.stdout.split(maxsplit=1) == ["False", "['py']\n"]
    assert (
        "RuntimeWarning: the compiled modules are stale (kafkaguard.protocol.skim.tails"
        in stale.stderr
    )
    required = probe(tmp_path, KAFKAGUARD_REQUIRE_COMPILED="1")
    assert required.returncode == 1
    assert "ImportError: KAFKAGUARD_REQUIRE_COMPILED is set but" in required.stderr
    # Without the build's record of its sources, an extension is never trusted.
    edited.write_text((PACKAGE / "skim" / "tails.py").read_text())
    assert probe(tmp_path).stdout.startswith("True")
    (tmp_path / "kafkaguard" / "protocol" / MANIFEST).unlink()
    assert probe(tmp_path).stdout.startswith("False")


def test_without_extensions_python_runs_silently(tmp_path: Path) -> None:
    shutil.copytree(
        PACKAGE.parent,
        tmp_path / "kafkaguard",
        ignore=shutil.ignore_patterns(*(f"*{s}" for s in importlib.machinery.EXTENSION_SUFFIXES)),
    )
    plain = probe(tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split(maxsplit=1) == ["False", "['py']\n"]
    assert "Warning" not in plain.stderr
    required = probe(tmp_path, KAFKAGUARD_REQUIRE_COMPILED="1")
    assert "the compiled modules are not built" in required.stderr
