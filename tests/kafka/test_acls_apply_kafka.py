"""``kafkaguard acls apply`` and ``--list`` against Apache Kafka 4.3.1 with StandardAuthorizer (the
referee, SASL/PLAIN): Kafka's own DescribeAcls refusal is seen, never taken for an empty store
(issue 38), and an allowed read returns what Kafka holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaguard.cli import main
from kafkaguard.policy.model import AclOperation
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from tests.support.kafka_broker import KafkaBroker, referee_command_config
from tests.support.policy import acl

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def test_apply_as_a_principal_kafka_refuses_exits_1_naming_the_code(
    kafka_referee: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    desired = tmp_path / "acls.yaml"
    desired.write_text(format_acl_text([acl("User:carol", AclOperation.READ, name="t")]))
    server = ("--bootstrap-server", kafka_referee.bootstrap)
    carol = ("--command-config", str(referee_command_config(tmp_path, "carol")))
    code = main(["acls", "apply", "-f", str(desired), *server, *carol, "--dry-run"])
    captured = capsys.readouterr()
    assert code == 1, captured.out
    assert "Dry run" not in captured.out and "+ " not in captured.out
    assert "CLUSTER_AUTHORIZATION_FAILED (31)" in captured.err, captured.err
    assert "as User:carol" in captured.err
    assert main(["acls", "--list", *server, *carol]) == 1
    assert "CLUSTER_AUTHORIZATION_FAILED (31)" in capsys.readouterr().err


def test_apply_as_the_super_user_reads_what_kafka_holds(
    kafka_referee: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grant = acl("User:issue38", AclOperation.WRITE, name="issue38-orders")
    desired = tmp_path / "acls.yaml"
    desired.write_text(format_acl_text([grant]))
    config = referee_command_config(tmp_path, "admin")
    admin = ("--bootstrap-server", kafka_referee.bootstrap, "--command-config", str(config))
    try:
        assert main(["acls", "apply", "-f", str(desired), *admin]) == 0
        capsys.readouterr()
        assert main(["acls", "apply", "-f", str(desired), *admin, "--dry-run"]) == 0
        assert "No changes" in capsys.readouterr().out  # read back through DescribeAcls
        assert main(["acls", "--list", *admin, "--principal", "User:issue38"]) == 0
        assert "(principal=User:issue38, host=*, operation=WRITE" in capsys.readouterr().out
    finally:  # the referee lives for the session: --prune of a KafkaUser without rules
        users = tmp_path / "users.yaml"
        users.write_text(
            "apiVersion: kafka.strimzi.io/v1\nkind: KafkaUser\nmetadata: {name: issue38}\n"
            "spec: {authorization: {type: simple, acls: []}}\n"
        )
        main(["acls", "apply", "-f", str(users), *admin, "--prune"])
    assert "- " + '{"principal": "User:issue38"' in capsys.readouterr().out
    assert main(["acls", "--list", *admin, "--principal", "User:issue38"]) == 0
    assert "issue38-orders" not in capsys.readouterr().out
