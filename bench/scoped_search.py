"""What scoped access costs a search: 100 sources, scoping on against off, in one run.

The real service over HTTP (uvicorn on 127.0.0.1, Qdrant Edge), with the tests' hashing
embedder: the query embedding is the same in every arm, so leaving MiniLM out leaves the
difference unchanged and the figure less noisy. 100 sources of `--docs-per-source` documents
each. Arms, interleaved query by query so that load drift hits them alike:

- off:    a token with `sources: ["*"]` (no filter);
- exact:  a token with 10 exact source ids (a MatchAny filter, nothing to resolve);
- glob:   a token with one glob matching 10 sources (resolved per request by a facet over the
          document records' sourceIdentifier, then the same MatchAny filter).

Warm caches: each arm's first requests are not counted. The cold cost of a new identity is the
first request of a token never seen before (static tokens keep no per-identity state). With
`--kubernetes` the same corpus is served in Kubernetes mode against the tests' kmock API server:
the warm latency of an agent granted one namespace, and the first request of five new identities
(a TokenReview, then SubjectAccessReviews per namespace and per refused namespace's sources).

    python -m bench.scoped_search [--docs-per-source 10] [--queries 300] [--kubernetes]
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import http_client, load_text, print_table, run_service, summary_ms, verdict, write_result
from bench.common import parser as common_parser

NAME = "scoped_search"
WARMUP = 10
SOURCES = 100
# The bound on what scoped access may add to a search, p50.
MAX_OVERHEAD_MS = 2.0
WORDS = ["deploy", "restart", "rollback", "pager", "dashboard", "latency", "quota", "backup", "restore", "certificate"]


def tokens_file(folder: Path) -> Path:
    exact = ", ".join(f'"team-{i:02d}/docs"' for i in range(0, 100, 10))
    path = folder / "tokens.yaml"
    path.write_text(
        "tokens:\n"
        '  - {name: admin, token: "bench-admin", write: true, sources: ["*"]}\n'
        f'  - {{name: exact, token: "bench-exact", sources: [{exact}]}}\n'
        '  - {name: glob, token: "bench-glob", sources: ["team-1*/docs"]}\n'
        '  - {name: newcomer, token: "bench-newcomer", sources: ["team-2*/docs"]}\n'
    )
    return path


def document(source: int, doc: int) -> str:
    words = [WORDS[(source + doc + k) % len(WORDS)] for k in range(40)]
    return f"# Runbook {source}-{doc}\n\n" + " ".join(words) + f" team{source} doc{doc}.\n"


def ingest(base_url: str, docs_per_source: int, token: str = "bench-admin") -> float:
    started = time.perf_counter()
    with http_client(base_url) as client:
        for source in range(SOURCES):
            for doc in range(docs_per_source):
                body = {
                    "uri": f"https://git.example/team-{source:02d}/doc{doc}.md",
                    "content": document(source, doc),
                    "metadata": {"sourceIdentifier": f"team-{source:02d}/docs"},
                }
                client.put("/api/v1/documents", json=body, headers=_bearer(token)).raise_for_status()
    return time.perf_counter() - started


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def measure(base_url: str, queries: int) -> dict[str, Any]:
    arms = {"off": "bench-admin", "exact": "bench-exact", "glob": "bench-glob"}
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    with http_client(base_url) as client:
        t0 = time.perf_counter()
        first = client.post("/api/v1/search", json={"query": "rollback"}, headers=_bearer("bench-newcomer"))
        cold_ms = (time.perf_counter() - t0) * 1000
        first.raise_for_status()
        for n in range(queries + WARMUP):
            query = {"query": f"{WORDS[n % len(WORDS)]} {WORDS[(n * 7) % len(WORDS)]}", "limit": 10}
            for arm, token in arms.items():
                t0 = time.perf_counter()
                response = client.post("/api/v1/search", json=query, headers=_bearer(token))
                elapsed = (time.perf_counter() - t0) * 1000
                response.raise_for_status()
                if arm != "off":
                    sources = {r["sourceIdentifier"] for r in response.json()["results"]}
                    assert len(sources) <= 10, "a scoped search returned another team's chunks"
                if n >= WARMUP:
                    times[arm].append(elapsed)
    summaries = {arm: summary_ms(values) for arm, values in times.items()}
    return {
        "searches": summaries,
        "p50OverheadMs": {arm: round(summaries[arm]["p50"] - summaries["off"]["p50"], 3) for arm in ("exact", "glob")},
        "coldNewIdentityMs": round(cold_ms, 3),
    }


class EmulatedApiServer:
    """The tests' kmock API server in a thread of its own, answering reviews from a script."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.url = ""
        self.reviews: Any = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        import kmock

        from tests.support.kube import KubeEmulator

        self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
        async with KubeEmulator() as emulator, kmock.Server(emulator):
            self.url, self.reviews = str(emulator.url).rstrip("/"), emulator.reviews
            self.ready.set()
            await self.stop.wait()

    def __enter__(self) -> EmulatedApiServer:
        self.thread.start()
        if not self.ready.wait(60):
            raise RuntimeError("the emulated API server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.loop is not None and self.stop is not None
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


def kubeconfig(folder: Path, server: str) -> Path:
    path = folder / "kubeconfig"
    user = {"token": "bench-search-service"}
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: u, user: {user}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
    )
    return path


