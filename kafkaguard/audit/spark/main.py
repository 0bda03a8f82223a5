"""Entry point of the audit analytics: ``kafkaguard analyze <job>`` and ``spark-submit``.

Both run the same code::

    kafkaguard analyze report --input audit/ --since 2026-11-22 --html report.html
    spark-submit --master yarn kafkaguard/audit/spark/main.py propose --input hdfs://nn/audit
    kafkaguard analyze compact --input audit/     # from cron: closed hours -> Parquet
    kafkaguard analyze propose --input kafka://k1:9092/_kafkaguard-audit   # the audit topic
    kafkaguard analyze watch --input kafka://k1:9092/_kafkaguard-audit --checkpoint state/

This module only dispatches: it puts every job of :data:`JOBS` (a package of
:mod:`kafkaguard.audit.spark.jobs` each, with its own arguments) on the command line with the
arguments they share (:mod:`kafkaguard.audit.spark.runtime.command`), checks them before any
JVM starts, and runs the chosen job with the session it needs. It imports pyspark lazily
(inside :func:`run`), as the jobs' command lines do, so ``kafkaguard`` works without the
``analytics`` extra until ``analyze`` is used.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

if __package__ in (None, ""):  # pragma: no cover - run as a script by spark-submit
    # The script's own directory must not shadow anything; the checkout root provides
    # kafkaguard when it is not installed.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parents[2]))

from kafkaguard.audit.spark.jobs import compact, propose, report, unused, watch, whatif
from kafkaguard.audit.spark.runtime.command import (
    Job,
    LazySession,
    Out,
    check_window_input,
    kafka_arguments,
    parse_conf,
    spark_arguments,
    window,
    window_arguments,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("kafkaguard.analyze")

JOBS: Final[dict[str, Job]] = {
    job.name: job
    for job in (report.JOB, propose.JOB, unused.JOB, whatif.JOB, compact.JOB, watch.JOB)
}
"""Every job, in the order ``kafkaguard analyze --help`` lists them."""

NOT_ON_CONNECT: Final = frozenset(name for name, job in JOBS.items() if not job.connect)
"""Jobs that need the classic API (:attr:`~kafkaguard.audit.spark.runtime.command.Job.connect`)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = window_arguments(NOT_ON_CONNECT)
    jobs = parser.add_subparsers(dest="job", required=True, metavar="job")
    for job in JOBS.values():
        if job.windowed:
            job.arguments(jobs.add_parser(job.name, parents=[common], help=job.help))
            continue
        own = jobs.add_parser(job.name, help=job.help)
        job.arguments(own)
        spark_arguments(own, NOT_ON_CONNECT)
        if job.kafka:
            kafka_arguments(own)


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")


def _arguments_error(job: Job, args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, found before any JVM starts."""
    try:
        parse_conf(args.conf)
        if args.remote is not None:
            if not job.connect:
                raise ValueError(f"{job.name} needs --master (Spark Connect has no RDD API)")
            if not args.remote.startswith("sc://"):
                raise ValueError("--remote must be a Spark Connect URL, sc://host:port")
        if job.windowed:
            window(args)
        job.check(args)
        if job.windowed:
            check_window_input(args)
    except ValueError as exc:
        return str(exc)
    return None


def _reads_kafka(job: Job, args: argparse.Namespace) -> bool:
    if not job.kafka:
        return False
    return any(
        (text or "").startswith("kafka://")
        for text in (args.input, getattr(args, "baseline", None))
    )


def run(args: argparse.Namespace, spark: SparkSession | None = None, out: Out | None = None) -> int:
    """Run one job; 0 ok, 1 error, 2 bad arguments (3: ``whatif --fail-on-breakage``).

    A ``spark`` session passed in is used and left running (tests share one); otherwise one
    is built from ``--master``/``--conf`` when first needed and stopped at the end.
    """
    write = out or _print
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:
        sys.stderr.write(
            "kafkaguard analyze needs PySpark and Java >= 17: pip install 'kafkaguard[analytics]'\n"
        )
        return 2
    job = JOBS[args.job]
    problem = _arguments_error(job, args)
    if problem is not None:
        sys.stderr.write(f"kafkaguard analyze: {problem}\n")
        return 2
    if "://" not in args.input and not Path(args.input).is_dir():
        sys.stderr.write(f"kafkaguard analyze {args.job}: error: no such directory {args.input}\n")
        return 1

    from kafkaguard.audit.spark.runtime.session import KafkaJarsMissing, default_jvm_log
    from kafkaguard.config_tree import ConfigError
    from kafkaguard.policy.stores.base import AclStoreError

    failures = (PySparkException, Py4JError, ConfigError, AclStoreError, ValueError, OSError)
    session = LazySession(
        spark,
        args.master,
        parse_conf(args.conf),
        kafka=_reads_kafka(job, args),
        remote=args.remote,
        quick_jit=job.windowed,  # not compact, not watch (QUICK_JIT_OPTIONS)
        jvm_log=None if args.verbose or spark is not None else default_jvm_log(),
    )
    try:
        return job.run(session, args, write)
    except KafkaJarsMissing as exc:
        sys.stderr.write(f"kafkaguard analyze {args.job}: {exc}\n")
        return 1
    except failures as exc:
        log.debug("analyze failed", exc_info=True)
        sys.stderr.write(f"kafkaguard analyze {args.job}: error: {exc}\n")
        if session.jvm_log is not None and session.jvm_log.exists():
            sys.stderr.write(f"(Spark's own log: {session.jvm_log}; --verbose shows it)\n")
        return 1
    finally:
        session.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafkaguard analyze", description=(__doc__ or "").splitlines()[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
