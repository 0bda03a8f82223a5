"""The process's password-hashing threads: few, with a bounded queue, refusing when full.

Checking a PLAIN credential costs one PBKDF2 (~50 ms of CPU at the default 100,000 iterations).
Run on an unbounded pool, a storm of wrong passwords from many addresses takes every core and
the event loop with them (measured: a healthy client's p99 from 2 ms to 428 ms). Kafka bounds
the same work by its fixed ``num.network.threads`` (``SocketServer`` processors run
``SaslServerAuthenticator``); here one :class:`AuthExecutor` serves every listener with
``limits.authentication_threads`` threads and at most ``limits.authentication_queue_size``
attempts waiting. An attempt beyond that is refused at once (:class:`AuthExecutorBusy`): its
client gets SASL_AUTHENTICATION_FAILED without any hash computed, so overload costs nothing.

Only CPU-expensive steps come here (a mechanism's ``blocking``): SCRAM's proof check (two
HMACs, ~20 µs; the PBKDF2 is the client's, RFC 5802 §3) and OAUTHBEARER's signature check
(RS256 ~35 µs, ES256 ~80 µs) cost less than the thread hop and stay on the event loop, so a
PLAIN storm that fills the queue never refuses them. All three are throttled alike: the
per-address failure window (``FailureThrottle``) limits guessing, not only CPU.

Who owns it: the proxy creates one per process from its top-level ``limits`` and closes it
after its listeners (:meth:`AuthExecutor.close`). A :class:`SaslServer` built without one
(tests, tools) gets its own, sized by the defaults below (``LimitsConfig``'s).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, Protocol, TypeVar

_T = TypeVar("_T")

AUTHENTICATION_THREADS: Final = 1
"""Default of ``limits.authentication_threads``."""
AUTHENTICATION_QUEUE_SIZE: Final = 32
"""Default of ``limits.authentication_queue_size``."""


class AuthenticationLimits(Protocol):
    """The two ``limits`` that size the executor (``LimitsConfig``, which imports this
    package's configuration, not the other way round)."""

    @property
    def authentication_threads(self) -> int: ...
    @property
    def authentication_queue_size(self) -> int: ...


class AuthExecutorBusy(Exception):
    """Every thread is hashing and the queue is full: refuse the attempt, hash nothing."""


class AuthExecutor:
    """``threads`` worker threads and at most ``queue_size`` jobs waiting for one.

    Thread-safe counters: ``submitted`` jobs accepted,
    ``started`` jobs that ran (password hashes computed), ``refused`` jobs turned away.
    A job whose awaiting task is cancelled before a thread takes it never runs; one already
    running cannot be stopped, so its result is still returned (a password checked for a
    client that left must still open its address's failure window).
    """

    def __init__(self, threads: int, queue_size: int) -> None:
        if threads < 1 or queue_size < 0:
            raise ValueError("an AuthExecutor needs threads >= 1 and queue_size >= 0")
        self.threads = threads
        self.queue_size = queue_size
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._admitted = 0
        """Jobs accepted and not yet finished (running + waiting)."""
        self.submitted = 0
        self.started = 0
        self.refused = 0

    @property
    def pending(self) -> int:
        """Jobs running or waiting now."""
        return self._admitted

    async def run(self, job: Callable[[], _T]) -> _T:
        """``job()`` in a worker thread, awaited without blocking the event loop.

        Raises :class:`AuthExecutorBusy` at once, without running ``job``, when
        ``threads + queue_size`` jobs are already running or waiting."""
        with self._lock:
            if self._admitted >= self.threads + self.queue_size:
                self.refused += 1
                raise AuthExecutorBusy(
                    f"{self._admitted} authentications running or waiting "
                    f"(authentication_threads {self.threads}, "
                    f"authentication_queue_size {self.queue_size})"
                )
            self._admitted += 1
            self.submitted += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kafkaguard-auth")
            future = self._pool.submit(self._started, job)  # under the lock: close() waits
        future.add_done_callback(self._finished)  # not under it: may run at once, and lock
        waiter = asyncio.wrap_future(future)
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            if future.cancel():  # still waiting for a thread: it never runs
                raise
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            return await waiter

    def _started(self, job: Callable[[], _T]) -> _T:
        with self._lock:
            self.started += 1
        return job()

    def _finished(self, _future: Future[Any]) -> None:
        with self._lock:
            self._admitted -= 1

    def close(self) -> None:
        """Stop the threads: jobs still waiting are cancelled (their awaiters see
        ``CancelledError``), a hash being computed finishes in the background. A later
        :meth:`run` starts fresh threads, so a shared executor survives one proxy's close."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def executor_for(limits: AuthenticationLimits) -> AuthExecutor:
    """The executor ``limits`` describe (``authentication_threads``/``_queue_size``)."""
    return AuthExecutor(limits.authentication_threads, limits.authentication_queue_size)
