"""KIP-1071 streams groups: StreamsGroupDescribe (89).

StreamsGroupHeartbeat (88) has its own module, ``streams_heartbeat.py``: besides READ GROUP and
DESCRIBE TOPIC on the topology's topics, Kafka lets the coordinator create the topology's missing
internal topics only with CREATE, so the proxy asks the broker which are missing first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, Protocol

from kafkaguard.proxy.handlers.consumer_groups import DescribedGroup, DescribedGroupsHandler
from kafkaguard.proxy.handlers.support.base import ApiHandler
from kafkaguard.proxy.handlers.support.fields import Named


class _Subtopology(Protocol):
    """``StreamsGroupDescribeResponse.Subtopology``."""

    @property
    def source_topics(self) -> Sequence[str]: ...

    @property
    def repartition_sink_topics(self) -> Sequence[str]: ...

    @property
    def state_changelog_topics(self) -> Sequence[Named]: ...

    @property
    def repartition_source_topics(self) -> Sequence[Named]: ...


class _Topology(Protocol):
    @property
    def subtopologies(self) -> Sequence[_Subtopology] | None: ...


class _StreamsGroup(DescribedGroup, Protocol):
    """``StreamsGroupDescribeResponse.DescribedGroup``."""

    @property
    def topology(self) -> _Topology | None: ...


class StreamsGroupDescribeHandler(DescribedGroupsHandler):
    """``handleStreamsGroupDescribe``: DESCRIBE GROUP per id (30); every topology topic (source,
    repartition sink, state changelog, repartition source) needs DESCRIBE TOPIC, else the entry
    is replaced by a 29 entry without members and topology."""

    api_key = 89
    topic_denied_message = (
        "The described group uses topics that the client is not authorized to describe."
    )
    topic_denied_values: ClassVar[dict[str, object]] = {"members": (), "topology": None}

    def topics_of(self, described: _StreamsGroup) -> Iterable[str]:
        topology = described.topology
        if topology is None:
            return
        for sub in topology.subtopologies or ():
            yield from sub.source_topics
            yield from sub.repartition_sink_topics
            for internal in (*sub.state_changelog_topics, *sub.repartition_source_topics):
                yield internal.name


HANDLERS: list[ApiHandler] = [StreamsGroupDescribeHandler()]
