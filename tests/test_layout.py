"""The tests mirror the code, and the code keeps its shape: every test module under tests/searchsvc sits
in the folder of the kbsearch package it covers (`app` for kbsearch's root modules), and only
kbsearch.factory builds a service."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests" / "searchsvc"
KBSEARCH = REPO_ROOT / "searchsvc" / "kbsearch"
FACTORY = KBSEARCH / "factory.py"
# The services and the collaborators they share that are not named *Service; every class of
# kbsearch/services named *Service counts too, so a new service is held without being listed here.
BUILT_BY_THE_FACTORY = {
    "Authenticator",
    "DocumentPreparer",
    "DocumentReads",
    "DocumentWork",
    "ListwiseChat",
    "QueryLog",
    "RerankStage",
    "Serving",
    "SourceCatalog",
    "StaticTokens",
}


def test_every_searchsvc_test_module_sits_in_a_folder_named_after_a_kbsearch_package() -> None:
    misplaced = []
    for module in sorted(TESTS.rglob("test_*.py")):
        folder = module.parent.relative_to(TESTS)
        if folder == Path("app"):
            continue
        if folder == Path(".") or not (KBSEARCH / folder / "__init__.py").is_file():
            misplaced.append(str(module.relative_to(REPO_ROOT)))
    assert not misplaced, misplaced


def _classes_of_services() -> set[str]:
    return {
        node.name
        for module in (KBSEARCH / "services").rglob("*.py")
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, ast.ClassDef)
    }


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):  # `module.DocumentService(...)`, or a classmethod constructor
        return func.value.id if isinstance(func.value, ast.Name) and func.attr.startswith("from_") else func.attr
    return None


def test_only_the_factory_calls_a_service_constructor() -> None:
    classes = _classes_of_services()
    assert BUILT_BY_THE_FACTORY <= classes, BUILT_BY_THE_FACTORY - classes  # a renamed class must be renamed here
    services = BUILT_BY_THE_FACTORY | {name for name in classes if name.endswith("Service")}
    calls = []
    for module in sorted(KBSEARCH.rglob("*.py")):
        if module == FACTORY:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Call) and _called_name(node) in services:
                calls.append(f"{module.relative_to(REPO_ROOT)}:{node.lineno} {_called_name(node)}")
    assert not calls, calls


def test_the_factory_builds_every_service() -> None:
    """The scan above would pass on a name nobody builds: the factory calls each constructor it holds."""
    built = {_called_name(node) for node in ast.walk(ast.parse(FACTORY.read_text())) if isinstance(node, ast.Call)}
    services = {name for name in _classes_of_services() if name.endswith("Service")}
    assert services <= built, services - built
