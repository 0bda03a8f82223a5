"""``logging.format`` (issue 14): the JSON line formatter, :func:`configure_logging` called again
(a reload), and ``kafkaguard run`` with ``logging: {format: json}`` writing only JSON lines."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.proxy.app.log_format import (
    SUPERVISOR,
    TEXT_FORMAT,
    JsonFormatter,
    configure_logging,
    set_worker,
)
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.proxy_fixture import TANSU_NODE_ID
from tests.support.raw_client import RawKafkaClient

ISO_UTC_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
BASE_KEYS = {"time", "level", "logger", "message", "pid", "worker"}


def _record(msg: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    """A record as ``logging.getLogger("kafkaguard.proxy").warning(msg, *args, extra=extra)``
    (inside an ``except`` block when ``exc``) makes it."""
    exc_info = None
    if exc:
        try:
            raise ZeroDivisionError("boom\nsecond line")
        except ZeroDivisionError:
            exc_info = sys.exc_info()
    logger = logging.getLogger("kafkaguard.proxy")
    return logger.makeRecord(
        logger.name, logging.WARNING, __file__, 1, msg, args, exc_info, extra=extra or None
    )


def _line(record: logging.LogRecord) -> Any:
    """The JSON line for ``record``, parsed, after checking it is one ASCII line."""
    text = JsonFormatter().format(record)
    assert "\n" not in text and "\r" not in text and text.isascii()
    return json.loads(text)


# -- the formatter ---------------------------------------------------------------------------


def test_json_line_has_the_stable_keys() -> None:
    record = _record("listener %s ready on port %d", "PLAINTEXT", 9092)
    document = _line(record)
    assert set(document) == BASE_KEYS
    assert document["level"] == "WARNING"
    assert document["logger"] == "kafkaguard.proxy"
    assert document["message"] == "listener PLAINTEXT ready on port 9092"
    assert ISO_UTC_MS.fullmatch(document["time"])
    expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    assert document["time"] == f"{expected}.{int(record.msecs):03d}Z"


def test_connection_fields_come_from_extra_and_are_strings() -> None:
    record = _record(
        "closed",
        listener="SASL_SSL",
        connection_id=17,
        client_address="10.0.0.1:51234",
        principal="User:alice",
    )
    document = _line(record)
    assert document == {
        "time": document["time"],
        "level": "WARNING",
        "logger": "kafkaguard.proxy",
        "message": "closed",
        "pid": os.getpid(),
        "worker": 0,
        "listener": "SASL_SSL",
        "connection_id": "17",
        "client_address": "10.0.0.1:51234",
        "principal": "User:alice",
    }
    # Absent or None: the key is left out, not written as null.
    partial = _line(_record("closed", listener="PLAINTEXT", principal=None))
    assert set(partial) == BASE_KEYS | {"listener"}


def test_worker_index_tells_the_processes_of_workers_apart() -> None:
    try:
        set_worker(3)
        assert _line(_record("serving"))["worker"] == 3
        set_worker(SUPERVISOR)
        assert _line(_record("starting 4 workers"))["worker"] is None
    finally:
        set_worker(0)


def test_newlines_and_tracebacks_stay_on_one_line() -> None:
    # A client-supplied name with a newline cannot forge a second record.
    record = _record(
        'bad name %s\n{"level": "INFO"}', "a\nb\u2028c", exc=True, client_address="::1"
    )
    document = _line(record)
    assert document["message"] == 'bad name a\nb\u2028c\n{"level": "INFO"}'
    assert document["exc_info"].startswith("Traceback (most recent call last):\n")
    assert document["exc_info"].endswith("ZeroDivisionError: boom\nsecond line")
    assert set(document) == BASE_KEYS | {"client_address", "exc_info"}
    # The traceback text is cached on the record, as logging.Formatter does.
    assert record.exc_text == document["exc_info"]


def test_stack_info_is_one_string() -> None:
    record = _record("where")
    record.stack_info = 'Stack (most recent call last):\n  File "x.py", line 1'
    assert _line(record)["stack_info"] == record.stack_info


def test_text_format_is_the_former_basic_config_line() -> None:
    line = logging.Formatter(TEXT_FORMAT).format(_record("hello %s", "world"))
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING kafkaguard\.proxy hello world", line
    )


# -- configure_logging -----------------------------------------------------------------------


@contextlib.contextmanager
def bare_root() -> Iterator[logging.Logger]:
    """The root logger as a fresh ``kafkaguard run`` process has it (no handlers, WARNING),
    restored afterwards. A context manager, not a fixture: pytest adds its capture handlers
    to the root logger after fixtures are set up, and removes them before they are torn down."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    root.setLevel(logging.WARNING)
    try:
        yield root
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)


def _emit(message: str) -> None:
    logging.getLogger("kafkaguard.test").info(message)


def test_configure_logging_again_switches_format_and_level_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)

    def last_line() -> Any:
        return json.loads(err.getvalue().splitlines()[-1])

    with bare_root() as root:
        configure_logging("INFO", "text")
        assert len(root.handlers) == 1
        handler = root.handlers[0]
        _emit("as text")
        assert err.getvalue().endswith(" INFO kafkaguard.test as text\n")

        configure_logging("DEBUG", "json")  # a reload
        assert root.handlers == [handler] and root.level == logging.DEBUG
        _emit("as json")
        assert {k: last_line()[k] for k in ("level", "logger", "message")} == {
            "level": "INFO",
            "logger": "kafkaguard.test",
            "message": "as json",
        }
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("deprecated\nthing", DeprecationWarning, stacklevel=1)
        assert last_line()["logger"] == "py.warnings"
        assert "deprecated\nthing" in last_line()["message"]

        configure_logging("WARNING", "text")
        configure_logging("WARNING", "text")
        assert root.handlers == [handler]
        before = err.getvalue()
        _emit("filtered out")
        assert err.getvalue() == before


