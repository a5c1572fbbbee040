"""Shared helpers: the real service in a background thread, result files, SciFact loading, load figures."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"  # git-ignored
CACHE_DIR = RESULTS_DIR / "cache"  # persisted between runs (ingested collections, vectors)

EXIT_USAGE = 2


# --- machine load -----------------------------------------------------------------------


def load_average() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"load1": round(one, 2), "load5": round(five, 2), "load15": round(fifteen, 2), "cpus": os.cpu_count() or 0}


def load_text(load: dict[str, float] | None = None) -> str:
    load = load or load_average()
    return f"load {load['load1']:.2f}/{load['load5']:.2f}/{load['load15']:.2f} on {load['cpus']} cpus"


# --- command line -------------------------------------------------------------------------

# What --scifact means to a benchmark. run_all passes it to every one, so those that generate
# their own corpus accept it too and say it is unused.
SCIFACT_TEXTS = "SciFact train folder (BEIR layout)"
SCIFACT_UNUSED = "unused: this benchmark makes its own data (run_all passes --scifact to every benchmark)"


def parser(name: str, doc: str | None, scifact: str | None = SCIFACT_TEXTS) -> argparse.ArgumentParser:
    """The argument parser benchmark `name` starts from: `python -m bench.<name>`, its docstring, --scifact."""
    made = argparse.ArgumentParser(
        prog=f"python -m bench.{name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if scifact is not None:
        made.add_argument("--scifact", help=scifact)
    return made


def verdict(met: bool) -> str:
    """A target's verdict in a headline."""
    return "met" if met else "NOT met"


