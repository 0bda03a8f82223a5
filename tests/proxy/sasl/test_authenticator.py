"""The per-connection SASL state machine, the failure throttle, the config section and the
``kafkaguard users`` CLI — all without sockets."""

from __future__ import annotations

import io
import ipaddress
import json
import os
import stat
import time
from pathlib import Path

import pytest

from kafkaguard.cli import main
from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy.authorizer import SecurityProtocol
from kafkaguard.policy.config import GroupsConfig
from kafkaguard.policy.groups import GroupResolver
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import parse_config
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.authenticator import (
    FailureThrottle,
    SaslAuthenticator,
    SaslServer,
    State,
)
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import (
    FileCredentialStore,
    MappingCredentialStore,
    parse_zookeeper_user_config,
    read_users_file,
)
from kafkaguard.proxy.sasl.mechanism import Failure, Success
from kafkaguard.proxy.session import Session

USERS = {
    "alice": {"PLAIN": plain.make_credential("pw", iterations=4096).to_string()},
    "alice@EXAMPLE.COM": {"PLAIN": plain.make_credential("pw", iterations=4096).to_string()},
}


def make(
    config: SaslListenerConfig | None = None, groups: GroupResolver | None = None
) -> SaslAuthenticator:
    server = SaslServer(
        config or SaslListenerConfig(("PLAIN",), connections_max_reauth_ms=1000),
        store=MappingCredentialStore(USERS),
        wall_clock=lambda: 1000.0,
        groups=groups,
    )
    session = Session(
        "SASL",
        SecurityProtocol.SASL_PLAINTEXT,
        ipaddress.ip_address("10.0.0.1"),
        group_resolver=groups,
    )
    return SaslAuthenticator(server, session)


def login(auth: SaslAuthenticator, token: bytes, now: float = 0.0) -> object:
    mechanism = auth.begin_step(2, now)
    assert not isinstance(mechanism, type(None))
    result = mechanism.step(token)  # type: ignore[union-attr]
    return auth.finish_step(result, now, 1_000_000)


def test_gate_before_and_after_authentication() -> None:
    auth = make()
    assert auth.check(18, 100, 0) is None  # ApiVersions
    assert auth.check(17, 100, 0) is None  # SaslHandshake
    assert "api key 3" in (auth.check(3, 100, 0) or "")
    assert "api key 36" in (auth.check(36, 100, 0) or "")  # authenticate before handshake
    assert auth.handshake("PLAIN").error_code == ErrorCode.none
    assert auth.check(36, 100, 0) is None
    assert auth.check(18, 100, 0) is not None
    assert "max_receive_size" in (auth.check(36, 600_000, 0) or "")
    outcome = login(auth, b"\0alice\0pw", now=10.0)
    assert outcome.authenticated == KafkaPrincipal("User", "alice")  # type: ignore[attr-defined]
    assert outcome.session_lifetime_ms == 1000  # type: ignore[attr-defined]
    assert auth.session.principal == KafkaPrincipal("User", "alice")
    assert auth.check(0, 10_000_000, 10.5) is None  # any request, any size
    assert "expired" in (auth.check(0, 100, 11.0) or "")
    assert auth.check(17, 100, 11.0) is None  # re-authentication is the way out


def test_stepping_state_admits_nothing() -> None:
    auth = make()
    auth.handshake("PLAIN")
    auth.begin_step(2, 0.0)
    assert auth.state is State.STEPPING
    for key in (18, 17, 36, 0):
        assert auth.check(key, 100, 0) is not None


def test_failure_and_unknown_mechanism() -> None:
    auth = make()
    outcome = auth.handshake("SCRAM-SHA-256")
    assert outcome.error_code == ErrorCode.unsupported_sasl_mechanism
    assert outcome.mechanisms == ("PLAIN",)
    assert outcome.close_reason
    auth = make()
    auth.handshake("PLAIN")
    failed = login(auth, b"\0alice\0nope")
    assert failed.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]
    assert failed.close_reason  # type: ignore[attr-defined]
    assert auth.session.principal == KafkaPrincipal.ANONYMOUS
    assert auth.check(18, 10, 0) is not None


def test_principal_mapping_rules() -> None:
    config = SaslListenerConfig(
        ("PLAIN",), kerberos_principal_to_local_rules="RULE:[1:$1@$0](.*@EXAMPLE.COM)s/@.*//"
    )
    auth = make(config)
    auth.handshake("PLAIN")
    outcome = login(auth, b"\0alice@EXAMPLE.COM\0pw")
    assert outcome.authenticated == KafkaPrincipal("User", "alice")  # type: ignore[attr-defined]
    strict = SaslListenerConfig(("PLAIN",), kerberos_principal_to_local_rules="RULE:[2:$1]")
    auth = make(strict)
    auth.handshake("PLAIN")
    outcome = login(auth, b"\0alice@EXAMPLE.COM\0pw")  # no rule applies: authentication fails
    assert outcome.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]


