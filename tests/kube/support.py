"""Helpers shared by the kube tests: KnowledgeSource manifests applied with kubectl, and their status."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.kube.cluster import Operator, Release, SearchService
from tests.support.controlplane import ControlPlane
from tests.support.git import WorkRepo


def source_manifest(name: str, namespace: str, repo: Path, **spec: Any) -> str:
    """The README's KnowledgeSource example, pointed at a local repository."""
    body = {
        "apiVersion": "kb.knowledgebase.dev/v1alpha1",
        "kind": "KnowledgeSource",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"repository": {"url": str(repo), "ref": "main"}, "schedule": "@every 1h", **spec},
    }
    return yaml.safe_dump(body)


def apply(plane: ControlPlane, tmp: Path, manifest: str) -> str:
    """`kubectl apply -f FILE`, as a user does."""
    path = tmp / f"manifest-{time.monotonic_ns()}.yaml"
    path.write_text(manifest)
    return plane.kubectl("apply", "-f", str(path)).stdout


def status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = plane.get("knowledgesource", name, "-n", namespace).get("status") or {}
    return found


def synced_at(plane: ControlPlane, namespace: str, name: str, commit: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        now = status(plane, namespace, name)
        return now if now.get("phase") == "Synced" and now.get("lastSyncedCommit") == commit else None

    return check


def expected(repo: WorkRepo, *paths: str) -> dict[str, str]:
    return {p: "sha256:" + hashlib.sha256((repo.path / p).read_bytes()).hexdigest() for p in paths}


def namespace_for(plane: ControlPlane, release: Release, name: str) -> str:
    """The watched namespace in namespaced mode; a fresh one in cluster-wide mode."""
    if release.watch:
        return release.watch[0]
    if plane.kubectl("get", "namespace", name, check=False).returncode != 0:
        plane.kubectl("create", "namespace", name)
    return name


@dataclass
class Clusterwide:
    """What a test of the operator on the cluster-wide release drives (the `clusterwide` fixture)."""

    plane: ControlPlane
    release: Release
    search: SearchService
    run_operator: Callable[..., Operator]
    operator_root: Path
    tmp: Path

    def namespace(self, name: str) -> str:
        return namespace_for(self.plane, self.release, name)

    def repo(self, name: str) -> WorkRepo:
        """A work repository of its own for a source (operator_root's sibling, as the operator reads them)."""
        return WorkRepo(self.operator_root.parent / "repos" / name)

    def start_operator(self, **env: str) -> Operator:
        """An operator for the release; `env` sets its KBOPERATOR_ settings."""
        return self.run_operator(self.release, **env)

    def apply(self, manifest: str) -> str:
        return apply(self.plane, self.tmp, manifest)
