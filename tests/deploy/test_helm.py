"""deploy/helm/kafkaguard: ``helm lint --strict`` accepts the chart, every object ``helm
template`` renders decodes strictly into Kubernetes' own API types (tests/support/k8s_validate,
``k8s.io/api``), and what the chart derives from the configuration it writes agrees with that
configuration as kafkaguard loads it: the Service and container ports are the listeners' and
the admin listener's, the probes reach ``/healthz`` and ``/readyz`` there, the command line
reads the mounted ConfigMap, every file the configuration names is mounted, and the pod
outlives the drain. Two shapes: the default values and ``ci/tls-sasl-sni-values.yaml``. The
chart's values.schema.json is what ``kafkaguard config-schema --helm-values`` generates, and
makes ``helm lint --strict`` refuse a mistyped value naming its path."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from kafkaguard.cli import build_parser, main
from kafkaguard.proxy.config import ProxyConfig, load_config
from tests.support import kubernetes
from tests.support.docs import deploying_commands

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "kafkaguard"
KUBE_VERSION = "1.30.0"
"""The chart's minimum (Chart.yaml ``kubeVersion``: the ``preStop`` sleep action), which
``helm template`` renders for (it has no cluster to ask)."""
SHAPES = {"default": [], "tls-sasl-sni": ["-f", str(CHART / "ci" / "tls-sasl-sni-values.yaml")]}


@dataclass(frozen=True)
class Rendered:
    text: str
    objects: dict[tuple[str, str], dict[str, Any]]
    """(kind, name) → object."""
    values: dict[str, Any]

    def one(self, kind: str, name: str = "release-kafkaguard") -> dict[str, Any]:
        return self.objects[(kind, name)]


def _helm(*argv: str) -> subprocess.CompletedProcess[str]:
    helm = kubernetes.require(kubernetes.helm_path(), "helm")
    return subprocess.run(
        [str(helm), *argv], capture_output=True, text=True, timeout=120, check=False
    )


def _values(shape: str) -> dict[str, Any]:
    """The values Helm renders with: the chart's defaults, the shape's file merged over them
    (maps merge, lists and scalars replace, as Helm's coalescing does)."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base.get(k), over[k]) if k in over else base[k] for k in base | over}
        return over

    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for path in SHAPES[shape][1::2]:
        values = merge(values, yaml.safe_load(Path(path).read_text(encoding="utf-8")))
    return values  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=sorted(SHAPES))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    done = _helm(
        "template", "release", str(CHART), "--kube-version", KUBE_VERSION, *SHAPES[request.param]
    )
    assert done.returncode == 0, done.stderr
    objects = {
        (doc["kind"], doc["metadata"]["name"]): doc
        for doc in yaml.safe_load_all(done.stdout)
        if doc
    }
    return Rendered(done.stdout, objects, _values(request.param))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_helm_lint_strict(shape: str) -> None:
    done = _helm("lint", "--strict", str(CHART), *SHAPES[shape])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_values_schema_is_generated_from_config_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """values.schema.json is what ``kafkaguard config-schema --helm-values`` prints: a
    configuration key added, renamed or given a range changes it. To regenerate:
    ``kafkaguard config-schema --helm-values deploy/helm/kafkaguard/values.yaml >
    deploy/helm/kafkaguard/values.schema.json``."""
    assert main(["config-schema", "--helm-values", str(CHART / "values.yaml")]) == 0
    generated = capsys.readouterr().out
    committed = (CHART / "values.schema.json").read_text(encoding="utf-8")
    assert committed == generated, "values.schema.json is stale: regenerate it (docstring)"


