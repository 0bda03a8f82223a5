"""Where job results go: each result table as Parquet (and, when asked, as JSON lines).

Owns the on-disk layout of results (``<output>/<table>.parquet/``, ``<output>/<table>.json/``),
nothing else. ``--output`` may be a local path or any Hadoop URI; Spark writes either.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pyspark.sql import DataFrame


def table_path(output: str, name: str, fmt: str) -> str:
    return f"{output.rstrip('/')}/{name}.{fmt}"


def write_tables(
    tables: Mapping[str, DataFrame],
    output: str,
    *,
    partitioned: Collection[str] = (),
    json: bool = False,
) -> list[str]:
    """Write every table as Parquet (and as JSON lines with ``json``), replacing earlier
    results; returns the paths.

    Parquet is what tools load; a JSON copy costs a second write of every table (and, for a
    table that is not cached, a second computation), so it is made only for a human or
    ``jq`` who asks (``--json``). Result tables are aggregates, mostly small: each is written
    as one file per format (easy to open), except those named in ``partitioned`` (e.g. the
    hourly cube), which keep Spark's parallel write.
    """
    written = []
    formats = ("parquet", "json") if json else ("parquet",)
    for name, df in tables.items():
        out = df if name in partitioned else df.coalesce(1)
        for fmt in formats:
            path = table_path(output, name, fmt)
            writer = out.write.mode("overwrite")
            (writer.parquet if fmt == "parquet" else writer.json)(path)
            written.append(path)
    return written
