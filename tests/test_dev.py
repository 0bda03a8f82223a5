"""``./dev demo`` says what it installs while it does: a line before each step of a first run
(the virtual environment, pip, kafkaguard and its dependencies, Java), none when nothing is to
be installed. Run on a copy of ``./dev`` whose Python, pip, ``java`` and ``dpkg-query`` are stubs
that log their calls to the same stream: nothing is installed, nothing leaves the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STUB_PYTHON = """#!/bin/sh
# python3: "-c" (the version check) succeeds; "-m venv DIR" makes DIR/bin with stubs.
if [ "$1" = "-m" ] && [ "$2" = venv ]; then
  echo "stub: venv $3" >&2
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\necho "stub: python $*" >&2\\n' > "$3/bin/python"
  printf '#!/bin/sh\\necho "stub: kafkaguard $*" >&2\\n' > "$3/bin/kafkaguard"
  chmod +x "$3/bin/python" "$3/bin/kafkaguard"
fi
"""


def _stub(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """``./dev`` beside the files its install stamp hashes, and the stubs in ``bin/``."""
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "kafkaguard" / "protocol", tmp_path / "kafkaguard" / "protocol")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    _stub(stubs, "python3", STUB_PYTHON)
    # every package installed: no apt-get
    _stub(stubs, "dpkg-query", "#!/bin/sh\nprintf 'install ok installed'\n")
    return tmp_path


def _demo(checkout: Path, java_version: str) -> list[str]:
    _stub(
        checkout / "bin",
        "java",
        f"#!/bin/sh\necho 'openjdk version \"{java_version}\" 2024-01-16' >&2\n",
    )
    done = subprocess.run(
        [str(checkout / "dev"), "demo", "--dir", "d"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": f"{checkout / 'bin'}:{os.environ['PATH']}", "PYTHON": "python3"},
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_the_first_demo_says_what_it_installs_before_each_step(checkout: Path) -> None:
    assert _demo(checkout, "11.0.2") == [
        "dev: creating the virtual environment .venv (python3 -m venv)",
        "stub: venv .venv",
        "dev: upgrading pip in .venv",
        "stub: python -m pip install --quiet --upgrade pip",
        "dev: installing kafkaguard[demo] and its dependencies into .venv (pip install -e; the "
        "first time takes a few minutes: mypyc compiles the allowed path)",
        "stub: python -m pip install --quiet -e .[demo]",
        "dev: .venv is ready (kafkaguard[demo])",
        "dev: installing Java 17 (openjdk-17-jre-headless, apt-get) for kafkaguard analyze",
        "stub: kafkaguard demo --dir d",
    ]


def test_a_demo_with_nothing_to_install_says_nothing_of_installing(checkout: Path) -> None:
    _demo(checkout, "17.0.2")
    assert _demo(checkout, "17.0.2") == ["stub: kafkaguard demo --dir d"]
