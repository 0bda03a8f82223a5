"""docs/opa.md as an operator follows it: the page's ``opa`` commands run as written (the
address made a free loopback port) on the Rego v0 policy of tests/support/opa_policies/, and
the page's configuration, pointed at that server, decides as the policy says, both with the
v0 policy loaded ``--v0-compatible`` and after ``opa fmt --v0-v1``; its ``opa build -t wasm``
command and ``mode: wasm`` configuration decide alike in process."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

import yaml

from kafkaguard.config_tree import ConfigSection
from kafkaguard.policy.authorizer import (
    Action,
    AuthorizationResult,
    RequestContext,
    SecurityProtocol,
)
from kafkaguard.policy.config import parse_authorizer_config
from kafkaguard.policy.model import AclOperation, KafkaPrincipal, ResourcePattern, ResourceType
from kafkaguard.policy.opa import OpaAuthorizer
from tests.support import docs
from tests.support.opa import V0_POLICY, OpaServer, require_opa

PAGE_ADDRESS = "127.0.0.1:8181"


def _decide(authorizer: OpaAuthorizer, user: str) -> AuthorizationResult:
    context = RequestContext(
        listener_name="SASL_SSL",
        security_protocol=SecurityProtocol.SASL_SSL,
        principal=KafkaPrincipal("User", user),
        client_address=ipaddress.ip_address("127.0.0.1"),
        api_key=0,
        api_version=11,
    )
    action = Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "alice-orders"))
    return authorizer.authorize(context, [action])[0]


def _page_authorizer(address: str) -> OpaAuthorizer:
    (snippet,) = docs.blocks("opa.md", "## Configuration", "yaml")
    section = ConfigSection.from_value(
        yaml.safe_load(snippet.replace(PAGE_ADDRESS, address)), "docs/opa.md"
    )
    config = parse_authorizer_config(section.section("authorizer"))
    assert config.class_path == "kafkaguard.policy.opa:OpaAuthorizer"
    return OpaAuthorizer(config)


def test_the_pages_commands_and_configuration(tmp_path: Path) -> None:
    binary = require_opa()
    shutil.copy(V0_POLICY, tmp_path / "policy.rego")
    commands = docs.commands("opa.md", "## Running OPA", "opa")
    assert [words[1] for words in commands] == ["run", "fmt", "run"]
    served = 0
    for words in commands:
        if words[1] == "fmt":
            subprocess.run([str(binary), *words[1:]], cwd=tmp_path, check=True, timeout=60)
            assert "allow if {" in (tmp_path / "policy.rego").read_text(encoding="utf-8")
            continue
        server = OpaServer(tmp_path / "policy.rego", tmp_path / "opa.log", v0=False)
        address = f"127.0.0.1:{server.port}"
        server.start([w.replace(PAGE_ADDRESS, address) for w in words[1:]], cwd=tmp_path)
        try:
            authorizer = _page_authorizer(address)
            assert _decide(authorizer, "alice-producer") is AuthorizationResult.ALLOWED
            assert _decide(authorizer, "bob-producer") is AuthorizationResult.DENIED
            assert authorizer.counters.errors == dict.fromkeys(authorizer.counters.errors, 0)
            served += 1
        finally:
            server.stop()
    assert served == 2


def test_the_wasm_mode_commands_and_configuration(tmp_path: Path) -> None:
    """The ``opa build -t wasm`` line run as written over the v0 policy, then the page's
    ``mode: wasm`` configuration (its bundle relative to the configuration file) decides."""
    binary = require_opa()
    shutil.copy(V0_POLICY, tmp_path / "policy.rego")
    heading = "## In process: `mode: wasm`"
    (command,) = docs.commands("opa.md", heading, "opa")
    subprocess.run([str(binary), *command[1:]], cwd=tmp_path, check=True, timeout=120)
    (snippet,) = docs.blocks("opa.md", heading, "yaml")
    section = ConfigSection.from_value(yaml.safe_load(snippet), str(tmp_path / "config.yaml"))
    authorizer = OpaAuthorizer(parse_authorizer_config(section.section("authorizer")))
    assert authorizer.options.mode == "wasm"
    assert _decide(authorizer, "alice-producer") is AuthorizationResult.ALLOWED
    assert _decide(authorizer, "bob-producer") is AuthorizationResult.DENIED
    assert authorizer.counters.errors == dict.fromkeys(authorizer.counters.errors, 0)
