"""Group principals end to end (issue 37): real clients through a SASL_PLAINTEXT kafkaguard to
Tansu, authorized over the whole identity. A user in ``eng`` produces to a topic whose only
ALLOW is ``Group:eng``'s; a user in ``contractors`` is refused by ``Group:contractors``' DENY
although his own ALLOW exists; an OAUTHBEARER token's ``groups`` claim is a group too; the
authorizer's audit line names the groups and the deciding ACL's principal."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
from kafkaguard.proxy.app import server as server_module
from kafkaguard.tansu import TansuBroker
from tests.support.jose_tokens import AUDIENCE, ISSUER
from tests.support.proxy_fixture import RunningProxy, created_topic, stop_proxy_thread
from tests.support.sasl_proxy import PASSWORDS, PROVIDER, start_sasl_proxy

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402

pytestmark = pytest.mark.integration

GROUPS = 'version: 1\ngroups:\n  "User:alice": [eng]\n  "User:bob": [contractors]\n'
WRITE = AclOperation.WRITE


def _acl(principal: str, permission: AclPermissionType, topic: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
        AccessControlEntry(principal, "*", WRITE, permission),
    )


@pytest.fixture
def topic(proxy: RunningProxy) -> Iterator[str]:
    """A topic created through the allow-all PLAINTEXT proxy (deleted afterwards)."""
    with created_topic(proxy, "groups") as name:
        yield name


def _start(
    tansu: TansuBroker, tmp_path: Path, acls: list[AclBinding], groups: GroupsConfig
) -> RunningProxy:
    policy = PolicyConfig(
        authorizer=AuthorizerConfig(groups=groups),
        acl_store=AclStoreConfig(type="file", path=tmp_path / "acls.yaml"),
    )
    return start_sasl_proxy(tansu, tmp_path, acls, policy=policy)


def _produce(running: RunningProxy, topic: str, **auth: Any) -> KafkaError | None:
    """Produce one record as ``auth`` (sasl.* settings or an oauth_cb); its delivery error."""
    delivered: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": running.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "message.timeout.ms": 10000,
            "enable.idempotence": False,
            **auth,
        }
    )
    producer.produce(topic, b"as a group", on_delivery=lambda err, _msg: delivered.append(err))
    producer.flush(12)
    assert len(delivered) == 1
    error: KafkaError | None = delivered[0]
    return error


def _plain(user: str) -> dict[str, str]:
    return {"sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _code(error: KafkaError | None) -> int | None:
    return None if error is None else error.code()


def test_a_group_allow_admits_its_member_and_a_group_deny_refuses_despite_a_user_allow(
    tansu: TansuBroker, tmp_path: Path, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kafka.authorizer.logger")
    groups_file = tmp_path / "groups.yaml"
    groups_file.write_text(GROUPS)
    acls = [
        _acl("Group:eng", AclPermissionType.ALLOW, topic),
        _acl("User:bob", AclPermissionType.ALLOW, topic),
        _acl("Group:contractors", AclPermissionType.DENY, topic),
    ]
    running = _start(tansu, tmp_path, acls, GroupsConfig(file=groups_file))
    try:
        assert _produce(running, topic, **_plain("alice")) is None
        denied = _code(_produce(running, topic, **_plain("bob")))
        assert denied == KafkaError.TOPIC_AUTHORIZATION_FAILED
        lines = [
            r.getMessage()
            for r in caplog.records
            if "is Denied operation = WRITE" in r.getMessage()
        ]
        assert lines and all(
            line.startswith("Principal = User:bob (groups = Group:contractors) is Denied")
            and "principal=Group:contractors, host=*, operation=WRITE, permissionType=DENY" in line
            for line in lines
        ), lines
        # alice joins the contractors: the file is reloaded within a second, her next
        # connection is refused as one of them
        groups_file.write_text(GROUPS.replace("[eng]", "[eng, contractors]"))
        deadline = time.monotonic() + 10
        while _code(_produce(running, topic, **_plain("alice"))) is None:
            assert time.monotonic() < deadline, "the new groups file was not applied"
            time.sleep(0.5)
    finally:
        stop_proxy_thread(running)


def _token(sub: str, **claims: object) -> dict[str, Any]:
    def oauth_cb(_config: object) -> tuple[str, float]:
        exp = int(time.time()) + 600
        return PROVIDER.token(sub=sub, iss=ISSUER, aud=AUDIENCE, exp=exp, **claims), float(exp)

    return {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}


def test_an_oauthbearer_tokens_groups_claim_gives_its_groups(
    tansu: TansuBroker, tmp_path: Path, topic: str
) -> None:
    acls = [_acl("Group:eng", AclPermissionType.ALLOW, topic)]
    running = _start(tansu, tmp_path, acls, GroupsConfig(oauthbearer_claim="groups"))
    try:
        assert _produce(running, topic, **_token("carol", groups=["staff", "eng"])) is None
        denied = _produce(running, topic, **_token("dave", groups="staff"))
        assert _code(denied) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # a claim that names no group usably fails the authentication (fail closed)
        refused = _produce(running, topic, **_token("erin", groups={"eng": True}))
        assert refused is not None and refused.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        stop_proxy_thread(running)


def test_sighup_rereads_the_groups_file_and_an_open_connection_takes_it_at_its_next_request(
    tansu: TansuBroker, tmp_path: Path, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No poll in this test (an hour apart): only SIGHUP's handler (``ProxyServer.reload``)
    reads the new file, and the producer's open connection is refused from then on."""
    monkeypatch.setattr(server_module, "GROUPS_POLL_INTERVAL_S", 3600.0)
    groups_file = tmp_path / "groups.yaml"
    groups_file.write_text(GROUPS)
    acls = [_acl("Group:eng", AclPermissionType.ALLOW, topic)]
    running = _start(tansu, tmp_path, acls, GroupsConfig(file=groups_file))
    delivered: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": running.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "message.timeout.ms": 10000,
            "enable.idempotence": False,
            "retries": 0,
            **_plain("alice"),
        }
    )
    try:
        producer.produce(topic, b"in eng", on_delivery=lambda err, _msg: delivered.append(err))
        producer.flush(12)
        assert delivered == [None]
        groups_file.write_text(GROUPS.replace("[eng]", "[ops]"))
        time.sleep(1.5)  # not polled: still in eng
        producer.produce(topic, b"still", on_delivery=lambda err, _msg: delivered.append(err))
        producer.flush(12)
        assert delivered[1] is None
        running.loop.call_soon_threadsafe(running.server.reload)
        time.sleep(0.5)
        producer.produce(topic, b"no more", on_delivery=lambda err, _msg: delivered.append(err))
        producer.flush(12)
        assert _code(delivered[2]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        stop_proxy_thread(running)
