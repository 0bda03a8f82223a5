"""One null-everything request per API key, through a real proxy in front of the fake broker:
each is answered (well-formed, its own correlation id) or its connection closed, nothing is
logged as an error or with a traceback, and a neighbour connection keeps working throughout.

"Null everything" is what the wire allows, not only what the schema allows: every array
(length −1) and every nullable field null (``harness.every_null``), at the highest version the
proxy serves.
"""

from __future__ import annotations

import logging

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.header import peek_correlation_id
from kafkaguard.proxy.handlers import REGISTRY
from tests.support.fake_broker import FakeBroker, RawClient, proxy_in_front, request
from tests.support.handler_harness import every_null

pytestmark = pytest.mark.timeout(60)

METADATA = request(3, 12, topics=None)


async def _outcome(client: RawClient, api_key: int, version: int) -> str:
    """Whether the proxy answered the request or closed the connection; raises when the
    answer is not the request's."""
    correlation_id = 1000 + api_key
    client.send(every_null(codec.request_schema(api_key, version)), correlation_id)
    try:
        data = await client.recv_frame(wait_s=5)
    except EOFError:
        return "closed"
    except TimeoutError:
        return "neither answered nor closed"
    assert peek_correlation_id(data) == correlation_id
    codec.decode_response(data, api_key, version)
    return "answered"


async def test_null_everything_request_per_api_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kafkaguard")
    versions = {k: codec.codec_versions(k) for k in codec.API_NAMES}
    outcomes: dict[str, str] = {}
    async with FakeBroker((1,), versions=versions) as fake, proxy_in_front(fake) as proxy:
        host, port = proxy.bootstrap().rsplit(":", 1)
        neighbour = await RawClient.connect(host, int(port))
        for api_key, handler in sorted(REGISTRY.items()):
            version = handler.versions[-1]
            client = await RawClient.connect(host, int(port))
            try:
                outcome = await _outcome(client, api_key, version)
            finally:
                await client.close()
            outcomes[f"{codec.API_NAMES[api_key]} v{version}"] = outcome
            assert (await neighbour.roundtrip(METADATA, correlation_id=api_key)).brokers
        await neighbour.close()
    assert not fake.errors
    hung = [name for name, outcome in outcomes.items() if outcome not in ("answered", "closed")]
    assert not hung
    bad = [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if (r.name.startswith("kafkaguard") or r.name == "asyncio")
        and (r.levelno >= logging.ERROR or r.exc_info)
    ]
    assert not bad, bad
    # The null arrays Kafka's parser refuses close the connection; the proxy does the same.
    assert outcomes["produce v13"] == "closed"
    assert outcomes["metadata v13"] == "answered"  # null topics: all topics
