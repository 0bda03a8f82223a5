"""confluent-kafka is the optional extra ``kafkaguard[kafka]``: the proxy, its command line and
a configuration without the audit topic work without it, and configuring the audit topic
without it is refused at load, naming the configuration line and the ``pip install``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kafkaguard.config_tree import ConfigError
from kafkaguard.proxy.config import load_config

CONFIG = """\
upstream:
  bootstrap_servers: ["127.0.0.1:9092"]
listeners:
  - name: PLAINTEXT
    port: 19092
"""


def test_the_audit_topic_without_confluent_kafka_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails: not installed
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG + "audit:\n  enabled: true\n  sink: both\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == (
        f"{path}:8 audit.sink: 'both' needs the confluent_kafka package: "
        "pip install 'kafkaguard[kafka]'"
    )


def test_the_audit_topic_loads_with_confluent_kafka(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG + "audit:\n  enabled: true\n  sink: kafka\n", encoding="utf-8")
    assert load_config(path).audit.sink == "kafka"


def test_the_proxy_never_imports_confluent_kafka_without_the_audit_topic(tmp_path: Path) -> None:
    """In a fresh interpreter where confluent_kafka cannot be imported: the command line,
    the proxy's server and the audit trail (files) import, and check-config passes."""
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG + f"audit:\n  enabled: true\n  dir: {tmp_path}\n", encoding="utf-8")
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["confluent_kafka"] = None
        import kafkaguard.proxy.app.server, kafkaguard.audit
        from kafkaguard.cli import main
        assert main(["check-config", "--config", {str(path)!r}]) == 0
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
