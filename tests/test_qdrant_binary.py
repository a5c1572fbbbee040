"""A missing Qdrant binary fails the run under CI and says how to get it everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.qdrant import qdrant_binary


def test_a_missing_binary_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_QDRANT", str(tmp_path / "no-qdrant"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="run `make qdrant`"):
        qdrant_binary()


def test_a_missing_binary_elsewhere_skips_saying_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_QDRANT", str(tmp_path / "no-qdrant"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="run `make qdrant`"):
        qdrant_binary()
