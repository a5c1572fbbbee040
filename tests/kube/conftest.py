"""End-to-end tests on a real control plane (tests/support/controlplane.py): the chart installed
with helm in both modes, the operator and the search service as local processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kube.cluster import AUDIENCE, Operator, Release, SearchService, install, operators
from tests.kube.support import Clusterwide
from tests.support.controlplane import ControlPlane

#: Cluster-wide install (a ClusterRole), with the search service in Kubernetes auth mode.
CLUSTERWIDE = Release("kb", "kb-system", ())
#: Namespaced install: Roles in the one watched namespace only.
NAMESPACED = Release("kbns", "kb-ns", ("team-ns",))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/kube/" in item.nodeid:
            item.add_marker(pytest.mark.kube)


@pytest.fixture(scope="session")
def releases(control_plane: ControlPlane) -> dict[str, Release]:
    """Both of the chart's install modes, installed once per session as a user would."""
    return {
        "clusterwide": install(
            control_plane,
            CLUSTERWIDE,
            "auth.mode=kubernetes",
            f"auth.kubernetes.audiences[0]={AUDIENCE}",
            "auth.kubernetes.cacheSeconds=1",
        ),
        "namespaced": install(control_plane, NAMESPACED),
    }


@pytest.fixture(scope="session")
def search(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchService]:
    """One search service (static tokens) shared by the operator tests; sources never overlap."""
    service = SearchService(tmp_path_factory.mktemp("search"))
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def operator_root(tmp_path: Path) -> Path:
    (tmp_path / "repos").mkdir()
    return tmp_path / "operator"


@pytest.fixture
def run_operator(
    control_plane: ControlPlane,
    search: SearchService,
    operator_root: Path,
) -> Iterator[Callable[..., Operator]]:
    """Start operators for a release; each is stopped at the end, and none may have been refused."""
    with operators(control_plane, search, operator_root) as start:
        yield start


@pytest.fixture
def clusterwide(
    control_plane: ControlPlane,
    releases: dict[str, Release],
    search: SearchService,
    run_operator: Callable[..., Operator],
    operator_root: Path,
    tmp_path: Path,
) -> Clusterwide:
    """The cluster-wide release with the search service, operators to start, repositories and a temp dir."""
    return Clusterwide(control_plane, releases["clusterwide"], search, run_operator, operator_root, tmp_path)
