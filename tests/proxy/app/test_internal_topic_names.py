"""The proxy's internal topics include the Kafka-topic stores' topics whatever they are named
(docs/acl-store.md), so a store topic outside ``_kafkaguard-*`` is still refused to clients."""

from __future__ import annotations

from pathlib import Path

from kafkaguard.proxy.app.server import internal_topics
from kafkaguard.proxy.config import load_config


def test_store_topics_named_outside_the_prefix_are_internal(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream:\n  bootstrap_servers: [127.0.0.1:9092]\n"
        "listeners:\n  - name: S\n    security_protocol: SASL_PLAINTEXT\n    port: 19092\n"
        "    sasl:\n      enabled_mechanisms: [SCRAM-SHA-512]\n"
        "      scram_credentials: kafka\n      kafka: {topic: team.users}\n"
        "acl_store:\n  type: kafka\n  topic: team.acls\n"
        "audit:\n  kafka: {topic: team.audit}\n",
        encoding="utf-8",
    )
    rules = internal_topics(load_config(config))
    assert {name for name in ("team.acls", "team.users", "team.audit") if rules.internal(name)} == {
        "team.acls",
        "team.users",
        "team.audit",
    }
    assert not rules.internal("team.orders")
    # Kafka's collisions ('.' and '_' are one character): a squatter name is internal too
    assert rules.internal("team_acls") and rules.internal("team_users")
    assert not rules.internal("team-acls")
