"""Run the real helm binary against the chart, and look things up in what it renders."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "knowledge-base"
VALUES_DIR = Path(__file__).resolve().parent / "values"
RELEASE = "kb"
NAMESPACE = "kb-system"
# The Kubernetes version the manifests are rendered for and validated against: that of the
# kubectl shipped next to our helm binary (kubernetes-validate has schemas for 1.25 to 1.37).
KUBE_VERSION = "1.33.0"

# Scenario name -> values file (None: the chart's defaults).
SCENARIOS: dict[str, Path | None] = {
    "default": None,
    "embedded": VALUES_DIR / "embedded.yaml",
    "qdrant-server": VALUES_DIR / "qdrant-server.yaml",
    "external-openai": VALUES_DIR / "external-openai.yaml",
    "namespaced-netpol": VALUES_DIR / "namespaced-netpol.yaml",
    "kubernetes-auth": VALUES_DIR / "kubernetes-auth.yaml",
}


@functools.cache
def helm_binary() -> str:
    """helm on PATH, else the one `make helm` installs. Missing helm is a failure, never a skip."""
    found = shutil.which("helm")
    if found:
        return found
    local = REPO / ".tools" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    pytest.fail("no helm binary on PATH or at .tools/helm; run `make helm` (see Makefile)", pytrace=False)


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False)


def values_args(scenario: str) -> list[str]:
    path = SCENARIOS[scenario]
    return ["-f", str(path)] if path else []


# A render here has no cluster: the chart refuses to make up tokens unless told the render is throwaway.
NO_CLUSTER_OK = ("--set", "auth.generateWithoutCluster=true")


def template(*args: str, throwaway: bool = True) -> subprocess.CompletedProcess[str]:
    return run_helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        "--include-crds",
        *(NO_CLUSTER_OK if throwaway else ()),
        *args,
    )


@dataclass(frozen=True)
class Manifests:
    """The objects one `helm template` produced."""

    docs: tuple[dict, ...]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.docs)

    def all(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict:
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
        return found[0]

    def names(self, kind: str) -> set[str]:
        return {d["metadata"]["name"] for d in self.all(kind)}

    def pod_specs(self) -> list[tuple[str, dict, dict]]:
        """(object name, pod metadata, pod spec) of every workload and bare pod."""
        out = []
        for doc in self.docs:
            if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
                tpl = doc["spec"]["template"]
                out.append((f"{doc['kind']}/{doc['metadata']['name']}", tpl["metadata"], tpl["spec"]))
            elif doc["kind"] == "Pod":
                out.append((f"Pod/{doc['metadata']['name']}", doc["metadata"], doc["spec"]))
        return out


def parse(stdout: str) -> Manifests:
    return Manifests(tuple(doc for doc in yaml.safe_load_all(stdout) if doc))


def render_ok(*args: str) -> Manifests:
    result = template(*args)
    assert result.returncode == 0, f"helm template {' '.join(args)} failed:\n{result.stderr}"
    return parse(result.stdout)


@functools.cache
def render(scenario: str) -> Manifests:
    return render_ok(*values_args(scenario))


def render_error(*args: str) -> str:
    """The error of a render that must fail."""
    result = template(*args)
    assert result.returncode != 0, f"helm template {' '.join(args)} rendered, but it should have failed"
    return result.stderr


def assert_schema_rejects(args: list[str], where: str) -> None:
    """values.schema.json refuses the render, naming the offending value's path."""
    error = render_error(*args)
    assert "don't meet the specifications of the schema" in error, error
    assert where in error, error


@functools.cache
def notes(scenario: str) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run needs no cluster)."""
    result = run_helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
        "--output",
        "json",
        *NO_CLUSTER_OK,
        *values_args(scenario),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["info"]["notes"]


def env_of(container: dict) -> dict[str, dict]:
    """A container's env as name -> EnvVar."""
    return {item["name"]: item for item in container.get("env", [])}


def container(manifests: Manifests, kind: str, name: str, container_name: str) -> dict:
    spec = manifests.one(kind, name)["spec"]["template"]["spec"]
    (found,) = [c for c in spec["containers"] if c["name"] == container_name]
    return found


OPERATOR = f"{RELEASE}-knowledge-base-operator"
SEARCH = f"{RELEASE}-knowledge-base-search"
QDRANT = f"{RELEASE}-knowledge-base-qdrant"
TOKENS = f"{RELEASE}-knowledge-base-tokens"
# The Kubernetes username of the operator's ServiceAccount.
OPERATOR_USERNAME = f"system:serviceaccount:{NAMESPACE}:{OPERATOR}"
