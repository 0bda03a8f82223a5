"""Audit analytics on Spark: ``kafkaguard analyze report|propose|unused|whatif|compact``.

This package reads the audit trail (``kafkaguard/audit/writer.py`` JSON lines, contract in
:mod:`.schema`; closed hours compacted to Parquet by :mod:`.compact`) and must never be
imported by the proxy: only :mod:`.main` is imported eagerly (by ``kafkaguard.cli``) and it
imports pyspark lazily (:mod:`.hours`, which it imports for ``compact``'s defaults, needs no
pyspark), so the proxy runs without the ``analytics`` extra.
"""
