"""Builds the compiled modules of the allowed path with mypyc at install, from the same source
that runs as pure Python (docs/design.md#the-compiled-modules); everything else is in
pyproject.toml.

The modules are those of ``kafkaguard.protocol.build.COMPILED_MODULES`` (full names). They are
compiled on this machine by its C compiler; nothing prebuilt is fetched. Any failure (no
compiler, no Python headers, mypyc refusing a module) leaves a working install of the
pure-Python modules, with a warning. The build records the sha256 of every compiled source in
``kafkaguard/protocol/compiled.json``, by which an import recognises a stale build.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
PACKAGE = ROOT / "kafkaguard" / "protocol"


def _load_build() -> Any:
    """``kafkaguard/protocol/build.py``, loaded from its file alone: kafkaguard itself is not
    installed in the build environment (only what mypy reads to type it: pyproject.toml's
    ``[build-system] requires``)."""
    spec = importlib.util.spec_from_file_location("_kafkaguard_build", PACKAGE / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _load_build()


def _warn(what: str) -> None:
    sys.stderr.write(
        f"warning: kafkaguard's compiled modules were not built ({what}); "
        "the pure-Python modules are installed and used instead\n"
    )


def _remove_stale_extensions() -> None:
    """Extensions built in the source tree for modules no longer compiled: left there, they
    would still be imported in place of their source (an extension is found before a ``.py``),
    and the chooser looks only at the modules it lists."""
    wanted = {*BUILD.COMPILED_MODULES, f"{BUILD.GROUP}__mypyc"}
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for extension in (ROOT / "kafkaguard").rglob(f"*{suffix}"):
            name = ".".join(extension.relative_to(ROOT).parts).removesuffix(suffix)
            if name not in wanted:
                extension.unlink()


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install, and records what it compiled."""

    def run(self) -> None:
        if self.inplace or self.editable_mode:
            _remove_stale_extensions()
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure falls back to pure Python
            traceback.print_exc()
            _warn(f"{type(exc).__name__}: {exc}")
            return
        if not self.extensions:
            return
        manifest = json.dumps(BUILD.source_digests(ROOT), indent=1, sort_keys=True) + "\n"
        targets = [Path(self.build_lib) / "kafkaguard" / "protocol"]
        if self.inplace or self.editable_mode:
            targets.append(PACKAGE)
        for target in targets:
            target.mkdir(parents=True, exist_ok=True)
            (target / BUILD.MANIFEST).write_text(manifest)


def _extensions() -> list[Any]:
    sources = [str(BUILD.module_path(Path(), name)) for name in BUILD.COMPILED_MODULES]
    try:
        from mypyc.build import mypycify

        return list(mypycify(sources, opt_level="3", group_name=BUILD.GROUP))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - mypyc's refusal is not fatal
        _warn(f"mypyc: {type(exc).__name__}: {exc}")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
