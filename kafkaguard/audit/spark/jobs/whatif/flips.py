"""``kafkaguard analyze whatif --acls proposed.yaml``: what a different ACL set would change.

Every distinct decision tuple of the window is decided again under the proposed ACLs (and the
authorizer settings of ``--config``, if given) by :mod:`kafkaguard.audit.spark.runtime.replay` — the
proxy's own authorizer — and compared with the result the audit recorded. A *flip* is a tuple whose
result changes: ``ALLOWED->DENIED`` (access a change would break) or ``DENIED->ALLOWED`` (access it
would open; for a ``log_only`` window, the would-denies it fixes). Counts are decisions (summed
``count``), not tuples.

What is replayed is what the audit trail recorded for the clients' behaviour at the time: a
client that is refused early (e.g. FindCoordinator) never sends the requests that follow, so
after a change the *observed* denials can be a subset of the predicted ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafkaguard.audit.spark.runtime.replay import (
    GROUPS,
    TUPLE_KEYS,
    Policy,
    decision_tuples,
    evaluate,
)

DIRECTIONS = ("ALLOWED->DENIED", "DENIED->ALLOWED")


def replay(events: DataFrame, policy: Policy) -> DataFrame:
    """Every distinct tuple with ``recorded`` and ``predicted`` results."""
    return (
        evaluate(decision_tuples(events, with_result=True), policy)
        .withColumnRenamed("result", "recorded")
        .select(
            *TUPLE_KEYS,
            GROUPS,
            "recorded",
            "predicted",
            "count",
            "reason",
            "deciding_acl",
            "error",
        )
        .orderBy(*TUPLE_KEYS, GROUPS, "recorded")
    )


def flips(replayed: DataFrame) -> DataFrame:
    return (
        replayed.where(F.col("error").isNull() & (F.col("predicted") != F.col("recorded")))
        .withColumn("direction", F.concat_ws("->", "recorded", "predicted"))
        .select("direction", *TUPLE_KEYS, GROUPS, "count", "reason", "deciding_acl")
        .orderBy("direction", *TUPLE_KEYS, GROUPS)
    )


@dataclass(frozen=True, slots=True)
class FlipCount:
    direction: str
    tuples: int
    decisions: int


SUMMARY_SCHEMA = StructType(
    [
        StructField("direction", StringType(), False),
        StructField("tuples", LongType(), False),
        StructField("decisions", LongType(), False),
    ]
)


def summarize(flipped: DataFrame) -> list[FlipCount]:
    """Both directions, always (zero when nothing flips that way)."""
    found = {
        r["direction"]: (int(r["tuples"]), int(r["decisions"]))
        for r in flipped.groupBy("direction")
        .agg(F.count("*").alias("tuples"), F.sum("count").alias("decisions"))
        .collect()
    }
    return [FlipCount(d, *found.get(d, (0, 0))) for d in DIRECTIONS]


def summary_table(flipped: DataFrame, counts: list[FlipCount]) -> DataFrame:
    rows = [(c.direction, c.tuples, c.decisions) for c in counts]
    return flipped.sparkSession.createDataFrame(rows, SUMMARY_SCHEMA)
