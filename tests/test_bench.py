"""Every benchmark sums itself up for run_all's summary, and starts from the shared command line.

The benchmarks themselves are measurements, run by `make bench`, never here; this checks only that
run_all can drive each one and that the summary applies each benchmark's targets.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from bench import run_all

BENCHMARKS = [*run_all.ORDER, "scoped_search", "rebuild_check", "peers"]  # these run alone: `python -m bench.<name>`


def benchmark(name: str) -> ModuleType:
    return importlib.import_module(f"bench.{name}")


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_exports_main_and_headline(name: str) -> None:
    module = benchmark(name)
    assert callable(module.main) and callable(module.headline)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_has_the_shared_command_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        benchmark(name).main(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"usage: python -m bench.{name}")
    # run_all passes --scifact to every benchmark it runs, so each must accept it.
    assert ("--scifact" in shown) == (name in run_all.ORDER)


def sync_result(files: int, full_seconds: float, incremental_seconds: float) -> dict[str, object]:
    """A result in the shape bench.sync writes, for a repository of `files` files."""
    reduced = "" if files >= 2000 else " (REDUCED: the issue's size is >= 2000 files, ~10 MB)"
    ratio = incremental_seconds / full_seconds
    return {
        "sizeNote": f"{files} files, {files * 5.4 / 1000:.1f} MB{reduced}",
        "runs": {"full": {"seconds": full_seconds}, "incremental": {"seconds": incremental_seconds}},
        "incrementalToFullRatio": ratio,
        "target": {"ratioMax": 0.01, "met": ratio <= 0.01},
    }


@pytest.mark.parametrize(
    ("files", "full_seconds", "incremental_seconds", "expected"),
    [
        (2000, 236.2, 0.189, "met"),
        (2000, 759.9, 0.322, "NOT met"),  # the first sync is over 8 minutes
        (2000, 236.2, 3.0, "NOT met"),  # the incremental sync is over 1% of the full one
        (50, 6.0, 0.02, "NOT met"),  # a reduced repository says nothing about the 2,000-file target
    ],
)
def test_the_sync_summary_checks_both_targets(
    files: int, full_seconds: float, incremental_seconds: float, expected: str
) -> None:
    figure, target, verdict = benchmark("sync").headline(sync_result(files, full_seconds, incremental_seconds))
    assert verdict == expected
    assert "full <= 480 s at 2,000 files" in target and f"full {full_seconds:.1f} s" in figure