def test_configure_logging_leaves_a_host_programs_handlers_alone() -> None:
    theirs = logging.NullHandler()
    with bare_root() as root:
        root.addHandler(theirs)
        configure_logging("DEBUG", "json")
        assert root.handlers == [theirs]
        assert theirs.formatter is None and root.level == logging.WARNING


def test_configure_logging_rejects_an_unknown_format() -> None:
    with bare_root() as root:
        with pytest.raises(ValueError, match="'xml'"):
            configure_logging("INFO", "xml")
        assert root.handlers == []


# -- kafkaguard run --------------------------------------------------------------------------


def _wait_for(path: Path, text: str, process: subprocess.Popen[bytes], errors: Path) -> None:
    deadline = time.monotonic() + 30
    while text not in path.read_text(encoding="utf-8"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"kafkaguard run did not start:\n{errors.read_text()}")
        time.sleep(0.05)


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_run_with_json_logging_writes_only_json_lines_to_stderr(
    tansu: TansuBroker, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        f"upstream:\n  bootstrap_servers: ['{tansu.address}']\n"
        "listeners:\n"
        f"  - name: PLAINTEXT\n    port: {port}\n"
        f"    broker_ports: {{base: {free_base([TANSU_NODE_ID])}}}\n"
        "authorizer:\n  super_users: 'User:ANONYMOUS'\n"
        "logging:\n  format: json\n",
        encoding="utf-8",
    )
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)],
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        _wait_for(out, "kafkaguard listener PLAINTEXT: bootstrap", process, err)
        with RawKafkaClient("127.0.0.1", port) as client:
            assert client.api_versions()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.sendall(b"\x7f\xff\xff\xff")  # a frame size no broker accepts: a close line
            with contextlib.suppress(ConnectionResetError):
                raw.recv(1)  # the proxy closes the connection
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    lines = err.read_text(encoding="utf-8").splitlines()
    documents = [json.loads(line) for line in lines]
    assert len(documents) >= 3, lines
    # stdout too: the bootstrap line is a JSON line (a log pipeline reads both streams).
    (bootstrap,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert bootstrap["message"] == f"kafkaguard listener PLAINTEXT: bootstrap 127.0.0.1:{port}"
    for document in [*documents, bootstrap]:
        assert set(document) >= BASE_KEYS, document
        assert ISO_UTC_MS.fullmatch(document["time"]), document
        assert (document["pid"], document["worker"]) == (process.pid, 0), document
    messages = [(d["level"], d["logger"], d["message"]) for d in documents]
    assert ("INFO", "kafkaguard") in {(level, logger) for level, logger, _ in messages}
    assert any(m.startswith("event loop: ") for _, _, m in messages), messages
    assert any(level == "WARNING" and "exceeds the limit" in m for level, _, m in messages), (
        messages
    )
    (closing,) = [d for d in documents if d["message"].startswith("closing connection from")]
    assert closing["listener"] == "PLAINTEXT" and closing["principal"] == "User:ANONYMOUS"
    assert closing["client_address"].startswith("127.0.0.1:")
    # Kafka's Selector connection id: local address - peer address - index
    assert closing["connection_id"].startswith(f"127.0.0.1:{port}-127.0.0.1:")


def test_a_configuration_that_does_not_load_is_reported_as_json_when_it_asks_for_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The one line ``run`` writes for a file it refuses follows the file's own
    ``logging.format``: a pipeline reading the container's JSON lines can parse it."""
    from kafkaguard.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream:\n  bootstrap_servers: ['127.0.0.1:9092']\n"
        "listeners:\n  - name: P\n    port: 70000\nlogging:\n  format: json\n",
        encoding="utf-8",
    )
    assert main(["run", "--config", str(config)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    document = json.loads(line)
    assert document["level"] == "ERROR" and document["logger"] == "kafkaguard"
    assert document["message"] == (
        f"kafkaguard: configuration error: {config}:5 listeners[0].port: must be a TCP port "
        "from 1 to 65535, got 70000"
    )
    assert captured.out == ""


@pytest.mark.timeout(60)
def test_the_supervisors_lines_have_no_worker_index(tmp_path: Path) -> None:
    """With ``workers: 2`` every supervisor line, its first included, says ``worker: null``;
    the workers' say 0 and 1."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream:\n  bootstrap_servers: ['127.0.0.1:1']\nworkers: 2\n"
        f"listeners:\n  - name: P\n    port: {free_port()}\nlogging:\n  format: json\n",
        encoding="utf-8",
    )
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kafkaguard", "run", "--config", str(config)],
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        # both workers retry the unreachable upstream: each has logged by then
        _wait_for(err, '"worker":1', process, err)
        _wait_for(err, '"worker":0', process, err)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    documents = [json.loads(line) for line in err.read_text(encoding="utf-8").splitlines()]
    by_worker: dict[Any, list[str]] = {}
    for document in documents:
        by_worker.setdefault(document["worker"], []).append(document["message"])
    assert set(by_worker) == {None, 0, 1}, by_worker
    assert by_worker[None][0].startswith("event loop: ")
    assert all(m.startswith("upstream not reachable yet") for m in by_worker[0] + by_worker[1])
