"""Apache Kafka itself for tests: an unsecured *upstream* behind kafkaguard and a *referee*
(Kafka with its own StandardAuthorizer) whose answers kafkaguard must reproduce.

The jars come from Maven Central via ``tests/kafka/pom.xml``; Maven is asked once for the
classpath, which is cached under ``~/.cache/kafkaguard/`` keyed by version and a hash of the pom
(the jars stay in ``~/.m2``), so later runs start no Maven. Each broker is a single-node KRaft
process (combined broker + controller, static voter) started with ``java -cp ... kafka.Kafka``
after ``kafka.tools.StorageTool format``, on loopback ports below the ephemeral range, with its
output in ``<log_dir>/server.log``. It is stopped by PID (SIGTERM, then SIGKILL after a bound);
on Linux it also gets PDEATHSIG (tied to one launcher thread that lives as long as the test
process) so a killed test run cannot leave a JVM behind.

Referee security: every listener, the controller one included, is SASL_PLAINTEXT/PLAIN and the
broker authenticates to itself as ``User:admin``, the only super user. That keeps
``User:ANONYMOUS`` out of ``super.users`` entirely (a PLAINTEXT controller listener would have
needed it), so every principal the authorizer sees is a real REFEREE_USERS user.

When Java >= 17 or the jars are unavailable, the fixtures skip with the reason -- except in CI
(``CI`` set), where they fail: a CI run that silently skips the referee proves nothing.
The ``kafka_upstream`` and ``kafka_referee`` session fixtures (``tests/conftest.py``) are
built from :func:`session_broker`. Run as a module (``python -m tests.support.kafka_broker
[version]``, from the repository root) it only resolves and caches the classpath; ``./dev test``
does that before pytest.
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import hashlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafkaguard.tansu import free_port

KAFKA_VERSION = "4.3.1"
"""The newest 4.x whose every artifact is on Maven Central. 4.4.0 is listed there, but its
``kafka-tools`` and ``kafka-tools-api`` jars (a runtime dependency of ``kafka_2.13``) are not."""

REFEREE_USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
}
"""SASL/PLAIN users of the referee; ``User:admin`` is its super user."""

POM = Path(__file__).resolve().parents[1] / "kafka" / "pom.xml"
"""Kept in tests/kafka beside the Kafka-backed tests; its hash keys the cached classpath."""
NODE_ID = 1
JVM_OPTS = ["-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
"""CLI tools live for seconds: C1 only starts them noticeably faster."""

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


class KafkaUnavailable(RuntimeError):
    """Java or the Kafka jars are missing; the message says what to install."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkaguard"


def java_major() -> int | None:
    try:
        out = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_..."
    return int(match.group(2) or 0) if major == 1 else major


def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    """The broker + tools classpath for ``version``, resolved by Maven once and cached."""
    pom_hash = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    cached = cache_dir() / f"kafka-{version}-{pom_hash}.classpath"
    if cached.exists():
        classpath = cached.read_text(encoding="utf-8").strip()
        if classpath and all(Path(jar).exists() for jar in classpath.split(os.pathsep)):
            return classpath
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    command = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(POM),
        "dependency:build-classpath",
        f"-Dkafka.version={version}",
        f"-Dmdep.outputFile={partial}",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except FileNotFoundError as exc:
        raise KafkaUnavailable("no `mvn` on PATH (`./dev test` installs Debian's maven)") from exc
    except subprocess.TimeoutExpired as exc:
        raise KafkaUnavailable(f"Maven did not resolve Kafka {version} within 900 s") from exc
    if result.returncode != 0 or not partial.exists():
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise KafkaUnavailable(f"Maven could not resolve Kafka {version}:\n" + "\n".join(tail))
    partial.replace(cached)  # atomic: concurrent runs never read half a file
    return cached.read_text(encoding="utf-8").strip()


def check_runtime(version: str = KAFKA_VERSION) -> str:
    """The classpath, after checking Java >= 17 (Kafka 4 brokers and tools need it)."""
    major = java_major()
    if major is None or major < 17:
        found = "no `java` on PATH" if major is None else f"Java {major}"
        raise KafkaUnavailable(f"Kafka needs Java >= 17, found {found} (`./dev test` installs it)")
    return kafka_classpath(version)


LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""
LOG4J1 = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={target}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def log_config_args(directory: Path, *, level: str, to_stderr: bool) -> list[str]:
    """System properties for both log4j2 (Kafka 4) and log4j 1/reload4j (Kafka 3.9)."""
    directory.mkdir(parents=True, exist_ok=True)
    v2, v1 = directory / f"log4j2-{level}.properties", directory / f"log4j-{level}.properties"
    v2_text = LOG4J2.format(level=level, target="SYSTEM_ERR" if to_stderr else "SYSTEM_OUT")
    v1_text = LOG4J1.format(level=level.upper(), target="System.err" if to_stderr else "System.out")
    for path, text in ((v2, v2_text), (v1, v1_text)):
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return [f"-Dlog4j2.configurationFile={v2}", f"-Dlog4j.configuration=file:{v1}"]


def run_kafka_tool(
    main_class: str,
    *args: str,
    version: str = KAFKA_VERSION,
    timeout: float = 60,
    input: str | None = None,  # noqa: A002 - subprocess.run's name
    jvm_args: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka CLI main class (e.g. ``org.apache.kafka.tools.TopicCommand``); the caller
    checks ``returncode``. Logging goes to stderr at WARN so stdout is the tool's output.
    ``jvm_args``: e.g. ``-Djdk.net.hosts.file=F``, so made-up host names resolve."""
    command = [
        "java",
        *TOOL_JVM_OPTS,
        *jvm_args,
        *log_config_args(cache_dir(), level="warn", to_stderr=True),
        "-cp",
        check_runtime(version),
        main_class,
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, input=input, check=False
    )


def _die_with_parent() -> None:
    """Runs in the child: the JVM gets SIGKILL when the thread that started it dies, so an
    interrupted or killed test run leaves no broker behind."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_Start = Callable[[], "subprocess.Popen[bytes]"]
_LAUNCHES: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], _Start]] = queue.SimpleQueue()
_LAUNCHER_LOCK = threading.Lock()
_launcher: threading.Thread | None = None


def _launch_loop() -> None:
    while True:
        future, start = _LAUNCHES.get()
        try:
            future.set_result(start())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            future.set_exception(exc)


def _popen_in_launcher(start: _Start) -> subprocess.Popen[bytes]:
    """``start()`` (a ``Popen`` with :func:`_die_with_parent`) run on one daemon thread that
    lives as long as the test process. PR_SET_PDEATHSIG fires when the *thread* that forked
    the child exits (prctl(2)): a broker restarted through ``asyncio.to_thread`` was killed
    as soon as ``asyncio.run`` shut its executor's threads down, at the end of the test that
    restarted it (issue 35's failover test left the module's cluster one broker short)."""
    global _launcher
    with _LAUNCHER_LOCK:
        if _launcher is None or not _launcher.is_alive():
            _launcher = threading.Thread(target=_launch_loop, name="kafka-launcher", daemon=True)
            _launcher.start()
    future: Future[subprocess.Popen[bytes]] = Future()
    _LAUNCHES.put((future, start))
    return future.result()


@dataclass
class KafkaBroker:
    """One running broker; ``bootstrap`` is its client listener (the only one clients use)."""

    bootstrap: str
    port: int
    node_id: int
    log_dir: Path
    flavour: str
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def stop(self) -> None:
        """SIGTERM (Kafka shuts down cleanly), SIGKILL after a bound; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def kill(self) -> None:
        """SIGKILL: the node dies without a controlled shutdown (a crash); idempotent. Fixture
        teardowns use it too: nothing reads the data after them, and a clean shutdown costs
        seconds (a broker stopping after its controller waits for it in vain until the
        bound)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def admin_config(self) -> dict[str, str]:
        """confluent-kafka config of a super-user client (the referee's ``User:admin``)."""
        return self.client_config("admin" if self.flavour == "referee" else None)

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """confluent-kafka config for ``user`` (referee; ``None`` = admin). The upstream has no
        users -- identities live in kafkaguard in front of it -- so ``user`` is ignored there."""
        config = {"bootstrap.servers": self.bootstrap}
        if self.flavour == "referee":
            name = user or "admin"
            if name not in REFEREE_USERS:
                raise ValueError(f"unknown referee user {name!r}; known: {sorted(REFEREE_USERS)}")
            config |= {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": name,
                "sasl.password": REFEREE_USERS[name],
            }
        return config

    def log_tail(self, lines: int = 60) -> str:
        path = self.log_dir / "server.log"
        if not path.exists():
            return "(no server.log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def referee_command_config(directory: Path, user: str) -> Path:
    """kafka-acls.sh's ``--command-config`` (client properties) for a referee user: SASL/PLAIN
    with a JAAS line, as Kafka's tools take it."""
    path = directory / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{REFEREE_USERS[user]}";\n',
        encoding="utf-8",
    )
    return path


