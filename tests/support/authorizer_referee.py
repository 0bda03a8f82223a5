"""Kafka 4.3.1's ``StandardAuthorizer`` in one long-lived JVM, given kafkaguard's ACLs and
queries: the referee of kafkaguard's decisions and the peer it is timed against.

``KafkaAuthorizer`` compiles ``AuthorizerReferee.java`` (next to this module) against the
classpath the tests resolve (:func:`tests.support.kafka_broker.check_runtime`), starts it and
talks to it one tab-separated line each way (the commands are described in the Java file).
ACLs and query lists go through files in a private temporary directory, so 2.4M ACLs cost no
pipe round trips. Used by ``tests/policy/test_standard_authorizer_kafka.py`` and
``bench/authorizer_jmh_bench.py``.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.model import (
    AclBinding,
    AclOperation,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.standard import StandardAuthorizer
from tests.support.kafka_broker import cache_dir, check_runtime, log_config_args
from tests.support.kafka_referee import JvmProgram, compiled_classes

SOURCE = Path(__file__).with_name("AuthorizerReferee.java")
JVM_OPTS = ["-Xss8m", "-Xmx3g", "-Djava.awt.headless=true"]
"""The JVM's default collector (G1 on a 2-core machine with this much memory), as a broker and
JMH run with; 3 GB holds 2.4M ACLs in ``StandardAuthorizer``'s persistent collections."""


@dataclass(frozen=True, slots=True)
class Query:
    """One question for both authorizers: ``authorize`` of one LITERAL resource, or
    ``by_type`` (``authorizeByResourceType``, ``name`` unused)."""

    kind: str
    principal: str
    host: str
    operation: AclOperation
    resource_type: ResourceType
    name: str = ""

    def fields(self) -> list[str]:
        """The query as ``AuthorizerReferee`` reads it (Java enum names)."""
        head = [self.kind, self.principal, self.host, self.operation.name, self.resource_type.name]
        return head if self.kind == "by_type" else [*head, self.name]

    def context(self) -> RequestContext:
        """``AuthorizerBenchmark``'s context for kafkaguard: a Produce v1 on ``listener``."""
        return RequestContext(
            listener_name="listener",
            security_protocol=SecurityProtocol.PLAINTEXT,
            principal=KafkaPrincipal.parse(self.principal),
            client_address=ipaddress.ip_address(self.host),
            api_key=0,
            api_version=1,
            client_id="someclient",
            correlation_id=1,
        )

    def actions(self) -> list[Action]:
        """The one LITERAL action of an ``authorize`` query, as the benchmark's."""
        pattern = ResourcePattern(self.resource_type, self.name, PatternType.LITERAL)
        return [Action(self.operation, pattern, 1, True, True)]

    def allowed_by(self, authorizer: StandardAuthorizer) -> bool:
        """kafkaguard's decision for the query."""
        if self.kind == "by_type":
            result = authorizer.authorize_by_resource_type(
                self.context(), self.operation, self.resource_type
            )
        else:
            result = authorizer.authorize(self.context(), self.actions())[0]
        return result is AuthorizationResult.ALLOWED


def _checked(text: str) -> str:
    if "\t" in text or "\n" in text or "\r" in text:
        raise ValueError(f"a tab or line break cannot cross to the referee: {text!r}")
    return text


def acl_line(binding: AclBinding) -> str:
    p, e = binding.pattern, binding.entry
    fields = (p.resource_type.name, p.name, p.pattern_type.name, e.principal, e.host)
    return "\t".join([*map(_checked, fields), e.operation.name, e.permission_type.name])


class KafkaAuthorizer(JvmProgram):
    """One JVM running ``AuthorizerReferee``; use as a context manager or call :meth:`close`."""

    def __init__(self, classpath: str | None = None) -> None:
        classpath = classpath or check_runtime()
        classes = compiled_classes(classpath, SOURCE)
        self._dir = tempfile.TemporaryDirectory(prefix="kafkaguard-authorizer-referee-")
        logging = log_config_args(cache_dir(), level="warn", to_stderr=True)
        self._proc = subprocess.Popen(
            ["java", *JVM_OPTS, *logging, "-cp", f"{classes}{os.pathsep}{classpath}"]
            + ["AuthorizerReferee"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def close(self) -> None:
        super().close()
        self._dir.cleanup()

    def _ask(self, *fields: str) -> list[str]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("\t".join(fields) + "\n")
        self._proc.stdin.flush()
        line: str = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the authorizer referee JVM exited ({self._proc.poll()})")
        status, *answer = line.rstrip("\n").split("\t")
        if status != "ok":
            raise RuntimeError(f"the authorizer referee refused {fields[0]}: {answer}")
        return answer

    def load(self, bindings: Iterable[AclBinding], allow_everyone: bool = False) -> float:
        """A fresh ``StandardAuthorizer`` holding exactly these ACLs; returns the seconds its
        ``configure`` + ``loadSnapshot`` + ``completeInitialLoad`` took (the file read and the
        ``Map<Uuid, StandardAcl>`` built before it are not timed)."""
        path = Path(self._dir.name) / "acls.tsv"
        count = 0
        with path.open("w", encoding="utf-8") as out:
            for binding in bindings:
                out.write(acl_line(binding) + "\n")
                count += 1
        nanos, loaded = self._ask("load", str(path), str(allow_everyone).lower())
        if int(loaded) != count:
            raise RuntimeError(f"the referee holds {loaded} ACLs, {count} were given")
        return int(nanos) / 1e9

    def decide(self, queries: Sequence[Query]) -> list[bool]:
        """Kafka's decision for each query (True: ALLOWED), in order."""
        path = Path(self._dir.name) / "queries.tsv"
        target = Path(self._dir.name) / "decisions.txt"
        path.write_text("".join("\t".join(map(_checked, q.fields())) + "\n" for q in queries))
        (count,) = self._ask("decide", str(path), str(target))
        decisions = target.read_text(encoding="utf-8").split()
        if int(count) != len(queries) or len(decisions) != len(queries):
            raise RuntimeError(f"{len(queries)} queries, {count} decisions")
        return [d == "ALLOWED" for d in decisions]

    def time(self, query: Query, calls: int) -> tuple[float, int]:
        """Seconds for ``calls`` calls of the query in one loop, and how many were allowed."""
        nanos, allowed = self._ask("time", str(calls), *map(_checked, query.fields()))
        return int(nanos) / 1e9, int(allowed)