def test_session_lifetime_is_bounded_by_the_credential() -> None:
    auth = make(SaslListenerConfig(("PLAIN",), connections_max_reauth_ms=60_000))
    auth.handshake("PLAIN")
    auth.begin_step(1, 0.0)
    outcome = auth.finish_step(Success("alice", b"", credential_expiry_ms=1_005_000), 0, 1_000_000)
    assert outcome.session_lifetime_ms == 5000
    auth = make(SaslListenerConfig(("PLAIN",)))  # no max reauth: the token alone bounds it
    auth.handshake("PLAIN")
    auth.begin_step(1, 0.0)
    assert auth.finish_step(Success("a", b"", 1_002_000), 0, 1_000_000).session_lifetime_ms == 2000
    auth = make(SaslListenerConfig(("PLAIN",)))
    auth.handshake("PLAIN")
    auth.begin_step(1, 0.0)
    outcome = auth.finish_step(Success("a"), 0, 1_000_000)
    assert outcome.session_lifetime_ms == 0 and auth.session_expiry is None


def test_reauthentication_failure_message() -> None:
    auth = make()
    auth.handshake("PLAIN")
    login(auth, b"\0alice\0pw")
    auth.handshake("PLAIN")
    assert auth.reauthenticating
    auth.begin_step(2, 0.0)
    outcome = auth.finish_step(Failure("x", "y"), 0, 0)
    assert outcome.close_reason and "re-authentication" in outcome.close_reason


def _resolver(tmp_path: Path, claim: str | None = None) -> GroupResolver:
    path = tmp_path / "groups.yaml"
    path.write_text('version: 1\ngroups:\n  "User:alice": [eng, oncall]\n')
    resolver = GroupResolver.from_config(GroupsConfig(file=path, oauthbearer_claim=claim))
    assert resolver is not None
    return resolver


def _group(*names: str) -> tuple[KafkaPrincipal, ...]:
    return tuple(KafkaPrincipal("Group", n) for n in names)


def test_plain_takes_its_groups_from_the_file_and_reauthentication_looks_again(
    tmp_path: Path,
) -> None:
    resolver = _resolver(tmp_path)
    auth = make(groups=resolver)
    auth.handshake("PLAIN")
    login(auth, b"\0alice\0pw")
    assert auth.session.groups == _group("eng", "oncall")
    (tmp_path / "groups.yaml").write_text('version: 1\ngroups:\n  "User:alice": [ops]\n')
    assert resolver.refresh() is None
    auth.handshake("PLAIN")  # KIP-368: the groups of the new authentication
    login(auth, b"\0alice\0pw")
    assert auth.session.groups == _group("ops")


def test_a_token_claim_adds_groups_and_an_unusable_claim_fails_authentication(
    tmp_path: Path,
) -> None:
    auth = make(groups=_resolver(tmp_path, claim="realm_access.roles"))
    auth.handshake("PLAIN")
    auth.begin_step(1, 0.0)
    claims = {"realm_access": {"roles": ["eng", "admins"]}}
    outcome = auth.finish_step(Success("alice", claims=claims), 0, 1_000_000)
    assert outcome.error_code == ErrorCode.none
    assert auth.session.groups == _group("eng", "oncall", "admins")
    auth = make(groups=_resolver(tmp_path, claim="realm_access.roles"))
    auth.handshake("PLAIN")
    auth.begin_step(1, 0.0)
    bad = {"realm_access": {"roles": [1, 2]}}
    outcome = auth.finish_step(Success("alice", claims=bad), 0, 1_000_000)
    assert outcome.error_code == ErrorCode.sasl_authentication_failed
    assert outcome.close_reason and "neither a string nor a list" in outcome.close_reason
    assert auth.session.principal == KafkaPrincipal.ANONYMOUS and auth.session.groups == ()


