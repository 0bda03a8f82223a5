"""The pure-Python pass of ``./dev test``: which tests run a second time with
``KAFKAGUARD_PURE_PYTHON=1`` (issue 34; docs/design.md#the-compiled-modules).

The whole suite runs once, on the compiled modules users install. Only the tests that exercise
the compiled modules directly or through their immediate callers run again on their
pure-Python source: the directories and files below, and every other test file that imports a
compiled protocol module itself. The compiled modules above ``kafkaguard/protocol`` (the
exchange, dispatch, the Produce and Fetch handlers, the authorizer's allow path) are imported
elsewhere as parts to build something with (an authorizer, a close cause to count), not to
exercise them: their own tests are the directories and files below. Everything else reaches
the compiled modules only through the same public functions, whose two implementations the
atheris differential in ``.ci/run`` compares directly.
``tests/protocol/test_pure_python_selection.py`` keeps the selection honest: it fails when a
module of :data:`~kafkaguard.protocol.build.COMPILED_MODULES` has no test in it.
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

SELECTED_FILES: Final = (
    "tests/policy/test_standard_authorizer.py",  # StandardAuthorizer.authorize, Kafka's cases
    "tests/policy/test_acl_index_properties.py",  # the ACL index against a reference model
    "tests/policy/test_acl_index.py",  # its merged views per subject (issue 37)
    "tests/policy/test_authorizer_properties.py",  # the authorizer against Kafka's rules
    "tests/policy/test_internal_topics.py",  # InternalTopicGuard, the rule asked first
    "tests/proxy/test_session.py",  # Session.request_context, the KIP-504 context per request
    "tests/test_topic_names.py",  # Topic.unifyCollisionChars, which the internal-topics rule calls
)
"""The compiled authorizer modules' own tests, outside the directories."""

_IMPORTED_DIRECTLY: Final = "kafkaguard.protocol."
"""The compiled modules a test file elsewhere imports to exercise them: the protocol's."""

OPTION: Final = "--pure-python-selection"
"""The pytest option (tests/conftest.py) that deselects every test outside the selection."""


def _named(module: str, names: list[str]) -> set[str]:
    """The compiled modules that ``import module`` or ``from module import names`` brings in
    (full names, as :data:`~kafkaguard.protocol.build.COMPILED_MODULES` lists them)."""
    return {module, *(f"{module}.{name}" for name in names)} & set(COMPILED_MODULES)


@functools.cache
def compiled_imports(path: Path) -> frozenset[str]:
    """The compiled modules that the test file ``path`` imports itself."""
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
    if relative in SELECTED_FILES or any(
        relative.startswith(directory + "/") for directory in SELECTED_DIRECTORIES
    ):
        return True
    return path.suffix == ".py" and any(
        name.startswith(_IMPORTED_DIRECTLY) for name in compiled_imports(path)
    )
