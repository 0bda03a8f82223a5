"""Entry point of the audit analytics: ``kafkaguard analyze <job>`` and ``spark-submit``.

Both run the same code::

    kafkaguard analyze report --input audit/ --since 2026-11-22 --html report.html
    spark-submit --master yarn kafkaguard/audit/spark/main.py propose --input hdfs://nn/audit
    kafkaguard analyze compact --input audit/     # from cron: closed hours -> Parquet
    kafkaguard analyze propose --input kafka://k1:9092/_kafkaguard-audit   # the audit topic
    kafkaguard analyze watch --input kafka://k1:9092/_kafkaguard-audit --checkpoint state/

This module owns the command line only and imports pyspark lazily (inside :func:`run`), so
``kafkaguard`` works without the ``analytics`` extra until ``analyze`` is used.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

if __package__ in (None, ""):  # pragma: no cover - run as a script by spark-submit
    # The script's own directory must not shadow anything; the checkout root provides
    # kafkaguard when it is not installed.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parents[2]))

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kafkaguard.audit.spark.source import TimeRange
    from kafkaguard.audit.spark.watch import SpikeRule

log = logging.getLogger("kafkaguard.analyze")
Out = Callable[[str], None]


def _common() -> argparse.ArgumentParser:
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
    _spark_arguments(common)
    _kafka_arguments(common)
    return common


def _kafka_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer setting for a kafka:// input, e.g. security.protocol=SASL_SSL,"
        " sasl.mechanism=SCRAM-SHA-512, sasl.jaas.config=... (repeatable)",
    )


def _watch_arguments(watch: argparse.ArgumentParser) -> None:
    # The spike rule's defaults are watch.SpikeRule's (None here: that module imports pyspark).
    watch.add_argument("--input", required=True, help="the audit topic: kafka://host:port/topic")
    watch.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="a local directory for Spark's offsets and the watch's state: a restart resumes"
        " there (default: none, every start reads from --starting-offsets)",
    )
    watch.add_argument(
        "--output", default="console", help="console (default) or jsonl:PATH (appended)"
    )
    watch.add_argument(
        "--baseline",
        metavar="INPUT",
        help="an audit directory or kafka:// topic whose principals and denials are known",
    )
    watch.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="where a start without checkpoint reads from (default earliest: the whole topic)",
    )
    watch.add_argument(
        "--trigger", type=float, default=1.0, metavar="SECONDS", help="micro-batch interval"
    )
    watch.add_argument(
        "--spike-min",
        type=int,
        metavar="N",
        help="a would-deny spike needs >= N in a minute of event time (default 20)",
    )
    watch.add_argument(
        "--spike-factor",
        type=float,
        metavar="F",
        help="... and more than F x the average of the minutes before it (default 3)",
    )
    watch.add_argument(
        "--spike-window",
        type=int,
        metavar="MINUTES",
        help="... over this many minutes (default 10)",
    )
    _spark_arguments(watch)
    _kafka_arguments(watch)


def _spark_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--master", help="Spark master (default local[*]; under spark-submit: its --master)"
    )
    where.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="a Spark Connect server to run on (kept warm: no start-up per job); not for"
        f" {', '.join(sorted(NOT_ON_CONNECT))}",
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


NOT_ON_CONNECT: Final = frozenset({"unused", "whatif", "watch"})
"""Jobs that need the classic API (``unused``/``whatif`` replay on RDDs with a broadcast
policy; ``watch`` runs its state on the driver): Spark Connect has neither."""


def _compact_arguments(compact: argparse.ArgumentParser) -> None:
    from kafkaguard.audit.spark.hours import DEFAULT_GRACE_S  # no pyspark: see module doc

    compact.add_argument("--input", required=True, help="the proxy's (local) audit directory")
    compact.add_argument("--output", help="the Parquet directory (default: INPUT/_compacted)")
    compact.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="an hour is closed once it ended, and its directory last changed, this long ago"
        f" (default {DEFAULT_GRACE_S:.0f}; above audit.aggregate_window_seconds)",
    )
    _spark_arguments(compact)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = _common()
    jobs = parser.add_subparsers(dest="job", required=True, metavar="job")
    report = jobs.add_parser(
        "report", parents=[common], help="decisions by principal/resource/operation/listener"
    )
    report.add_argument("--html", help="write the self-contained HTML report here")
    report.add_argument("--top", type=int, default=10, help="top-N denied lists (default 10)")
    baseline = report.add_mutually_exclusive_group()
    baseline.add_argument(
        "--baseline-until",
        metavar="TIME",
        help="principals first seen at/after this time are new (default: the window's middle;"
        " the page states the baseline)",
    )
    baseline.add_argument(
        "--baseline-days",
        type=float,
        metavar="N",
        help="the window's first N days are the baseline: principals first seen after are new",
    )
    propose = jobs.add_parser(
        "propose", parents=[common], help="least-privilege ACLs for the observed access"
    )
    propose.add_argument(
        "--prefix-min-topics",
        type=int,
        default=0,
        metavar="N",
        help="one PREFIXED ACL for >= N topics of a principal sharing a prefix (default 0: off)",
    )
    propose.add_argument(
        "--hosts", choices=("any", "exact"), default="any", help="ACL host: * or observed IPs"
    )
    propose.add_argument("--acl-file", help="write the ACL file here (default: stdout)")
    propose.add_argument(
        "--commands-file", help="write kafka-acls commands here (with --bootstrap-server)"
    )
    propose.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="the proxy (or broker) the --commands-file commands connect to; required with it",
    )
    unused = jobs.add_parser(
        "unused", parents=[common], help="ACLs in the current store that matched no decision"
    )
    unused.add_argument("--acls", help="the ACL file to check (default: --config's store)")
    unused.add_argument("--config", help="the proxy config: its ACL store and authorizer settings")
    whatif = jobs.add_parser(
        "whatif", parents=[common], help="replay the window against another ACL set"
    )
    whatif.add_argument("--acls", required=True, help="the proposed ACL file")
    whatif.add_argument("--config", help="the proxy config whose authorizer settings apply")
    whatif.add_argument("--show", type=int, default=50, help="flips to print (default 50)")
    whatif.add_argument(
        "--fail-on-breakage",
        action="store_true",
        help="exit 3 when some allowed decision would be denied",
    )
    _compact_arguments(
        jobs.add_parser(
            "compact", help="turn the closed hours of the audit trail into Parquet (incremental)"
        )
    )
    _watch_arguments(
        jobs.add_parser(
            "watch",
            help="stream the audit topic: alert on new principals, new denials, would-deny spikes",
        )
    )


def _conf(pairs: Sequence[str], option: str = "--conf") -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} needs KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def _window(args: argparse.Namespace) -> TimeRange:
    from kafkaguard.audit.spark.source import TimeRange, parse_time

    return TimeRange(
        parse_time(args.since) if args.since else None,
        parse_time(args.until) if args.until else None,
    )


def _report(spark: SparkSession, events: DataFrame, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.html_report import render
    from kafkaguard.audit.spark.output import write_tables
    from kafkaguard.audit.spark.report import LARGE_TABLES, build_report, iso, report_data
    from kafkaguard.audit.spark.source import parse_time

    window = _window(args)
    baseline = parse_time(args.baseline_until) if args.baseline_until else None
    built = build_report(
        events,
        window,
        top_n=args.top,
        baseline_until=baseline,
        baseline_days=args.baseline_days,
    )
    if args.output:
        writing = time.perf_counter()
        write_tables(built.tables, args.output, partitioned=LARGE_TABLES, json=args.json)
        built.timings["write the tables (--output)"] = time.perf_counter() - writing
        out(f"report tables written to {args.output}")
    if args.html:
        page = render(report_data(built, window, datetime.now(UTC)))
        Path(args.html).write_text(page, encoding="utf-8")
        out(f"HTML report written to {args.html}")
    s, b = built.summary, built.baseline
    out(
        f"read {s.records} events in {time.perf_counter() - built.started:.1f} s"
        + "".join(f"; {name}: {sec:.1f} s" for name, sec in built.timings.items())
    )
    if b is not None and b.cutoff is not None:
        fresh = len(built.rows["new_principals"])
        out(
            f"{fresh} new principals since {iso(b.cutoff)} "
            f"(baseline {iso(b.start) or 'start'} .. {iso(b.cutoff)}: {b.basis})"
        )
    out(
        f"{s.allowed + s.denied} decisions: {s.allowed} allowed, {s.denied} denied "
        f"({s.would_deny} would-deny in log_only), {s.principals} principals"
    )
    return 0


def _propose(spark: SparkSession, events: DataFrame, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.output import write_tables
    from kafkaguard.audit.spark.proposal import render_acl_file, render_commands
    from kafkaguard.audit.spark.propose import proposal_tables, propose

    if args.prefix_min_topics < 0 or args.prefix_min_topics == 1:
        raise ValueError("--prefix-min-topics must be 0 (off) or at least 2")
    made = propose(
        events, exact_hosts=args.hosts == "exact", prefix_min_topics=args.prefix_min_topics
    )
    principals = len({a.binding.entry.principal for a in made.acls})
    header = [
        f"Proposed by `kafkaguard analyze propose` from {args.input}"
        f" (window {args.since or 'start'} .. {args.until or 'end'}).",
        f"{len(made.acls)} ALLOW ACLs for {principals} principals: every observed allowed or"
        " would-deny access, nothing else. Review before loading.",
    ]
    text = render_acl_file(made.acls, header)
    if args.acl_file:
        Path(args.acl_file).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.commands_file:
        Path(args.commands_file).write_text(
            render_commands(made.acls, args.bootstrap_server), encoding="utf-8"
        )
    if args.output:
        write_tables(proposal_tables(spark, made), args.output, json=args.json)
    note = f"; {made.skipped} unusable tuples skipped" if made.skipped else ""
    sys.stderr.write(f"proposed {len(made.acls)} ACLs for {principals} principals{note}\n")
    return 0


def _unused(spark: SparkSession, events: DataFrame, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.cache import cached
    from kafkaguard.audit.spark.output import write_tables
    from kafkaguard.audit.spark.replay import load_policy
    from kafkaguard.audit.spark.unused import acl_usage, unused_acls
    from kafkaguard.policy.explain import acl_text

    policy = load_policy(args.acls, args.config)
    usage = cached(acl_usage(events, policy))
    unused = unused_acls(usage)
    if args.output:
        write_tables({"acl_usage": usage, "unused_acls": unused}, args.output, json=args.json)
    indexes = [r["acl_index"] for r in unused.select("acl_index").collect()]
    out(f"{len(indexes)} of {len(policy.acls)} ACLs ({policy.source}) matched no decision:")
    for i in indexes:
        out(f"  {acl_text(policy.acls[i])}")
    return 0


def _whatif(spark: SparkSession, events: DataFrame, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.cache import cached
    from kafkaguard.audit.spark.output import write_tables
    from kafkaguard.audit.spark.replay import load_policy
    from kafkaguard.audit.spark.whatif import flips, replay, summarize, summary_table

    policy = load_policy(args.acls, args.config)
    replayed = cached(replay(events, policy))
    flipped = cached(flips(replayed))
    counts = summarize(flipped)
    if args.output:
        tables = {
            "whatif_replay": replayed,
            "whatif_flips": flipped,
            "whatif_summary": summary_table(flipped, counts),
        }
        write_tables(tables, args.output, json=args.json)
    for c in counts:
        out(f"{c.direction}: {c.decisions} decisions ({c.tuples} distinct requests)")
    for r in flipped.limit(args.show).collect():
        out(
            f"  {r['direction']} x{r['count']}: {r['principal']} {r['operation']} "
            f"{r['resource_type']}:{r['resource_name']} from {r['client_host']} "
            f"({r['listener']}) -> {r['reason']}"
        )
    errors = replayed.where(replayed["error"].isNotNull()).count()
    if errors:
        out(f"{errors} recorded tuples could not be replayed (see whatif_replay.error)")
    breaking = counts[0].decisions > 0
    return 3 if args.fail_on_breakage and breaking else 0


JOBS = {"report": _report, "propose": _propose, "unused": _unused, "whatif": _whatif}


class _Session:
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

    def get(self) -> SparkSession:
        if self._given is not None:
            return self._given
        if self._built is None:  # no JVM (no Java >= 17) fails here, as a PySparkException
            from kafkaguard.audit.spark.session import build_remote_session, build_session

            if self._remote is not None:
                self._built = build_remote_session(self._remote, self._conf)
            else:
                self._built = build_session(
                    self._master,
                    self._conf,
                    kafka=self._kafka,
                    quick_jit=self._quick_jit,
                    jvm_log=self.jvm_log,
                )
        return self._built

    def close(self) -> None:
        if self._built is not None:
            self._built.stop()


def _compact(session: _Session, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.compact import compact
    from kafkaguard.audit.spark.source import compacted_path

    if "://" in args.input or (args.output and "://" in args.output):
        raise ValueError("compact works on the proxy's local audit directory (a path, no URI)")
    output = Path(args.output or compacted_path(args.input))
    lines = compact(session.get, Path(args.input), output, grace=args.grace)
    if lines is None:
        out(f"another compaction holds {output}; nothing done")
        return 0
    for line in lines:
        out(line)
    return 0


FACT_JOBS = frozenset({"report", "propose"})
"""Jobs that only sum counts per hour: they read the hourly facts ``compact`` wrote where
present (:mod:`.facts`), the records elsewhere (``propose --hosts exact``: the records)."""


def _analyze(session: _Session, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.cache import job_caches
    from kafkaguard.audit.spark.facts import read_facts
    from kafkaguard.audit.spark.progress import stage_progress
    from kafkaguard.audit.spark.source import describe_input, read_audit

    spark = session.get()
    described = describe_input(
        args.input, _window(args), compacted=args.compacted, json_only=args.json_only
    )
    if described is not None:  # stderr: propose writes its ACL file to stdout
        sys.stderr.write(described + "\n")
    facts = args.job in FACT_JOBS and getattr(args, "hosts", None) != "exact"
    events = (read_facts if facts else read_audit)(
        spark,
        args.input,
        _window(args),
        compacted=args.compacted,
        json_only=args.json_only,
        kafka_options=_conf(args.kafka_option, "--kafka-option"),
    )
    with job_caches(), stage_progress(spark, sys.stderr):  # caches: cache.py
        return JOBS[args.job](spark, events, args, out)


def _spike_rule(args: argparse.Namespace) -> SpikeRule:
    from kafkaguard.audit.spark.watch import SpikeRule

    given = {
        "min_count": args.spike_min,
        "factor": args.spike_factor,
        "window_minutes": args.spike_window,
    }
    return SpikeRule(**{k: v for k, v in given.items() if v is not None})


def _watch(session: _Session, args: argparse.Namespace, out: Out) -> int:
    import signal
    import threading

    from kafkaguard.audit.spark.source import KafkaInput, read_audit
    from kafkaguard.audit.spark.watch import WatchOptions, open_sink, watch

    options = WatchOptions(
        KafkaInput.parse(args.input),
        _conf(args.kafka_option, "--kafka-option"),
        args.checkpoint,
        args.starting_offsets,
        args.trigger,
        _spike_rule(args),
    )
    emit, close = open_sink(args.output)
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
    try:
        spark = session.get()
        baseline = None
        if args.baseline:
            baseline = read_audit(spark, args.baseline, kafka_options=options.kafka_options)

        def started(line: str) -> None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

        batches = watch(spark, options, emit, stop, baseline=baseline, started=started)
    finally:
        close()
    sys.stderr.write(f"watch stopped after {batches} micro-batches\n")
    return 0


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")


def _arguments_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, found before any JVM starts."""
    try:
        _conf(args.conf)
        if args.remote is not None:
            if args.job in NOT_ON_CONNECT:
                raise ValueError(f"{args.job} needs --master (Spark Connect has no RDD API)")
            if not args.remote.startswith("sc://"):
                raise ValueError("--remote must be a Spark Connect URL, sc://host:port")
        if args.job not in ("compact", "watch"):
            _window(args)
        if args.job == "propose" and args.commands_file and not args.bootstrap_server:
            # No default: a made-up address (localhost:9092) would send the commands elsewhere.
            raise ValueError(
                "--commands-file needs --bootstrap-server HOST:PORT, the address of the proxy "
                "(or broker) its kafka-acls commands connect to"
            )
        _kafka_input_error(args)
    except ValueError as exc:
        return str(exc)
    return None


