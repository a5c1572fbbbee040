"""Memory through a real sync: peak RSS and growth per 1,000 documents of the real service.

A repository of --pages markdown pages (default 2,000) is generated with the shapes real
documentation repositories have: tables whose header row a formatter padded to the width of the
longest cell, long code blocks, admonitions (MkDocs `!!!` and Docusaurus `:::`), YAML front
matter, nested lists, and versioned copies of every page (`docs/<version>/...`, each version a
little different). The real service runs as its own process (`python -m kbsearch`: uvicorn,
Qdrant Edge, the bundled MiniLM on onnx-int8, default settings) and the pages are PUT one at a
time, in path order, as the operator's sync does. The service's resident memory (with any child
process) is sampled every 0.5 s.

Reported: peak RSS; RSS every --every pages; growth per 1,000 documents over the second half of
what was synced (the first half is the warm-up: caches fill, the collection's segments grow);
documents per second. On a loaded machine --max-seconds stops the sync early and reports the part
done. The model's first ONNX export (torch, in the service's process) runs in a start of its own
before the measured one.
Each checkpoint also records the collection's chunks and its allocated size on disk, so growth splits
into the store's own and the rest. `--embedder hashing` runs the service's own entry point with the
tests' hashing embedder at 384 dimensions: the same collection, a sync not bound by the model (a
20,000-document run in minutes instead of hours on two shared cores).
Target (issue 27): peak under 1.5 GB, no growth after warm-up.

`--wide` adds tables whose header and separator rows are each wider than the chunker's max_chars
(the shape that looped the chunker before its fix); leave it off on a chunker without the fix.

    python -m bench.sync_memory [--pages 2000] [--wide] [--embedder minilm|hashing]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    CACHE_DIR,
    RUNBOOK_WORDS,
    load_text,
    print_table,
    start_process,
    verdict,
    wait_process_ready,
    write_result,
)
from tests.support.service_process import service_env

NAME = "sync_memory"
TOKEN = "bench-sync-memory-token-0001"
VERSIONS = ("current", "v3.2", "v2.9", "v1.8")
TARGET_PEAK_MIB = 1536
WORDS = [
    *RUNBOOK_WORDS,
    "replica",
    "volume",
    "secret",
    "config",
    "cluster",
    "namespace",
    "operator",
    "controller",
    "webhook",
    "sync",
    "commit",
    "branch",
    "token",
    "scope",
    "search",
    "index",
    "chunk",
    "vector",
    "model",
    "cache",
    "timeout",
    "retry",
    "budget",
    "queue",
    "worker",
]


# --- the repository's pages ------------------------------------------------------------------


def sentence(rng: random.Random, n: int = 14) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random, sentences: int = 4) -> str:
    return " ".join(sentence(rng, rng.randint(8, 18)) for _ in range(sentences))


def padded_table(rng: random.Random, columns: int, rows: int, widest: int) -> str:
    """A table as markdown formatters write it: every cell, header included, padded to its column's widest."""
    header = [f"{rng.choice(WORDS).title()} {c}" for c in range(columns)]
    body = [
        [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(columns)] for _ in range(rows)
    ]
    body[0] = [(cell + " " + "x" * widest)[:widest] for cell in body[0]]  # the longest cell of each column
    width = [max(len(header[c]), *(len(r[c]) for r in body)) for c in range(columns)]
    line = lambda cells: "| " + " | ".join(cell.ljust(width[c]) for c, cell in enumerate(cells)) + " |"  # noqa: E731
    separator = "| " + " | ".join("-" * width[c] for c in range(columns)) + " |"
    return "\n".join([line(header), separator, *(line(r) for r in body)])


def code_block(rng: random.Random, lines: int) -> str:
    language = rng.choice(["yaml", "python", "bash"])
    if language == "yaml":
        body = [f"{'  ' * (i % 4)}{rng.choice(WORDS)}_{i}: {rng.choice(WORDS)}" for i in range(lines)]
    elif language == "python":
        body = [f"{'    ' * (i % 3)}{rng.choice(WORDS)}_{i} = {rng.choice(WORDS)}({i})" for i in range(lines)]
    else:
        body = [
            f"kubectl {rng.choice(WORDS)} {rng.choice(WORDS)}-{i} --namespace {rng.choice(WORDS)}" for i in range(lines)
        ]
    return f"```{language}\n" + "\n".join(body) + "\n```"


def admonition(rng: random.Random) -> str:
    if rng.random() < 0.5:
        kind = rng.choice(["note", "warning", "tip"])
        return f'!!! {kind} "{sentence(rng, 4)[:-1]}"\n    ' + paragraph(rng, 2)
    return f":::{rng.choice(['note', 'caution', 'info'])}\n\n{paragraph(rng, 2)}\n\n:::"