@pytest.mark.parametrize(
    ("values", "refusals"),
    [
        (
            "config:\n  listeners:\n    - name: EXTERNAL\n      bind_host: 0.0.0.0\n"
            "      port: 9092\n      advertized_host: proxy.example.com\n",
            ["at '/config/listeners/0': additional properties 'advertized_host' not allowed"],
        ),
        (
            "config:\n  listeners:\n    - {name: EXTERNAL, port: 99192}\n",
            ["at '/config/listeners/0/port': maximum: got 99,192, want 65,535"],
        ),
        (
            "replicaCounts: 3\nservice: {typ: ClusterIP}\n",
            [
                "at '': additional properties 'replicaCounts' not allowed",
                "at '/service': additional properties 'typ' not allowed",
            ],
        ),
    ],
    ids=["config-key", "config-port", "chart-keys"],
)
def test_helm_lint_strict_refuses_a_mistyped_value_naming_its_path(
    tmp_path: Path, values: str, refusals: list[str]
) -> None:
    """The chart's values.schema.json: a mistyped configuration key fails ``helm lint`` (and
    ``helm install``) with its path, not pods that crash-loop on check-config."""
    file = tmp_path / "values.yaml"
    file.write_text(values, encoding="utf-8")
    done = _helm("lint", "--strict", str(CHART), "-f", str(file))
    assert done.returncode == 1, done.stdout + done.stderr
    for refusal in refusals:
        assert refusal in done.stdout, done.stdout


def _validate(text: str) -> subprocess.CompletedProcess[str]:
    validator = kubernetes.require(kubernetes.validator_path(), "k8s-validate")
    return subprocess.run(
        [str(validator)], input=text, capture_output=True, text=True, timeout=60, check=False
    )


def test_every_object_decodes_strictly_into_kubernetes_types(rendered: Rendered) -> None:
    done = _validate(rendered.text)
    assert done.returncode == 0, done.stderr
    printed = {tuple(line.split(" ", 1)) for line in done.stdout.splitlines()}
    assert printed == set(rendered.objects)


def test_the_validator_refuses_a_misspelt_field(rendered: Rendered) -> None:
    """The strict decoding is what catches a template typo: the same output with one field
    misspelt fails, naming it."""
    assert "readinessProbe:" in rendered.text
    done = _validate(rendered.text.replace("readinessProbe:", "readinesProbe:", 1))
    assert done.returncode == 1 and 'unknown field "readinesProbe"' in done.stderr


