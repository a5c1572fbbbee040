"""A Qdrant node killed under load: two search services share a three-node cluster (3 shards, 2
copies each) through one load-balanced address, writing and searching while a node dies.

What must hold: searches keep answering; every acknowledged write (a 200 to PUT) survives; two
services racing on one document leave one whole version of it, never chunks of two; and once the
killed node is back and its copies recovered, those copies alone serve the index whole (the other
holder of each of its shards is killed in turn, and every count and document is checked again).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from tests.searchsvc.api_fixtures import counts, sections
from tests.searchsvc.store.cluster_support import cluster_service, shard_placement
from tests.support.qdrant import Balancer, QdrantCluster

DOCUMENTS = 24  # per service
SOURCES = 3
CHUNKS = 3  # per document
RACES = 6  # writes of one document by each service at once
# A write refused with a retryable 503 (its shard's leader was the dead node) is tried again, as
# the operator's sync does; a search gets one retry, after the service's own 503 says "retry".
RETRY_FOR_S = 60.0


def replica_states(nodes: QdrantCluster) -> dict[int, list[str]]:
    """Shard id -> the states of its copies, as the first live node's consensus says."""
    info = shard_placement(nodes)
    states: dict[int, list[str]] = {}
    for shard in [*info["local_shards"], *info["remote_shards"]]:
        states.setdefault(shard["shard_id"], []).append(shard["state"])
    return states


async def put_until_answered(client: httpx.AsyncClient, body: dict[str, object], *, racing: bool = False) -> int:
    """PUT, again on a retryable 503; the number of 503s it took, or -1 for a write that lost a race
    (409 WRITE_CONFLICT, not acknowledged), allowed only when `racing`. Anything else fails the test."""
    deadline, refused = time.monotonic() + RETRY_FOR_S, 0
    while True:
        answer = await client.put("/api/v1/documents", json=body)
        if answer.status_code == 200:
            return refused
        if racing and answer.status_code == 409 and answer.json()["error"]["code"] == "WRITE_CONFLICT":
            return -1
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "STORE_UNAVAILABLE", answer.text
        assert time.monotonic() < deadline, answer.text
        refused += 1
        await asyncio.sleep(0.5)


def document(i: int) -> dict[str, object]:
    words = f"topic{i} kill words"
    metadata = {"sourceIdentifier": f"s{i % SOURCES}"}
    return {"uri": f"docs/{i}.md", "content": sections(CHUNKS, words=words), "metadata": metadata}


async def searched_chunks(client: httpx.AsyncClient, uri: str, query: str) -> list[dict[str, object]]:
    body = {"query": query, "limit": 50, "mode": "keyword", "collapse": False, "filter": {"uriPrefix": uri}}
    answer = await client.post("/api/v1/search", json=body)
    if answer.status_code == 503:  # the one retry a search gets
        await asyncio.sleep(1)
        answer = await client.post("/api/v1/search", json=body)
    assert answer.status_code == 200, answer.text
    return [r for r in answer.json()["results"] if r["uri"] == uri]


async def source_counts(client: httpx.AsyncClient) -> dict[str, tuple[int, int]]:
    listed = (await client.get("/api/v1/sources")).json()["sources"]
    return {s["sourceIdentifier"]: (s["documents"], s["chunks"]) for s in listed}


async def check_index(services: list[httpx.AsyncClient], acknowledged: set[int]) -> None:
    """Counts per source, and every chunk of every acknowledged document found by search, via each service."""
    expected = {f"s{k}": (0, 0) for k in range(SOURCES)}
    for i in acknowledged:
        docs, chunks = expected[f"s{i % SOURCES}"]
        expected[f"s{i % SOURCES}"] = (docs + 1, chunks + CHUNKS)
    for client in services:
        found = await source_counts(client)
        assert {s: found.get(s) for s in expected} == expected, found
        for i in sorted(acknowledged):
            hits = await searched_chunks(client, f"docs/{i}.md", f"topic{i} kill words")
            assert sorted(int(str(h["chunkIndex"])) for h in hits) == list(range(CHUNKS)), (i, hits)


async def test_a_node_killed_under_two_services_loses_no_acknowledged_write(
    cluster: QdrantCluster,
    tmp_path: Path,
) -> None:
    with Balancer(cluster.nodes) as balancer:
        async with (
            cluster_service(balancer.url, tmp_path / "a", qdrant_timeout_s=20) as a,
            cluster_service(balancer.url, tmp_path / "b", qdrant_timeout_s=20) as b,
        ):
            services = [a, b]
            assert all(len(states) == 2 for states in replica_states(cluster).values())
            acknowledged: set[int] = set()
            refusals = {"writes": 0, "searches": 0}
            writing = asyncio.Event()

            async def writer(k: int) -> None:
                for n in range(DOCUMENTS):
                    i = n * 2 + k
                    refusals["writes"] += await put_until_answered(services[k], document(i))
                    acknowledged.add(i)
                    if len(acknowledged) == DOCUMENTS // 2:
                        writing.set()

            async def searcher() -> None:
                while not done.is_set():
                    for client in services:
                        body = {"query": "kill words", "limit": 10}
                        answer = await client.post("/api/v1/search", json=body)
                        if answer.status_code == 503:
                            refusals["searches"] += 1
                            await asyncio.sleep(1)
                            answer = await client.post("/api/v1/search", json=body)
                        assert answer.status_code == 200, answer.text
                    await asyncio.sleep(0.1)

            async def killer() -> None:
                await writing.wait()  # mid-write and mid-search
                cluster.nodes[0].kill()

            async def racer(k: int) -> list[str]:
                tags = []
                for n in range(RACES):
                    tag = f"race{k}x{n}"
                    body = {"uri": "docs/race.md", "content": sections(CHUNKS, words=f"{tag} racing"), "metadata": {}}
                    if await put_until_answered(services[k], body, racing=True) >= 0:
                        tags.append(tag)  # acknowledged
                return tags

            done = asyncio.Event()
            search_task = asyncio.create_task(searcher())
            results = await asyncio.gather(writer(0), writer(1), killer(), racer(0), racer(1))
            done.set()
            await search_task
            assert acknowledged == set(range(DOCUMENTS * 2))
            raced = set(results[3]) | set(results[4])

            async def race_chunks(client: httpx.AsyncClient) -> set[str]:
                hits = await searched_chunks(client, "docs/race.md", "racing section0 section1 section2")
                assert sorted(int(str(h["chunkIndex"])) for h in hits) == list(range(CHUNKS)), hits
                return {t for h in hits for t in raced if f"{t} racing" in str(h["content"])}

            # One whole version: every chunk of the raced document from one acknowledged write
            # (the tags are the acknowledged ones; a 409 loser's content must not show).
            assert raced
            winner = await race_chunks(a)
            assert len(winner) == 1, winner
            assert await race_chunks(b) == winner
            await check_index(services, acknowledged)
            assert await counts(a) == await counts(b) == (DOCUMENTS * 2 + 1, (DOCUMENTS * 2 + 1) * CHUNKS)

            # The node comes back; Qdrant recovers its dead copies from the live ones.
            cluster.nodes[0].start()
            deadline = time.monotonic() + 120
            while not all(states == ["Active", "Active"] for states in replica_states(cluster).values()):
                assert time.monotonic() < deadline, replica_states(cluster)
                await asyncio.sleep(1)
            # Kill another node: the shards it shared with node 0 are now served by node 0's
            # recovered copies alone, so the checks below read what the recovery wrote.
            cluster.nodes[1].kill()
            await check_index(services, acknowledged)
            assert await race_chunks(a) == winner
