"""Audit analytics on Spark: ``kafkaguard analyze report|propose|unused|whatif``.

This package reads the audit trail (``kafkaguard/audit/writer.py`` JSON lines, contract in
:mod:`.schema`) and must never be imported by the proxy: only :mod:`.main` is imported eagerly
(by ``kafkaguard.cli``) and it imports pyspark lazily, so the proxy runs without the
``analytics`` extra.
"""
