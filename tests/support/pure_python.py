"""The pure-Python pass of ``./dev test``: which tests run a second time with
``KAFKAGUARD_PURE_PYTHON=1`` (issue 34; docs/design.md#the-compiled-protocol-modules).

The whole suite runs once, on the compiled protocol modules users install. Only the tests that
exercise the compiled modules directly or through their immediate callers run again on their
pure-Python source: the directories below, and every other test file that imports a compiled
module itself. Everything else reaches the protocol modules only through the same public
functions, whose two implementations the atheris differential in ``.ci/run`` compares
directly. ``tests/protocol/test_pure_python_selection.py`` keeps the selection honest: it fails
when a module of :data:`~kafkaguard.protocol.build.COMPILED_MODULES` has no test in it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Final

from kafkaguard.protocol.build import COMPILED_MODULES

ROOT: Final = Path(__file__).resolve().parents[2]

SELECTED_DIRECTORIES: Final = (
    "tests/protocol",  # the compiled modules and the codec over them
    "tests/proxy/core",  # the exchange: framing, header peek and in-flight slots per request
    "tests/proxy/handlers",  # the two-phase handlers and the skims they call
    "tests/differential",  # the readers against Kafka's own
    "tests/fuzz",  # the seeded fuzz and the implementations harness
)
"""Directories every test of which is in the pure-Python pass."""

OPTION: Final = "--pure-python-selection"
"""The pytest option (tests/conftest.py) that deselects every test outside the selection."""

_PACKAGE: Final = "kafkaguard.protocol"


def _named(module: str, names: list[str]) -> set[str]:
    """The compiled modules that ``import module`` or ``from module import names`` brings in."""
    candidates: list[str] = []
    if module == _PACKAGE:
        candidates = names
    elif module.startswith(_PACKAGE + "."):
        inner = module.removeprefix(_PACKAGE + ".")
        candidates = [inner, *(f"{inner}.{name}" for name in names)]
    return set(candidates) & set(COMPILED_MODULES)


@functools.cache
def compiled_imports(path: Path) -> frozenset[str]:
    """The compiled protocol modules that the test file ``path`` imports itself."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _named(alias.name, [])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= _named(node.module, [alias.name for alias in node.names])
    return frozenset(found)


def selected(path: Path) -> bool:
    """Whether the tests of file ``path`` run in the pure-Python pass."""
    relative = path.resolve().relative_to(ROOT).as_posix()
    if any(relative.startswith(directory + "/") for directory in SELECTED_DIRECTORIES):
        return True
    return path.suffix == ".py" and bool(compiled_imports(path))
