"""kafkaguard: a Kafka wire-protocol authorizing proxy."""

from __future__ import annotations


def version() -> str:
    """The installed distribution's version (``pyproject.toml``), for ``kafkaguard --version``
    and ``kafkaguard_build_info``; ``unknown`` when run from a tree that was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("kafkaguard")
    except PackageNotFoundError:
        return "unknown"
