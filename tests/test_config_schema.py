"""``kafkaguard config-schema``: the JSON Schema is derived from the loaders (a key a loader
reads is in it, with no second list), accepts config.example.yaml (its commented listener
examples too), the documentation's configuration snippets and the Helm chart's configuration,
and refuses a misspelt key where check-config would."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import kafkaguard.proxy.config
from kafkaguard.cli import main
from kafkaguard.cli.config_schema import config_schema
from kafkaguard.config_tree import ConfigSection

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator: jsonschema.Draft202012Validator, document: Any) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def _example_with_listener_examples() -> dict[str, Any]:
    """config.example.yaml with its commented-out listeners (``#  - name: SSL`` ...)
    uncommented: they document the SSL, SASL and SNI listeners' keys."""
    lines, section = [], ""
    for line in (ROOT / "config.example.yaml").read_text(encoding="utf-8").splitlines():
        if top := re.match(r"([a-z_]+):", line):
            section = top.group(1)
        if section == "listeners" and (commented := re.fullmatch(r"#(  +\S.*)", line)):
            line = commented.group(1)
        lines.append(line)
    document: dict[str, Any] = yaml.safe_load("\n".join(lines))
    return document


def test_the_example_validates(validator: jsonschema.Draft202012Validator) -> None:
    example = yaml.safe_load((ROOT / "config.example.yaml").read_text(encoding="utf-8"))
    assert _errors(validator, example) == []
    uncommented = _example_with_listener_examples()
    assert {"SSL", "SASL_PLAINTEXT", "EXTERNAL"} <= {ls["name"] for ls in uncommented["listeners"]}
    assert _errors(validator, uncommented) == []


def _readme_snippets() -> list[str]:
    """Every configuration snippet of the README and the documentation's pages."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [
        snippet
        for path in pages
        for snippet in re.findall(r"```yaml\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)
        if re.match(r"(upstream|listeners|acl_store|audit|authorizer|admin|enforcement):", snippet)
    ]


def test_the_readme_snippets_validate(validator: jsonschema.Draft202012Validator) -> None:
    snippets = _readme_snippets()
    assert len(snippets) >= 2
    for snippet in snippets:
        assert _errors(validator, yaml.safe_load(snippet)) == [], snippet


def test_the_helm_charts_configuration_validates(
    validator: jsonschema.Draft202012Validator,
) -> None:
    chart = ROOT / "deploy" / "helm" / "kafkaguard"
    for values in (chart / "values.yaml", chart / "ci" / "tls-sasl-sni-values.yaml"):
        config = yaml.safe_load(values.read_text(encoding="utf-8"))["config"]
        assert _errors(validator, config) == [], values


@pytest.mark.parametrize(
    "misspelt,where",
    [
        ("shutdown_timeout: 1000\n", "'shutdown_timeout' was unexpected"),
        ("admin:\n  bind_hots: 0.0.0.0\n", "admin: Additional properties"),
        ("audit:\n  kafka:\n    linger: 5\n", "audit.kafka: Additional properties"),
        ("listeners:\n  - {name: A, port: 1, advertized_host: h}\n", "listeners.0: Additional"),
        ("logging:\n  format: jsn\n", "logging.format: 'jsn' is not one of"),
        ("admin:\n  port: 0\n  max_connections: 0\n", "admin.max_connections: 0 is less than"),
    ],
)
def test_a_misspelt_key_or_bad_value_fails(
    validator: jsonschema.Draft202012Validator, misspelt: str, where: str
) -> None:
    errors = _errors(validator, yaml.safe_load(misspelt))
    assert len(errors) == 1 and where in errors[0], errors


def test_a_key_a_loader_reads_is_in_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """No second list: a key read by a loader, here one more admin key, appears by itself."""
    admin = kafkaguard.proxy.config._admin

    def with_new_key(section: ConfigSection) -> kafkaguard.proxy.config.AdminConfig:
        section.get_int("new_key_ms", 250, minimum=1)
        return admin(section)

    monkeypatch.setattr(kafkaguard.proxy.config, "_admin", with_new_key)
    properties = config_schema()["properties"]["admin"]["properties"]
    assert properties["new_key_ms"] == {"type": "integer", "minimum": 1, "default": 250}


def test_the_command_prints_the_schema(
    validator: jsonschema.Draft202012Validator, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config-schema"]) == 0
    assert json.loads(capsys.readouterr().out) == validator.schema
