"""Audit analytics on Spark: ``kafkaguard analyze report|propose|unused|whatif|compact|watch``.

This package reads the audit trail (``kafkaguard/audit/writer.py`` JSON lines, contract in
:mod:`.trail.schema`; closed hours compacted to Parquet by :mod:`.jobs.compact`) and must never
be imported by the proxy. Laid out by role (issue 36), each an import layer
(pyproject.toml, ``./dev lint``):

``main``
    the command line: dispatches to the jobs, nothing else.
``jobs/``
    one package per job (report, propose, unused, whatif, compact, watch): its arguments,
    what it prints, its Spark work; no job imports another.
``render/``, ``solver/``
    the HTML report's page and ``propose``'s rules, pure Python (no pyspark).
``runtime/``
    what the jobs share to run: the common arguments, the session, caches, progress, result
    tables, the decision replay.
``trail/``
    the audit trail itself: schema, reading a window, hour directories, hourly and daily facts.

Only :mod:`.main` is imported eagerly (by ``kafkaguard.cli``); it, the jobs' command lines
(``jobs/*/__init__.py``), :mod:`.runtime.command` and :mod:`.trail.hours` (``compact``'s
defaults) import pyspark lazily or not at all, so the proxy runs without the ``analytics``
extra.
"""
