"""The jobs of ``kafkaguard analyze``, one package each, independent of each other.

Each package's ``__init__`` is the job's command line (its :class:`~kafkaguard.audit.spark
.runtime.command.Job`: its own arguments, their checks, what it runs and prints) and imports
pyspark lazily, as :mod:`kafkaguard.audit.spark.main` needs; the job's Spark work is a module
beside it. What two jobs share lives in :mod:`kafkaguard.audit.spark.runtime` and
:mod:`kafkaguard.audit.spark.trail`, never in a job: an import contract in pyproject.toml
(``./dev lint``) keeps every job from importing another.
"""
