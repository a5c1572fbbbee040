"""A burst of large bodies from one token against a real service: its memory stays bounded and comes back.

Issue #37, finding 2: a token with no sources sent 200 concurrent 8 MiB `POST /api/v1/search`
bodies; each was read and parsed (then answered 422), RSS rose past the chart's 3 GiB limit and
stayed there. Now the body budget refuses what does not fit before reading it (429 for the
caller's share, with Retry-After), and a fixed mmap threshold hands freed bodies back to the
system. The bound is docs/operations/memory.md's: body bytes in flight times BODY_EXPANSION, plus
a read buffer per open connection. The service here is `python -m kbsearch` with the hashing embedder.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kbsearch.settings.service import BODY_EXPANSION, CONNECTION_BUFFER_BYTES
from tests.support.rss import PeakRss, rss_kib
from tests.support.service_process import ServiceProcess, ready_service

NOBODY, TEAM_B = "nobody-token-1", "team-b-token-2"
TOKENS = (
    "tokens:\n"
    f'  - {{name: nobody, token: "{NOBODY}", sources: []}}\n'
    f'  - {{name: team-b, token: "{TEAM_B}", sources: ["team-b/*"]}}\n'
)
MIB = 1_048_576
IN_FLIGHT = 16 * MIB  # SEARCHSVC_BODY_BYTES_IN_FLIGHT of this service
BURST = 200
BODY = b'{"query":"' + b"a" * (8 * MIB - 100) + b'"}'  # under the 8 MiB limit; a query too long: 422


def rss_bytes(pid: int) -> int:
    kib = rss_kib(pid)
    assert kib is not None, "no VmRSS"
    return kib * 1024


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    env = {
        "SEARCHSVC_DATA_DIR": str(tmp_path / "data"),
        "SEARCHSVC_TOKENS_FILE": str(tmp_path / "tokens.yaml"),
        "SEARCHSVC_BODY_BYTES_IN_FLIGHT": str(IN_FLIGHT),
        "SEARCHSVC_LOG_LEVEL": "WARNING",  # 200 access lines would only slow the burst
    }
    with ready_service(tmp_path / "service.log", env) as process:
        yield process


async def burst(url: str) -> tuple[list[httpx.Response | Exception], list[int]]:
    """The 200 large bodies at once, and team b's small searches, one after another, while they last."""
    limits = httpx.Limits(max_connections=BURST + 1)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def large() -> httpx.Response | Exception:
            headers = {"authorization": f"Bearer {NOBODY}", "content-type": "application/json"}
            try:
                return await client.post("/api/v1/search", content=BODY, headers=headers)
            except httpx.TransportError as exc:
                return exc

        async def team_b(done: asyncio.Event) -> list[int]:
            statuses = []
            while not done.is_set() or not statuses:
                response = await client.post(
                    "/api/v1/search", json={"query": "runbook"}, headers={"authorization": f"Bearer {TEAM_B}"}
                )
                statuses.append(response.status_code)
                await asyncio.sleep(0.05)
            return statuses

        done = asyncio.Event()
        async with asyncio.timeout(300):  # bounded: the burst ends by itself well before this
            searches = asyncio.create_task(team_b(done))
            answers = await asyncio.gather(*(large() for _ in range(BURST)))
            done.set()
            return answers, await searches


def test_a_burst_of_large_bodies_stays_within_the_bound_and_memory_comes_back(service):
    pid = service.proc.pid
    service.client.post("/api/v1/search", json={"query": "warm"}, headers={"authorization": f"Bearer {TEAM_B}"})
    baseline = rss_bytes(pid)
    sampler = PeakRss(pid, interval_s=0.01)
    sampler.start()
    try:
        answers, team_b = asyncio.run(burst(service.url))
    finally:
        sampler.done.set()
        sampler.join()

    bound = IN_FLIGHT * BODY_EXPANSION + (BURST + 1) * CONNECTION_BUFFER_BYTES
    peak = sampler.peak_kib * 1024
    assert peak - baseline <= bound, (peak >> 20, baseline >> 20, bound >> 20)

    responses = [a for a in answers if isinstance(a, httpx.Response)]
    statuses = Counter(r.status_code for r in responses)
    refused = [r for r in responses if r.status_code in (429, 503)]
    assert set(statuses) <= {422, 429, 503}, statuses
    assert len(refused) >= BURST // 2, statuses  # most were turned away unread, not read and parsed
    assert len(responses) >= BURST * 9 // 10, Counter(type(a).__name__ for a in answers)
    for response in refused:
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["code"] in ("BODY_BUDGET_EXCEEDED", "SERVICE_BUSY")
    assert team_b and set(team_b) == {200}, Counter(team_b)  # another team's search went on

    # Memory comes back: freed bodies are returned to the system, not kept by the allocator.
    deadline = time.monotonic() + 30
    while rss_bytes(pid) - baseline > 64 * MIB and time.monotonic() < deadline:
        time.sleep(0.5)
    assert rss_bytes(pid) - baseline <= 64 * MIB, (rss_bytes(pid) >> 20, baseline >> 20)
