"""The audit record as a Spark ``StructType``: the reading side of the audit contract.

It mirrors ``kafkaguard/audit/events.py`` field for field (a test asserts the two field lists
are identical) and must not add fields the writer does not write: a JSON reader given a schema
silently fills unknown fields with null. Partition columns (``date``, ``hour``) are not part of
the record; Spark discovers them from the ``date=YYYY-MM-DD/hour=HH`` directories.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA_VERSION = 2
"""The record version the proxy writes (``kafkaguard/audit/events.py``)."""
SCHEMA_VERSIONS: Final = (1, 2)
"""The record versions this reader understands; rows of another version are skipped. Version
1 has no ``groups`` (its records are read with none, as a connection without groups)."""

ACL_FIELDS: tuple[str, ...] = (
    "resource_type",
    "pattern_type",
    "resource_name",
    "principal",
    "host",
    "operation",
    "permission_type",
)
"""Keys of the deciding-ACL object (Kafka enum names)."""

ACL_SCHEMA = StructType([StructField(name, StringType()) for name in ACL_FIELDS])

_FIELDS: tuple[tuple[str, DataType], ...] = (
    ("schema_version", IntegerType()),
    ("kind", StringType()),
    ("time", StringType()),
    ("window_end", StringType()),
    # Aggregates carry counts of many decisions: 64-bit, although the contract says "int".
    ("count", LongType()),
    ("mode", StringType()),
    ("listener", StringType()),
    ("security_protocol", StringType()),
    ("principal", StringType()),
    # The connection's group principals, sorted; version 1 lines have none (read as []).
    ("groups", ArrayType(StringType(), False)),
    ("client_host", StringType()),
    ("client_id", StringType()),
    ("api_key", IntegerType()),
    ("api_name", StringType()),
    ("api_version", IntegerType()),
    ("correlation_id", IntegerType()),
    ("operation", StringType()),
    ("resource_type", StringType()),
    ("pattern_type", StringType()),
    ("resource_name", StringType()),
    ("result", StringType()),
    ("would_deny", BooleanType()),
    ("reason", StringType()),
    ("implied", BooleanType()),
    ("acl", ACL_SCHEMA),
)

FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in _FIELDS)
"""The JSON keys of one audit line, in the contract's order."""

AUDIT_SCHEMA = StructType([StructField(name, kind) for name, kind in _FIELDS])
"""What ``spark.read.schema(AUDIT_SCHEMA).json(dir)`` parses; every field nullable, so a
malformed line becomes a row of nulls that :func:`.source.read_audit` drops."""

KAFKAGUARD_ONLY_FIELDS: Final = (
    "kind",
    "window_end",
    "count",
    "security_protocol",
    "api_key",
    "api_version",
    "would_deny",
    "reason",
    "implied",
    "acl",
)
"""Fields of the record that Confluent's authorization event has no place for: a
CloudEvents record carries them under ``data.kafkaguard`` (docs/audit.md). ``groups`` has one:
``data.authorizationInfo.assignedPrincipals``, where Confluent Cloud's events with group mapping
name the groups a decision considered."""

_KAFKAGUARD_DATA = StructType(
    [
        StructField(name, kind)
        for name, kind in _FIELDS
        if name == "schema_version" or name in KAFKAGUARD_ONLY_FIELDS
    ]
)


def _struct(**fields: DataType) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields.items()])


CLOUDEVENT_FIELDS: tuple[StructField, ...] = (
    StructField("specversion", StringType()),
    StructField("type", StringType()),
    StructField("source", StringType()),
    StructField("kafkaguardmode", StringType()),
    StructField(
        "data",
        _struct(
            methodName=StringType(),
            authenticationInfo=_struct(principal=StringType()),
            authorizationInfo=_struct(
                granted=BooleanType(),
                operation=StringType(),
                resourceType=StringType(),
                resourceName=StringType(),
                patternType=StringType(),
                assignedPrincipals=ArrayType(StringType(), False),
            ),
            request=_struct(correlation_id=StringType(), client_id=StringType()),
            requestMetadata=_struct(client_address=StringType()),
            kafkaguard=_KAFKAGUARD_DATA,
        ),
    ),
)
"""The fields of an ``audit.format: cloudevents`` line that the jobs read
(``kafkaguard/audit/events.py``, ``AuditEvent.to_cloudevent``; ``time`` is shared)."""

READ_SCHEMA = StructType([*AUDIT_SCHEMA.fields, *CLOUDEVENT_FIELDS])
"""What the jobs parse each line with: either format, so a trail that mixes them is one
read (:func:`.source.normalized` turns both into :data:`AUDIT_SCHEMA`'s columns)."""

PARTITION_COLUMNS: tuple[str, str] = ("date", "hour")
"""Hive-style directory columns: ``date`` (DateType), ``hour`` (IntegerType)."""

EVENT_TIME = "event_time"
"""The parsed ``time`` (TimestampType, UTC) that :func:`.source.read_audit` adds."""

COMPACTED_SCHEMA = StructType([*AUDIT_SCHEMA.fields, StructField(EVENT_TIME, TimestampType())])
"""The data columns of ``analyze compact``'s Parquet: the valid records as
:func:`.source.valid_records` returns them, ``event_time`` included (parsed once, at
compaction); ``date`` and ``hour`` are its directories, as in the JSON trail."""

RECORD_COLUMNS: tuple[str, ...] = (*FIELD_NAMES, *PARTITION_COLUMNS, EVENT_TIME)
"""The columns (and their order) of every DataFrame :func:`.source.read_audit` returns,
whether its rows come from JSON lines or from compacted Parquet."""
