"""Wire fuzzing of the proxy (docs/security.md): ``frames`` generates seeded hostile frames,
``harness`` runs them against a real ``kafkaguard run`` process
(``python -m tests.support.fuzz.harness``, ``./dev fuzz``)."""
