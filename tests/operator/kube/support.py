"""The KnowledgeSource CRD as the kube tests read it: the document, its schema, the schema made strict."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.support.paths import REPO_ROOT

CRD_FILE = REPO_ROOT / "crds" / "knowledgesources.yaml"


def crd_document() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text())


def crd_schema() -> dict[str, Any]:
    return crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def strict_schema(node: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown fields, as kubectl's default strict field validation does."""
    node = copy.deepcopy(node)
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        node["additionalProperties"] = False
    for key, child in node.get("properties", {}).items():
        # metadata is validated by the API server itself, not by this schema.
        node["properties"][key] = child if key == "metadata" else strict_schema(child)
    if isinstance(node.get("items"), dict):
        node["items"] = strict_schema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = strict_schema(node["additionalProperties"])
    return node
