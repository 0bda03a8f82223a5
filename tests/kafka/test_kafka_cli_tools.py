"""Kafka's own command-line tools as clients of kafkaguard (issue 8).

kafkaguard runs a SASL_PLAINTEXT/PLAIN listener in front of the unsecured ``kafka_upstream``;
the tools (Kafka 4.3.1's main classes, the same code as ``kafka-topics.sh`` and friends) log in
with ``--command-config`` properties files as one of three users:

* ``User:admin`` — a super user (manages ACLs),
* ``User:alice`` — ALL on topics and groups with this module's prefix (PREFIXED ACLs),
* ``User:bob`` — authenticated, without any ACL; in group ``eng`` (a groups file, issue 37),
  which has no ACL either but the one a test adds.

The expected outputs and exit codes are Kafka's own: every scenario here was first run with
the same tools against ``kafka_referee`` (Kafka's StandardAuthorizer, same users and ACLs) and
the outputs compared line by line. The only difference found is the *message* of a
CLUSTER_AUTHORIZATION_FAILED DescribeAcls error: Kafka puts ``Request Request(processor=...,
connectionId=<broker address>...) needs DESCRIBE permission.`` there, kafkaguard sends no
message (the client prints its default, ``Cluster authorization failed.``), so the tests match
the exception class only. Every run also checks that the upstream's address appears nowhere in
the tool's output. JVM tool runs are slow (~2-4 s), so there are 21 of them in all.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, GroupsConfig, PolicyConfig
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.proxy.config import BrokerPorts, HostPort
from kafkaguard.proxy.sasl import plain
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import write_users_file
from kafkaguard.tansu import free_base
from tests.support.kafka_broker import KafkaBroker, run_kafka_tool
from tests.support.proxy_fixture import (
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOOL_TIMEOUT_S = 90.0
QUIET = {"log_level": "0"}


@dataclass
class Guard:
    """kafkaguard in front of the upstream, and what the tools need to reach it."""

    proxy: RunningProxy
    upstream: KafkaBroker
    prefix: str
    """alice's topics and groups start with it."""
    outside: str
    """A topic on the upstream outside alice's prefix (must stay invisible to her)."""
    tool_configs: dict[str, Path]

    def tool(
        self,
        main_class: str,
        user: str,
        *args: str,
        input: str | None = None,  # noqa: A002
    ) -> subprocess.CompletedProcess[str]:
        result = run_kafka_tool(
            main_class,
            "--bootstrap-server",
            self.proxy.bootstrap,
            "--command-config",
            str(self.tool_configs[user]),
            *args,
            timeout=TOOL_TIMEOUT_S,
            input=input,
        )
        # Clients never learn where the brokers are.
        assert f"127.0.0.1:{self.upstream.port}" not in result.stdout + result.stderr
        return result

    def client(self, user: str) -> dict[str, str]:
        """confluent-kafka config for ``user`` through kafkaguard."""
        return {
            "bootstrap.servers": self.proxy.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
        } | QUIET

    def direct(self) -> dict[str, str]:
        """confluent-kafka config straight to the upstream (what really happened there)."""
        return {"bootstrap.servers": self.upstream.bootstrap} | QUIET

    def create_topic(self, topic: str) -> None:
        admin = AdminClient(self.client("admin"))
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def upstream_topics(self) -> set[str]:
        return set(AdminClient(self.direct()).list_topics(timeout=15).topics)


def _allow_all(rtype: ResourceType, prefix: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, prefix, PatternType.PREFIXED),
        AccessControlEntry("User:alice", "*", AclOperation.ALL, AclPermissionType.ALLOW),
    )


@pytest.fixture(scope="module")
def guard(kafka_upstream: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guard]:
    tmp = tmp_path_factory.mktemp("kafka-cli")
    prefix = unique_name("cli") + "-"
    credentials = tmp / "users.yaml"
    write_users_file(
        credentials,
        {
            u: {"PLAIN": plain.make_credential(p, iterations=4096).to_string()}
            for u, p in USERS.items()
        },
    )
    acl_file = tmp / "acls.yaml"
    acl_file.write_text(
        format_acl_text(
            [_allow_all(ResourceType.TOPIC, prefix), _allow_all(ResourceType.GROUP, prefix)]
        ),
        encoding="utf-8",
    )
    groups = tmp / "groups.yaml"
    groups.write_text('version: 1\ngroups:\n  "User:bob": [eng]\n', encoding="utf-8")
    tool_configs = {}
    for user, password in USERS.items():
        path = tmp / f"{user}.properties"
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}";\n',
            encoding="utf-8",
        )
        tool_configs[user] = path
    config = proxy_config(
        HostPort("127.0.0.1", kafka_upstream.port),
        name="SASL_PLAINTEXT",
        security_protocol="SASL_PLAINTEXT",
        sasl=SaslListenerConfig(enabled_mechanisms=("PLAIN",), credentials_file=credentials),
        broker_ports=BrokerPorts(free_base([kafka_upstream.node_id]), {}),
        policy=PolicyConfig(
            authorizer=AuthorizerConfig(
                super_users=frozenset({"User:admin"}), groups=GroupsConfig(file=groups)
            ),
            acl_store=AclStoreConfig(type="file", path=acl_file),
        ),
    )
    outside = unique_name("cli-outside")
    admin = AdminClient({"bootstrap.servers": kafka_upstream.bootstrap})
    admin.create_topics([NewTopic(outside, 1, 1)])[outside].result(30)
    running = start_proxy_thread(config)
    try:
        yield Guard(running, kafka_upstream, prefix, outside, tool_configs)
    finally:
        stop_proxy_thread(running)


