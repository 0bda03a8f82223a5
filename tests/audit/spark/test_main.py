"""``kafkaguard analyze`` end to end on files: arguments, outputs, exit codes, spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.render.html import DATA_ELEMENT_ID
from kafkaguard.policy import acls_cli
from kafkaguard.policy.stores.file import read_acl_file
from tests.support.analyze_data import rec, write_audit

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[3]
T = "2026-11-22T{:02d}:00:00.000Z"
LOG_ONLY = {"mode": "log_only", "result": "DENIED"}
TRAIL = [
    rec(T.format(9), "User:old", "READ", "TOPIC", "t"),  # before --since
    rec(T.format(10), "User:app", "WRITE", "TOPIC", "orders", count=7, **LOG_ONLY),
    rec(T.format(10), "User:app", "DESCRIBE", "TOPIC", "orders", **LOG_ONLY),
    rec(T.format(11), "User:app", "READ", "GROUP", "g", count=2, **LOG_ONLY),
    rec(T.format(11), "User:app", "READ", "TOPIC", "orders", count=3, **LOG_ONLY),
]


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_audit(tmp_path_factory.mktemp("trail"), TRAIL))


def analyze(spark: SparkSession, *argv: str) -> tuple[int, list[str]]:
    """``kafkaguard analyze ...`` through the real parser, on the shared session."""
    lines: list[str] = []
    args = cli.build_parser().parse_args(["analyze", *argv])
    assert args.handler is analyze_main.run
    return analyze_main.run(args, spark, lines.append), lines


def test_report_writes_parquet_json_and_html(
    spark: SparkSession, trail: str, tmp_path: Path
) -> None:
    out, html = tmp_path / "out", tmp_path / "report.html"
    code, lines = analyze(
        spark, "report", "--input", trail, "--since", "2026-11-22T10:00Z",
        "--output", str(out), "--json", "--html", str(html),
    )  # fmt: skip
    assert code == 0
    assert (
        lines[-1] == "13 decisions: 0 allowed, 13 denied (13 would-deny in log_only), 1 principals"
    )
    expected = [Row(principal="User:app", denied=13, would_deny=13)]
    assertDataFrameEqual(spark.read.parquet(str(out / "top_denied_principals.parquet")), expected)
    [part] = (out / "top_denied_principals.json").glob("part-*.json")
    assert json.loads(part.read_text()) == {"principal": "User:app", "denied": 13, "would_deny": 13}
    page = html.read_text(encoding="utf-8")
    data = json.loads(page.split(f'id="{DATA_ELEMENT_ID}">', 1)[1].split("</script>", 1)[0])
    assert data["window"]["since"] == "2026-11-22T10:00:00.000Z"
    assert [h["would_deny"] for h in data["decisions_over_time"]] == [8, 5]


def test_propose_unused_whatif_round_trip(spark: SparkSession, trail: str, tmp_path: Path) -> None:
    acl_file, commands = tmp_path / "proposed.yaml", tmp_path / "acls.sh"
    code, _ = analyze(
        spark, "propose", "--input", trail, "--since", "2026-11-22T10:00Z",
        "--acl-file", str(acl_file), "--commands-file", str(commands),
        "--bootstrap-server", "kafka:9092", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0
    proposed = read_acl_file(acl_file)[0]
    assert sorted(str(b) for b in proposed) == sorted(
        str(b) for b in read_acl_file(_write(tmp_path / "expected.yaml", EXPECTED_PROPOSAL))[0]
    )
    assert acls_cli.main(["--acl-file", str(acl_file), "--list"]) == 0  # loads with the tool
    assert "--operation Write --topic orders" in commands.read_text()
    assert spark.read.parquet(str(tmp_path / "out" / "proposed_acls.parquet")).count() == 3

    config = _write(
        tmp_path / "config.yaml",
        f"authorizer: {{super_users: 'User:admin'}}\n"
        f"acl_store: {{type: file, path: {acl_file.name}}}\n",
    )
    code, lines = analyze(spark, "unused", "--input", trail, "--config", str(config))
    assert (code, lines[0]) == (0, f"0 of 3 ACLs (file {acl_file}) matched no decision:")

    reduced = acl_file.read_text().replace(
        [line for line in acl_file.read_text().splitlines() if '"GROUP"' in line][0] + "\n", ""
    )
    _write(tmp_path / "reduced.yaml", reduced)
    code, lines = analyze(
        spark, "whatif", "--input", trail, "--since", "2026-11-22T10:00Z",
        "--acls", str(tmp_path / "reduced.yaml"), "--fail-on-breakage",
    )  # fmt: skip
    # The recorded decisions were would-denies: every one flips to allowed, except the group
    # READ the reduced set no longer grants (it stays denied, so it is no flip).
    assert code == 0
    assert lines[:2] == [
        "ALLOWED->DENIED: 0 decisions (0 distinct requests)",
        "DENIED->ALLOWED: 11 decisions (3 distinct requests)",
    ]


def test_a_job_leaves_nothing_cached_in_the_session(
    spark: SparkSession, trail: str, tmp_path: Path
) -> None:
    """On a server kept running (``--remote``, ``--master``) the session's cache outlives the
    client: each job releases what it cached (``audit/spark/cache.py``)."""
    acls = _write(tmp_path / "acls.yaml", EXPECTED_PROPOSAL)
    cache_manager = spark._jsparkSession.sharedState().cacheManager()
    spark.catalog.clearCache()
    for argv in (
        ("report", "--input", trail, "--html", str(tmp_path / "r.html")),
        ("propose", "--input", trail, "--acl-file", str(tmp_path / "p.yaml")),
        ("unused", "--input", trail, "--acls", str(acls)),
        ("whatif", "--input", trail, "--acls", str(acls)),
    ):
        code, lines = analyze(spark, *argv)
        assert code == 0, lines
        assert cache_manager.isEmpty(), argv[0]


EXPECTED_PROPOSAL = """\
acls:
  - {principal: User:app, operation: WRITE, permission: ALLOW, resource_type: TOPIC, name: orders}
  - {principal: User:app, operation: READ, permission: ALLOW, resource_type: TOPIC, name: orders}
  - {principal: User:app, operation: READ, permission: ALLOW, resource_type: GROUP, name: g}
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_whatif_fails_on_breakage(spark: SparkSession, tmp_path: Path) -> None:
    trail = write_audit(
        tmp_path / "trail", [rec(T.format(10), "User:app", "READ", "TOPIC", "t", count=4)]
    )
    empty = _write(tmp_path / "none.yaml", "acls: []\n")
    code, lines = analyze(
        spark, "whatif", "--input", str(trail), "--acls", str(empty), "--fail-on-breakage"
    )
    assert code == 3
    assert lines[0] == "ALLOWED->DENIED: 4 decisions (1 distinct requests)"
    assert lines[2] == (
        "  ALLOWED->DENIED x4: User:app READ TOPIC:t from 10.0.0.1 (PLAINTEXT) -> DefaultDeny"
    )