def measure_kubernetes(folder: Path, docs_per_source: int, queries: int) -> dict[str, Any]:
    """Kubernetes mode: warm p50 of an agent granted 10 of the 100 namespaces, and a new identity's first request."""
    from kbsearch.settings import Settings
    from tests.support.hashing import HashingEmbedder

    with EmulatedApiServer() as api:
        os.environ["KUBECONFIG"] = str(kubeconfig(folder, api.url))
        import kubernetes.config.kube_config

        kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ["KUBECONFIG"]
        api.reviews.user("bench-writer", "system:serviceaccount:kb:operator")
        for n in range(queries + WARMUP + 2):
            api.reviews.user(f"agent-{n}", f"system:serviceaccount:team-{n % 100:02d}:agent-{n}")
        api.reviews.grants |= {
            (f"system:serviceaccount:team-{n % 100:02d}:agent-{n}", f"team-{n % 100:02d}", None)
            for n in range(queries + WARMUP + 2)
        }
        settings = Settings(
            data_dir=folder / "kdata", auth_mode="kubernetes", kubernetes_writers="system:serviceaccount:kb:operator"
        )
        with run_service(settings, embedder=HashingEmbedder()) as service:
            ingest(service.base_url, docs_per_source, token="bench-writer")
            with http_client(service.base_url) as client:
                cold = []
                for n in range(5):  # five new identities, one request each
                    t0 = time.perf_counter()
                    client.post(
                        "/api/v1/search", json={"query": "rollback"}, headers=_bearer(f"agent-{n}")
                    ).raise_for_status()
                    cold.append((time.perf_counter() - t0) * 1000)
                reviews = len(api.reviews.token_reviews) + len(api.reviews.access_reviews)
                warm = []
                for n in range(queries + WARMUP):
                    query = {"query": f"{WORDS[n % len(WORDS)]} {WORDS[(n * 7) % len(WORDS)]}", "limit": 10}
                    t0 = time.perf_counter()
                    client.post("/api/v1/search", json=query, headers=_bearer("agent-0")).raise_for_status()
                    if n >= WARMUP:
                        warm.append((time.perf_counter() - t0) * 1000)
        return {
            "kubernetesWarm": summary_ms(warm),
            "kubernetesColdNewIdentityMs": summary_ms(cold),
            "kubernetesReviewsForFiveNewIdentities": reviews,
        }


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for a summary (run_all does not run this one: `python -m bench.scoped_search`)."""
    overhead = result["p50OverheadMs"]
    shown = ", ".join(f"{arm} +{ms} ms" for arm, ms in overhead.items())
    figure = f"scoped search p50 overhead {shown}; a new identity's first request {result['coldNewIdentityMs']} ms"
    return figure, "scope overhead p50 <= 2 ms", verdict(all(ms <= MAX_OVERHEAD_MS for ms in overhead.values()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("scoped_search", __doc__, scifact=None)
    parser.add_argument("--docs-per-source", type=int, default=10)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--kubernetes", action="store_true", help="also Kubernetes mode, against the tests' emulator")
    args = parser.parse_args(argv)

    from kbsearch.settings import Settings
    from tests.support.hashing import HashingEmbedder

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        settings = Settings(data_dir=folder / "data", tokens_file=tokens_file(folder))
        with run_service(settings, embedder=HashingEmbedder()) as service:
            ingest_s = ingest(service.base_url, args.docs_per_source)
            result = measure(service.base_url, args.queries)
        if args.kubernetes:
            result.update(measure_kubernetes(folder, args.docs_per_source, args.queries))
    result.update(
        sources=SOURCES, documents=SOURCES * args.docs_per_source, ingestSeconds=round(ingest_s, 1), load=load_text()
    )
    rows = [[arm, s["p50"], s["p95"], s["n"]] for arm, s in result["searches"].items()]
    print_table(["arm", "p50 ms", "p95 ms", "n"], rows)
    print(
        f"p50 overhead: {result['p50OverheadMs']} ms; cold first request of a new identity: "
        f"{result['coldNewIdentityMs']} ms ({result['load']})"
    )
    if args.kubernetes:
        k = result["kubernetesWarm"]
        print(
            f"kubernetes mode, warm: p50 {k['p50']} ms, p95 {k['p95']} ms; a new identity's first request: "
            f"p50 {result['kubernetesColdNewIdentityMs']['p50']} ms "
            f"({result['kubernetesReviewsForFiveNewIdentities']} reviews for 5 identities)"
        )
    write_result(NAME, result)
    return result


if __name__ == "__main__":
    main()
