"""deploy/container/Containerfile, built and run for real: ``buildah bud --isolation chroot``
builds the image on a Debian base made here with ``mmdebstrap`` (images cannot be pulled on
the test machines; the base tarball is cached under ~/.cache/kafkaguard/container/, keyed by
its package list and mirror), and ``buildah run --isolation chroot`` runs the proxy from it in
front of the session's Tansu broker: ``/readyz``, a produce and consume through it, a denied
produce, a clean exit on SIGTERM. One build per session (the ``image`` fixture).

Dependencies come as wheels built on this machine (``pip wheel``, through its own index
configuration) and mounted into the build (``PIP_OPTIONS``), so the build needs no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support import debian
from tests.support.docs import deploying_commands
from tests.support.proxy_fixture import TANSU_NODE_ID

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "deploy" / "container" / "Containerfile"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
"""The base: Debian's Python, what the Containerfile needs of a base image."""
CACHE = Path.home() / ".cache" / "kafkaguard" / "container"


@dataclass(frozen=True)
class Image:
    buildah: list[str]
    """``buildah`` with this session's storage."""
    name: str
    size: str


def _mirror() -> str:
    """The Debian mirror of this machine's apt configuration (deb822 or one-line format)."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("URIs:") and "security" not in line and "debian" in line:
                return line.split()[1]
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt").glob("sources.list.d/*.list")]:
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            words = line.split()
            if words[:1] == ["deb"] and "security" not in line and "debian" in line:
                return next(w for w in words[1:] if "://" in w)
    return "http://deb.debian.org/debian"


def _base_tarball() -> Path:
    """A minbase Debian with :data:`PACKAGES`, built once per package list and mirror."""
    mmdebstrap = debian.require("mmdebstrap", "mmdebstrap")
    mirror = _mirror()
    key = hashlib.sha256(f"{SUITE} {' '.join(PACKAGES)} {mirror}".encode()).hexdigest()[:16]
    tarball = CACHE / f"base-{SUITE}-{key}.tar"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(f".{os.getpid()}.tar")
        subprocess.run(
            [mmdebstrap, "--variant=minbase", "--mode=root", f"--include={','.join(PACKAGES)}"]
            + [SUITE, str(partial), mirror],
            check=True,
            capture_output=True,
            timeout=900,
        )
        partial.replace(tarball)
    return tarball


def _wheels(directory: Path) -> Path:
    """kafkaguard and its dependencies as wheels, plus the build requirements
    (``pyproject.toml``'s ``[build-system]``: setuptools, and mypy for setup.py's mypyc)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # the image's default EXTRAS (the Containerfile's ARG)
    wheel = [*pip, "wheel", "-w", str(directory), f"{ROOT}[kafka]"]
    subprocess.run(wheel, check=True, timeout=600)
    build_requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    subprocess.run(
        [*pip, "download", "-d", str(directory), *build_requires["requires"]],
        check=True,
        timeout=600,
    )
    return directory


