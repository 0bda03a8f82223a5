"""A real KIP-932 client through kafkaguard: Kafka 4.3.1's console share consumer
(``kafka-console-share-consumer.sh``, ``org.apache.kafka.tools.consumer.ConsoleShareConsumer``,
a ``KafkaShareConsumer`` in explicit acknowledgement mode).

The same runs go to Kafka with its own StandardAuthorizer (``kafka_referee``) and to kafkaguard
in front of the unsecured ``kafka_upstream``, as ``User:alice`` of one share group: she may
READ one topic and only DESCRIBE another. Both sides must print the same records, the same
authorization error for the second topic only, and the same record counts; the upstream's
address never shows.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conformance.datapath import acl, create_topics, record_batch, seed
from tests.support.conformance.harness import Side, guard_config, scenario_name
from tests.support.conformance.share import read_from_earliest
from tests.support.kafka_broker import KafkaBroker, referee_command_config, run_kafka_tool
from tests.support.proxy_fixture import start_proxy_thread, stop_proxy_thread

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
TOOL_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def sides(
    kafka_upstream: KafkaBroker,
    kafka_referee: KafkaBroker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[Side]]:
    """The referee and kafkaguard (the referee's users and super user) in front of the
    upstream, as in the differential suite (tests/conformance/conftest.py)."""
    running = start_proxy_thread(guard_config(kafka_upstream, tmp_path_factory.mktemp("share")))
    try:
        yield [Side("referee", kafka_referee.bootstrap), Side("kafkaguard", running.bootstrap)]
    finally:
        stop_proxy_thread(running)


def consume(side: Side, config: Path, topic: str, group: str, count: int) -> dict[str, object]:
    """Run the console share consumer until ``count`` records (or 20 s without one); what it
    printed, the errors it logged (class and message, names of this run's topics kept), and
    its record count."""
    result: subprocess.CompletedProcess[str] = run_kafka_tool(
        CONSOLE_SHARE_CONSUMER,
        "--bootstrap-server",
        side.bootstrap,
        "--command-config",
        str(config),
        "--topic",
        topic,
        "--group",
        group,
        "--max-messages",
        str(count),
        "--timeout-ms",
        "20000",
        timeout=TOOL_TIMEOUT_S,
    )
    errors = re.findall(r"(org\.apache\.kafka\.common\.errors\.\w+): ([^\n]*)", result.stderr)
    processed = re.findall(r"Processed a total of (\d+) messages", result.stdout + result.stderr)
    return {
        "exit": result.returncode,
        "records": result.stdout.splitlines(),
        "errors": sorted(set(errors)),
        "processed": processed,
        "stderr": result.stderr,
    }


def test_console_share_consumer(
    sides: list[Side], kafka_upstream: KafkaBroker, tmp_path: Path
) -> None:
    """alice consumes the topic she may READ; on the one she may only DESCRIBE the consumer
    stops with TopicAuthorizationException naming that topic alone, as with Kafka."""
    ok, no, group = scenario_name("scc-ok"), scenario_name("scc-no"), scenario_name("scc-g")
    acls = [
        acl("User:alice", "READ", "GROUP", group),
        acl("User:alice", "READ", "TOPIC", ok),
        acl("User:alice", "DESCRIBE", "TOPIC", no),  # joins, may not read
    ]
    for side in sides:
        side.set_acls(acls)
        create_topics(side, ok, no)
        seed(side, {ok: record_batch(b"one", b"two", b"three"), no: record_batch(b"secret")})
        read_from_earliest(side, group)
    config = referee_command_config(tmp_path, "alice")
    runs = {side.name: {t: consume(side, config, t, group, 3) for t in (ok, no)} for side in sides}
    referee, guard = runs["referee"], runs["kafkaguard"]
    for run in guard.values():  # clients never learn where the brokers are
        assert kafka_upstream.bootstrap not in str(run["stderr"])
    for topic in (ok, no):
        compared = {k: v for k, v in guard[topic].items() if k != "stderr"}
        expected = {k: v for k, v in referee[topic].items() if k != "stderr"}
        assert compared == expected, f"{topic}:\n  kafka: {expected}\n  kafkaguard: {compared}"
    assert guard[ok]["records"] == ["one", "two", "three"] and guard[ok]["errors"] == []
    assert guard[no]["records"] == []
    assert guard[no]["errors"] == [
        (
            "org.apache.kafka.common.errors.TopicAuthorizationException",
            f"Not authorized to access topics: [{no}]",
        )
    ]
