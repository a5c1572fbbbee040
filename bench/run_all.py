"""Run every benchmark in order and print a summary table (`make bench`).

    python -m bench.run_all --scifact ../shared/eval/scifact-train [--skip NAME ...] [--quick] [--backend B]

--quick is a smoke run on small sizes (minutes, not the reported figures). Each benchmark writes
bench/results/<name>.json; this writes bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import time
import traceback
from typing import Any

from bench.common import load_average, load_scifact, load_text, print_table, write_result

ORDER = (
    "embedders",
    "image_env",
    "retrieval",
    "ingest",
    "search_latency",
    "edge_scale",
    "sync",
    "mcp_search",
    "insights",
    "ask",
    "console",
)

QUICK_ARGS = {
    "embedders": ["--docs", "100", "--throughput-chunks", "64", "--rounds", "1"],
    "image_env": [],
    "retrieval": ["--docs", "300", "--no-sweep"],
    "ingest": ["--docs", "20", "--big-kb", "20"],
    "search_latency": ["--docs", "200", "--chunks", "2000", "--queries", "50"],
    "edge_scale": ["--sizes", "2000", "--queries", "50", "--indexing-threshold-kb", "1"],
    "sync": ["--files", "50"],
    "mcp_search": ["--docs", "100", "--queries", "50"],
    "insights": ["--entries", "5000", "--repeats", "2", "--queries", "50", "--docs", "50"],
    "ask": ["--docs", "100", "--chunks", "2000", "--queries", "20"],
    "console": ["--chunks", "2000", "--queries", "30", "--log-entries", "10000", "--insights-loads", "5"],
}


def headline(name: str, r: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for the summary table."""
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    if name == "embedders":
        speed = ", ".join(
            f"{b} {t['medianChunksPerSecond']} ({t['medianChunksPerCpuSecond']}/CPU-s)"
            for b, t in r["throughput"].items()
        )
        fig = f"chunks/s {speed}"
        if "quality" in r:
            q = r["quality"]
            fig += "; hybrid nDCG@10 " + ", ".join(f"{b} {q[b]['hybrid']['ndcg@10']:.4f}" for b in q)
            fig += f"; default by the rule: {r.get('default')}"
        return fig, "fastest within 0.005 nDCG@10 of torch", "measured"
    if name == "image_env":
        fig = (
            f"runtime Python env {r['beforeMB']:.0f} MB with torch -> {r['afterMB']:.0f} MB "
            f"(+{r['onnxFilesMB']:.0f} MB ONNX files)"
        )
        return fig, "no torch in the search image", "met" if "torch" in r["removed"] else "NOT met"
    if name == "retrieval":
        m = r["modes"]
        fig = (
            f"nDCG@10 hybrid {m['hybrid']['ndcg@10']:.4f} / dense {m['dense']['ndcg@10']:.4f} / "
            f"keyword {m['keyword']['ndcg@10']:.4f}; R@100 hybrid {m['hybrid']['recall@100']:.4f}; "
            + ", ".join(f"{label} {h['ndcg@10']:.4f}" for label, h in r["hybrid"].items() if label != "default")
        )
        return fig, "keyword >= 0.71, hybrid >= 0.76", met(r["target"]["met"])
    if name == "ingest":
        fig = (
            f"{r['pipelineCold']['docsPerSecond']} docs/s, {r['pipelineCold']['chunksPerSecond']} chunks/s vs raw "
            f"{r['raw']['chunksPerSecond']} chunks/s: overhead {r['overhead']:.1%}; 100 KB 1-line edit "
            f"{r['bigFile']['oneLineEdit']['chunksEmbedded']}/{r['bigFile']['oneLineEdit']['chunks']} chunks in "
            f"{r['bigFile']['oneLineEdit']['seconds']} s vs fresh {r['bigFile']['fresh']['seconds']} s"
        )
        return fig, "overhead <= 10%", met(r["target"]["met"])
    if name == "search_latency":
        e = r["runs"]["edge"]
        fig = (
            f"edge engine p50 {e['engineMs']['p50']} / p95 {e['engineMs']['p95']} ms, "
            f"embed p50 {e['embedMs']['p50']} ms"
        )
        if "qdrant-local" in r["runs"]:
            q = r["runs"]["qdrant-local"]
            fig += f"; qdrant-local engine p50 {q['engineMs']['p50']} / p95 {q['engineMs']['p95']} ms"
        return fig, "edge engine p95 <= 20 ms", met(r["target"]["met"])
    if name == "edge_scale":
        runs = ", ".join(
            f"{x['chunks']}: {x['noIndex']['engineMs']['p95']} -> {x['indexed']['engineMs']['p95']} ms"
            for x in r["runs"]
        )
        t = r["target"]
        fig = f"engine p95 no index -> indexed {runs}; longest search in a build {t['longestSearchDuringBuildMs']} ms"
        return fig, "p95 <= 20 ms; stall <= 100 ms", f"p95 {met(t['engineP95Met'])}, stall {met(t['stallMet'])}"
    if name == "sync":
        fig = (
            f"{r['sizeNote']}: full {r['runs']['full']['seconds']:.1f} s, incremental "
            f"{r['runs']['incremental']['seconds']:.3f} s = {r['incrementalToFullRatio']:.4%}"
        )
        return fig, "incremental <= 1% of full", met(r["target"]["met"])
    if name == "mcp_search":
        s, o = r["searches"], r["p50OverheadMs"]
        fig = (
            f"MCP search_knowledge p50 {s['mcp']['p50']} ms vs REST {s['rest']['p50']} ms: +{o['mcp']} ms "
            f"(server side +{o['mcp-rpc']} ms)"
        )
        return fig, "MCP overhead p50 <= 5 ms", met(r["target"]["met"])
    if name == "insights":
        month = r["insights"]["unrestricted/30d"]
        fig = (
            f"insights over {r['entries']} logged queries: 30d p50 {month['p50']} ms, 24h p50 "
            f"{r['insights']['unrestricted/24h']['p50']} ms; search overhead of the log p50 "
            f"{r['overhead']['p50OverheadMs']} ms"
        )
        return fig, "reported (no target)", ""
    if name == "ask":
        a = r["run"]
        fig = (
            f"extractive ask p50 {a['askMs']['p50']} / p95 {a['askMs']['p95']} ms at {a['chunks']} chunks "
            f"(search alone p50 {a['searchMs']['p50']} ms)"
        )
        return fig, "measured (no target)", "-"
        full_ok = r["runs"]["full"]["seconds"] <= 480 and "REDUCED" not in r["sizeNote"]
        return fig, "incremental <= 1% of full; full <= 480 s at 2,000 files", met(r["target"]["met"] and full_ok)
    if name == "console":
        page, insights = r["search"]["pageMs"], r["insights"]["30d"]
        fig = (
            f"/ui/?q= p50 {page['p50']:.0f} ms at {r['chunks']} chunks (REST {r['search']['restMs']['p50']:.0f} ms); "
            f"insights 30d p50 {insights['p50']:.0f} ms over {r['logEntries']} logged queries"
        )
        return fig, "measured (no target)", "-"
    return "", "", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", help="SciFact train folder (BEIR layout), e.g. ../shared/eval/scifact-train")
    parser.add_argument("--skip", action="append", default=[], choices=ORDER, help="skip a benchmark (repeatable)")
    parser.add_argument("--quick", action="store_true", help="small smoke run of every benchmark")
    parser.add_argument(
        "--backend", help="retrieval: SEARCHSVC_LOCAL_BACKEND of the local embedder (e.g. torch, onnx, onnx-int8)"
    )
    args = parser.parse_args(argv)
    load_scifact(args.scifact)  # every benchmark reads it: exit 2 with a clear message if it is missing

    import importlib

    rows, results, failed = [], {}, []
    print(f"[run_all] {'QUICK smoke run' if args.quick else 'full run'}; start {load_text()}")
    for name in ORDER:
        if name in args.skip:
            rows.append([name, "skipped", "", "", ""])
            continue
        module = importlib.import_module(f"bench.{name}")
        bench_argv = ["--scifact", args.scifact, *(QUICK_ARGS[name] if args.quick else [])]
        if name == "retrieval" and args.backend:
            bench_argv += ["--backend", args.backend]
        own = [] if name == "image_env" else ["--scifact", args.scifact]
        bench_argv = [*own, *(QUICK_ARGS[name] if args.quick else [])]
        print(f"\n=== {name} {' '.join(bench_argv)} ===", flush=True)
        started = time.perf_counter()
        try:
            result = module.main(bench_argv)
        except Exception:  # noqa: BLE001 - one failing benchmark must not hide the others
            traceback.print_exc()
            failed.append(name)
            rows.append([name, "FAILED (see above)", "", "", f"{time.perf_counter() - started:.0f}"])
            continue
        results[name] = result
        rows.append([name, *headline(name, result), f"{time.perf_counter() - started:.0f}"])
    columns = ("benchmark", "figure", "target", "verdict", "seconds")
    write_result("summary", {"quick": args.quick, "rows": [dict(zip(columns, r, strict=True)) for r in rows]})
    print(
        f"\n[run_all] summary ({'QUICK smoke sizes' if args.quick else 'full sizes'}; end {load_text(load_average())})"
    )
    print_table(["benchmark", "figure", "target", "verdict", "s"], rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
