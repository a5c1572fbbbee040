"""The KnowledgeSource CRD: strict validity, documented fields, and its examples."""

from __future__ import annotations

import copy
import datetime
import enum
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from kboperator.kube.resource import KnowledgeSourceSpec, KnowledgeSourceStatus
from kboperator.kube.secrets import REPOSITORY_KEYS, SEARCH_TOKEN_KEYS, SECRET_TYPE_LABEL
from tests.operator.kube.support import CRD_FILE, crd_document, crd_schema, strict_schema
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLES = sorted((ROOT / "crds" / "examples").glob("*.yaml"))
INVALID = sorted((ROOT / "crds" / "examples" / "invalid").glob("*.yaml"))


def _validator() -> jsonschema.Draft4Validator:
    # The CRD dialect is OpenAPI v3.0, closest to draft 4; format checks as the API server does.
    return jsonschema.Draft4Validator(strict_schema(crd_schema()), format_checker=jsonschema.FormatChecker())


def _sources(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "KnowledgeSource"]


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def test_names_are_the_agreed_ones() -> None:
    crd = crd_document()
    assert crd["metadata"]["name"] == "knowledgesources.kb.knowledgebase.dev"
    assert crd["spec"]["group"] == "kb.knowledgebase.dev"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == "KnowledgeSource"
    assert crd["spec"]["names"]["plural"] == "knowledgesources"
    assert crd["spec"]["names"]["shortNames"] == ["ks"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Ready", "Commit", "Documents", "Progress", "Last Sync", "Age"]
    progress = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Progress")
    assert progress["jsonPath"] == ".status.progress.summary"  # 25/126 while a sync runs, empty otherwise


def test_kubernetes_validate_strict_accepts_the_crd() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", str(CRD_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_schema_field_has_a_description() -> None:
    # The API server refuses anything but `type` on metadata (it is the standard ObjectMeta).
    missing = [
        path or "<root>" for path, node in _nodes(crd_schema()) if not node.get("description") and path != ".metadata"
    ]
    assert missing == []
    assert crd_schema()["properties"]["metadata"] == {"type": "object"}


def test_every_default_is_valid_for_its_own_field() -> None:
    invalid = [
        path
        for path, node in _nodes(crd_schema())
        if "default" in node and not jsonschema.Draft4Validator(node).is_valid(node["default"])
    ]
    assert invalid == []


def _mismatches(annotation: Any, node: dict[str, Any], path: str) -> list[str]:
    """Where a model's type and the CRD schema's node disagree (fields, types, enums, requiredness)."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType):  # `X | None`: the field may be absent
        (annotation,) = args
        return _mismatches(annotation, node, path)
    origin, kind = get_origin(annotation), node.get("type")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if kind != "object":
            return [f"{path}: a model, but the CRD says {kind}"]
        fields = {field.alias: field for field in annotation.model_fields.values()}
        declared = node.get("properties", {})
        problems = [f"{path}.{key}: in the model, not in the CRD" for key in fields.keys() - declared.keys()]
        problems += [f"{path}.{key}: in the CRD, not in the model" for key in declared.keys() - fields.keys()]
        required = {key for key, field in fields.items() if field.is_required()}
        if required != set(node.get("required", ())):
            problems.append(f"{path}: the model requires {sorted(required)}, the CRD {node.get('required', [])}")
        for key in fields.keys() & declared.keys():
            problems += _mismatches(fields[key].annotation, declared[key], f"{path}.{key}")
        return problems
    if origin is list:
        inner = _mismatches(args[0], node.get("items", {}), f"{path}[]")
        return inner if kind == "array" else [f"{path}: a list, but the CRD says {kind}", *inner]
    if origin is dict:
        if kind != "object":
            return [f"{path}: a dict, but the CRD says {kind}"]
        value = args[1]
        children = [(f"{path}{{}}", node["additionalProperties"])] if "additionalProperties" in node else []
        children += [(f"{path}.{key}", child) for key, child in node.get("properties", {}).items()]
        return [] if value is Any else [p for where, child in children for p in _mismatches(value, child, where)]
    if origin is Literal or (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        values = list(args) if origin is Literal else [member.value for member in annotation]
        return [] if kind == "string" and node.get("enum") == values else [f"{path}: {values} is not {node}"]
    if annotation is datetime.datetime:
        return [] if (kind, node.get("format")) == ("string", "date-time") else [f"{path}: a time, not {node}"]
    expected = {str: "string", bool: "boolean", int: "integer", float: "number"}.get(annotation)
    return [] if expected == kind else [f"{path}: {annotation} in the model, {kind} in the CRD"]


def test_the_spec_model_is_the_crds_spec() -> None:
    assert _mismatches(KnowledgeSourceSpec, crd_schema()["properties"]["spec"], "spec") == []


def test_the_spec_models_defaults_are_the_crds() -> None:
    def defaults(model: type[BaseModel], node: dict[str, Any], path: str) -> Iterator[tuple[str, Any, Any]]:
        for field in model.model_fields.values():
            child = node["properties"][field.alias]
            if "default" in child:
                yield f"{path}.{field.alias}", field.get_default(call_default_factory=True), child["default"]
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from defaults(field.annotation, child, f"{path}.{field.alias}")

    pairs = list(defaults(KnowledgeSourceSpec, crd_schema()["properties"]["spec"], "spec"))
    assert [where for where, model, crd in pairs if model != crd] == []
    assert {where for where, _, _ in pairs} == {
        "spec.repository.ref", "spec.paths", "spec.exclude", "spec.maxFileSizeBytes", "spec.schedule",
        "spec.suspend", "spec.deletionPolicy", "spec.driftPolicy",
    }  # fmt: skip


def test_the_status_model_is_the_crds_status() -> None:
    # A structural schema prunes undeclared status fields: one the model has and the CRD lacks is lost.
    status = copy.deepcopy(crd_schema()["properties"]["status"])
    kopf = status["properties"].pop("kopf")  # kopf's own progress: the model keeps it as an extra key
    assert kopf["x-kubernetes-preserve-unknown-fields"] is True
    assert KnowledgeSourceStatus.model_config.get("extra") == "allow"
    assert _mismatches(KnowledgeSourceStatus, status, "status") == []


def test_the_model_comparison_finds_a_difference() -> None:
    spec = copy.deepcopy(crd_schema()["properties"]["spec"])
    spec["properties"]["suspend"]["type"] = "string"
    spec["properties"]["newField"] = {"type": "string"}
    del spec["properties"]["webhook"]
    assert sorted(_mismatches(KnowledgeSourceSpec, spec, "spec")) == [
        "spec.newField: in the CRD, not in the model",
        "spec.suspend: <class 'bool'> in the model, string in the CRD",
        "spec.webhook: in the model, not in the CRD",
    ]


def test_there_are_examples_of_both_kinds() -> None:
    assert len(EXAMPLES) >= 4 and len(INVALID) >= 5


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    sources = _sources(path)
    assert sources, "each example holds a KnowledgeSource"
    for source in sources:
        assert source["apiVersion"] == "kb.knowledgebase.dev/v1alpha1"
        _validator().validate(source)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example_is_rejected(path: Path) -> None:
    (source,) = _sources(path)
    errors = list(_validator().iter_errors(source))
    assert errors, f"{path.name} was accepted"


@pytest.mark.parametrize(
    ("url", "valid"),
    [
        ("https://github.com/org/repo", True),
        ("https://git.example.com:8443/group/sub/repo.git", True),
        ("git@github.com:org/repo.git", True),
        ("ssh://git@host.example.com:2222/org/repo.git", True),
        ("ssh://host/org/repo", True),
        ("/srv/git/docs", True),
        ("file:///srv/git/docs", True),
        ("-oProxyCommand=sh", False),
        ("git@-oProxyCommand=sh:repo", False),
        ("-u@host:repo", False),
        ("https://user:pass@github.com/org/repo", False),
        ("ftp://example.com/repo", False),
        ("relative/path", False),
        ("ext::sh -c touch% /tmp/pwned", False),
    ],
)
def test_repository_url_pattern(url: str, valid: bool) -> None:
    source = {"spec": {"repository": {"url": url}}}
    assert _validator().is_valid(source) is valid


@pytest.mark.parametrize(
    ("schedule", "valid"),
    [
        ("@every 1h", True),
        ("@every 1h30m", True),
        ("@every 500ms", True),
        ("@daily", True),
        ("*/5 * * * *", True),
        ("0 3 * * 1-5", True),
        ("@every", False),
        ("@every 1d", False),
        ("* * * *", False),
        ("hourly", False),
    ],
)
def test_schedule_pattern(schedule: str, valid: bool) -> None:
    source = {"spec": {"repository": {"url": "https://github.com/o/r"}, "schedule": schedule}}
    assert _validator().is_valid(source) is valid


def _secrets(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "Secret"]


def test_example_secrets_opt_in_for_their_use_with_fixed_keys() -> None:
    """What a user copies must work: the operator ignores a Secret without the label, and other keys."""
    uses = {"repository": set(REPOSITORY_KEYS), "search-token": set(SEARCH_TOKEN_KEYS)}
    seen = set()
    for path in EXAMPLES:
        secrets = {s["metadata"]["name"]: s for s in _secrets(path)}
        for source in _sources(path):
            spec = source["spec"]
            for use, ref in (
                ("repository", spec["repository"].get("secretRef")),
                ("search-token", spec.get("searchService", {}).get("secretRef")),
            ):
                if not ref:
                    continue
                secret = secrets[ref["name"]]
                assert secret["metadata"]["labels"] == {SECRET_TYPE_LABEL: use}, path.name
                assert set(secret["stringData"]) <= uses[use], path.name
                assert "key" not in ref, path.name
                seen.add(use)
    assert seen == set(uses)


@pytest.mark.parametrize(("key", "valid"), [("token", True), ("api-token", False), ("", False)])
def test_the_search_token_key_is_fixed(key: str, valid: bool) -> None:
    source = {
        "spec": {
            "repository": {"url": "https://github.com/o/r"},
            "searchService": {"secretRef": {"name": "s", "key": key}},
        }
    }
    assert _validator().is_valid(source) is valid


@pytest.mark.parametrize(
    ("spec", "valid"),
    [
        ({"webhook": {"secretRef": {"name": "docs-webhook"}}}, True),
        ({"webhook": {"secretRef": {"name": "docs-webhook"}}, "freshnessBoundSeconds": 900}, True),
        ({"webhook": {"secretRef": {}}}, False),  # the Secret's name is required
        ({"webhook": {"secretRef": {"name": "Not_A_Name"}}}, False),
        ({"webhook": {"secretRef": {"name": "s", "namespace": "other"}}}, False),  # only the source's own namespace
        ({"webhook": {"url": "https://example.com/hook"}}, False),
        ({"freshnessBoundSeconds": 0}, False),
    ],
)
def test_webhook_and_freshness_fields(spec: dict[str, Any], valid: bool) -> None:
    source = {"spec": {"repository": {"url": "https://github.com/o/r"}, **spec}}
    assert _validator().is_valid(source) is valid
