"""Push to searchable: how long a one-file push takes to be returned by search, through webhooks.

Everything real but the Kubernetes API server: git's own smart-HTTP server (`git http-backend`,
tests/support/githttp.py) serves a bare repository of --files small markdown files; the real kopf
operator (kboperator's handlers, the webhook receiver on its own port) runs against the kmock API
emulator of the tests (tests/support/kube.py); the real search service (uvicorn on 127.0.0.1,
the bundled MiniLM, Qdrant Edge) holds the index. The repository is indexed first. Then, --pushes
times: one file gets a new sentence with a unique word, is committed and pushed, and its push is
delivered to the receiver (generic HMAC scheme); the clock runs from the `git push` to the first
search (polled every 50 ms) that returns the new word. Also counted on the git server per push:
`ls-refs` (git ls-remote, and each fetch's own listing) and `fetch`; and a sync request with no
new commit (a no-op check): it must cost one ls-remote and no fetch.

    python -m bench.freshness [--files 2000] [--pushes 30]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    load_average,
    load_text,
    local_embedder,
    print_table,
    run_service,
    service_cache,
    summary_ms,
    write_result,
)
from tests.support.git import git

NAME = "freshness"
NAMESPACE = "bench"
SOURCE = "handbook"
SECRET = "bench-webhook-secret-0123456789"
_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa").split()  # noqa: SIM905 - a sentence reads better than 16 quoted words


def make_repo(work: Path, bare: Path, files: int) -> None:
    rng = random.Random(21)
    work.mkdir(parents=True)
    git(work, "init", "--quiet", "--initial-branch=main")
    for n in range(files):
        path = work / f"docs/area-{n % 20:02d}/page-{n:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        words = " ".join(rng.choice(_WORDS) for _ in range(60))
        path.write_text(f"# Page {n}\n\n{words}.\n", encoding="utf-8")
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "-m", "import")
    git(bare.parent, "init", "--quiet", "--bare", bare.name)
    git(work, "remote", "add", "origin", str(bare))
    git(work, "push", "--quiet", "origin", "main")


# The operator and its receiver run in this event loop: every wait here must be asynchronous.
async def deliver(port: int, path: str, payload: dict[str, Any], delivery: str) -> int:
    body = json.dumps(payload).encode()
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-KB-Signature-256": f"sha256={digest}", "X-KB-Delivery": delivery}
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(f"http://127.0.0.1:{port}{path}", content=body, headers=headers)
    return answer.status_code


async def searchable(base_url: str, word: str, deadline: float) -> bool:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        while time.monotonic() < deadline:
            answer = await client.post("/api/v1/search", json={"query": word, "limit": 3})
            hits = answer.json().get("results", []) if answer.status_code == 200 else []
            if any(word in str(hit.get("content", "")) for hit in hits):  # not the echoed query
                return True
            await asyncio.sleep(0.05)
    return False


async def wait_for(check: Any, timeout: float, what: str) -> Any:  # noqa: ASYNC109 - a polling deadline
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000, help="markdown files in the repository (default 2000)")
    parser.add_argument("--pushes", type=int, default=30, help="single-file pushes measured (default 30)")
    parser.add_argument("--backend", choices=["torch", "onnx", "onnx-int8"], help="local backend")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-freshness-") as tmp_name:
        return asyncio.run(_run(args, Path(tmp_name)))


async def _run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import socket

    import kmock
    import kopf
    import yaml

    from kboperator.kube.webhooks import hook_path
    from kbsearch.settings import Settings
    from tests.support.githttp import GitHttpServer
    from tests.support.kube import OPERATOR_TOKEN, KubeApi, KubeEmulator, running_operator

    served_root = tmp / "served"
    served_root.mkdir()
    work = tmp / "work"
    t0 = time.perf_counter()
    make_repo(work, served_root / "handbook.git", args.files)
    print(f"[freshness] {args.files} files generated in {time.perf_counter() - t0:.1f}s ({load_text()})", flush=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        hook_port = probe.getsockname()[1]
    embedder = service_cache(local_embedder(args.backend), 10_000)
    settings = Settings(data_dir=tmp / "data", collection="bench", api_token=None, read_token=None)
    with GitHttpServer(served_root) as served, run_service(settings, embedder=embedder) as svc:
        async with KubeEmulator() as kube, kmock.Server(kube):
            config = tmp / "kubeconfig"
            cluster = {"server": str(kube.url).rstrip("/")}
            config.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": cluster}],
                "users": [{"name": "kmock", "user": {"token": OPERATOR_TOKEN}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
            }))  # fmt: skip
            import kubernetes.config.kube_config

            kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(config)
            os.environ.pop("KUBERNETES_SERVICE_HOST", None)
            for key, value in {
                "SEARCH_URL": svc.base_url, "NAMESPACES": NAMESPACE, "CACHE_DIR": str(tmp / "cache"),
                "METRICS_PORT": "0", "STARTUP_JITTER_SECONDS": "0", "WEBHOOK_PORT": str(hook_port),
                "WEBHOOK_RATE_PER_MINUTE": "600", "WEBHOOK_BURST": "50", "FULL_RECONCILE_INTERVAL": "86400",
            }.items():  # fmt: skip
                os.environ[f"KBOPERATOR_{key}"] = value
            api = KubeApi(kube, NAMESPACE)
            secret = {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "hook", "namespace": NAMESPACE,
                             "labels": {"kb.knowledgebase.dev/secret-type": "webhook"}},
                "data": {"token": base64.b64encode(SECRET.encode()).decode()},
            }  # fmt: skip
            await kube.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json=secret)
            async with running_operator(kopf.Memo(), namespaces=[NAMESPACE]) as memo:
                spec = {
                    "repository": {"url": served.url("handbook.git")},
                    "schedule": "@every 24h",
                    "webhook": {"secretRef": {"name": "hook"}},
                }
                t0 = time.perf_counter()
                await api.create(SOURCE, spec, checked=False)  # the CRD takes https only; the operator takes http
                status = await wait_for(
                    lambda: (s := api.status(SOURCE)).get("phase") == "Synced" and s.get("webhookPath") and s,
                    3600, "the first sync",
                )  # fmt: skip
                first_sync = time.perf_counter() - t0
                print(f"[freshness] indexed {status['documentCount']} documents in {first_sync:.1f}s ({load_text()})")
                path = hook_path(NAMESPACE, SOURCE, SECRET)
                assert status["webhookPath"] == path
                lags, wire = [], []
                for n in range(args.pushes):
                    word = f"zulu{n:03d}freshness"
                    page = work / f"docs/area-{n % 20:02d}/page-{n:05d}.md"
                    page.write_text(page.read_text() + f"\nA new sentence about {word}.\n")
                    await asyncio.to_thread(git, work, "commit", "--quiet", "-am", f"push {n}")
                    served.clear()
                    pushed = time.monotonic()
                    await asyncio.to_thread(git, work, "push", "--quiet", "origin", "main")
                    rel = str(page.relative_to(work))
                    code = await deliver(hook_port, path, {"ref": "refs/heads/main", "paths": [rel]}, f"push-{n}")
                    assert code == 202, code
                    if not await searchable(svc.base_url, word, pushed + 300):
                        raise RuntimeError(f"push {n} was not searchable within 300 s")
                    lags.append((time.monotonic() - pushed) * 1000)
                    await asyncio.sleep(0.3)  # let the status patch land before counting
                    wire.append({"lsRefs": served.count("ls-refs"), "fetch": served.count("fetch")})
                    print(f"  push {n:2d}: {lags[-1]:.0f} ms, git {wire[-1]} ({load_text()})", flush=True)
                # A sync request without a new commit: the no-op check.
                served.clear()
                before = api.status(SOURCE).get("lastSyncTime")
                await api.annotate(SOURCE, "kb.knowledgebase.dev/sync-requested-at", "push:noop")
                await wait_for(lambda: api.status(SOURCE).get("lastHandledSyncRequest") == "push:noop", 120, "no-op")
                noop = {"lsRefs": served.count("ls-refs"), "fetch": served.count("fetch")}
                assert api.status(SOURCE).get("lastSyncTime") != before
                freshness = api.status(SOURCE).get("freshness")
                skipped = memo["services"].metrics.registry.get_sample_value("kb_operator_fetches_skipped_total")
    summary = summary_ms(lags)
    result = {
        "files": args.files,
        "pushes": args.pushes,
        "firstSyncSeconds": round(first_sync, 1),
        "pushToSearchableMs": summary,
        "target": "p95 <= 5000 ms",
        "gitPerPush": wire,
        "noopCheck": noop,
        "fetchesSkipped": skipped,
        "lastFreshnessStatus": freshness,
        "load": load_average(),
        "setup": "git http-backend on 127.0.0.1, real kopf operator + webhook receiver against the kmock API "
        "emulator, real search service (uvicorn, bundled MiniLM, Qdrant Edge)",
    }
    write_result(NAME, result)
    print_table(
        ["pushes", "p50 ms", "p95 ms", "max ms", "no-op: ls-refs / fetch", "load"],
        [[args.pushes, summary.get("p50"), summary.get("p95"), summary.get("max"),
          f"{noop['lsRefs']} / {noop['fetch']}", load_text()]],
    )  # fmt: skip
    return result


if __name__ == "__main__":
    main()
