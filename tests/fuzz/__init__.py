"""Wire fuzzing of the proxy (docs/security.md). A package, so that the harness runs as
``python -m tests.fuzz.harness`` and pytest imports its modules as ``fuzz.*``."""