def _kafka_input_error(args: argparse.Namespace) -> None:
    """A ``kafka://`` input's URI and ``--kafka-option`` settings (ValueError when wrong)."""
    from kafkaguard.audit.spark.source import KafkaInput, is_kafka_input

    if args.job == "compact":
        return
    _conf(args.kafka_option, "--kafka-option")
    if args.job == "watch":
        KafkaInput.parse(args.input)  # the topic is the only input a stream reads
        if args.checkpoint and "://" in args.checkpoint:
            raise ValueError("--checkpoint is a local directory (the watch's state is a file)")
        if args.trigger <= 0:
            raise ValueError("--trigger must be positive")
        _spike_rule(args)
        kind, sep, path = args.output.partition(":")
        if args.output != "console" and (kind != "jsonl" or not sep or not path):
            raise ValueError(f"--output must be console or jsonl:PATH, not {args.output!r}")
    elif is_kafka_input(args.input):
        KafkaInput.parse(args.input)


def _reads_kafka(args: argparse.Namespace) -> bool:
    if args.job == "compact":
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
    problem = _arguments_error(args)
    if problem is not None:
        sys.stderr.write(f"kafkaguard analyze: {problem}\n")
        return 2
    if "://" not in args.input and not Path(args.input).is_dir():
        sys.stderr.write(f"kafkaguard analyze {args.job}: error: no such directory {args.input}\n")
        return 1

    from kafkaguard.audit.spark.session import KafkaJarsMissing, default_jvm_log
    from kafkaguard.config_tree import ConfigError
    from kafkaguard.policy.stores.base import AclStoreError

    failures = (PySparkException, Py4JError, ConfigError, AclStoreError, ValueError, OSError)
    session = _Session(
        spark,
        args.master,
        _conf(args.conf),
        kafka=_reads_kafka(args),
        remote=args.remote,
        quick_jit=args.job in JOBS,  # not compact, not watch (QUICK_JIT_OPTIONS)
        jvm_log=None if args.verbose or spark is not None else default_jvm_log(),
    )
    try:
        if args.job == "compact":
            return _compact(session, args, write)
        if args.job == "watch":
            return _watch(session, args, write)
        return _analyze(session, args, write)
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