# --- results ------------------------------------------------------------------------------


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    data = {"benchmark": name, "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadAtEnd": load_average(), **data}
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), like numpy's default."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "p99": round(percentile(values, 99), 3),
        "mean": round(statistics.fmean(values), 3) if values else float("nan"),
        "max": round(max(values), 3) if values else float("nan"),
    }


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(
            "  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        )
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


# --- generated text -----------------------------------------------------------------------

# The operations words the generated-corpus benchmarks (fairness, sync_memory, cache_partition)
# build their documents and queries from. Their order is part of each benchmark's data: a seeded
# rng picks by position, so reordering it changes every generated document.
RUNBOOK_WORDS = (
    "deploy",
    "restart",
    "rollback",
    "pager",
    "dashboard",
    "latency",
    "quota",
    "backup",
    "restore",
    "certificate",
    "ingress",
)


# --- SciFact ------------------------------------------------------------------------------


@dataclass
class SciFact:
    corpus: list[dict[str, str]]  # {"_id", "title", "text"}, file order
    queries: dict[str, str]  # id -> text, file order
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> graded relevance


class MissingData(SystemExit):
    pass


def load_scifact(folder: str | Path | None) -> SciFact:
    """Read a BEIR-layout SciFact train folder; exit 2 with a clear message when it is not there."""
    if folder is None:
        fail_usage("no SciFact folder given: pass --scifact PATH (e.g. ../shared/eval/scifact-train)")
    root = Path(folder)
    # SciFact's split is train; MLQuestions ships dev only. The one split present is the one scored.
    splits = sorted((root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
    qrels_file = root / "qrels" / "train.tsv" if len(splits) != 1 else splits[0]
    needed = [root / "corpus.jsonl", root / "queries.jsonl", qrels_file]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        fail_usage(
            f"SciFact data not found at {root.resolve()} (missing: {', '.join(missing)}). Pass --scifact with "
            "the folder holding corpus.jsonl, queries.jsonl and qrels/train.tsv or one other split (BEIR layout); "
            "the data is never copied into the repository."
        )
    with open(needed[0], encoding="utf-8") as fh:
        corpus = [json.loads(line) for line in fh if line.strip()]
    with open(needed[1], encoding="utf-8") as fh:
        queries = {str(q["_id"]): q["text"] for q in map(json.loads, filter(str.strip, fh))}
    qrels: dict[str, dict[str, int]] = {}
    with open(needed[2], encoding="utf-8") as fh:
        header = fh.readline()
        if not header.lower().startswith("query-id"):
            fh.seek(0)
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return SciFact(corpus=corpus, queries=queries, qrels=qrels)


def fail_usage(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def scifact_markdown(doc: dict[str, str]) -> str:
    return f"# {doc['title']}\n\n{doc['text']}"


# --- one user per embedded data directory ----------------------------------------------------


@contextmanager
def exclusive_dir(path: Path) -> Iterator[None]:
    """Mark `path` as in use by this process while a service or store holds it.

    Qdrant Edge refuses a second open of a shard held by another process, but the refused
    `EdgeShard.load` has already touched the shard's files (seen here: a payload tracker journal
    truncated to 0 bytes, then every flush of the live service failed with 500). So a benchmark
    never even tries to open a data directory another benchmark process holds.
    """
    path.mkdir(parents=True, exist_ok=True)
    marker = path / "bench-in-use.pid"
    if marker.is_file():
        try:
            pid = int(marker.read_text().strip())
        except ValueError:
            pid = 0
        if pid and pid != os.getpid() and _alive(pid):
            raise RuntimeError(f"{path} is in use by benchmark process {pid}; wait for it to finish")
    marker.write_text(str(os.getpid()))
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def dir_in_use(path: Path) -> int | None:
    marker = path / "bench-in-use.pid"
    try:
        pid = int(marker.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid != os.getpid() and _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- the real service in a thread ---------------------------------------------------------


@dataclass
class ServerTimes:
    """Wall time spent inside the app per route (measured around the ASGI call), in ms."""

    by_route: dict[str, list[float]] = field(default_factory=dict)
    intervals: list[tuple[float, float]] = field(default_factory=list)  # perf_counter (start, end) of every request
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, ms: float, start: float | None = None, end: float | None = None) -> None:
        with self.lock:
            self.by_route.setdefault(key, []).append(ms)
            if start is not None and end is not None:
                self.intervals.append((start, end))

    def busy_seconds(self, since: float, until: float) -> float:
        """Wall time within [since, until] during which at least one request was inside the app."""
        with self.lock:
            spans = sorted((max(a, since), min(b, until)) for a, b in self.intervals if b > since and a < until)
        total, cur_a, cur_b = 0.0, None, None
        for a, b in spans:
            if cur_b is None or a > cur_b:
                if cur_b is not None:
                    total += cur_b - cur_a
                cur_a, cur_b = a, b
            else:
                cur_b = max(cur_b, b)
        if cur_b is not None:
            total += cur_b - cur_a
        return total

    def take(self, key: str) -> list[float]:
        with self.lock:
            return self.by_route.pop(key, [])


class TimedASGI:
    """Outermost ASGI wrapper: records the time the app spends on each HTTP request.

    This is the service's own time (routing, validation, chunking, embedding, store writes),
    without the client, the socket or uvicorn's HTTP parsing.
    """

    def __init__(self, app, times: ServerTimes):
        self.app = app
        self.times = times

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            ended = time.perf_counter()
            self.times.add(f"{scope['method']} {scope['path']}", (ended - started) * 1000, started, ended)


@dataclass
class RunningService:
    base_url: str
    app: Any
    times: ServerTimes


@contextmanager
def run_service(settings=None, *, store=None, embedder=None, timeout_s: float = 300.0) -> Iterator[RunningService]:
    """Serve `kbsearch.app.create_app(...)` with uvicorn on 127.0.0.1:<free port> in a thread."""
    import httpx
    import uvicorn

    from kbsearch.app import create_app

    app = create_app(settings, store=store, embedder=embedder)
    times = ServerTimes()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        TimedASGI(app, times),
        lifespan="on",
        log_level="warning",
        access_log=False,
        log_config=None,
        timeout_keep_alive=300,
    )
    server = uvicorn.Server(config)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    thread = threading.Thread(target=serve, name="bench-uvicorn", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(base_url=base_url, timeout=5) as client:
            while True:
                if errors or not thread.is_alive():
                    raise RuntimeError(f"the service failed to start: {errors[0] if errors else 'thread ended'}")
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the service did not become ready in time")
                time.sleep(0.1)
        yield RunningService(base_url=base_url, app=app, times=times)
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


def service_cache(inner, max_entries: int):
    """The service's own CachedEmbedder around `inner`, safe to hand to create_app.

    create_app does `embedder or build_embedder(settings.embedding, ...)`, and CachedEmbedder defines __len__,
    so an EMPTY cache is falsy: create_app silently drops it and builds (and loads) a new
    embedder of its own. This subclass is always truthy, so the app uses the cache it is given.
    """
    from kbsearch.embedders.cache import CachedEmbedder

    class _TruthyCache(CachedEmbedder):
        def __bool__(self) -> bool:
            return True

    return _TruthyCache(inner, max_entries)


def model_tag(model: str | None = None) -> str:
    """'' for the bundled MiniLM, else '<model>-': keeps another local model's cached vectors apart
    (SEARCHSVC_LOCAL_MODEL picks the model of every benchmark that embeds, as it does the service's)."""
    from kbsearch.embedders.catalog import BUNDLED_MODEL
    from kbsearch.settings import Settings

    model = model or Settings().embedding.local_model
    return "" if model == BUNDLED_MODEL else re.sub(r"[^A-Za-z0-9_.-]+", "-", model) + "-"


def local_embedder(backend: str | None = None):
    """The real local model (SEARCHSVC_LOCAL_MODEL, the bundled MiniLM by default) on `backend`
    (default: the service's default), loaded, no cache in front.

    Built by the service's own factory with its default batch size and threads; ONNX exports are
    kept in bench/results/cache/onnx.
    """
    from kbsearch.embedders.factory import build_embedder
    from kbsearch.settings import Settings

    chosen = {"local_backend": backend} if backend else {}
    settings = Settings(embed_cache_size=0, onnx_dir=CACHE_DIR / "onnx", **chosen)
    embedder = build_embedder(settings.embedding, settings.storage.data_dir)
    embedder.load()
    return embedder


def http_client(base_url: str, timeout: float = 600.0):
    import httpx

    return httpx.Client(base_url=base_url, timeout=timeout, limits=httpx.Limits(max_keepalive_connections=16))


def server_timing(header: str | None) -> dict[str, float]:
    """Parse `Server-Timing: embed;dur=1.2, engine;dur=3.4` into {"embed": 1.2, "engine": 3.4}."""
    out: dict[str, float] = {}
    for part in (header or "").split(","):
        name, *params = [p.strip() for p in part.split(";")]
        for param in params:
            if param.startswith("dur="):
                out[name] = float(param[4:])
    return out


# --- the real service as its own process ----------------------------------------------------


def start_process(
    root: Path, port: int, log_name: str, env: dict[str, str], *, module: str = "kbsearch"
) -> subprocess.Popen[bytes]:
    """`python -m kbsearch` (or `module`, an entry point over it) on `port`, data under root/data, the
    ONNX export cached between runs.

    Only `env`'s SEARCHSVC_ settings reach it (not the caller's), at WARNING; its output goes to root/log_name.
    """
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCHSVC_")}
    child_env |= {
        "SEARCHSVC_PORT": str(port),
        "SEARCHSVC_DATA_DIR": str(root / "data"),
        "SEARCHSVC_ONNX_DIR": str(CACHE_DIR / "onnx"),
        "SEARCHSVC_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        **env,
    }
    log = open(root / log_name, "wb")  # noqa: SIM115 - the child writes it until it ends
    return subprocess.Popen([sys.executable, "-m", module], env=child_env, stdout=log, stderr=subprocess.STDOUT)


def wait_process_ready(url: str, child: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until the service at `url` answers /readyz; fails at once if `child` exits first."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the service exited with {child.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the service did not become ready")
