"""Metadata's answers rewritten on their bytes, with a real broker's answers (Tansu).

The broker's own frames go through both paths of the handler (the splice of
``protocol/skim/metadata.py`` and the decoded rewrite), which must send the client the same
bytes; and through a proxy in front of the broker, the spliced answer carries the proxy's
addresses only and teaches it the topic's id.
"""

from __future__ import annotations

from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.skim.metadata import walk_metadata_response
from kafkaguard.proxy.core.dispatch import response_transform
from kafkaguard.proxy.handlers.support.base import Forward
from kafkaguard.proxy.handlers.support.responses import entity
from kafkaguard.tansu import TansuBroker
from tests.support.data_path import nested
from tests.support.handler_harness import HandlerHarness, acl
from tests.support.proxy_fixture import RunningProxy, created_topic
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

VERSIONS = (1, 4, 9, 12)
EVERYTHING = [acl("User:alice", "ALL", "TOPIC", "*"), acl("User:alice", "ALL", "CLUSTER", "*")]


def by_name(version: int, *names: str) -> Any:
    schema = codec.request_schema(3, version)
    topics = tuple(entity(nested(schema, "topics"), name=n) for n in names)
    return entity(schema, topics=topics, allow_auto_topic_creation=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_brokers_answer_is_spliced_as_the_decoded_path_encodes_it(
    proxy: RunningProxy, tansu: TansuBroker, version: int
) -> None:
    with created_topic(proxy, "skim") as name:
        address = tansu.address
        with RawKafkaClient(address.host, address.port) as broker:
            frame, answer = broker.request(by_name(version, name))
        assert [t.name for t in answer.topics] == [name]
        assert walk_metadata_response(frame, version) is not None  # taken on: not decoded
        harness = HandlerHarness(EVERYTHING)
        verdict = harness.send(by_name(version, name), correlation_id=1)
        assert isinstance(verdict, Forward) and verdict.transform is not None
        assert verdict.rewrite is not None
        header = RequestHeaderInfo(3, version, 1, "", 0)
        spliced = bytes(verdict.transform(frame))
        assert spliced == bytes(response_transform(verdict.rewrite, header)(frame))
        sent = codec.decode_response(spliced, 3, version)
        assert {(b.host, b.port) for b in sent.brokers} == {
            ("proxy.test", 30000 + b.node_id) for b in answer.brokers
        }
        if version >= 10:
            assert harness.topic_names == {answer.topics[0].topic_id: name}


def test_through_the_proxy_the_answer_names_the_proxy_and_teaches_it_the_id(
    proxy: RunningProxy, tansu: TansuBroker
) -> None:
    """Metadata v12 for one topic (the spliced path): the proxy's addresses only, and the id
    learned from the splice (which Produce and Fetch v13+ name topics by)."""
    host, port = proxy.bootstrap.rsplit(":", 1)
    learned = proxy.server.cluster.topic_names
    with created_topic(proxy, "skim") as name, RawKafkaClient(host, int(port)) as client:
        for topic_id in [i for i, n in learned.items() if n == name]:  # the admin's lookups
            del learned[topic_id]
        _, answer = client.request(by_name(12, name))
        assert answer.brokers and all(b.port != tansu.address.port for b in answer.brokers)
        (topic,) = answer.topics
        assert topic.name == name and topic.topic_id is not None and topic.error_code == 0
        assert learned.get(topic.topic_id) == name