def _build(buildah: list[str], *args: str, context: Path) -> None:
    done = subprocess.run(
        [*buildah, "bud", "--isolation", "chroot", *args, str(context)],
        cwd=context,  # relative paths in args (docs/deploying.md's -f) are the context's
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    tool = debian.require("buildah", "buildah")
    work = tmp_path_factory.mktemp("container")
    buildah = [
        tool,
        "--storage-driver",
        "vfs",
        "--root",
        str(work / "storage"),
        "--runroot",
        str(work / "run"),
    ]
    base = work / "base"
    base.mkdir()
    os.link(_base_tarball(), base / "base.tar")
    (base / "Containerfile").write_text('FROM scratch\nADD base.tar /\nCMD ["/bin/sh"]\n')
    _build(buildah, "-t", "localhost/kafkaguard-base:test", context=base)
    wheels = _wheels(work / "wheels")
    name = "localhost/kafkaguard:test"
    # docs/deploying.md's build line as written, plus what this machine needs: the Debian
    # base, and the wheels instead of an index.
    documented = next(c for c in deploying_commands("buildah") if "--target" not in c)
    assert documented[:2] == ["buildah", "bud"] and documented[-1] == "."
    assert documented[documented.index("-f") + 1] == str(CONTAINERFILE.relative_to(ROOT))
    _build(
        buildah,
        *documented[2:-1],
        "--build-arg",
        "BASE=localhost/kafkaguard-base:test",
        "--build-arg",
        "PIP_OPTIONS=--no-index --find-links /wheels",
        "-v",
        f"{wheels}:/wheels:ro",
        "-t",
        name,
        context=ROOT,
    )
    listed = subprocess.run(
        [*buildah, "images", "--json", name], capture_output=True, text=True, check=True
    )
    size = json.loads(listed.stdout)[0]["size"]  # as buildah prints it, e.g. "315 MB"
    try:
        yield Image(buildah, name, size)
    finally:
        subprocess.run([*buildah, "rm", "--all"], capture_output=True, timeout=120)
        subprocess.run([*buildah, "rmi", "--all", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)


def _inspect(image: Image) -> dict[str, object]:
    done = subprocess.run(
        [*image.buildah, "inspect", "--type", "image", image.name],
        capture_output=True,
        text=True,
        check=True,
    )
    config: dict[str, object] = json.loads(done.stdout)["OCIv1"]["config"]
    return config


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_the_image_runs_as_operators_expect(image: Image) -> None:
    config = _inspect(image)
    assert config["User"] == "10001:10001"  # not root
    assert config["StopSignal"] == "SIGTERM" and "9404/tcp" in config["ExposedPorts"]  # type: ignore[operator]
    assert config["Entrypoint"] == ["kafkaguard"]
    assert config["Cmd"] == ["run", "--config", "/etc/kafkaguard/config.yaml"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == "0.1.0"  # type: ignore[index]
    assert "org.opencontainers.image.source" in labels  # type: ignore[operator]
    print(f"image size: {image.size}")  # recorded in the test log (docs/deploying.md)


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_the_proxy_serves_from_the_image(image: Image, tansu: TansuBroker, tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    port, admin = free_port(), free_port()
    (etc / "config.yaml").write_text(
        f"upstream:\n  bootstrap_servers: ['{tansu.address}']\n"
        "listeners:\n"
        f"  - name: PLAINTEXT\n    bind_host: 127.0.0.1\n    port: {port}\n"
        f"    broker_ports: {{base: {free_base([TANSU_NODE_ID])}}}\n"
        f"admin:\n  port: {admin}\n"
        "acl_store:\n  type: file\n  path: acls.yaml\n",
        encoding="utf-8",
    )
    shutil.copyfile(ROOT / "kafkaguard" / "demo" / "acls.yaml", etc / "acls.yaml")
    for path in (etc, *etc.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the image's user
    container = subprocess.run(
        [*image.buildah, "from", image.name], capture_output=True, text=True, check=True
    ).stdout.strip()
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        # The image's entry point and command, as a runtime would run them.
        process = subprocess.Popen(
            [*image.buildah, "run", "--isolation", "chroot", "-v", f"{etc}:/etc/kafkaguard:ro"]
            + [container, "--", "kafkaguard", "run", "--config", "/etc/kafkaguard/config.yaml"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(admin, process, log)
        bootstrap = f"127.0.0.1:{port}"
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000})
        producer.produce("demo-image", b"through the image")
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "demo-image",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["demo-image"])
        try:
            message = None
            deadline = time.monotonic() + 60
            while message is None or message.error():
                assert time.monotonic() < deadline, "nothing consumed through the image"
                message = consumer.poll(1)
            assert message.value() == b"through the image"
        finally:
            consumer.close()
        errors: list[KafkaError] = []
        denied = Producer(
            {
                "bootstrap.servers": bootstrap,
                "message.timeout.ms": 20000,
                "error_cb": errors.append,
            }
        )
        denied.produce("demo-secret", b"nope", on_delivery=lambda e, _m: errors.append(e))
        denied.flush(30)
        codes = {e.code() for e in errors if e is not None}
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, errors
        # As a runtime stops a container: SIGTERM to its main process (buildah run does not
        # forward signals), which drains and exits 0; buildah run exits with its status.
        os.kill(_proxy_pid(process.pid), signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        subprocess.run([*image.buildah, "rm", container], capture_output=True, timeout=60)


def _proxy_pid(ancestor: int) -> int:
    """The ``kafkaguard run`` process below ``ancestor`` (``buildah run``), from /proc."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                commands[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    for pid, command in commands.items():
        # The venv's script under its Python, not buildah's chroot-exec wrapper around it.
        if b"/opt/kafkaguard/bin/kafkaguard\0run\0" not in command or command.startswith(
            b"buildah"
        ):
            continue
        up = pid
        while up > 1 and up != ancestor:
            up = parents.get(up, 0)
        if up == ancestor:
            return pid
    raise AssertionError(f"no kafkaguard run process below {ancestor}")


def _wait_ready(admin: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the proxy did not become ready:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
