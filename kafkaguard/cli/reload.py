"""``kafkaguard reload``: check a configuration file, then signal the running proxy (SIGHUP)
that was started with it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from kafkaguard.cli.serve import add_demo_arguments, add_run_arguments, check_config

DESCRIPTION = """\
Check a configuration file as check-config does, then send SIGHUP to the running proxy
(kafkaguard run --pid-file P writes its process id to P). The proxy re-reads its ACL store
and the configuration file it was started with, which must be this file.

Applied without a restart: authorizer super_users, allow_everyone_if_no_acl_found and
extensions (per-listener overrides, host_cidr); enforcement, top level and per listener;
limits, except authentication_threads and authentication_queue_size; logging level and
format; shutdown_timeout_ms; listeners added (opened, then accepting) or removed (drained as
at shutdown; its port can be taken by a listener added in a later reload, not in the same).
New decisions on every connection follow the new authorizer settings and enforcement modes;
new connections get the new limits.

Kept until a restart (the proxy logs a WARNING naming each changed one): upstream; a
listener's bind_host, port, advertised_host, broker_ports, security_protocol, ssl and sasl;
admin, metrics, audit, acl_store; authorizer class and options; the two authentication pool
limits. Certificate and SASL credential files need no reload: they are re-read when they
change.

The proxy checks the file again: an invalid one is rejected, with the check-config error in
its log, and the running configuration stays. Outcomes are counted in
kafkaguard_config_reloads_total{result="applied"|"rejected"}.

Exit status: 0 signalled, 1 no such kafkaguard process, 2 invalid configuration (nothing is
signalled)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        required=True,
        help="the configuration file the proxy runs with, edited",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int, help="process id of kafkaguard run")
    target.add_argument("--pid-file", type=Path, help="the file kafkaguard run --pid-file wrote")


def _read_pid(path: Path) -> int:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the pid file {path}: {exc}") from exc
    if not text.isdigit():
        raise ValueError(f"the pid file {path} holds no process id")
    return int(text)


def _serve_parser() -> argparse.ArgumentParser:
    """The ``run`` and ``demo`` command lines, as ``kafkaguard`` parses them."""
    parser = argparse.ArgumentParser(prog="kafkaguard")
    commands = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(commands.add_parser("run"))
    add_demo_arguments(commands.add_parser("demo"))
    return parser


def _kafkaguard_config(argv: Sequence[str]) -> Path | None:
    """The configuration file of a ``kafkaguard run``/``demo`` command line; None for any
    other command line."""
    for index, word in enumerate(argv[1:], start=1):
        if word in ("run", "demo") and "kafkaguard" in Path(argv[index - 1]).name:
            try:
                args, _ = _serve_parser().parse_known_args(argv[index:])
            except SystemExit:  # argparse's way of refusing a command line
                return None
            return Path(args.config) if word == "run" else Path(args.dir) / "config.yaml"
    return None


def _check_target(pid: int, config_path: Path) -> None:
    """Refuse to signal a process that is not a proxy reading ``config_path``: SIGHUP ends a
    process that does not handle it. Linux only (``/proc``); elsewhere nothing is checked."""
    proc = Path("/proc") / str(pid)
    try:
        argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        cwd = Path(os.readlink(proc / "cwd"))
    except FileNotFoundError as exc:
        raise ProcessLookupError(f"no process {pid}") from exc
    except OSError:
        return  # no /proc, or another user's process: os.kill decides
    running = _kafkaguard_config([a for a in argv if a])
    if running is None:
        raise ValueError(f"process {pid} is not kafkaguard run: {' '.join(argv).strip()[:200]}")
    if (cwd / running).resolve() != config_path.resolve():
        raise ValueError(
            f"process {pid} runs with {cwd / running}, not {config_path}: it re-reads its own file"
        )


def run(args: argparse.Namespace) -> int:
    """``kafkaguard reload``: exit 0 once signalled, 1 no such process, 2 invalid file."""
    code = check_config(args.config)
    if code != 0:
        return code
    try:
        pid: int = args.pid if args.pid is not None else _read_pid(args.pid_file)
        _check_target(pid, args.config)
        os.kill(pid, signal.SIGHUP)
    except (OSError, ValueError) as exc:
        print(f"kafkaguard reload: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    print(  # noqa: T201
        f"sent SIGHUP to process {pid}: it reloads {args.config} and its ACL store "
        "(the outcome is in its log and in kafkaguard_config_reloads_total)"
    )
    return 0
