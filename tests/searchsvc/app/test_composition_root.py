"""The service has one composition root: one typed AppParts on the app, reached only through kbsearch.deps."""

from __future__ import annotations

import ast
from pathlib import Path

import kbsearch

PACKAGE = Path(kbsearch.__file__).parent


def touches_app_state(tree: ast.AST) -> bool:
    """Whether the module reads or writes `<anything>.app.state` or `app.state`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "state":
            owner = node.value
            if (isinstance(owner, ast.Attribute) and owner.attr == "app") or (
                isinstance(owner, ast.Name) and owner.id == "app"
            ):
                return True
    return False


def test_the_check_sees_both_spellings() -> None:
    assert touches_app_state(ast.parse("x = request.app.state.settings"))
    assert touches_app_state(ast.parse("app.state.ready = True"))
    assert not touches_app_state(ast.parse("request.state.caller = caller"))


def test_only_deps_touches_app_state() -> None:
    touching = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if touches_app_state(ast.parse(path.read_text(), filename=str(path)))
    )
    assert touching == ["deps.py"]
