"""The rebuild self-check's verdicts: an identical rebuild, the markdown-v1 -> v2 upgrade, a broken embedder.

    python -m bench.rebuild_check --eval ../shared/eval/argocd-docs [--pages 100] [--runs 5]

The corpus is versioned real documentation: `--pages` pages of the Argo CD docs dev set (every n-th
in path order), three versions of each (Hugo layout `content/docs/<v>/`, older ones with small
edits, as bench/docsqa.py --versioned makes them), in two sources (user-guide, the rest). The
previous release (`de201e8`, markdown-v1, no stored bodies, no versions: its code from git history)
ingests it with the real MiniLM and answers the 80 dev-set questions (the query log), once. Then,
per run, on a fresh copy of that data directory, today's service (real MiniLM):

- (b) starts on it: the chunker changed, so it rebuilds by itself; a client searches throughout;
- (a) is asked `POST /api/v1/reindex` with nothing changed: an identical rebuild;
- (c) restarts on a copy of the result with `SEARCHSVC_EMBEDDER=openai` pointed at an endpoint
  serving random vectors (tests/support/randomembed.py): a broken embedder, through its real class.

Reported per scenario and run: the verdict (swapped / refused), the check's queries and per-mode
figures; search p50/p95 during the rebuilds and failed requests (target 0); the load average.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import CACHE_DIR, load_text, print_table, summary_ms, verdict, write_result
from bench.common import parser as common_parser
from bench.docsqa import DEFAULT_EVAL, VERSIONS, _small_edit, clone_corpus

NAME = "rebuild_check"
FINISHED = ("refused", "failed")


def corpus(eval_dir: Path, into: Path, pages: int) -> list[dict[str, Any]]:
    single = clone_corpus(eval_dir, into)
    paths = sorted((single / "docs").rglob("*.md"))
    chosen = paths[:: max(1, len(paths) // pages)][:pages]
    rng = random.Random(5)
    documents = []
    for path in chosen:
        rel = path.relative_to(single / "docs").as_posix()
        text = path.read_text(encoding="utf-8")
        source = "argocd-user-guide" if rel.startswith("user-guide/") else "argocd-docs"
        for age, version in enumerate(reversed(VERSIONS)):
            edited = text
            for _ in range(age):
                edited = _small_edit(edited, rng)
            where = f"content/docs/{version}/{rel}"
            metadata = {"sourceIdentifier": source, "path": where}
            documents.append({"uri": f"git://argocd/{where}", "content": edited, "metadata": metadata})
    return documents


def previous_release_data(folder: Path, documents: list[dict[str, Any]], questions: list[str]) -> Path:
    """The data directory the previous release writes: its own code, the real model, the questions asked.

    Kept in the bench cache (per corpus size): every run starts from a copy of it.
    """
    from tests.support.previous_release import extract
    from tests.support.service_process import REAL_MODEL_START_S, ServiceProcess

    data = CACHE_DIR / f"{NAME}-previous-data-{len(documents)}"
    complete = data.with_name(data.name + ".complete")  # beside it: nothing foreign in a data directory
    if complete.exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    tree = extract(folder / "previous-release")
    env = {"SEARCHSVC_DATA_DIR": str(data), "SEARCHSVC_ONNX_DIR": str(CACHE_DIR / "onnx-previous-release")}
    old = ServiceProcess(folder / "previous.log", env, real_model=True, repo=tree).start()
    try:
        old.wait_ready(REAL_MODEL_START_S * 3)
        for doc in documents:
            old.client.put("/api/v1/documents", json=doc).raise_for_status()
        for i, question in enumerate(questions):
            for _ in range(1 + (i % 3 == 0)):  # some asked twice: the log has a frequency order
                old.client.post("/api/v1/search", json={"query": question, "limit": 10}).raise_for_status()
        time.sleep(3)  # the query log's writer flushes
    finally:
        old.stop()
    complete.write_text("written by the previous release\n")
    return data


def copy_data(source: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)
    return target


class Searcher:
    """A client searching back to back while a rebuild runs; latencies and failures."""

    def __init__(self, url: str, questions: list[str]) -> None:
        self.client = httpx.Client(base_url=url, timeout=60)
        self.questions = questions
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            query = self.questions[n % len(self.questions)]
            n += 1
            started = time.perf_counter()
            try:
                response = self.client.post("/api/v1/search", json={"query": query, "limit": 10})
                if response.status_code != 200:
                    self.failures.append(f"search {response.status_code}")
                    continue
            except httpx.HTTPError as exc:
                self.failures.append(f"search {type(exc).__name__}")
                continue
            self.latencies.append((time.perf_counter() - started) * 1000)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()


def wait_rebuild(client: httpx.Client, deadline_s: float = 3600) -> dict[str, Any]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        status: dict[str, Any] = client.get("/api/v1/status").json()["rebuild"]
        if status["state"] in FINISHED or (status["state"] == "idle" and status["finishedAt"]):
            return status
        time.sleep(1)
    raise TimeoutError("the rebuild did not finish")


def outcome(status: dict[str, Any], searcher: Searcher | None, seconds: float) -> dict[str, Any]:
    check = status.get("check") or {}
    return {
        "state": status["state"],
        "verdict": "swapped" if status["state"] == "idle" and check.get("passed") else status["state"],
        "message": status["message"],
        "seconds": round(seconds, 1),
        "check": check,
        "searchDuring": summary_ms(searcher.latencies) if searcher else None,
        "failed": len(searcher.failures) if searcher else 0,
        "failures": searcher.failures[:10] if searcher else [],
    }


def one_run(folder: Path, previous: Path, questions: list[str]) -> dict[str, Any]:
    from tests.support.randomembed import RandomEmbeddings
    from tests.support.service_process import REAL_MODEL_START_S, ServiceProcess

    onnx = {"SEARCHSVC_ONNX_DIR": str(CACHE_DIR / "onnx")}
    data = copy_data(previous, folder / "data")
    result: dict[str, Any] = {}
    today = ServiceProcess(folder / "today.log", {"SEARCHSVC_DATA_DIR": str(data), **onnx}, real_model=True).start()
    try:
        today.wait_ready(REAL_MODEL_START_S * 3)
        searcher, started = Searcher(today.url, questions), time.perf_counter()
        status = wait_rebuild(today.client)
        searcher.stop()
        result["upgrade"] = outcome(status, searcher, time.perf_counter() - started)
        response = today.client.post("/api/v1/reindex", json={})
        searcher, started = Searcher(today.url, questions), time.perf_counter()
        status = wait_rebuild(today.client) if response.status_code == 202 else {"state": str(response.status_code)}
        searcher.stop()
        result["identical"] = outcome(
            {"message": response.text[:300], **status}, searcher, time.perf_counter() - started
        )
    finally:
        today.stop()
    broken_data = copy_data(data, folder / "broken-data")
    with RandomEmbeddings() as endpoint:
        env = {"SEARCHSVC_DATA_DIR": str(broken_data), **onnx, **endpoint.settings()}
        broken = ServiceProcess(folder / "broken.log", env, real_model=True).start()
        try:
            broken.wait_ready(REAL_MODEL_START_S * 3)
            searcher, started = Searcher(broken.url, questions), time.perf_counter()
            status = wait_rebuild(broken.client)
            searcher.stop()
            result["broken"] = outcome(status, searcher, time.perf_counter() - started)
        finally:
            broken.stop()
    shutil.rmtree(broken_data, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser(NAME, __doc__, scifact=None)
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="the argocd-docs folder (questions + bundle)")
    parser.add_argument("--pages", type=int, default=100, help="pages taken from the corpus (three versions each)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    load_before = load_text()
    questions = [json.loads(line)["question"] for line in (args.eval / "questions.jsonl").read_text().splitlines()]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        documents = corpus(args.eval, folder, args.pages)
        started = time.perf_counter()
        previous = previous_release_data(folder, documents, questions)
        previous_s = round(time.perf_counter() - started, 1)
        for n in range(args.runs):
            run_dir = folder / f"run-{n}"
            run_dir.mkdir()
            runs.append(one_run(run_dir, previous, questions))
            print(f"run {n + 1}: " + ", ".join(f"{k} {v['verdict']}" for k, v in runs[-1].items()), flush=True)
            result: dict[str, Any] = {
                "documents": len(documents),
                "pages": args.pages,
                "previousReleaseSeconds": previous_s,
                "runsDone": len(runs),
                "runs": runs,
                "loadBefore": load_before,
                "load": load_text(),
            }
            write_result(NAME, result)  # after every run: a long benchmark keeps what it measured
    rows = []
    for scenario in ("identical", "upgrade", "broken"):
        for n, run in enumerate(runs):
            r = run[scenario]
            check = r["check"] or {}
            figures = " ".join(
                f"{m} {check['current'][m]}->{check['rebuilt'][m]} (ub {check['upperBound'][m]:+.3f})"
                for m in check.get("current", {})
            )
            during = r["searchDuring"] or {}
            rows.append([scenario, n + 1, r["verdict"], check.get("queries"), figures, during.get("p95"), r["failed"]])
    print_table(["scenario", "run", "verdict", "queries", "MRR@10 current->rebuilt", "search p95 ms", "failed"], rows)
    print(f"{len(documents)} documents; {result['load']}")
    write_result(NAME, result)
    return result


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for a summary: identical and upgrade swap, broken refused, 0 failed."""
    runs = result["runs"]
    verdicts = {s: [r[s]["verdict"] for r in runs] for s in ("identical", "upgrade", "broken")}
    failed = sum(r[s]["failed"] for r in runs for s in verdicts)
    figure = "; ".join(f"{s}: {v.count('swapped')}/{len(v)} swapped" for s, v in verdicts.items())
    met = (
        all(v == "swapped" for v in verdicts["identical"] + verdicts["upgrade"])
        and all(v == "refused" for v in verdicts["broken"])
        and failed == 0
    )
    return f"{figure}; {failed} failed requests", "identical and v1->v2 swap, broken refused, 0 failed", verdict(met)


if __name__ == "__main__":
    main()
