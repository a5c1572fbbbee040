"""The repository's operator/ folder must never shadow the standard-library `operator` module."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_standard_operator_module_is_the_real_one() -> None:
    import operator

    assert operator.itemgetter(1)([0, 1]) == 1
    assert hasattr(operator, "attrgetter") and hasattr(operator, "add")
    assert Path(operator.__file__ or "").parent != ROOT / "operator"


def test_kboperator_imports_alongside_it() -> None:
    kboperator = importlib.import_module("kboperator")
    assert Path(kboperator.__file__).parent == ROOT / "operator" / "kboperator"
    assert not (ROOT / "operator" / "__init__.py").exists(), "operator/ must stay a plain folder"


def test_a_fresh_interpreter_in_the_repository_root_gets_both() -> None:
    # The worst case: the repository root first on sys.path, as `python -c` from the root has it.
    code = (
        "import sys; sys.path.insert(0, '.'); sys.path.insert(0, 'operator');"
        "import operator, collections, kboperator;"
        "assert operator.itemgetter(0)('x') == 'x';"
        "print(kboperator.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kboperator"
