"""Cached DataFrames that end with the job that cached them.

A job caches what it reads more than once (``unused``'s and ``whatif``'s replays; ``report`` and
``propose`` read each aggregation once and cache nothing, issue 36).
Spark's ``CacheManager`` belongs to the ``SparkContext``, not to the session: on a Spark
Connect server or a cluster kept running (``--remote``, ``--master``, docs/audit.md), a cache
left behind holds the server's memory after the client has gone, one more with every job,
and a later job with the same plan is served from it (measured: a warm server answered a
10M-record ``report`` in 4 s where its work takes 33 s, bench/RESULTS.md, issue 29). Every
cache a job makes goes through :func:`cached` and is released when :func:`job_caches` ends,
as ``watch`` already unpersists each micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pyspark.sql import DataFrame

_HELD: ContextVar[list[DataFrame] | None] = ContextVar("kafkaguard_job_caches", default=None)


def cached(df: DataFrame) -> DataFrame:
    """``df.cache()``, released at the end of the enclosing :func:`job_caches` (outside one,
    e.g. a caller holding the result in its own session, it stays cached)."""
    held = _HELD.get()
    if held is not None:
        held.append(df)
    return df.cache()


@contextmanager
def job_caches() -> Iterator[None]:
    """Unpersist every DataFrame :func:`cached` within, however the job ends."""
    held: list[DataFrame] = []
    token = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(token)
        for df in held:
            df.unpersist()
