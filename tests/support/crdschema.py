"""What the API server does with a custom resource's structural schema, for the kmock emulator.

On every create and update of a custom resource the API server, in this order:
1. drops `null` values of fields that are not `nullable`;
2. prunes fields the schema does not declare (kept under `x-kubernetes-preserve-unknown-fields`;
   `apiVersion`, `kind` and `metadata` at the root are the server's own);
3. applies `default`s to absent fields of objects that are present;
4. validates the result against the OpenAPI v3 schema and refuses it with 422 Invalid.
   Since Kubernetes 1.30 an update is "ratcheted": a value left unchanged by the update is not
   re-checked, so an object stored under an older, laxer CRD can still have its status written.

Not done: CEL rules (`x-kubernetes-validations`); the operator checks those fields itself.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "knowledgesources.yaml"
_ROOT_FIELDS = {"apiVersion", "kind", "metadata"}

_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    # RFC 3339 with a mandatory offset, as the API server's strfmt parses it.
    if not isinstance(value, str):
        return True  # the type check reports it
    parsed = datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    return "T" in value.upper() and parsed.tzinfo is not None


@dataclass(frozen=True)
class Cause:
    """One reason an object is invalid, as in a Status's details.causes."""

    field: str
    message: str

    def as_status_cause(self) -> dict[str, str]:
        return {"reason": "FieldValueInvalid", "field": self.field, "message": f"{self.field}: {self.message}"}


class StructuralSchema:
    """One CRD version's openAPIV3Schema, applied like the API server applies it."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._validator = jsonschema.Draft4Validator(schema, format_checker=_FORMATS)

    @classmethod
    def from_crd(cls, path: Path = CRD_FILE, version: str = "v1alpha1") -> StructuralSchema:
        crd = yaml.safe_load(path.read_text())
        (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
        return cls(served["schema"]["openAPIV3Schema"])

    def admit(
        self, body: dict[str, Any], old: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[str], list[Cause]]:
        """(the object as it would be stored, the paths pruned from it, why it is invalid)."""
        pruned: list[str] = []
        result = _normalise(copy.deepcopy(body), self.schema, "", pruned, root=True)
        causes = [
            Cause(_field(error.absolute_path), _message(error))
            for error in self._validator.iter_errors(result)
            if old is None or not _unchanged(error.absolute_path, result, old)
        ]
        causes += _list_map_duplicates(result, self.schema, "")  # never ratcheted: no old object held them
        return result, pruned, causes


@functools.cache
def knowledge_source_schema() -> StructuralSchema:
    """The KnowledgeSource schema from crds/: read once, so a run follows the file it started with."""
    return StructuralSchema.from_crd()


def _normalise(value: Any, schema: dict[str, Any], path: str, pruned: list[str], *, root: bool = False) -> Any:
    """Drop nulls, prune unknown fields, apply defaults: in place, depth first."""
    if isinstance(value, dict) and schema.get("type", "object") == "object":
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields", False)
        for key in list(value):
            child = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if root and key in _ROOT_FIELDS:
                continue
            if value[key] is None and not (child or {}).get("nullable", False):
                del value[key]
            elif child is None and not keep_unknown:
                pruned.append(f"{path}.{key}".lstrip("."))
                del value[key]
            elif child is not None:
                value[key] = _normalise(value[key], child, f"{path}.{key}", pruned)
        for key, child in properties.items():
            if key not in value and "default" in child:
                value[key] = _normalise(copy.deepcopy(child["default"]), child, f"{path}.{key}", pruned)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_normalise(item, schema["items"], f"{path}[{i}]", pruned) for i, item in enumerate(value)]
    return value


def _list_map_duplicates(value: Any, schema: dict[str, Any], path: str) -> list[Cause]:
    """`x-kubernetes-list-type: map` (and `set`) lists hold each key once."""
    causes: list[Cause] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                causes += _list_map_duplicates(item, properties[key], f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        list_type = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[str] = set()
        for i, item in enumerate(value):
            identity = (
                json.dumps([item.get(k) for k in keys])
                if list_type == "map" and isinstance(item, dict)
                else json.dumps(item, sort_keys=True)
                if list_type == "set"
                else None
            )
            if identity is not None and identity in seen:
                causes.append(Cause(f"{path}[{i}]".lstrip("."), f"Duplicate value: {identity}"))
            if identity is not None:
                seen.add(identity)
            causes += _list_map_duplicates(item, schema["items"], f"{path}[{i}]")
    return causes


def _unchanged(path: Any, new: Any, old: Any) -> bool:
    """Ratcheting: the value at `path` is the same in both objects."""
    missing = object()
    a, b = _at(new, path, missing), _at(old, path, missing)
    return a is not missing and a == b


def _at(value: Any, path: Any, missing: object) -> Any:
    for part in path:
        if (isinstance(value, dict) and part in value) or (
            isinstance(value, list) and isinstance(part, int) and part < len(value)
        ):
            value = value[part]
        else:
            return missing
    return value


def _field(path: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".") or "<root>"


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "required":
        return f"Required value: {error.message}"
    if error.validator == "enum":
        return f"Unsupported value: {json.dumps(error.instance)}: supported values: {error.validator_value}"
    return f"Invalid value: {json.dumps(error.instance)[:200]}: {error.message[:300]}"
