"""The tests mirror the code, and the code keeps its shape: every test module under tests/searchsvc sits
in the folder of the kbsearch package it covers (`app` for kbsearch's root modules), and under
tests/operator in kboperator's (or at its root, for kboperator's root modules); no test module imports
another (shared helpers live in tests/support or a support module beside the tests); and only
kbsearch.factory builds a service."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests" / "searchsvc"
KBSEARCH = REPO_ROOT / "searchsvc" / "kbsearch"
OPERATOR_TESTS = REPO_ROOT / "tests" / "operator"
KBOPERATOR = REPO_ROOT / "operator" / "kboperator"
# Code a test hands a child process (`python -c "from tests.x.test_y import ..."`) imports too.
IMPORT_IN_CODE = re.compile(r"\b(?:from|import)\s+(tests(?:\.\w+)*)")
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


def test_every_operator_test_module_sits_at_the_root_or_in_a_folder_named_after_a_kboperator_package() -> None:
    misplaced = [
        str(module.relative_to(REPO_ROOT))
        for module in sorted(OPERATOR_TESTS.rglob("test_*.py"))
        if module.parent != OPERATOR_TESTS
        and not (KBOPERATOR / module.parent.relative_to(OPERATOR_TESTS) / "__init__.py").is_file()
    ]
    assert not misplaced, misplaced


def _is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of each import, in statements and in string constants that hold code."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.module or ""))
            # `from tests.x import test_y` imports a module too.
            found += [
                (node.lineno, f"{node.module}.{alias.name}") for alias in node.names if _is_test_module(alias.name)
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, match) for match in IMPORT_IN_CODE.findall(node.value)]
    return found


def test_no_test_module_imports_another() -> None:
    imports = [
        f"{module.relative_to(REPO_ROOT)}:{line} {name}"
        for module in sorted((REPO_ROOT / "tests").rglob("*.py"))
        for line, name in _imported_modules(ast.parse(module.read_text()))
        if _is_test_module(name)
    ]
    assert not imports, imports


def test_the_import_scan_sees_statements_and_code_for_a_child() -> None:
    t = "test_"  # spelled apart, so that the scan of this very module finds none of them
    code = (
        f'from tests.a.{t}b import x\nimport tests.c.{t}d\nfrom tests.e import {t}f\nrun("from tests.g.{t}h import y")'
    )
    found = [name for _, name in _imported_modules(ast.parse(code)) if _is_test_module(name)]
    assert found == ["tests.a.test_b", "tests.c.test_d", "tests.e.test_f", "tests.g.test_h"], found


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
    assert classes >= BUILT_BY_THE_FACTORY, BUILT_BY_THE_FACTORY - classes  # a renamed class must be renamed here
    services = BUILT_BY_THE_FACTORY | {name for name in classes if name.endswith("Service")}
    calls = [
        f"{module.relative_to(REPO_ROOT)}:{node.lineno} {_called_name(node)}"
        for module in sorted(KBSEARCH.rglob("*.py"))
        if module != FACTORY
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, ast.Call) and _called_name(node) in services
    ]
    assert not calls, calls


def test_the_factory_builds_every_service() -> None:
    """The scan above would pass on a name nobody builds: the factory calls each constructor it holds."""
    built = {_called_name(node) for node in ast.walk(ast.parse(FACTORY.read_text())) if isinstance(node, ast.Call)}
    services = {name for name in _classes_of_services() if name.endswith("Service")}
    assert services <= built, services - built