def _loaded(rendered: Rendered, tmp_path: Path) -> ProxyConfig:
    """The ConfigMap's files as kafkaguard reads them, from a copy of the mount."""
    for name, text in rendered.one("ConfigMap")["data"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return load_config(tmp_path / "config.yaml")


def _container(rendered: Rendered) -> dict[str, Any]:
    (container,) = rendered.one("Deployment")["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def _client_ports(config: ProxyConfig, node_ids: list[int]) -> set[int]:
    """Every port kafkaguard serves clients on, for these upstream node ids."""
    ports = set()
    for listener in config.listeners:
        ports.add(listener.port)
        if listener.sni is None:
            ports |= {p for n in node_ids if (p := listener.broker_ports.port_for(n)) is not None}
    return ports


def test_the_ports_are_the_configurations(rendered: Rendered, tmp_path: Path) -> None:
    config = _loaded(rendered, tmp_path)
    assert config.admin is not None
    wanted = _client_ports(config, rendered.values["brokerNodeIds"])
    service = {p["port"] for p in rendered.one("Service")["spec"]["ports"]}
    assert service == wanted
    (admin_service,) = rendered.one("Service", "release-kafkaguard-admin")["spec"]["ports"]
    assert admin_service["port"] == config.admin.port
    container = {p["name"]: p["containerPort"] for p in _container(rendered)["ports"]}
    assert container.pop("admin") == config.admin.port
    assert set(container.values()) == wanted
    for port in rendered.one("Service")["spec"]["ports"]:
        assert container[port["targetPort"]] == port["port"]


def test_the_probes_reach_the_admin_listener(rendered: Rendered, tmp_path: Path) -> None:
    config = _loaded(rendered, tmp_path)
    assert config.admin is not None and config.admin.bind_host == "0.0.0.0"
    container = _container(rendered)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and ports[get["port"]] == config.admin.port


def _mounts(rendered: Rendered) -> dict[PurePosixPath, dict[str, Any]]:
    """Mount path → the volume mounted there."""
    spec = rendered.one("Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {
        PurePosixPath(m["mountPath"]): volumes[m["name"]]
        for m in _container(rendered)["volumeMounts"]
    }


def test_the_command_reads_the_mounted_configmap(rendered: Rendered, tmp_path: Path) -> None:
    config = _loaded(rendered, tmp_path)
    args = build_parser().parse_args(_container(rendered)["args"])
    assert args.command == "run"
    mounted = _mounts(rendered)[PurePosixPath(args.config).parent]
    assert mounted["configMap"]["name"] == rendered.one("ConfigMap")["metadata"]["name"]
    # the ACL file the configuration names is in the same ConfigMap, beside it
    assert config.policy.acl_store.path is not None
    assert config.policy.acl_store.path.parent == (tmp_path / "config.yaml").resolve().parent
    assert config.policy.acl_store.path.name in rendered.one("ConfigMap")["data"]


def test_every_secret_file_is_mounted_from_its_secret(rendered: Rendered, tmp_path: Path) -> None:
    config = _loaded(rendered, tmp_path)
    files: dict[str, list[Path]] = {"tls": [], "users": []}
    for listener in config.listeners:
        if listener.ssl is not None:
            tls = listener.ssl
            files["tls"] += [p for p in (tls.cert_file, tls.key_file, tls.ca_file) if p]
        if listener.sasl is not None and listener.sasl.credentials_file is not None:
            files["users"].append(listener.sasl.credentials_file)
    mounts = _mounts(rendered)
    for secret, paths in files.items():
        for path in paths:
            volume = mounts[PurePosixPath(path).parent]
            assert volume["secret"]["secretName"] == rendered.values["secrets"][secret]
    assert any(files.values()) == bool(rendered.values["secrets"]["tls"])


def test_the_pod_outlives_the_drain(rendered: Rendered, tmp_path: Path) -> None:
    config = _loaded(rendered, tmp_path)
    spec = rendered.one("Deployment")["spec"]["template"]["spec"]
    sleep = _container(rendered)["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert sleep > 0
    assert spec["terminationGracePeriodSeconds"] > sleep + config.shutdown_timeout_ms / 1000


def test_check_config_accepts_the_default_configmap(tmp_path: Path) -> None:
    """The default values' files pass ``kafkaguard check-config`` (which opens every file the
    configuration names) as they are."""
    done = _helm(
        "template",
        "release",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--show-only",
        "templates/configmap.yaml",
    )
    assert done.returncode == 0, done.stderr
    for name, text in yaml.safe_load(done.stdout)["data"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    from kafkaguard.cli import main

    assert main(["check-config", "--config", str(tmp_path / "config.yaml")]) == 0


def test_the_readmes_helm_commands_run(tmp_path: Path) -> None:
    """docs/deploying.md's helm lines, as written (``helm install`` needs a cluster)."""
    commands = {c[1]: c for c in deploying_commands("helm")}
    assert set(commands) == {"lint", "template", "install"}
    root = CHART.parents[2]
    for verb in ("lint", "template"):
        helm = kubernetes.require(kubernetes.helm_path(), "helm")
        done = subprocess.run(
            [str(helm), *commands[verb][1:]],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert _validate(done.stdout).returncode == 0


def test_the_monitors_scrape_the_admin_port_as_job_kafkaguard(rendered: Rendered) -> None:
    """deploy/prometheus/alerts.yml selects ``job="kafkaguard"``: prometheus-operator names
    the job after the ``jobLabel`` label of the Service (ServiceMonitor) or pod (PodMonitor)."""
    monitors = {kind for kind, _ in rendered.objects if kind.endswith("Monitor")}
    assert monitors == (
        {"ServiceMonitor", "PodMonitor"}
        if rendered.values["metrics"]["podMonitor"]["enabled"]
        else set()
    )
    if not monitors:
        return
    admin = rendered.one("Service", "release-kafkaguard-admin")
    service_monitor = rendered.one("ServiceMonitor")["spec"]
    assert admin["metadata"]["labels"][service_monitor["jobLabel"]] == "kafkaguard"
    selector = service_monitor["selector"]["matchLabels"]
    assert selector.items() <= admin["metadata"]["labels"].items()
    assert [e["port"] for e in service_monitor["endpoints"]] == ["admin"]
    pod = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    pod_monitor = rendered.one("PodMonitor")["spec"]
    assert pod[pod_monitor["jobLabel"]] == "kafkaguard"
    assert pod_monitor["selector"]["matchLabels"].items() <= pod.items()
    assert [e["port"] for e in pod_monitor["podMetricsEndpoints"]] == ["admin"]
