"""The tests mirror the code: every test module under tests/searchsvc sits in the folder of the kbsearch
package it covers (`app` for kbsearch's root modules)."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests" / "searchsvc"
KBSEARCH = REPO_ROOT / "searchsvc" / "kbsearch"


def test_every_searchsvc_test_module_sits_in_a_folder_named_after_a_kbsearch_package() -> None:
    misplaced = []
    for module in sorted(TESTS.rglob("test_*.py")):
        folder = module.parent.relative_to(TESTS)
        if folder == Path("app"):
            continue
        if folder == Path(".") or not (KBSEARCH / folder / "__init__.py").is_file():
            misplaced.append(str(module.relative_to(REPO_ROOT)))
    assert not misplaced, misplaced
