"""What every job's command line shares: the arguments, the lazily built session, the window.

A job (a package under :mod:`kafkaguard.audit.spark.jobs`) describes itself to
:mod:`kafkaguard.audit.spark.main` as a :class:`Job`: its name and help, its own arguments, the
checks of them made before any JVM starts, and the function that runs it. The arguments the
jobs share (:func:`window_arguments`, :func:`spark_arguments`, :func:`kafka_arguments`) and
what a job over a window of the trail does before its own work (:func:`window_input`) are here,
so that no job imports another.

This module is imported with the command line (``kafkaguard`` without the ``analytics`` extra
included), so it imports pyspark lazily, inside the functions that need it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kafkaguard.audit.spark.runtime.class_archive import ClassArchive
    from kafkaguard.audit.spark.trail.source import ReadOptions, TimeRange

Out = Callable[[str], None]
"""Where a job prints its result lines (stdout, or a test's list)."""


class LazySession:
    """The session a run uses: the one passed in (left running), else one built on first use
    from ``--master``/``--conf`` and stopped at the end — ``compact`` with nothing to do
    starts no JVM."""

    def __init__(
        self,
        given: SparkSession | None,
        master: str | None,
        conf: dict[str, str],
        *,
        kafka: bool = False,
        remote: str | None = None,
        quick_jit: bool = False,
        jvm_log: Path | None = None,
    ):
        self._given, self._master, self._conf, self._kafka = given, master, conf, kafka
        self._remote, self._quick_jit, self.jvm_log = remote, quick_jit, jvm_log
        self._built: SparkSession | None = None
        self._archive: ClassArchive | None = None

    def get(self) -> SparkSession:
        if self._given is not None:
            return self._given
        if self._built is None:  # no JVM (no Java >= 17) fails here, as a PySparkException
            from kafkaguard.audit.spark.runtime.class_archive import announce, class_archive
            from kafkaguard.audit.spark.runtime.session import (
                build_remote_session,
                build_session,
                wants_class_archive,
            )

            if self._remote is not None:
                self._built = build_remote_session(self._remote, self._conf)
            else:
                from pyspark import SparkContext

                # A JVM of this process already runs (an earlier session): its options are set.
                fresh = SparkContext._gateway is None
                if fresh and wants_class_archive(self._master, self._conf):
                    self._archive = class_archive()
                    if self._archive is not None:
                        announce(self._archive)
                self._built = build_session(
                    self._master,
                    self._conf,
                    kafka=self._kafka,
                    quick_jit=self._quick_jit,
                    jvm_log=self.jvm_log,
                    archive=self._archive,
                )
        return self._built

    def close(self) -> None:
        if self._built is not None:
            self._built.stop()
            if self._archive is not None and self._archive.writing:
                from pyspark import SparkContext

                gateway = SparkContext._gateway
                self._archive.finish(getattr(gateway, "proc", None))
                # That JVM has exited: a later session of this process starts another.
                SparkContext._gateway = SparkContext._jvm = None


def _no_check(args: argparse.Namespace) -> None:
    del args


@dataclass(frozen=True)
class Job:
    """A job as :mod:`kafkaguard.audit.spark.main` puts it on the command line and runs it."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    """Adds the job's own arguments (the shared ones are added around them, see below)."""
    run: Callable[[LazySession, argparse.Namespace, Out], int]
    """Runs the job: 0 ok (3: ``whatif --fail-on-breakage``); errors are exceptions."""
    check: Callable[[argparse.Namespace], None] = _no_check
    """Raises ValueError for what is wrong with the job's arguments, before any JVM starts."""
    windowed: bool = True
    """A job over a window of the trail (report, propose, unused, whatif): the arguments of
    :func:`window_arguments` come first and are checked, and a local driver JVM runs the
    JIT settings for short jobs (``QUICK_JIT_OPTIONS``). Otherwise the job's own arguments
    come first, then :func:`spark_arguments` (and :func:`kafka_arguments`, with ``kafka``)."""
    connect: bool = True
    """Runs on Spark Connect (``--remote``): ``unused``/``whatif`` replay on RDDs with a
    broadcast policy and ``watch`` keeps its state on the driver; Spark Connect has neither."""
    kafka: bool = True
    """May read the audit topic (``kafka://``): the session gets Spark's Kafka source."""


def parse_conf(pairs: Sequence[str], option: str = "--conf") -> dict[str, str]:
    """``KEY=VALUE`` settings as a dict (ValueError naming ``option`` when one is not)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} needs KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def window(args: argparse.Namespace) -> TimeRange:
    """``--since``/``--until`` (ValueError when either is not a time)."""
    from kafkaguard.audit.spark.trail.source import TimeRange, parse_time

    return TimeRange(
        parse_time(args.since) if args.since else None,
        parse_time(args.until) if args.until else None,
    )


def kafka_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer setting for a kafka:// input, e.g. security.protocol=SASL_SSL,"
        " sasl.mechanism=SCRAM-SHA-512, sasl.jaas.config=... (repeatable)",
    )


def spark_arguments(parser: argparse.ArgumentParser, not_on_connect: Collection[str]) -> None:
    """Where the job runs (``--master``/``--remote``, ``--conf``) and ``--verbose``;
    ``not_on_connect``: the jobs ``--remote`` cannot run (:attr:`Job.connect`)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--master", help="Spark master (default local[*]; under spark-submit: its --master)"
    )
    where.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="a Spark Connect server to run on (kept warm: no start-up per job); not for"
        f" {', '.join(sorted(not_on_connect))}",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's and the JVM's own output (default: written to a log file, named"
        " when a job fails)",
    )


