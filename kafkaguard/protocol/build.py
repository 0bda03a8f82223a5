"""What the build of the compiled modules and the import that chooses them share (``setup.py``
loads this file alone, without the package; :mod:`kafkaguard.protocol` imports it): which
modules are compiled, and the digest of their sources by which an import recognises a stale
build. No kafkaguard import here: kafkaguard itself is not installed in the build environment.

Run as a script (``python kafkaguard/protocol/build.py``), it prints the sources it compiles,
one a line, relative to the repository: ``./dev``'s install stamp hashes them, so an edited
compiled module is rebuilt rather than shadowed by its stale extension."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

COMPILED_MODULES: Final = (
    # The wire protocol's data path: framing, the header peek, in-flight slots and the skims.
    "kafkaguard.protocol.framing",
    "kafkaguard.protocol.header",
    "kafkaguard.protocol.inflight",
    "kafkaguard.protocol.strings",
    "kafkaguard.protocol.skim.reading",
    "kafkaguard.protocol.skim.produce",
    "kafkaguard.protocol.skim.share",
    "kafkaguard.protocol.skim.tails",
    "kafkaguard.protocol.skim.metadata",
    # The allowed path above it, compiled with it as one unit (issue 39, item 3): the exchange
    # and its counters, the decision (dispatch), the KIP-504 context, the handlers' contract,
    # the Produce and Fetch handlers' two phases and what they call per request, and the
    # authorizer's allow path down to the ACL index lookup, and the internal-topics rule every
    # question passes first (policy/internal_topics.InternalTopicGuard, issue 26); the
    # connection's Session, whose request_context builds every request's KIP-504 context; the
    # Metadata handler, whose allowed answer the Metadata skim splices (issue 39).
    "kafkaguard.proxy.core.commands",
    "kafkaguard.proxy.core.context",
    "kafkaguard.proxy.core.dispatch",
    "kafkaguard.proxy.core.exchange",
    "kafkaguard.proxy.core.stats",
    "kafkaguard.proxy.handlers.fetch",
    "kafkaguard.proxy.handlers.metadata",
    "kafkaguard.proxy.handlers.produce",
    "kafkaguard.proxy.handlers.support.addresses",
    "kafkaguard.proxy.handlers.support.authz",
    "kafkaguard.proxy.handlers.support.base",
    "kafkaguard.proxy.handlers.support.questions",
    "kafkaguard.proxy.session",
    "kafkaguard.policy.acl_index",
    "kafkaguard.policy.internal_topics",
    "kafkaguard.policy.standard",
    # Kafka's topic-name rule the internal-topics rule applies to every question
    # (Topic.unifyCollisionChars), below the policy and the topic tables that share it.
    "kafkaguard.topic_names",
)
"""Modules compiled by mypyc, by full name: the allowed Produce and Fetch path from the bytes
read to the bytes written, and what it calls per request (docs/design.md#the-compiled-modules)."""

GROUP: Final = "kafkaguard.allowed_path"
"""mypyc's name for the one shared library of the compiled modules
(``kafkaguard/allowed_path__mypyc*.so``): compiled together, they call each other directly."""

MANIFEST: Final = "compiled.json"
"""Written by the build beside ``kafkaguard/protocol/__init__.py`` (the import that chooses):
:func:`source_digests` of the sources it compiled."""


def module_path(root: Path, name: str) -> Path:
    """The source of compiled module ``name`` under ``root``, the directory holding the
    ``kafkaguard`` package (the repository, or ``site-packages``)."""
    return root.joinpath(*name.split(".")).with_suffix(".py")


def source_digests(root: Path) -> dict[str, str]:
    """sha256 of each compiled module's source under ``root`` (as :func:`module_path`)."""
    return {
        name: hashlib.sha256(module_path(root, name).read_bytes()).hexdigest()
        for name in COMPILED_MODULES
    }


if __name__ == "__main__":
    for name in COMPILED_MODULES:
        print(module_path(Path(), name))  # noqa: T201 - the script's output
