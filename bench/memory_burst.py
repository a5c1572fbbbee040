"""Memory through a burst of large bodies: peak and after-burst RSS, before and after the body budget.

A token with no sources sends `--burst` concurrent 8 MiB `POST /api/v1/search` bodies (a query
too long: 422 when read), `--bursts` times, 3 s apart, against a real service process (the
service's entry point with the tests' hashing embedder, tests/support/service_process.py):

- before: the code of `--before` (a git ref, default the commit before the body budget), run from
  a `git archive` of it;
- after:  this tree.

VmRSS of the service is sampled every 20 ms: baseline, peak of each burst, 3 s after each, and the
answers by status (a transport error by its type).

    python -m bench.memory_burst [--before REF] [--burst 200] [--bursts 2]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.common import load_text, print_table, write_result
from tests.support.rss import PeakRss, rss_kib
from tests.support.service_process import REPO, ServiceProcess

NAME = "memory_burst"
NOBODY = "bench-nobody-0001"
TOKENS = f'tokens:\n  - {{name: nobody, token: "{NOBODY}", sources: []}}\n'
BODY = b'{"query":"' + b"a" * (8 * 1_048_576 - 100) + b'"}'
BEFORE = "afadf56"  # main before the body budget


def rss_mib(pid: int) -> int:
    return (rss_kib(pid) or 0) // 1024


async def burst(url: str, count: int) -> Counter[str]:
    answers: Counter[str] = Counter()
    headers = {"authorization": f"Bearer {NOBODY}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=count)) as client:

        async def one() -> None:
            try:
                response = await client.post("/api/v1/search", content=BODY, headers=headers)
                answers[str(response.status_code)] += 1
            except httpx.TransportError as exc:
                answers[type(exc).__name__] += 1

        async with asyncio.timeout(600):
            await asyncio.gather(*(one() for _ in range(count)))
    return answers


def arm(repo: Path, root: Path, count: int, bursts: int) -> dict[str, Any]:
    root.mkdir()
    (root / "tokens.yaml").write_text(TOKENS)
    env = {
        "SEARCHSVC_DATA_DIR": str(root / "data"),
        "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml"),
        "SEARCHSVC_LOG_LEVEL": "WARNING",
    }
    service = ServiceProcess(root / "service.log", env, repo=repo).start()
    try:
        service.wait_ready()
        pid = service.proc.pid
        result: dict[str, Any] = {"baselineMiB": rss_mib(pid), "bursts": []}
        for _ in range(bursts):
            peak = PeakRss(pid, interval_s=0.02)
            peak.start()
            started = time.monotonic()
            answers = asyncio.run(burst(service.url, count))
            seconds = round(time.monotonic() - started, 1)
            time.sleep(3)
            peak.done.set()
            peak.join()
            result["bursts"].append(
                {
                    "peakMiB": peak.peak_kib // 1024,
                    "afterMiB": rss_mib(pid),
                    "seconds": seconds,
                    "answers": dict(answers),
                }
            )
        return result
    finally:
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE, help="git ref of the code before")
    parser.add_argument("--burst", type=int, default=200, help="large bodies sent at once")
    parser.add_argument("--bursts", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, Any] = {"before": args.before, "burst": args.burst}
    with tempfile.TemporaryDirectory(prefix="kb-memory-burst-") as tmp:
        old = Path(tmp) / "before-tree"
        old.mkdir()
        archive = subprocess.run(["git", "archive", args.before], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        for name, repo in (("before", old), ("after", REPO)):
            results[name] = arm(repo, Path(tmp) / name, args.burst, args.bursts)
            print(name, results[name], flush=True)
            write_result(NAME, results)
    rows = [
        [name, results[name]["baselineMiB"], i + 1, b["peakMiB"], b["afterMiB"], b["seconds"], b["answers"]]
        for name in ("before", "after")
        for i, b in enumerate(results[name]["bursts"])
    ]
    print_table(["code", "baseline MiB", "burst", "peak MiB", "3 s after MiB", "seconds", "answers"], rows)
    results["load"] = load_text()
    print(results["load"])
    print(write_result(NAME, results))


if __name__ == "__main__":
    main()
