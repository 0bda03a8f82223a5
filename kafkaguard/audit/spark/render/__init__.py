"""Presentation of job results, Spark-free: the self-contained HTML report (:mod:`.html`)."""
