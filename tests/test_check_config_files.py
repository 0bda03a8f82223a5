"""``check-config`` (and so ``kafkaguard reload``) refuses a file that ``run`` would refuse for
a file it names: certificate/key pairs, CA files, the ACL file, credentials, OAUTHBEARER keys;
each error names the configuration file, line and key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kafkaguard.certs import tooling
from kafkaguard.cli import main

UPSTREAM = "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pki")
    tooling.init_ca(root)
    tooling.issue_server(root)
    tooling.issue_server(root, name="other")
    return root


def _write(directory: Path, pki: Path) -> Path:
    """A valid SASL_SSL configuration with every kind of file, all present and good."""
    (directory / "acls.yaml").write_text("acls: []\n", encoding="utf-8")
    (directory / "users.yaml").write_text("users: {}\n", encoding="utf-8")
    (directory / "jwks.json").write_text(
        '{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": '
        '"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}',
        encoding="utf-8",
    )
    config = directory / "config.yaml"
    config.write_text(
        UPSTREAM + "listeners:\n"
        "  - name: S\n"
        "    security_protocol: SASL_SSL\n"
        "    port: 19093\n"
        "    ssl:\n"
        f"      cert_file: {pki}/server.pem\n"
        f"      key_file: {pki}/server-key.pem\n"
        f"      ca_file: {pki}/ca.pem\n"
        "      client_auth: requested\n"
        "    sasl:\n"
        "      enabled_mechanisms: [SCRAM-SHA-512, OAUTHBEARER]\n"
        "      credentials_file: users.yaml\n"
        "      oauthbearer:\n"
        "        jwks_file: jwks.json\n"
        "acl_store:\n  type: file\n  path: acls.yaml\n",
        encoding="utf-8",
    )
    return config


def _replace(old: str, new: str) -> Callable[[Path], None]:
    def edit(config: Path) -> None:
        text = config.read_text(encoding="utf-8")
        assert old in text
        config.write_text(text.replace(old, new), encoding="utf-8")

    return edit


def _overwrite(name: str, content: str) -> Callable[[Path], None]:
    def edit(config: Path) -> None:
        (config.parent / name).write_text(content, encoding="utf-8")

    return edit


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (_replace("/server.pem", "/missing.pem"), ":7 listeners[0].ssl.cert_file", "missing.pem"),
        (
            _replace("/server-key.pem", "/other-key.pem"),
            ":7 listeners[0].ssl.cert_file",
            "cannot load certificate/key",
        ),
        (_replace("/ca.pem", "/server-key.pem"), ":9 listeners[0].ssl.ca_file", "CA file"),
        (_overwrite("acls.yaml", "acls: []\nextra: 1\n"), ":18 acl_store.path", "acls.yaml"),
        (_replace("path: acls.yaml", "path: nope.yaml"), ":18 acl_store.path", "does not exist"),
        (
            _overwrite("users.yaml", "users: [alice]\n"),
            ":13 listeners[0].sasl.credentials_file",
            "users.yaml",
        ),
        (
            _overwrite("jwks.json", "{not json"),
            ":15 listeners[0].sasl.oauthbearer.jwks_file",
            "not a JWKS",
        ),
        (
            _replace("jwks_file: jwks.json", "jwks_file: gone.json"),
            ":15 listeners[0].sasl.oauthbearer.jwks_file",
            "gone.json",
        ),
    ],
)
def test_check_config_refuses_what_run_refuses(
    edit: Callable[[Path], None],
    where: str,
    message: str,
    pki: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _write(tmp_path, pki)
    assert main(["check-config", "--config", str(config)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    edit(config)
    assert main(["check-config", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}{where}: " in err and message in err, err


def test_check_config_names_every_file_run_would_refuse(
    pki: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three bad files: three errors, each with its configuration line, in one report."""
    config = _write(tmp_path, pki)
    _replace("/server.pem", "/missing.pem")(config)
    _overwrite("users.yaml", "users: [alice]\n")(config)
    _overwrite("acls.yaml", "acls: []\nextra: 1\n")(config)
    assert main(["check-config", "--config", str(config)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "kafkaguard: configuration error: 3 errors:"
    assert [line.split(": ", 1)[0].strip() for line in lines[1:4]] == [
        f"{config}:7 listeners[0].ssl.cert_file",
        f"{config}:13 listeners[0].sasl.credentials_file",
        f"{config}:18 acl_store.path",
    ]


def test_reload_checks_the_files_before_signalling(
    pki: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path, pki)
    _overwrite("acls.yaml", "acls: [{principal: User:a}]\n")(config)
    assert main(["reload", "--config", str(config), "--pid", "1"]) == 2  # nothing signalled
    assert f"{config}:18 acl_store.path" in capsys.readouterr().err