def window_arguments(not_on_connect: Collection[str]) -> argparse.ArgumentParser:
    """The parent parser of the jobs over a window of the trail (:attr:`Job.windowed`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--input",
        required=True,
        help="audit directory (local path or Hadoop URI: hdfs://, s3a://), or the audit topic:"
        " kafka://host:port[,host:port]/topic",
    )
    common.add_argument("--since", help="window start, inclusive (ISO date or timestamp, UTC)")
    common.add_argument("--until", help="window end, exclusive (ISO date or timestamp, UTC)")
    common.add_argument("--output", help="directory (or URI) for result tables (Parquet)")
    common.add_argument(
        "--json", action="store_true", help="with --output: a JSON-lines copy of every table too"
    )
    common.add_argument(
        "--compacted",
        metavar="DIR",
        help="where `analyze compact` wrote (default: INPUT/_compacted); its hours are read"
        " from Parquet, the others from JSON",
    )
    common.add_argument(
        "--json-only", action="store_true", help="ignore compacted Parquet: read the JSON lines"
    )
    spark_arguments(common, not_on_connect)
    kafka_arguments(common)
    return common


def check_window_input(args: argparse.Namespace) -> None:
    """A windowed job's ``kafka://`` input and ``--kafka-option`` settings (ValueError when
    wrong; :func:`window` checks ``--since``/``--until``)."""
    from kafkaguard.audit.spark.trail.source import KafkaInput, is_kafka_input

    parse_conf(args.kafka_option, "--kafka-option")
    if is_kafka_input(args.input):
        KafkaInput.parse(args.input)


def read_options(args: argparse.Namespace) -> ReadOptions:
    """How a windowed job reads the trail: ``--compacted``, ``--json-only``,
    ``--kafka-option`` (:func:`kafkaguard.audit.spark.trail.source.read_audit`'s options)."""
    return {
        "compacted": args.compacted,
        "json_only": args.json_only,
        "kafka_options": parse_conf(args.kafka_option, "--kafka-option"),
    }


@contextmanager
def window_input(
    session: LazySession, args: argparse.Namespace, *, facts: bool, daily: bool = True
) -> Iterator[tuple[SparkSession, DataFrame]]:
    """The session and the window's input of a windowed job, with its caches and progress.

    It names what is read and skipped on stderr (propose writes its ACL file to stdout), then
    reads the window: with ``facts`` the daily facts ``compact`` wrote for its whole days
    (unless not ``daily``: a job that needs every hour), the hourly facts for the whole hours
    of the others and the records elsewhere, and names them on stderr too
    (:func:`kafkaguard.audit.spark.trail.facts.read_facts`: for a job that only sums counts),
    otherwise the records. What the job caches is released when it ends
    (:mod:`kafkaguard.audit.spark.runtime.cache`); on a terminal each finished Spark stage is
    a line (:mod:`kafkaguard.audit.spark.runtime.progress`).
    """
    from kafkaguard.audit.spark.runtime.cache import job_caches
    from kafkaguard.audit.spark.runtime.progress import stage_progress
    from kafkaguard.audit.spark.trail.facts import describe_facts, read_facts
    from kafkaguard.audit.spark.trail.source import describe_input, read_audit

    spark = session.get()
    span, compacted, json_only = window(args), args.compacted, args.json_only
    described = [describe_input(args.input, span, compacted=compacted, json_only=json_only)]
    if facts:
        described.append(
            describe_facts(args.input, span, compacted=compacted, json_only=json_only, daily=daily)
        )
    for line in described:
        if line is not None:
            sys.stderr.write(line + "\n")
    events = (
        read_facts(spark, args.input, span, daily=daily, **read_options(args))
        if facts
        else read_audit(spark, args.input, span, **read_options(args))
    )
    with job_caches(), stage_progress(spark, sys.stderr):
        yield spark, events
