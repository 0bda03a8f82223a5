"""``logging:`` in the proxy config: the process's log level and line format (issue 14).

``format: text`` (the default) is the line ``kafkaguard run`` has always written: the handler
``logging.basicConfig`` installs, formatted ``%(asctime)s %(levelname)s %(name)s %(message)s``.
``format: json`` writes one JSON object per line, for log shippers that would otherwise have
to parse free text and guess where a traceback ends. Its keys are stable:

``time``
    ISO 8601 in UTC with milliseconds, e.g. ``2024-05-01T12:00:00.123Z``.
``level``, ``logger``, ``message``
    The level name, the logger's name and the formatted message.
``pid``, ``worker``
    The process id, and the index of the worker process that wrote the line (``workers``,
    kafkaguard/proxy/app/workers.py; 0 for a single process, ``null`` for the supervisor):
    with ``workers: N`` the lines of the N processes can be told apart.
``listener``, ``connection_id``, ``client_address``, ``principal``
    Strings, present when the call site passed them, e.g.
    ``log.info("...", extra={"listener": name, "client_address": peer})``; absent otherwise.
``exc_info``, ``stack_info``
    A traceback (``exc_info=True``) or stack (``stack_info=True``) as one string.

Output is pure ASCII (``json.dumps`` escapes newlines, control characters and every
non-ASCII character), so a message quoting client-supplied text (a SASL name, a client id)
can neither start a forged line nor break a line-oriented shipper.

:func:`configure_logging` is the single entry point: ``kafkaguard run`` calls it at start,
and a config reload may call it again to change the level or format of the running process.
:func:`console` writes the few lines ``kafkaguard run`` prints whatever the level (the
bootstrap address, a failed start) in the same format, so that with ``json`` every line the
process writes parses.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Final, TextIO

TEXT: Final = "text"
JSON: Final = "json"
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"
"""The ``text`` line, unchanged from the ``logging.basicConfig`` call it replaces."""
CONTEXT_KEYS: Final = ("listener", "connection_id", "client_address", "principal")
"""``extra=`` attributes copied into a JSON line when a record has them."""
SUPERVISOR: Final = None
"""The ``worker`` of the supervisor process's lines."""
_worker: int | None = 0


def set_worker(index: int | None) -> None:
    """This process's ``worker`` in JSON lines: its index, or :data:`SUPERVISOR`."""
    global _worker
    _worker = index


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line, with the keys the module docstring lists."""

    converter = staticmethod(time.gmtime)
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, str | int | None] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": os.getpid(),
            "worker": _worker,
        }
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                # Strings always, so a shipper's schema does not depend on the call site.
                document[key] = str(value)
        if record.exc_info and not record.exc_text:
            # Cached on the record, as logging.Formatter.format does.
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            document["exc_info"] = record.exc_text
        if record.stack_info:
            document["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(document, separators=(",", ":"))


class _ProcessHandler(logging.StreamHandler[TextIO]):
    """The stderr handler :func:`configure_logging` puts on the root logger; found again by
    its type, so a second call reconfigures it instead of adding another."""


def _formatter(fmt: str) -> logging.Formatter:
    if fmt == TEXT:
        return logging.Formatter(TEXT_FORMAT)
    if fmt == JSON:
        return JsonFormatter()
    raise ValueError(f"unknown log format {fmt!r} (expected {TEXT!r} or {JSON!r})")


def configure_logging(level: str, fmt: str) -> None:
    """Set the root logger's level and the line format of kafkaguard's stderr handler.

    The first call installs the handler (stderr, like ``logging.basicConfig``); later calls
    swap its formatter and the level in place, so calling it again (a reload) never duplicates
    lines. If the root logger already has handlers that this function did not install (a
    program embedding the proxy, a test runner), they are left alone and nothing changes, as
    ``logging.basicConfig`` does. ``json`` also routes Python warnings through logging
    (``logging.captureWarnings``), so that they too arrive as JSON lines.
    """
    formatter = _formatter(fmt)
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _ProcessHandler)), None)
    if handler is None:
        if root.handlers:
            return
        handler = _ProcessHandler(sys.stderr)
        root.addHandler(handler)
    handler.setFormatter(formatter)
    root.setLevel(level)
    logging.captureWarnings(fmt == JSON)


def console(message: str, fmt: str, *, level: int = logging.INFO, error: bool = False) -> None:
    """A line for the operator whatever the log level, on stdout (``error``: stderr): the text
    itself, or with ``json`` a JSON line of logger ``kafkaguard`` (module docstring)."""
    if fmt == JSON:
        record = logging.LogRecord("kafkaguard", level, __file__, 0, message, None, None)
        message = JsonFormatter().format(record)
    print(message, file=sys.stderr if error else sys.stdout, flush=True)