def page(rng: random.Random, n: int, version: str, wide: bool) -> str:
    title = f"{rng.choice(WORDS).title()} {rng.choice(WORDS)} guide {n}"
    tags = ", ".join(rng.sample(WORDS, 3))
    parts = [f"---\ntitle: {title}\ntags: [{tags}]\nversion: {version}\n---\n", f"# {title}\n", paragraph(rng)]
    for s in range(rng.randint(2, 5)):
        parts.append(f"## {rng.choice(WORDS).title()} {s}\n")
        shape = rng.random()
        if shape < 0.25:
            widest = rng.choice([150, 220]) if wide and rng.random() < 0.3 else rng.randint(20, 55)
            parts.append(padded_table(rng, rng.randint(3, 6), rng.randint(4, 14), widest))
        elif shape < 0.45:
            parts.append(code_block(rng, rng.randint(15, 80)))
        elif shape < 0.6:
            parts.append(admonition(rng))
        else:
            items = [f"{'  ' * (i % 3)}- {sentence(rng, 8)}" for i in range(rng.randint(3, 12))]
            parts.append(paragraph(rng, 3) + "\n\n" + "\n".join(items))
        parts.append(paragraph(rng, rng.randint(1, 5)))
    return "\n\n".join(parts) + "\n"


def pages(total: int, wide: bool, seed: int = 27) -> list[tuple[str, str]]:
    """(path, text): each base page in every version; older versions drop or reword a section."""
    out = []
    base = -(-total // len(VERSIONS))
    for n in range(base):
        for v, version in enumerate(VERSIONS):
            rng = random.Random(seed * 100_003 + n)  # the same page in every version...
            text = page(rng, n, version, wide)
            if v:  # ...less one section, reworded, the older it is
                sections = text.split("\n## ")
                keep = sections[: max(2, len(sections) - v)]
                text = "\n## ".join(keep).replace(WORDS[n % len(WORDS)], WORDS[(n + v) % len(WORDS)])
            out.append((f"docs/{version}/section{n % 20}/page{n}.md", text))
    return sorted(out[:total])


# --- the service and its memory ---------------------------------------------------------------


def tree_rss_kib(pid: int) -> int:
    """Resident KiB of the process and its descendants (a conversion child, an index build)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in family]
        family.update(children)
        frontier.extend(children)
    total = 0
    for member in family:
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self.last_kib = pid, 0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.last_kib = tree_rss_kib(self.pid)
            self.peak_kib = max(self.peak_kib, self.last_kib)
            self.stop.wait(0.5)


def start_service(root: Path, port: int, embedder: str = "minilm", traced: bool = False) -> subprocess.Popen[bytes]:
    """The real service; `hashing`: its own entry point with the tests' hashing embedder at MiniLM's 384
    dimensions, so the collection has the same size and the sync is not bound by the model."""
    if embedder == "hashing":
        hashing = service_env(KB_TEST_HASHING_MODEL="hashing-384", KB_TEST_HASHING_DIMENSIONS="384")
        env = hashing | {"SEARCHSVC_API_TOKEN": TOKEN}
        if traced:
            env["KB_TEST_TRACEMALLOC_FILE"] = str(root / "python-heap")
        return start_process(root, port, "service.log", env, module="tests.support.service_process")
    return start_process(root, port, "service.log", {"SEARCHSVC_API_TOKEN": TOKEN})


def python_heap(path: Path) -> dict[str, int]:
    """The service's traced Python heap, when it reports one (--tracemalloc)."""
    try:
        return {"pythonMiB": round(int(path.read_text()) / 2**20)}
    except (OSError, ValueError):
        return {}


def folder_bytes(folder: Path) -> int:
    """Bytes allocated to the files under `folder` (the collection's own size on disk: segments, WAL, indexes)."""
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_blocks * 512  # allocated: segments are preallocated sparse files
    return total


def sync(
    url: str,
    corpus: list[tuple[str, str]],
    sampler: Sampler,
    every: int,
    max_seconds: float,
    data_dir: Path,
) -> dict[str, Any]:
    checkpoints: list[dict[str, Any]] = []
    statuses: dict[str, int] = {}
    started = time.monotonic()
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=600) as client:
        for i, (path, text) in enumerate(corpus, start=1):
            body = {
                "uri": f"https://git.example/docs-team/site/blob/main/{path}",
                "content": text,
                "metadata": {"sourceIdentifier": "docs-team/site", "path": path},
            }
            response = client.put("/api/v1/documents", json=body)
            code = str(response.status_code)
            if response.status_code != 200:
                code += " " + response.json().get("error", {}).get("code", "")
            statuses[code] = statuses.get(code, 0) + 1
            out_of_time = time.monotonic() - started > max_seconds
            if i % every == 0 or i == len(corpus) or out_of_time:
                rss = round(tree_rss_kib(sampler.pid) / 1024)
                chunks = client.get("/api/v1/status").json()["store"]["chunks"]
                checkpoints.append(
                    {
                        "docs": i,
                        "chunks": chunks,
                        "rssMiB": rss,
                        "storeMiB": round(folder_bytes(data_dir) / 2**20),
                        **python_heap(data_dir.parent / "python-heap"),
                        "seconds": round(time.monotonic() - started),
                    }
                )
                print(checkpoints[-1], f"peak {round(sampler.peak_kib / 1024)} MiB", flush=True)
            if out_of_time:
                break  # a loaded machine: report the part synced
    seconds = round(time.monotonic() - started, 1)
    return {"checkpoints": checkpoints, "statuses": statuses, "synced": sum(statuses.values()), "seconds": seconds}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--wide", action="store_true", help="tables whose header is wider than max_chars")
    parser.add_argument("--port", type=int, default=18741)
    parser.add_argument("--every", type=int, default=100, help="documents between two RSS checkpoints")
    parser.add_argument(
        "--embedder",
        choices=["minilm", "hashing"],
        default="minilm",
        help="hashing: the store and service, not the model",
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="with --embedder hashing: record the service's Python heap too"
    )
    parser.add_argument("--max-seconds", type=float, default=float("inf"), help="stop syncing after this long")
    args = parser.parse_args(argv)
    corpus = pages(args.pages, args.wide)
    results: dict[str, Any] = {
        "pages": len(corpus),
        "wide": args.wide,
        "embedder": args.embedder,
        "megabytes": round(sum(len(t.encode()) for _, t in corpus) / 1e6, 1),
        "loadBefore": load_text(),
    }
    with tempfile.TemporaryDirectory(prefix="kb-sync-memory-") as tmp:
        root = Path(tmp)
        url = f"http://127.0.0.1:{args.port}"
        if (
            args.embedder == "minilm" and not (CACHE_DIR / "onnx").exists()
        ):  # the first start exports the model with torch: not measured
            exporter = start_service(root, args.port)
            try:
                wait_process_ready(url, exporter, timeout_s=900)  # the first start exports the model to ONNX
            finally:
                exporter.terminate()
                exporter.wait(timeout=120)
        child = start_service(root, args.port, args.embedder, args.tracemalloc)
        sampler = Sampler(child.pid)
        try:
            wait_process_ready(url, child, timeout_s=900)
            results["readyMiB"] = round(tree_rss_kib(child.pid) / 1024)
            sampler.start()
            results |= sync(url, corpus, sampler, args.every, args.max_seconds, root / "data")
        finally:
            sampler.stop.set()
            child.terminate()
            child.wait(timeout=120)
    points = results["checkpoints"]
    last = points[-1]
    half = next(p for p in points if p["docs"] >= last["docs"] // 2)
    results["peakMiB"] = round(sampler.peak_kib / 1024)
    span = max(1, last["docs"] - half["docs"])
    results["growthMiBPer1000AfterWarmup"] = round((last["rssMiB"] - half["rssMiB"]) * 1000 / span, 1)
    # What is not the collection: RSS less the store's own size on disk, over the second half.
    beside = lambda p: p["rssMiB"] - p["storeMiB"]  # noqa: E731
    results["storeGrowthMiBPer1000AfterWarmup"] = round((last["storeMiB"] - half["storeMiB"]) * 1000 / span, 1)
    results["besideStoreGrowthMiBPer1000AfterWarmup"] = round((beside(last) - beside(half)) * 1000 / span, 1)
    results["besideStoreMiB"] = {"atHalf": beside(half), "atEnd": beside(last)}
    results["docsPerSecond"] = round(results["synced"] / results["seconds"], 2)
    results["load"] = load_text()
    print_table(
        ["docs", "chunks", "RSS MiB", "store MiB", "RSS - store", "Python heap MiB", "seconds"],
        [
            [p["docs"], p["chunks"], p["rssMiB"], p["storeMiB"], beside(p), p.get("pythonMiB", "-"), p["seconds"]]
            for p in points
        ],
    )
    if "pythonMiB" in last:
        results["pythonHeapGrowthMiBPer1000AfterWarmup"] = round(
            (last["pythonMiB"] - half["pythonMiB"]) * 1000 / span, 1
        )
    met = verdict(results["peakMiB"] < TARGET_PEAK_MIB)
    print(
        f"{results['synced']} of {len(corpus)} pages synced; peak {results['peakMiB']} MiB (target < "
        f"{TARGET_PEAK_MIB}: {met}), growth over the second half {results['growthMiBPer1000AfterWarmup']} MiB "
        f"per 1,000 documents (the store on disk {results['storeGrowthMiBPer1000AfterWarmup']}, the rest "
        f"{results['besideStoreGrowthMiBPer1000AfterWarmup']}), {results['docsPerSecond']} documents/s, "
        f"statuses {results['statuses']}"
    )
    print(results["load"])
    print(write_result(NAME, results))
    return results


if __name__ == "__main__":
    main()
