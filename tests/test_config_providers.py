"""Config provider references in the proxy's file, as Kafka's ``ConfigTransformer`` resolves
them: ``${env:NAME}``, ``${file:path:key}`` (a properties file), ``${directory:path:file}``
(a mounted Kubernetes Secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaguard.cli import main
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.proxy.config import load_config


def _config(tmp_path: Path) -> Path:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    (secrets / "password").write_text("s3cret-from-dir", encoding="utf-8")  # no newline, as k8s
    (tmp_path / "kafka.properties").write_text(
        "# as FileConfigProvider reads it\nsasl.username = alice\nother:x\\\n  y\n",
        encoding="utf-8",
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream:\n"
        "  bootstrap_servers: ['${env:KG_TEST_BROKER}']\n"
        "  sasl:\n"
        "    mechanism: PLAIN\n"
        "    username: ${file:kafka.properties:sasl.username}\n"
        "    password_file: ${directory:secrets:password}.txt\n"
        "listeners:\n  - name: P\n    port: 19092\n",
        encoding="utf-8",
    )
    return config


def test_env_file_and_directory_references_resolve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KG_TEST_BROKER", "kafka-1:9093")
    (tmp_path / "s3cret-from-dir.txt").write_text("pw\n", encoding="utf-8")  # the file named
    config = load_config(_config(tmp_path))
    assert [str(s) for s in config.upstream.bootstrap_servers] == ["kafka-1:9093"]
    assert config.upstream.sasl is not None
    assert config.upstream.sasl.username == "alice"
    properties = ConfigSection.from_text("k: ${file:kafka.properties:other}\n", base_dir=tmp_path)
    assert properties.get_str("k") == "xy"  # a continued line, as java.util.Properties


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("${env:KG_TEST_UNSET}", "environment variable KG_TEST_UNSET is not set"),
        ("${file:missing.properties:k}", "cannot read"),
        ("${file:kafka.properties:nope}", "has no key 'nope'"),
        ("${directory:secrets:nope}", "has no file 'nope'"),
        ("${directory:secrets:../kafka.properties}", "has no file"),
        ("${vault:x:y}", "unknown config provider 'vault'"),
    ],
)
def test_an_unresolvable_reference_fails_check_config_at_its_line(
    reference: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KG_TEST_UNSET", raising=False)
    _config(tmp_path)
    config = tmp_path / "bad.yaml"
    config.write_text(
        "upstream:\n  bootstrap_servers: ['127.0.0.1:9092']\n"
        f"listeners:\n  - name: P\n    port: 19092\n    advertised_host: '{reference}'\n",
        encoding="utf-8",
    )
    assert main(["check-config", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}:6 " in err and message in err


def test_a_resolved_secret_is_never_quoted_in_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KG_TEST_SECRET", "hunter2")
    text = "logging:\n  level: ${env:KG_TEST_SECRET}\n"
    with pytest.raises(ConfigError) as error:
        ConfigSection.from_text(text).section("logging").choice("level", ("INFO",))
    assert "hunter2" not in str(error.value) and "${env:KG_TEST_SECRET}" in str(error.value)