def test_errors_are_one_line_and_an_exit_code(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert analyze(spark, "report", "--input", str(tmp_path / "missing"))[0] == 1
    assert "kafkaguard analyze report: error:" in capsys.readouterr().err
    assert analyze(spark, "report", "--input", str(tmp_path), "--since", "last week")[0] == 2
    assert "not an ISO-8601" in capsys.readouterr().err
    code, _ = analyze(spark, "unused", "--input", str(tmp_path))
    assert code == 1
    assert "give --acls" in capsys.readouterr().err


def test_the_proxy_cli_does_not_import_pyspark() -> None:
    """Nor does building its parser: every job's arguments (``jobs/*/__init__.py``) and the
    shared ones (``runtime/command.py``) are pyspark-free until a job runs."""
    code = "import sys, kafkaguard.cli as c; c.build_parser(); sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=60).returncode == 0


@pytest.mark.timeout(300)
def test_spark_submit_runs_the_same_entry_point(trail: str, tmp_path: Path) -> None:
    """``spark-submit kafkaguard/audit/spark/main.py propose ...`` in a JVM of its own."""
    acl_file = tmp_path / "proposed.yaml"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "KAFKAGUARD_SPARK_LOG_LEVEL": "ERROR",
    }
    spark_submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run(
        [
            str(spark_submit), "--master", "local[1]",
            "--conf", "spark.sql.codegen.wholeStage=false",
            "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
            str(REPO / "kafkaguard" / "audit" / "spark" / "main.py"),
            "propose", "--input", trail, "--since", "2026-11-22T10:00Z",
            "--acl-file", str(acl_file),
        ],
        env=env, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # spark-submit merges the Python driver's stderr into its stdout
    assert "proposed 3 ACLs for 1 principals" in done.stdout + done.stderr
    assert len(read_acl_file(acl_file)[0]) == 3


def test_local_mode_is_sized_from_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafkaguard.audit.spark.runtime import session

    physical = session.machine_memory_bytes()
    assert physical > 0
    limits = [tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"]
    limits[0].write_text("max\n")  # cgroup v2 without a limit
    limits[1].write_text(f"{3 << 30}\n")  # cgroup v1: 3 GB
    monkeypatch.setattr(session, "_CGROUP_LIMITS", tuple(limits))
    assert session.machine_memory_bytes() == min(physical, 3 << 30)

    monkeypatch.setattr(session, "machine_memory_bytes", lambda: 64 << 30)
    settings = session.local_settings("local[3]")
    assert settings["spark.sql.shuffle.partitions"] == "6"
    assert settings["spark.driver.memory"] == "1024m"  # a quarter, at most 1 GB
    assert settings["spark.ui.enabled"] == "false"
    assert "spark.driver.memory" not in session.local_settings("local[3]", jvm_running=True)
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    settings = session.local_settings("local[3]")
    options = settings["spark.driver.extraJavaOptions"].split()  # compact and watch: C2 too
    assert options == [*session.DRIVER_JVM_OPTIONS.split(), "-XX:+UseParallelGC"]
    quick = session.local_settings("local[3]", quick_jit=True)
    assert quick["spark.driver.extraJavaOptions"].split() == [
        *options,
        *session.QUICK_JIT_OPTIONS.split(),
    ]
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:+UseG1GC")  # HotSpot refuses two collectors
    assert "GC" not in session.local_settings("local[3]")["spark.driver.extraJavaOptions"]
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    chosen = {"spark.driver.defaultJavaOptions": "-Xss4m -XX:+UseZGC"}
    with_zgc = session.local_settings("local[3]", conf=chosen)["spark.driver.extraJavaOptions"]
    assert "Parallel" not in with_zgc
    assert "-XX:Tier4CompileThreshold=150000" in session.QUICK_JIT_OPTIONS
    from kafkaguard.audit.spark.runtime.class_archive import ClassArchive

    mapped = ClassArchive(tmp_path / "a.jsa", writing=False)
    written = ClassArchive(tmp_path / "a.jsa", writing=True)
    with_archive = session.local_settings("local[3]", archive=mapped)
    assert (
        f"-XX:SharedArchiveFile={tmp_path / 'a.jsa'}"
        in with_archive["spark.driver.extraJavaOptions"].split()
    )
    dumping = session.local_settings("local[3]", archive=written)["spark.driver.extraJavaOptions"]
    assert f"-XX:ArchiveClassesAtExit={written.part}" in dumping.split()
    running = session.local_settings("local[3]", jvm_running=True, quick_jit=True)
    assert "spark.driver.extraJavaOptions" not in running  # spark-submit's JVM runs already
    assert session.wants_class_archive(None, {}) and session.wants_class_archive("local[2]", {})
    assert not session.wants_class_archive("spark://h:7077", {})
    assert not session.wants_class_archive(None, {"spark.driver.extraJavaOptions": "-Xss2m"})
    monkeypatch.setattr(session.os, "cpu_count", lambda: 5)
    assert session.local_settings("local[*]")["spark.sql.shuffle.partitions"] == "10"
    monkeypatch.setattr(session, "machine_memory_bytes", lambda: 0)  # unknown: the minimum
    assert session.local_settings("local")["spark.driver.memory"] == "512m"


def test_commands_file_needs_the_bootstrap_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No made-up ``localhost:9092`` in the commands (issue 38): refused before any JVM."""
    commands = tmp_path / "acls.sh"
    argv = ["analyze", "propose", "--input", str(tmp_path), "--commands-file", str(commands)]
    args = cli.build_parser().parse_args(argv)
    assert analyze_main.run(args, None, print) == 2
    assert "--commands-file needs --bootstrap-server HOST:PORT" in capsys.readouterr().err
    assert not commands.exists()


@pytest.mark.timeout(600)
def test_a_fresh_job_prints_no_jvm_output_unless_verbose(trail: str, tmp_path: Path) -> None:
    """A job that starts its own JVM (issue 36): log4j's and the JVM's lines go to the log
    file in the temporary directory, the terminal gets the job's own lines; ``--verbose``
    shows them instead."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [
        sys.executable, "-m", "kafkaguard.audit.spark.main", "report", "--input", trail,
        "--master", "local[1]", "--conf", "spark.sql.codegen.wholeStage=false",
    ]  # fmt: skip
    quiet = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=280, check=False
    )
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert [line.split(":")[0] for line in quiet.stderr.splitlines()] == ["input"]
    log = tmp_path / f"kafkaguard-analyze-{os.getuid()}.log"
    assert "log4j" in log.read_text(encoding="utf-8")  # what the terminal was spared
    log.unlink()
    verbose = subprocess.run(
        [*command, "--verbose"], env=env, capture_output=True, text=True, timeout=280, check=False
    )
    assert verbose.returncode == 0, verbose.stderr[-2000:]
    assert "log4j" in verbose.stderr
    assert not log.exists()
