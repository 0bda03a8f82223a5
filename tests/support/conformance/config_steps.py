"""Config requests for the configs scenarios (test_admin_configs.py,
test_admin_broker_configs.py): DescribeConfigs / AlterConfigs / IncrementalAlterConfigs steps
from plain tuples, and single config values read as the super user.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tests.support.conformance.admin_steps import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    call,
    sorted_entries,
)
from tests.support.conformance.harness import Side

# ConfigResource.Type wire codes.
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE = 0, 1  # AlterConfigOp.OpType

SHARED_BROKER_KEYS = [
    "num.partitions",
    "auto.create.topics.enable",
    "log.retention.hours",
    "compression.type",
    "offsets.topic.num.partitions",
]
"""Broker configs set alike on both brokers (tests/support/kafka_broker.py)."""


def resource_codes(answer: Any, field: str = "results") -> dict[tuple[int, str], str]:
    return {(r["resource_type"], r["resource_name"]): r["error_code"] for r in answer[field]}


def describe(
    user: str,
    version: int,
    resources: Iterable[tuple[int, str, list[str] | None]],
    *,
    synonyms: bool = False,
    documentation: bool = False,
) -> Callable[[Side], Any]:
    """DescribeConfigs of (type, name, keys or None for all)."""
    wanted = [
        {"resource_type": t, "resource_name": n, "configuration_keys": keys}
        for t, n, keys in resources
    ]

    def run(side: Side) -> Any:
        response = call(
            side,
            user,
            DESCRIBE_CONFIGS,
            version,
            resources=wanted,
            include_synonyms=synonyms,
            include_documentation=documentation,
        )
        return sorted_entries(response, "results")

    return run


def alter(
    user: str,
    version: int,
    resources: list[tuple[int, str, dict[str, str | None]]],
    *,
    validate_only: bool = False,
) -> Callable[[Side], Any]:
    """Legacy AlterConfigs: (type, name, {key: value})."""
    wanted = [
        {
            "resource_type": t,
            "resource_name": n,
            "configs": [{"name": k, "value": v} for k, v in configs.items()],
        }
        for t, n, configs in resources
    ]

    def run(side: Side) -> Any:
        response = call(
            side, user, ALTER_CONFIGS, version, resources=wanted, validate_only=validate_only
        )
        return sorted_entries(response, "responses")

    return run


def incremental(
    user: str,
    version: int,
    resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
    *,
    validate_only: bool = False,
) -> Callable[[Side], Any]:
    """IncrementalAlterConfigs: (type, name, [(key, op, value)])."""
    wanted = [
        {
            "resource_type": t,
            "resource_name": n,
            "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
        }
        for t, n, ops in resources
    ]

    def run(side: Side) -> Any:
        response = call(
            side,
            user,
            INCREMENTAL_ALTER_CONFIGS,
            version,
            resources=wanted,
            validate_only=validate_only,
        )
        return sorted_entries(response, "responses")

    return run


def topic_config(side: Side, topic: str, key: str) -> Any:
    """One config of ``topic`` as the super user sees it (value and source)."""
    answer = call(
        side,
        "admin",
        DESCRIBE_CONFIGS,
        4,
        resources=[{"resource_type": TOPIC, "resource_name": topic, "configuration_keys": [key]}],
        include_synonyms=False,
        include_documentation=False,
    )
    (config,) = answer.results[0].configs
    return config.value, config.config_source


def broker_config(side: Side, key: str) -> Any:
    """One config of broker 1 (value and source) as the super user sees it."""
    answer = call(
        side,
        "admin",
        DESCRIBE_CONFIGS,
        4,
        resources=[{"resource_type": BROKER, "resource_name": "1", "configuration_keys": [key]}],
        include_synonyms=False,
        include_documentation=False,
    )
    (config,) = answer.results[0].configs
    return config.value, config.config_source