def test_failure_throttle_doubles_bounded_and_resets() -> None:
    throttle = FailureThrottle(100, 1000, forget_after_s=60)
    delays = [throttle.failure("10.0.0.1", float(i)) for i in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert throttle.failure("10.0.0.2", 6.0) == 0.1  # per address
    throttle.success("10.0.0.1")
    assert throttle.failure("10.0.0.1", 7.0) == 0.1
    assert throttle.failure("10.0.0.1", 500.0) == 0.1  # forgotten after a quiet period
    small = FailureThrottle(100, 1000, max_addresses=2)
    for i in range(5):
        small.failure(f"h{i}", 0.0)
    assert len(small._failures) == 2


CONFIG = """
upstream: {bootstrap_servers: ["127.0.0.1:9092"]}
listeners:
  - name: SASL
    security_protocol: SASL_PLAINTEXT
    port: 9300
    sasl:
      enabled_mechanisms: [SCRAM-SHA-512, OAUTHBEARER]
      credentials_file: users.yaml
      connections_max_reauth_ms: 3600000
      kerberos_principal_to_local_rules: DEFAULT
      oauthbearer:
        jwks_file: /etc/kafkaguard/jwks.json
        expected_issuer: https://issuer
        expected_audience: kafka
"""


def test_config_section() -> None:
    config = parse_config(ConfigSection.from_text(CONFIG, "/etc/kafkaguard/config.yaml"))
    sasl = config.listeners[0].sasl
    assert sasl is not None
    assert sasl.enabled_mechanisms == ("SCRAM-SHA-512", "OAUTHBEARER")
    assert sasl.credentials_file == Path("/etc/kafkaguard/users.yaml")
    assert sasl.oauthbearer is not None and sasl.oauthbearer.expected_audience == ("kafka",)
    assert sasl.connections_max_reauth_ms == 3600000


@pytest.mark.parametrize(
    "change,message",
    [
        (("SCRAM-SHA-512, OAUTHBEARER", "GSSAPI"), "unknown 'GSSAPI'"),
        (("      credentials_file: users.yaml\n", ""), "credentials_file: is required"),
        (("security_protocol: SASL_PLAINTEXT", "security_protocol: PLAINTEXT"), "sasl"),
        (("        jwks_file: /etc/kafkaguard/jwks.json\n", ""), "jwks_file"),
        (("connections_max_reauth_ms: 3600000", "connections_max_reauth_ms: -1"), "at least 0"),
        (
            ("kerberos_principal_to_local_rules: DEFAULT", "kerberos_principal_to_local_rules: X"),
            "Invalid rule",
        ),
        (
            ("      connections_max_reauth_ms", "      bogus: 1\n      connections_max_reauth_ms"),
            "unknown key 'bogus'",
        ),
    ],
)
def test_config_errors(change: tuple[str, str], message: str) -> None:
    text = CONFIG.replace(*change)
    assert text != CONFIG
    with pytest.raises(ConfigError, match=message):
        parse_config(ConfigSection.from_text(text, "config.yaml"))


def test_users_cli_add_list_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.yaml"
    monkeypatch.setattr("sys.stdin", io.StringIO("alice-pw\n"))
    assert (
        main(
            [
                "users",
                "add",
                "--file",
                str(path),
                "--user",
                "alice",
                "--mechanism",
                "SCRAM-SHA-512",
                "--mechanism",
                "PLAIN",
                "--iterations",
                "4096",
                "--password-stdin",
            ]
        )
        == 0
    )
    text = path.read_text()
    assert "alice-pw" not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    users = read_users_file(path)
    store = MappingCredentialStore(users)
    credential = store.scram_credential("alice", "SCRAM-SHA-512")
    assert credential is not None and credential.iterations == 4096
    expected = scram.make_credential("SCRAM-SHA-512", "alice-pw", salt=credential.salt)
    assert credential == expected
    plain_credential = store.plain_credential("alice")
    assert plain_credential is not None and plain_credential.matches("alice-pw")
    monkeypatch.setattr("sys.stdin", io.StringIO("bob-pw\n"))
    assert main(["users", "add", "--file", str(path), "--user", "bob", "--password-stdin"]) == 0
    capsys.readouterr()
    assert main(["users", "list", "--file", str(path)]) == 0
    assert capsys.readouterr().out == "alice: PLAIN, SCRAM-SHA-512\nbob: SCRAM-SHA-512\n"
    assert (
        main(["users", "remove", "--file", str(path), "--user", "alice", "--mechanism", "PLAIN"])
        == 0
    )
    assert main(["users", "remove", "--file", str(path), "--user", "bob"]) == 0
    assert read_users_file(path) == {"alice": {"SCRAM-SHA-512": users["alice"]["SCRAM-SHA-512"]}}
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert main(["users", "add", "--file", str(path), "--user", "x", "--password-stdin"]) == 2


def test_file_store_reloads_and_keeps_old_on_error(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    path.write_text("users:\n  alice:\n    PLAIN: " + USERS["alice"]["PLAIN"] + "\n")
    store = FileCredentialStore(path, check_interval_s=0)
    assert store.plain_credential("alice") is not None
    path.write_text("users: {bob: {PLAIN: 'salt=bad'}}\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert store.plain_credential("alice") is not None  # invalid file: old credentials stay
    path.write_text("users: {}\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert store.plain_credential("alice") is None


def test_zookeeper_user_config_seam() -> None:
    credential = scram.make_credential("SCRAM-SHA-256", "pw").to_kafka_string()
    znode = json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": credential, "producer_byte_rate": "1024"}}
    ).encode()
    config = parse_zookeeper_user_config(znode)
    assert config == {"SCRAM-SHA-256": credential}
    store = MappingCredentialStore({"alice": config})
    assert store.scram_credential("alice", "SCRAM-SHA-256") is not None
