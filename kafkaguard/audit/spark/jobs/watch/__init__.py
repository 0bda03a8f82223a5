"""``kafkaguard analyze watch``: its arguments, their checks and the stream's lifetime (until
SIGINT or SIGTERM); the alerts and their state are :mod:`.stream`."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING, Final

from kafkaguard.audit.spark.runtime.command import Job, LazySession, Out, parse_conf

if TYPE_CHECKING:
    from kafkaguard.audit.spark.jobs.watch.stream import SpikeRule

HELP: Final = "stream the audit topic: alert on new principals, new denials, would-deny spikes"
"""The job's line in ``kafkaguard analyze --help``."""


def _arguments(watch: argparse.ArgumentParser) -> None:
    # The spike rule's defaults are stream.SpikeRule's (None here: that module imports pyspark).
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


def _spike_rule(args: argparse.Namespace) -> SpikeRule:
    from kafkaguard.audit.spark.jobs.watch.stream import SpikeRule

    given = {
        "min_count": args.spike_min,
        "factor": args.spike_factor,
        "window_minutes": args.spike_window,
    }
    return SpikeRule(**{k: v for k, v in given.items() if v is not None})


def _check(args: argparse.Namespace) -> None:
    from kafkaguard.audit.spark.trail.source import KafkaInput

    parse_conf(args.kafka_option, "--kafka-option")
    KafkaInput.parse(args.input)  # the topic is the only input a stream reads
    if args.checkpoint and "://" in args.checkpoint:
        raise ValueError("--checkpoint is a local directory (the watch's state is a file)")
    if args.trigger <= 0:
        raise ValueError("--trigger must be positive")
    _spike_rule(args)
    kind, sep, path = args.output.partition(":")
    if args.output != "console" and (kind != "jsonl" or not sep or not path):
        raise ValueError(f"--output must be console or jsonl:PATH, not {args.output!r}")


def _run(session: LazySession, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.jobs.watch.stream import WatchOptions, open_sink, watch
    from kafkaguard.audit.spark.trail.source import KafkaInput, read_audit

    options = WatchOptions(
        KafkaInput.parse(args.input),
        parse_conf(args.kafka_option, "--kafka-option"),
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


JOB = Job("watch", HELP, _arguments, _run, _check, windowed=False, connect=False)
