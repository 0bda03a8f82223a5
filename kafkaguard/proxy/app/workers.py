"""``workers: N``: N proxy processes sharing each listening port, under one supervisor.

Why processes: one Python process uses one core for the data path (the event loop, the
codec, the authorizer). N workers each run the whole proxy (:class:`~kafkaguard.proxy.app.server.
ProxyServer`, its own event loop, authorizer snapshot, ACL and credential stores, TLS files),
and the kernel spreads new connections over them: every worker binds each listener port with
``SO_REUSEPORT``. Nothing is shared between workers, so nothing needs locking, and each sees
ACL, credential and certificate changes from its store as a single process does.

The supervisor (this module; no event loop, no threads) forks the workers after the
configuration is loaded and before anything else starts, then only waits:

* a worker that exits while the proxy is running (a crash, a kill) is started again, after a
  delay doubling from :data:`RESTART_DELAY_S` to :data:`MAX_RESTART_DELAY_S` while it keeps
  failing (reset once it has served for :data:`STABLE_AFTER_S`);
* a worker that exits before it served at all (the upstream unreachable, a port taken, files
  missing) stops the others and the supervisor: retrying cannot help, as with one process;
* SIGTERM and SIGINT are sent on to every worker (each drains, as a single process does; a
  second signal cuts the drain short), SIGHUP too (each reloads the file itself; a worker
  still starting gets it once it serves). A worker reads the file when it starts, so one
  started again after a reload runs the file as it is then;
* a worker whose supervisor dies gets SIGTERM (``PR_SET_PDEATHSIG``), so none is orphaned;
  each worker has a process group of its own, so a signal to the supervisor's group (a
  terminal's Ctrl-C) reaches a worker once, from the supervisor.

Per worker: connection limits (``max_connections``, ``max_connections_per_ip``,
``max_connection_creation_rate``, ``connection_creation_rate``), SASL failure delays, the
authentication pool, TLS session ticket keys, and the admin listener, served by worker i on
``admin.port + i``. Audit files are per process already
(their names carry the pid), so workers never share one.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

log = logging.getLogger("kafkaguard")

RESTART_DELAY_S: Final = 1.0
MAX_RESTART_DELAY_S: Final = 30.0
STABLE_AFTER_S: Final = 60.0
"""A worker that has served this long is healthy again: its next restart waits the least."""
_FORWARDED: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass
class _Worker:
    index: int
    pid: int
    ready: int
    """Read end of the pipe the worker writes one byte to once it serves (then closed)."""
    started: float
    serving: bool = False
    restarted: bool = False
    """Started again after an exit: failing to start is then retried, not fatal (the
    upstream may be down for a while; the other workers keep serving)."""
    reload_pending: bool = False
    """A SIGHUP came before the worker served: sent once it does (until its server installs
    its handler, a SIGHUP is ignored, never the default end of the process)."""


Serve = Callable[[int, Callable[[], None]], int]
"""Runs worker ``index`` in the forked child until it stops; calls the second argument once
it serves; returns the exit status."""


class Supervisor:
    """Fork ``count`` workers running ``serve`` and keep them running (module docstring)."""

    def __init__(self, count: int, serve: Serve, *, serving: Callable[[], None] | None) -> None:
        self.count = count
        self._serve = serve
        self._serving = serving
        """Called once every worker serves (the pid file)."""
        self._workers: dict[int, _Worker] = {}
        self._delays: dict[int, float] = {}
        self._stopping = False
        self._failed: int | None = None
        """The exit status of a worker that never served: the supervisor's own."""

    def run(self) -> int:
        """Until every worker has exited after a stop signal (0), or one failed to start."""
        previous = {sig: signal.signal(sig, self._forward) for sig in _FORWARDED}
        try:
            for index in range(self.count):
                self._spawn(index)
            announced = False
            while self._workers:
                if not announced and all(w.serving for w in self._workers.values()):
                    announced = True
                    if self._serving is not None:
                        self._serving()
                self._wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self._failed or 0

    # -- children ----------------------------------------------------------------------------
    def _spawn(self, index: int, *, restarted: bool = False) -> None:
        read, write = os.pipe()
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            for fd in [read, *(w.ready for w in self._workers.values())]:
                os.close(fd)
            os._exit(self._child(index, write, supervisor))
        os.close(write)
        self._workers[pid] = _Worker(index, pid, read, time.monotonic(), restarted=restarted)
        log.info("worker %d started (pid %d)", index, pid)

    def _child(self, index: int, ready: int, supervisor: int) -> int:
        status = 1
        try:
            os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the supervisor only: it is sent on
            # once (a second SIGINT would cut the worker's drain short)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the worker's server installs its own
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            _die_with_parent(supervisor)

            def served() -> None:
                os.write(ready, b"r")
                os.close(ready)

            status = self._serve(index, served)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # the worker's last word, then its exit status
            log.exception("worker %d failed", index)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
        return status

    def _wait(self) -> None:
        """Wait for a readiness byte or a worker's exit, and act on it."""
        pending = [w.ready for w in self._workers.values() if not w.serving]
        if pending:  # a readiness byte, or the pipe closed by an exit; at most 1 s
            with contextlib.suppress(InterruptedError):
                readable, _, _ = select.select(pending, [], [], 1.0)
                for worker in self._workers.values():
                    if worker.ready in readable and os.read(worker.ready, 1):
                        worker.serving = True
                        log.info("worker %d (pid %d) serves", worker.index, worker.pid)
                        if worker.reload_pending:
                            os.kill(worker.pid, signal.SIGHUP)
        try:
            pid, status = os.waitpid(-1, 0 if not pending else os.WNOHANG)
        except ChildProcessError:
            self._workers.clear()
            return
        if pid == 0:
            return
        worker = self._workers.pop(pid)
        os.close(worker.ready)
        self._exited(worker, status)

    def _exited(self, worker: _Worker, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        how = f"exit status {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        if self._stopping:
            log.info("worker %d (pid %d) stopped (%s)", worker.index, worker.pid, how)
            return
        if not worker.serving and not worker.restarted:
            log.error(
                "worker %d (pid %d) failed to start (%s): stopping the other workers",
                worker.index,
                worker.pid,
                how,
            )
            self._failed = code if code > 0 else 1
            self._stop_all(signal.SIGTERM)
            return
        lived = time.monotonic() - worker.started
        delay = self._delays.get(worker.index, RESTART_DELAY_S)
        if worker.serving and lived >= STABLE_AFTER_S:
            delay = RESTART_DELAY_S
        self._delays[worker.index] = min(delay * 2, MAX_RESTART_DELAY_S)
        log.error(
            "worker %d (pid %d) ended unexpectedly (%s) after %.0f s: restarting it in %.0f s",
            worker.index,
            worker.pid,
            how,
            lived,
            delay,
        )
        deadline = time.monotonic() + delay
        while not self._stopping and time.monotonic() < deadline:  # a stop ends the wait
            time.sleep(0.1)
        if not self._stopping:
            self._spawn(worker.index, restarted=True)

    # -- signals ------------------------------------------------------------------------------
    def _forward(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP:
            for worker in self._workers.values():
                if worker.serving:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(worker.pid, signal.SIGHUP)
                else:
                    worker.reload_pending = True
            return
        self._stop_all(signal.Signals(signum))

    def _stop_all(self, sig: signal.Signals) -> None:
        self._stopping = True
        for pid in self._workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def _die_with_parent(supervisor: int) -> None:
    """SIGTERM to this worker when the supervisor dies (Linux ``PR_SET_PDEATHSIG``)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
        if os.getppid() != supervisor:  # it died before the call
            os.kill(os.getpid(), signal.SIGTERM)


__all__ = ["Supervisor"]
