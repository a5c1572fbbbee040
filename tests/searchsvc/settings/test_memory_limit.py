"""The memory limit the body budget and the embedded store's index builds are sized against."""

from __future__ import annotations

from pathlib import Path

from kbsearch.settings import Settings


def test_the_configured_limit_wins_then_the_cgroups_then_none(tmp_path: Path) -> None:
    cgroup = tmp_path / "memory.max"
    cgroup.write_text("3221225472\n")
    assert Settings(memory_limit_mb=512).http.memory_limit_bytes(cgroup) == 512 << 20
    assert Settings().http.memory_limit_bytes(cgroup) == 3 << 30
    cgroup.write_text("max\n")  # a cgroup without a limit
    assert Settings().http.memory_limit_bytes(cgroup) is None
    assert Settings().http.memory_limit_bytes(tmp_path / "absent") is None  # no cgroup v2
