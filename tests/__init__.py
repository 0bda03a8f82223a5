"""kafkaguard's tests. A package, imported from the repository root (pytest's ``pythonpath``
is ``["."]``; ``python -m tests.…`` runs from there too): test modules are ``tests.<dir>.<name>``
and import their helpers as ``tests.support.<module>``, never from a conftest or another test
module. tests/kafka stays a directory without ``__init__.py``: as a regular package it would be
one sys.path entry away from shadowing kafka-python's top-level ``kafka``."""
