"""Apache Kafka's own readers in one long-lived JVM: the referee of the parser differential.

``KafkaReferee`` compiles ``Referee.java`` (next to this module) against Kafka 4.3.1's
classpath once into the cache directory, starts it, and asks it to read frames exactly as a
broker does (``RequestHeader.parse`` then ``AbstractRequest.parseRequest``, as
``RequestContext.parseRequest``), responses as a client does (``ResponseHeader.parse`` then the
generated ``*ResponseData`` reader), and regular expressions as ``SslPrincipalMapper`` and
``KerberosRule`` evaluate them (``java.util.regex``). Decoded messages come back in the form of
Kafka's generated ``*JsonConverter`` classes (camelCase field names, UUIDs base64, bytes
base64).

Throughput: calls are batched, one JSON line per batch each way; :meth:`submit` sends a batch
and returns at once, so the caller works while the JVM reads (the differential's Python side
overlaps the JVM's).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.support.kafka_broker import KAFKA_VERSION, KafkaUnavailable, cache_dir, check_runtime

SOURCE = Path(__file__).with_name("Referee.java")


def compiled_classes(classpath: str, source: Path = SOURCE) -> Path:
    """The directory of the class compiled from ``source`` (``Referee.java`` by default), once
    per source and classpath."""
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:16]
    prefix = "referee" if source == SOURCE else source.stem
    target = cache_dir() / f"{prefix}-{KAFKA_VERSION}-{digest}"
    if (target / f"{source.stem}.class").exists():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.mkdir(parents=True, exist_ok=True)
    try:
        javac = subprocess.run(
            ["javac", "-nowarn", "-cp", classpath, "-d", str(partial), str(source)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except FileNotFoundError as exc:
        raise KafkaUnavailable("no `javac` on PATH (`./dev test` installs a JDK)") from exc
    if javac.returncode != 0:
        raise RuntimeError(f"javac {source.name} failed:\n{javac.stdout}{javac.stderr}")
    try:
        partial.rename(target)  # atomic: a concurrent compile's result is as good
    except OSError:
        if not (target / f"{source.stem}.class").exists():
            raise
    return target


class Pending:
    """A batch sent to the referee; :meth:`answers` waits for its answers (in order)."""

    def __init__(self, referee: KafkaReferee, count: int) -> None:
        self._referee = referee
        self._count = count

    def answers(self) -> list[dict[str, Any]]:
        answers = self._referee._receive()
        assert len(answers) == self._count, (len(answers), self._count)
        return answers


class JvmProgram:
    """A Java program answering on its stdout what it reads on its stdin; use as a context
    manager or call :meth:`close`, which ends its input and waits for it (10 s, then kills)."""

    _proc: subprocess.Popen[Any]

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


class KafkaReferee(JvmProgram):
    """One JVM running ``Referee``; use as a context manager or call :meth:`close`."""

    def __init__(self, classpath: str | None = None) -> None:
        classpath = classpath or check_runtime()
        classes = compiled_classes(classpath)
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            ["java", "-Xss8m", "-XX:+UseSerialGC", "-cp", f"{classes}{os.pathsep}{classpath}"]
            + ["Referee"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    # -- batches -------------------------------------------------------------------------------
    def submit(self, ops: Sequence[dict[str, Any]]) -> Pending:
        """Send a batch of ops (see ``Referee.java``); one batch in flight at a time."""
        assert self._proc.stdin is not None
        self._lock.acquire()
        self._proc.stdin.write(json.dumps(ops, separators=(",", ":")).encode() + b"\n")
        self._proc.stdin.flush()
        return Pending(self, len(ops))

    def _receive(self) -> list[dict[str, Any]]:
        assert self._proc.stdout is not None
        try:
            line = self._proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the referee JVM exited ({self._proc.poll()})")
            answers: list[dict[str, Any]] = json.loads(line)
            return answers
        finally:
            self._lock.release()

    def batch(self, ops: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.submit(ops).answers()

    # -- ops -----------------------------------------------------------------------------------
    @staticmethod
    def request_op(frame: bytes) -> dict[str, Any]:
        """The op reading a whole request frame (size prefix included, as on the wire)."""
        return {"op": "request", "frame": base64.b64encode(frame[4:]).decode()}

    @staticmethod
    def request_body_op(api_key: int, version: int, body: bytes) -> dict[str, Any]:
        """The op reading a request body alone (no size prefix, no header)."""
        return {
            "op": "request",
            "api_key": api_key,
            "version": version,
            "body": base64.b64encode(body).decode(),
        }

    @staticmethod
    def response_op(api_key: int, version: int, frame: bytes) -> dict[str, Any]:
        """The op reading a whole response frame (size prefix included) to (api_key, version)."""
        return {
            "op": "response",
            "api_key": api_key,
            "version": version,
            "frame": base64.b64encode(frame[4:]).decode(),
        }

    def requests(self, frames: Iterable[bytes]) -> list[dict[str, Any]]:
        return self.batch([self.request_op(f) for f in frames])

    def request(self, frame: bytes) -> dict[str, Any]:
        return self.requests([frame])[0]

    def request_body(self, api_key: int, version: int, body: bytes) -> dict[str, Any]:
        return self.batch([self.request_body_op(api_key, version, body)])[0]

    def response(self, api_key: int, version: int, frame: bytes) -> dict[str, Any]:
        return self.batch([self.response_op(api_key, version, frame)])[0]

    def regex(self, pattern: str, subject: str, replacement: str | None) -> dict[str, Any]:
        """``java.util.regex``: {"compiles", "error", "matches", "result"} — ``result`` is
        ``matcher.replaceAll(replacement)`` when the whole subject matches (``SslPrincipalMapper``,
        ``KerberosRule``), else None; ``error`` says why the pattern or replacement failed."""
        op = {"op": "regex", "pattern": pattern, "subject": subject, "replacement": replacement}
        return self.batch([op])[0]