def plain_jaas(user: str, password: str, *, accounts: dict[str, str] | None = None) -> str:
    entries = [f'username="{user}"', f'password="{password}"']
    entries += [f'user_{name}="{secret}"' for name, secret in (accounts or {}).items()]
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {' '.join(entries)};"


def server_properties(
    flavour: str,
    data_dir: Path,
    port: int,
    controller_port: int,
    *,
    node_id: int = NODE_ID,
    controller: bool = True,
) -> dict[str, str]:
    """One node's ``server.properties``; ``controller`` False: a broker-only node of a cluster
    whose controller (node :data:`NODE_ID`) listens on ``controller_port``."""
    listeners = f"CLIENT://127.0.0.1:{port}"
    if controller:
        listeners += f",CONTROLLER://127.0.0.1:{controller_port}"
    props = {
        "process.roles": "broker,controller" if controller else "broker",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": listeners,
        "advertised.listeners": f"CLIENT://127.0.0.1:{port}",
        "inter.broker.listener.name": "CLIENT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        # The conformance suite writes records with a fixed 2023 timestamp (deterministic
        # answers); with the default 7-day retention the broker's retention check deleted
        # them mid-test and a consumer at offset 0 got OFFSET_OUT_OF_RANGE, depending on when
        # the check ran. Keep records forever and check every second, so that a retention
        # mistake fails every run instead of some.
        "log.retention.ms": "-1",
        "log.retention.check.interval.ms": "1000",
    }
    if flavour == "upstream":
        props["listener.security.protocol.map"] = "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        return props
    admin = ("admin", REFEREE_USERS["admin"])
    props |= {
        "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": plain_jaas(*admin, accounts=REFEREE_USERS),
        "listener.name.controller.plain.sasl.jaas.config": plain_jaas(
            *admin, accounts={"admin": REFEREE_USERS["admin"]}
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }
    return props


def _cluster_id() -> str:
    """A Kafka ``Uuid`` string (base64url, no padding); Kafka rejects ids starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _wait_ready(broker: KafkaBroker, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Ready = the broker answers Metadata listing itself (on the client listener)."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Kafka exited with {proc.returncode}:\n{broker.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=1):
                pass
        except OSError:
            time.sleep(0.2)
            continue
        admin = AdminClient(broker.admin_config() | {"log_level": "0"})
        try:
            metadata = admin.list_topics(timeout=max(1.0, min(5.0, deadline - time.monotonic())))
            if broker.node_id in metadata.brokers:
                return
        except Exception:  # noqa: BLE001 - KafkaException until the broker is up
            time.sleep(0.2)
    raise RuntimeError(f"Kafka not ready within {timeout_s:.0f} s:\n{broker.log_tail()}")


def start_kafka(
    flavour: str,
    tmp_dir: Path,
    *,
    version: str = KAFKA_VERSION,
    extra_props: dict[str, str] | None = None,
) -> KafkaBroker:
    """Format storage and start one broker; raises :class:`KafkaUnavailable` without Java/jars
    and ``RuntimeError`` (with the log tail) when it does not come up. From any thread: the
    JVM is forked by one that lives as long as the process (:func:`_popen_in_launcher`)."""
    if flavour not in ("upstream", "referee"):
        raise ValueError(f"flavour must be 'upstream' or 'referee', not {flavour!r}")
    port, controller_port = free_port(), free_port()
    while controller_port == port:
        controller_port = free_port()
    props = server_properties(flavour, tmp_dir / "data", port, controller_port)
    return _launch(flavour, tmp_dir, props | (extra_props or {}), _cluster_id(), version)


def start_kafka_cluster(
    tmp_dir: Path,
    size: int = 3,
    *,
    version: str = KAFKA_VERSION,
    extra_props: dict[str, str] | None = None,
    node_props: Callable[[int, dict[str, str]], dict[str, str]] | None = None,
) -> list[KafkaBroker]:
    """An upstream cluster of ``size`` brokers: node 1 is also the (single) controller, nodes
    2.. are brokers only. ``node_props(node_id, props)`` may change one node's properties
    (a listener of its own). Same contract as :func:`start_kafka`; stop every broker returned
    (:func:`restart_broker` starts a stopped one again)."""
    ports = {free_port() for _ in range(size + 1)}
    while len(ports) < size + 1:
        ports.add(free_port())
    controller_port, *client_ports = sorted(ports)
    cluster_id = _cluster_id()
    brokers: list[KafkaBroker] = []
    try:
        for node_id, port in enumerate(client_ports, start=NODE_ID):
            directory = tmp_dir / f"node-{node_id}"
            props = server_properties(
                "upstream",
                directory / "data",
                port,
                controller_port,
                node_id=node_id,
                controller=node_id == NODE_ID,
            ) | (extra_props or {})
            if node_props is not None:
                props = node_props(node_id, props)
            brokers.append(_launch("upstream", directory, props, cluster_id, version))
    except BaseException:
        for broker in brokers:
            broker.stop()
        raise
    return brokers


def _launch(
    flavour: str, tmp_dir: Path, props: dict[str, str], cluster_id: str, version: str
) -> KafkaBroker:
    """Format ``log.dirs`` for ``cluster_id`` and start the node ``props`` describe; returns
    once it answers Metadata listing itself."""
    classpath = check_runtime(version)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    config = tmp_dir / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in props.items()), "utf-8")
    java = ["java", *JVM_OPTS, *log_config_args(tmp_dir, level="info", to_stderr=False)]
    java += ["-cp", classpath]
    fmt = subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if fmt.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
    port = int(props["listeners"].split(",")[0].rsplit(":", 1)[1])
    broker = KafkaBroker(f"127.0.0.1:{port}", port, int(props["node.id"]), tmp_dir, flavour)
    atexit.register(broker.stop)
    _run_node(broker, java)
    return broker


def _run_node(broker: KafkaBroker, java: list[str]) -> None:
    """Start the JVM of a formatted node; returns once it answers Metadata listing itself."""
    log = open(broker.log_dir / "server.log", "ab")  # noqa: SIM115 - the child owns it from here
    try:
        proc = _popen_in_launcher(
            lambda: subprocess.Popen(
                [
                    *java,
                    f"-Dkafka.logs.dir={broker.log_dir}",
                    "kafka.Kafka",
                    str(broker.log_dir / "server.properties"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        )
    finally:
        log.close()
    broker.proc = proc
    try:
        _wait_ready(broker, proc, READY_TIMEOUT_S)
    except BaseException:
        broker.stop()
        raise


def restart_broker(broker: KafkaBroker, version: str = KAFKA_VERSION) -> None:
    """Start a stopped node again on its data (a broker restart: nothing is reformatted)."""
    if broker.proc is not None and broker.proc.poll() is None:
        raise RuntimeError(f"node {broker.node_id} is still running")
    java = ["java", *JVM_OPTS, *log_config_args(broker.log_dir, level="info", to_stderr=False)]
    _run_node(broker, [*java, "-cp", check_runtime(version)])


def require_kafka(version: str = KAFKA_VERSION) -> str:
    """The classpath, or skip the calling test (fail it in CI) saying what is missing. For
    tests that run only tools (e.g. Kafka 3.9's ZooKeeper ``kafka.admin.AclCommand``)."""
    try:
        return check_runtime(version)
    except KafkaUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Apache Kafka {version} unavailable in CI: {exc}", pytrace=False)
        pytest.skip(f"Apache Kafka {version} unavailable: {exc}")


def session_broker(flavour: str, tmp_dir: Path) -> Iterator[KafkaBroker]:
    """The body of the ``kafka_upstream``/``kafka_referee`` session fixtures
    (``tests/conftest.py``): skip without Kafka (fail in CI), stop the broker at teardown."""
    require_kafka()
    broker = start_kafka(flavour, tmp_dir)
    try:
        yield broker
    finally:
        broker.kill()


def stop_cluster(brokers: Iterable[KafkaBroker]) -> None:
    """A cluster fixture's teardown: every node killed (:meth:`KafkaBroker.kill`)."""
    for broker in brokers:
        broker.kill()


if __name__ == "__main__":
    try:
        path = check_runtime(sys.argv[1] if len(sys.argv) > 1 else KAFKA_VERSION)
    except KafkaUnavailable as exc:
        print(f"kafka tests unavailable: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"Kafka classpath: {path.count(os.pathsep) + 1} jars")
