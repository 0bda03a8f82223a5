"""kafkaguard's wire protocol, sans I/O; and the import that chooses the compiled modules.

The modules of the allowed data path (:data:`COMPILED_MODULES`: this package's framing, header
peek, in-flight slots and skims, and above them the exchange, dispatch, the Produce and Fetch
handlers and the authorizer's allow path) are compiled by mypyc when the package is installed
(``setup.py``; docs/design.md#the-compiled-modules), from the same source that runs as pure
Python. Which one runs is decided here, before any of them is imported (``kafkaguard``'s own
``__init__`` imports this package first, so a policy or proxy module imported alone is chosen
too), and is all or nothing: compiled modules call each other directly, so a pure module among
compiled ones would not be the one they call.

* Pure Python when ``KAFKAGUARD_PURE_PYTHON=1``, when the extensions are absent (no compiler
  at install, a source tree never built), or when they are stale: built from sources that
  have changed since (the build records their digests in :data:`~.build.MANIFEST`). A stale
  build is reported with a :class:`RuntimeWarning`. A finder on ``sys.meta_path`` then loads
  the ``.py`` files in place of the extensions beside them.
* ``KAFKAGUARD_REQUIRE_COMPILED=1`` turns a missing or stale build into an ImportError (the
  compiled pass of ``./dev test``), so the suites never run one implementation twice.

:data:`COMPILED` says which runs (:data:`IMPLEMENTATION`: the ``implementation`` label of
``kafkaguard_build_info``, and ``kafkaguard --version``).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

from kafkaguard.protocol.build import COMPILED_MODULES, MANIFEST, module_path, source_digests

PURE_PYTHON_ENV: Final = "KAFKAGUARD_PURE_PYTHON"
REQUIRE_COMPILED_ENV: Final = "KAFKAGUARD_REQUIRE_COMPILED"

_HERE: Final = Path(__file__).parent
_ROOT: Final = _HERE.parent.parent
"""The directory holding the ``kafkaguard`` package, under which :func:`module_path` finds
each compiled module."""


def _extension(name: str) -> Path | None:
    source = module_path(_ROOT, name)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if source.with_suffix(suffix).exists():
            return source.with_suffix(suffix)
    return None


def _stale() -> list[str]:
    """The compiled modules whose extension was not built from the source beside it."""
    try:
        built = json.loads((_HERE / MANIFEST).read_text())
    except (OSError, ValueError):
        built = {}
    current = source_digests(_ROOT)
    return [name for name in COMPILED_MODULES if built.get(name) != current[name]]


class PurePythonFinder(importlib.machinery.PathFinder):
    """Finds the ``.py`` source of a compiled module, never its extension."""

    @classmethod
    def find_spec(
        cls,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES or not path:
            return None
        source = Path(path[0]) / (fullname.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(fullname, source)


def _select() -> bool:
    """Whether the compiled modules are the ones imported (see the module docstring)."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        problem = ""
    elif not all(_extension(name) for name in COMPILED_MODULES):
        problem = "the compiled modules are not built"
    elif stale := _stale():
        problem = (
            f"the compiled modules are stale ({', '.join(stale)} changed since the "
            "build; rebuild with `pip install -e .`, as ./dev does)"
        )
        if os.environ.get(REQUIRE_COMPILED_ENV, "") in ("", "0"):
            warnings.warn(f"{problem}: pure Python is used", RuntimeWarning, stacklevel=2)
    else:
        return True
    if problem and os.environ.get(REQUIRE_COMPILED_ENV, "") not in ("", "0"):
        raise ImportError(f"{REQUIRE_COMPILED_ENV} is set but {problem}")
    if any(_extension(name) for name in COMPILED_MODULES) and PurePythonFinder not in sys.meta_path:
        sys.meta_path.insert(0, PurePythonFinder)
    return False


COMPILED: Final = _select()
"""True when the modules of :data:`COMPILED_MODULES` run compiled (mypyc), False when they run
as pure Python."""
IMPLEMENTATION: Final = "compiled" if COMPILED else "python"
