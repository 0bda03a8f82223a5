"""kafkaguard: a Kafka wire-protocol authorizing proxy."""

from __future__ import annotations

# First: the import that chooses the compiled modules or their pure-Python source runs before
# any of them can be imported, whichever package a program imports first (kafkaguard.policy
# may not import kafkaguard.protocol itself; docs/design.md#the-compiled-modules).
import kafkaguard.protocol  # noqa: F401


def version() -> str:
    """The installed distribution's version (``pyproject.toml``), for ``kafkaguard --version``
    and ``kafkaguard_build_info``; ``unknown`` when run from a tree that was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("kafkaguard")
    except PackageNotFoundError:
        return "unknown"
