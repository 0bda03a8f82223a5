"""What the build of the compiled protocol modules and the import that chooses them share
(``setup.py`` loads this file alone, without the package; :mod:`kafkaguard.protocol` imports
it): which modules are compiled, and the digest of their sources by which an import
recognises a stale build. No kafkaguard import here: the build environment has only
setuptools and mypy."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

COMPILED_MODULES: Final = (
    "framing",
    "header",
    "inflight",
    "strings",
    "skim.reading",
    "skim.produce",
    "skim.share",
    "skim.tails",
)
"""Modules of :mod:`kafkaguard.protocol` compiled by mypyc: the allowed data path's framing,
header peek, in-flight slots and skims, and what they call per request."""

MANIFEST: Final = "compiled.json"
"""Written by the build beside ``kafkaguard/protocol/__init__.py``: :func:`source_digests` of
the sources it compiled."""


def module_path(root: Path, name: str) -> Path:
    """The source of compiled module ``name`` under ``root`` (the package's directory)."""
    return root.joinpath(*name.split(".")).with_suffix(".py")


def source_digests(root: Path) -> dict[str, str]:
    """sha256 of each compiled module's source under ``root``."""
    return {
        name: hashlib.sha256(module_path(root, name).read_bytes()).hexdigest()
        for name in COMPILED_MODULES
    }