def produce_error(config: dict[str, str], topic: str, value: bytes = b"x") -> int | None:
    """Produce one record with a fresh producer: the delivery error code (None = acked)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(config | {"message.timeout.ms": "15000"})
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report within 20 s"
    return None if outcome[0] is None else int(outcome[0].code())


def table_rows(stdout: str, first: str) -> list[list[str]]:
    """The rows of a kafka-consumer-groups table whose first column is ``first``."""
    return [line.split() for line in stdout.splitlines() if line.split()[:1] == [first]]


def end_offset(guard: Guard, topic: str) -> int:
    consumer = Consumer(guard.direct() | {"group.id": unique_name("wm")})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1])
    finally:
        consumer.close()


# -- kafka-topics ---------------------------------------------------------------------------------


def test_kafka_topics_create_list_describe_delete(guard: Guard) -> None:
    topic = guard.prefix + "topics"
    create = ("--create", "--partitions", "1", "--replication-factor", "1", "--topic")

    denied = guard.tool(TOPIC_COMMAND, "bob", *create, guard.prefix + "bob")
    assert denied.returncode == 1
    assert denied.stdout == "Error while executing topic command : Authorization failed.\n"
    assert (
        "org.apache.kafka.common.errors.TopicAuthorizationException: Authorization failed."
        in denied.stderr
    )
    assert guard.prefix + "bob" not in guard.upstream_topics()

    created = guard.tool(TOPIC_COMMAND, "alice", *create, topic)
    assert created.returncode == 0, created.stdout + created.stderr
    assert created.stdout == f"Created topic {topic}.\n"
    assert topic in guard.upstream_topics()

    # Listing shows what alice may describe, nothing of the other topics upstream.
    listed = guard.tool(TOPIC_COMMAND, "alice", "--list")
    assert listed.returncode == 0, listed.stderr
    names = listed.stdout.split()
    assert topic in names
    assert all(name.startswith(guard.prefix) for name in names), names
    assert guard.outside in guard.upstream_topics()

    described = guard.tool(TOPIC_COMMAND, "alice", "--describe", "--topic", topic)
    assert described.returncode == 0, described.stderr
    header, partition = described.stdout.splitlines()[:2]
    assert header.startswith(f"Topic: {topic}\tTopicId: ")
    assert "\tPartitionCount: 1\tReplicationFactor: 1\t" in header
    assert partition.split("\t")[1:6] == [
        f"Topic: {topic}",
        "Partition: 0",
        "Leader: 1",
        "Replicas: 1",
        "Isr: 1",
    ]

    # Kafka hides topics a principal may not describe: to bob it does not exist.
    hidden = guard.tool(TOPIC_COMMAND, "bob", "--describe", "--topic", topic)
    assert hidden.returncode == 1
    assert hidden.stdout == (
        f"Error while executing topic command : Topic '{topic}' does not exist as expected\n"
    )

    deleted = guard.tool(TOPIC_COMMAND, "alice", "--delete", "--topic", topic)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    deadline = time.monotonic() + 15
    while topic in guard.upstream_topics():
        assert time.monotonic() < deadline, f"{topic} still exists upstream"
        time.sleep(0.2)


# -- kafka-acls --bootstrap-server ----------------------------------------------------------------


def test_kafka_acls_add_list_remove_governs_a_client(guard: Guard) -> None:
    topic = guard.prefix + "acls"
    guard.create_topic(topic)
    bob = guard.client("bob")
    assert produce_error(bob, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acl = ("--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    entry = "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)"

    # bob may not manage ACLs (no ALTER/DESCRIBE on the cluster).
    refused = guard.tool(ACL_COMMAND, "bob", "--add", *acl)
    assert refused.returncode == 1
    assert refused.stdout.startswith(
        "Error while executing ACL command: "
        "org.apache.kafka.common.errors.ClusterAuthorizationException"
    ), refused.stdout
    assert produce_error(bob, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    added = guard.tool(ACL_COMMAND, "admin", "--add", *acl)
    assert added.returncode == 0, added.stdout + added.stderr
    assert added.stdout == f"Adding ACLs for resource `{pattern}`: \n \t{entry}\n\n"
    assert produce_error(bob, topic, b"now allowed") is None  # the new ACL governs bob

    listed = guard.tool(ACL_COMMAND, "admin", "--list", "--topic", topic)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert listed.stdout == f"Current ACLs for resource `{pattern}`:\n\t{entry}\n\n"

    removed = guard.tool(ACL_COMMAND, "admin", "--remove", "--force", *acl)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert produce_error(bob, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(guard, topic) == 1  # only the record written while the ACL existed


def test_kafka_acls_add_allow_principal_group_governs_its_member(guard: Guard) -> None:
    """``--allow-principal Group:eng`` (Kafka's tools accept any principal type): stored,
    listed and enforced for bob, whom the groups file puts in ``eng``."""
    topic = guard.prefix + "group-acls"
    guard.create_topic(topic)
    bob = guard.client("bob")
    acl = ("--allow-principal", "Group:eng", "--operation", "Write", "--topic", topic)
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    entry = "(principal=Group:eng, host=*, operation=WRITE, permissionType=ALLOW)"
    assert produce_error(bob, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    added = guard.tool(ACL_COMMAND, "admin", "--add", *acl)
    assert added.returncode == 0, added.stdout + added.stderr
    assert added.stdout == f"Adding ACLs for resource `{pattern}`: \n \t{entry}\n\n"
    assert produce_error(bob, topic, b"as Group:eng") is None
    listed = guard.tool(ACL_COMMAND, "admin", "--list", "--principal", "Group:eng")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"Current ACLs for resource `{pattern}`:\n\t{entry}\n" in listed.stdout
    removed = guard.tool(ACL_COMMAND, "admin", "--remove", "--force", *acl)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert produce_error(bob, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


# -- kafka-consumer-groups ------------------------------------------------------------------------


def test_kafka_consumer_groups_list_describe_reset_delete(guard: Guard) -> None:
    topic, group = guard.prefix + "groups", guard.prefix + "group"
    hidden_group = unique_name("cli-hidden-group")
    guard.create_topic(topic)
    alice = guard.client("alice")
    for i in range(3):
        assert produce_error(alice, topic, f"m{i}".encode()) is None
    consumer = Consumer(alice | {"group.id": group, "enable.auto.commit": "false"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 3 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 3
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # A group outside alice's prefix, committed straight at the upstream.
    other = Consumer(guard.direct() | {"group.id": hidden_group})
    try:
        other.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        other.close()

    listed = guard.tool(GROUP_COMMAND, "alice", "--list")
    assert listed.returncode == 0, listed.stderr
    groups = listed.stdout.split()
    assert group in groups
    assert hidden_group not in groups
    assert all(g.startswith(guard.prefix) for g in groups), groups

    described = guard.tool(GROUP_COMMAND, "alice", "--describe", "--group", group)
    assert described.returncode == 0, described.stderr
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert table_rows(described.stdout, group) == [
        [group, topic, "0", "3", "3", "0", "-", "-", "-"]
    ]

    refused = guard.tool(GROUP_COMMAND, "bob", "--describe", "--group", group)
    assert refused.returncode == 0  # the tool reports the failure but exits 0, as with Kafka
    assert (
        "Error: Executing consumer group command failed due to "
        "org.apache.kafka.common.errors.GroupAuthorizationException: FindCoordinator request "
        f"for groupId `CoordinatorKey(idValue='{group}', type=GROUP)` failed due to "
        "authorization failure"
    ) in refused.stdout

    reset = guard.tool(
        GROUP_COMMAND, "alice", "--reset-offsets", "--group", group, "--topic", topic,
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    assert table_rows(reset.stdout, group) == [[group, topic, "0", "0"]]
    checker = Consumer(alice | {"group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, 0)], timeout=15)
    finally:
        checker.close()
    assert [tp.offset for tp in committed] == [0]

    deleted = guard.tool(GROUP_COMMAND, "alice", "--delete", "--group", group)
    assert deleted.returncode == 0, deleted.stderr
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted.stdout
    admin = AdminClient(guard.direct())
    admin.list_topics(timeout=15)  # ListGroups goes to the brokers the client knows of
    upstream = admin.list_consumer_groups().result(15)
    assert not upstream.errors, upstream.errors
    remaining = {g.group_id for g in upstream.valid}
    assert group not in remaining
    assert hidden_group in remaining


# -- kafka-console-producer / kafka-console-consumer ----------------------------------------------


def test_console_producer_consumer_round_trip_and_denied_producer(guard: Guard) -> None:
    topic = guard.prefix + "console"
    guard.create_topic(topic)

    produced = guard.tool(CONSOLE_PRODUCER, "alice", "--topic", topic, input="first\nsecond\n")
    assert produced.returncode == 0, produced.stderr
    assert "ERROR" not in produced.stderr, produced.stderr

    consumed = guard.tool(
        CONSOLE_CONSUMER, "alice", "--topic", topic, "--group", guard.prefix + "console",
        "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["first", "second"]
    assert "Processed a total of 2 messages" in consumed.stderr

    # Kafka's console producer logs the failed sends and still exits 0.
    intruder = guard.tool(CONSOLE_PRODUCER, "bob", "--topic", topic, input="intruder\n")
    assert intruder.returncode == 0
    assert (
        "org.apache.kafka.common.errors.TopicAuthorizationException: "
        f"Not authorized to access topics: [{topic}]"
    ) in intruder.stderr
    assert end_offset(guard, topic) == 2
