"""Invalid KnowledgeSources are refused by the API server itself (schema and CEL rules), with a
message that names the field, before the operator ever sees them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.kube.cluster import Release
from tests.support.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
INVALID = sorted((ROOT / "crds" / "examples" / "invalid").glob("*.yaml"))
VALID = sorted((ROOT / "crds" / "examples").glob("*.yaml"))

#: The field each invalid example gets wrong, as the API server names it.
FIELD = {
    "bad-deletion-policy": "spec.deletionPolicy",
    "bad-drift-policy": "spec.driftPolicy",
    "bad-schedule": "spec.schedule",
    "credentials-in-url": "spec.repository.url",
    "empty-paths": "spec.paths",
    "missing-repository": "spec.repository",
    "non-string-metadata": "spec.metadata",
    "plain-http": "spec.repository.url",
    "ref-option-injection": "spec.repository.ref",
    "search-token-key": "spec.searchService.secretRef.key",
    "unknown-field": "unknown field",
    "url-option-injection": "spec.repository.url",
    "zero-max-file-size": "spec.maxFileSizeBytes",
}

#: Refused only by the CRD's CEL rules (x-kubernetes-validations), with their messages.
CEL_CASES = {
    "query-in-url": (
        {"repository": {"url": "https://git.example/org/docs?ref=x"}},
        "the repository URL must not have a query or fragment",
    ),
    "zero-interval": (
        {"repository": {"url": "https://git.example/org/docs"}, "schedule": "@every 0s"},
        "longer than zero",
    ),
    "reserved-metadata": (
        {"repository": {"url": "https://git.example/org/docs"}, "metadata": {"path": "x"}},
        "metadata keys sourceIdentifier, repository, ref, commit and path are reserved",
    ),
    "bad-ref": ({"repository": {"url": "https://git.example/org/docs", "ref": "a..b"}}, "valid git branch or tag"),
    "version-pattern-without-group": (
        {"repository": {"url": "https://git.example/org/docs"}, "versionPattern": "docs/([^/]+)/"},
        "the version pattern needs a group named version",
    ),
}


def dry_run(plane: ControlPlane, path: Path) -> tuple[int, str]:
    """`kubectl apply --dry-run=server`: the API server validates in full and stores nothing."""
    done = plane.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def example_namespaces(control_plane: ControlPlane, releases: dict[str, Release]) -> None:
    for path in INVALID + VALID:
        for doc in yaml.safe_load_all(path.read_text()):
            namespace = (doc or {}).get("metadata", {}).get("namespace")
            if namespace and control_plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
                control_plane.kubectl("create", "namespace", namespace)


def test_every_invalid_example_has_a_field() -> None:
    assert sorted(FIELD) == [p.stem for p in INVALID]


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_an_invalid_example_is_refused_naming_the_field(
    control_plane: ControlPlane, example_namespaces: None, path: Path
) -> None:
    code, message = dry_run(control_plane, path)
    assert code != 0, f"{path.name} was accepted"
    assert FIELD[path.stem] in message, message


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_a_valid_example_is_accepted(control_plane: ControlPlane, example_namespaces: None, path: Path) -> None:
    code, message = dry_run(control_plane, path)
    assert code == 0, message


@pytest.mark.parametrize("case", sorted(CEL_CASES))
def test_a_cel_rule_refuses_with_its_message(
    control_plane: ControlPlane, releases: dict[str, Release], tmp_path: Path, case: str
) -> None:
    spec, message = CEL_CASES[case]
    body = {
        "apiVersion": "kb.knowledgebase.dev/v1alpha1",
        "kind": "KnowledgeSource",
        "metadata": {"name": case, "namespace": "default"},
        "spec": spec,
    }
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump(body))
    code, refused = dry_run(control_plane, path)
    assert code != 0 and message in refused, refused
