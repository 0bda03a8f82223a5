"""Logs bounded under attack: at most one line per second per (listener, cause).

A hostile client can make the proxy refuse thousands of connections or frames a second. Each
refusal is counted in full (the listener's counters), but only the first of each second is
logged, and the next line logged for that cause says how many were left out, so the log says
what happened without letting an attacker fill the disk. Kafka's broker has no such limiter; its
``kafka.network.Processor`` logs closed connections at DEBUG for the same reason.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final

INTERVAL_S: Final = 1.0
"""One line per cause per listener per this many seconds."""
_MAX_KEYS: Final = 4096
"""Causes remembered (LRU); a forgotten cause simply logs its next line at once."""


class RateLimitedLog:
    """``log(key, level, msg, *args)`` writes at most one line per ``interval_s`` per key.

    A line that follows suppressed ones ends with ``(N similar lines suppressed)``. Keys are
    small tuples such as ``(listener, "bad-frame")``: a bounded set, never a client address.
    """

    __slots__ = ("_clock", "_interval", "_logger", "_state")

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval_s
        self._clock = clock
        self._state: OrderedDict[object, tuple[float, int]] = OrderedDict()
        """key → (time of the last line written, lines suppressed since)."""

    def log(
        self,
        key: object,
        level: int,
        msg: str,
        *args: object,
        extra: Callable[[], Mapping[str, object]] | None = None,
    ) -> bool:
        """Log unless ``key`` logged less than ``interval_s`` ago; True if written. ``extra``
        gives the record's structured fields (``logging.format: json``), called only when the
        line is written: a suppressed line under attack costs no dictionary."""
        if not self._logger.isEnabledFor(level):
            return False
        now = self._clock()
        last, suppressed = self._state.get(key, (float("-inf"), 0))
        if now - last < self._interval:
            self._state[key] = (last, suppressed + 1)
            return False
        self._state[key] = (now, 0)
        self._state.move_to_end(key)
        while len(self._state) > _MAX_KEYS:
            self._state.popitem(last=False)
        if suppressed:
            msg = f"{msg} (%d similar lines suppressed)"
            args = (*args, suppressed)
        self._logger.log(level, msg, *args, extra=extra() if extra is not None else None)
        return True
