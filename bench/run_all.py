"""Run every benchmark in order and print a summary table (`make bench`).

    python -m bench.run_all --scifact ../shared/eval/scifact-train [--skip NAME ...] [--quick] [--backend B]

--quick is a smoke run on small sizes (minutes, not the reported figures). Each benchmark writes
bench/results/<name>.json; this writes bench/results/summary.json.
"""

from __future__ import annotations

import importlib
import time
import traceback

from bench.common import load_average, load_scifact, load_text, print_table, write_result
from bench.common import parser as common_parser

ORDER = (
    "embedders",
    "image_env",
    "retrieval",
    "docsqa",
    "ingest",
    "search_latency",
    "edge_scale",
    "sync",
    "mcp_search",
    "insights",
    "ask",
    "console",
    "rebuild",
)

QUICK_ARGS = {
    "embedders": ["--docs", "100", "--throughput-chunks", "64", "--rounds", "1"],
    "image_env": [],
    "retrieval": ["--docs", "300", "--no-sweep"],
    "docsqa": ["--modes", "hybrid"],
    "ingest": ["--docs", "20", "--big-kb", "20"],
    "search_latency": ["--docs", "200", "--chunks", "2000", "--queries", "50"],
    "edge_scale": ["--sizes", "2000", "--queries", "50", "--indexing-threshold-kb", "1"],
    "sync": ["--files", "50"],
    "mcp_search": ["--docs", "100", "--queries", "50"],
    "insights": ["--entries", "5000", "--repeats", "2", "--queries", "50", "--docs", "50"],
    "ask": ["--docs", "100", "--chunks", "2000", "--queries", "20"],
    "console": ["--chunks", "2000", "--queries", "30", "--log-entries", "10000", "--insights-loads", "5"],
    "rebuild": ["--chunks", "1500"],
}
# The benchmarks --backend is passed to (the local embedder's backend for their vectors).
BACKEND_TAKERS = ("retrieval",)


def main(argv: list[str] | None = None) -> int:
    parser = common_parser("run_all", __doc__, "SciFact train folder (BEIR layout), e.g. ../shared/eval/scifact-train")
    parser.add_argument("--skip", action="append", default=[], choices=ORDER, help="skip a benchmark (repeatable)")
    parser.add_argument("--quick", action="store_true", help="small smoke run of every benchmark")
    parser.add_argument(
        "--backend", help="retrieval: SEARCHSVC_LOCAL_BACKEND of the local embedder (e.g. torch, onnx, onnx-int8)"
    )
    args = parser.parse_args(argv)
    load_scifact(args.scifact)  # every benchmark reads it: exit 2 with a clear message if it is missing

    rows, failed = [], []
    print(f"[run_all] {'QUICK smoke run' if args.quick else 'full run'}; start {load_text()}")
    for name in ORDER:
        if name in args.skip:
            rows.append([name, "skipped", "", "", ""])
            continue
        module = importlib.import_module(f"bench.{name}")
        bench_argv = ["--scifact", args.scifact, *(QUICK_ARGS[name] if args.quick else [])]
        if name in BACKEND_TAKERS and args.backend:
            bench_argv += ["--backend", args.backend]
        print(f"\n=== {name} {' '.join(bench_argv)} ===", flush=True)
        started = time.perf_counter()
        try:
            # Each benchmark knows its own result's shape: it runs (main) and sums itself up (headline).
            row = module.headline(module.main(bench_argv))
        except Exception:  # noqa: BLE001 - one failing benchmark must not hide the others
            traceback.print_exc()
            failed.append(name)
            rows.append([name, "FAILED (see above)", "", "", f"{time.perf_counter() - started:.0f}"])
            continue
        rows.append([name, *row, f"{time.perf_counter() - started:.0f}"])
    columns = ("benchmark", "figure", "target", "verdict", "seconds")
    write_result("summary", {"quick": args.quick, "rows": [dict(zip(columns, r, strict=True)) for r in rows]})
    print(
        f"\n[run_all] summary ({'QUICK smoke sizes' if args.quick else 'full sizes'}; end {load_text(load_average())})"
    )
    print_table(["benchmark", "figure", "target", "verdict", "s"], rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
