"""docs/security-model.md's worked examples are what they say: the nftables ruleset is one
``nft`` accepts, the NetworkPolicy admits the pods the Helm chart runs (and only them, with
the brokers), and the security-group rules admit other groups, never an address range."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support import debian, docs, kubernetes

PAGE = "security-model.md"
CHART = docs.ROOT / "deploy" / "helm" / "kafkaguard"


def test_the_nftables_ruleset_is_valid(tmp_path: Path) -> None:
    nft = debian.require("nft", "nftables")
    (ruleset,) = docs.blocks(PAGE, "### nftables on the broker hosts", "")
    assert "tcp dport { 9092, 9093 } drop" in ruleset
    path = tmp_path / "kafka-brokers.nft"
    path.write_text(ruleset, encoding="utf-8")
    done = subprocess.run(
        [nft, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    broken = tmp_path / "broken.nft"  # the check is a real one
    broken.write_text(ruleset.replace("ip saddr @kafkaguard", "ip saddr @nosuchset"), "utf-8")
    done = subprocess.run(
        [nft, "-c", "-f", str(broken)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0


def _chart_pod_labels() -> dict[str, str]:
    helm = kubernetes.require(kubernetes.helm_path(), "helm")
    done = subprocess.run(
        [str(helm), "template", "kafkaguard", str(CHART), "--kube-version", "1.30.0",
         "--namespace", "kafkaguard", "--show-only", "templates/deployment.yaml"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels: dict[str, str] = yaml.safe_load(done.stdout)["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_network_policy_admits_the_charts_pods_and_the_brokers_only() -> None:
    (text,) = docs.blocks(PAGE, "### A Kubernetes NetworkPolicy", "yaml")
    policy: dict[str, Any] = yaml.safe_load(text)
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    brokers = spec["podSelector"]["matchLabels"]
    proxies, themselves = spec["ingress"]
    (peer,) = proxies["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kafkaguard"}
    assert peer["podSelector"]["matchLabels"].items() <= _chart_pod_labels().items()
    assert [p["port"] for p in proxies["ports"]] == [9092]
    assert themselves["from"] == [{"podSelector": {"matchLabels": brokers}}]


def test_the_security_group_rules_admit_groups_only() -> None:
    (block,) = docs.blocks(PAGE, "### AWS security groups", "sh")
    rules = [
        shlex.split(line, comments=True)
        for line in block.replace("\\\n", " ").splitlines()
        if "authorize-security-group-ingress" in line
    ]
    assert len(rules) == 2
    sources = {}
    for words in rules:
        assert "--cidr" not in words and words[words.index("--group-id") + 1] == "sg-0brokers"
        sources[words[words.index("--port") + 1]] = words[words.index("--source-group") + 1]
    assert sources == {"9092": "sg-0kafkaguard", "9092-9093": "sg-0brokers"}
