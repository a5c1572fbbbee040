"""The service on a real three-node Qdrant cluster, through one load-balanced address.

The collection is made with 3 shards and 2 copies of each (SEARCHSVC_QDRANT_SHARDS,
SEARCHSVC_QDRANT_REPLICATION_FACTOR), so every node holds two shards and each shard lives on two
nodes. With one node killed every shard keeps a live copy: searches answer as before and counts
stay exact. With a second killed one shard has none: /readyz says not ready.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from tests.searchsvc.api_fixtures import counts, put, sections
from tests.searchsvc.store.cluster_support import cluster_service, search_ids, shard_placement
from tests.support.qdrant import Balancer, QdrantCluster

DOCUMENTS = 12


def shard_copies(cluster: QdrantCluster) -> dict[int, set[int]]:
    """Shard id -> the peers holding an active copy, as the first live node's consensus says."""
    info = shard_placement(cluster)
    copies: dict[int, set[int]] = {}
    for shard in info["local_shards"]:
        copies.setdefault(shard["shard_id"], set()).add(info["peer_id"])
    for shard in info["remote_shards"]:
        copies.setdefault(shard["shard_id"], set()).add(shard["peer_id"])
    return copies


async def readiness(client: httpx.AsyncClient) -> httpx.Response:
    return await client.get("/readyz")


async def test_a_cluster_keeps_serving_with_a_node_lost_and_is_not_ready_with_two(
    cluster: QdrantCluster, tmp_path: Path
) -> None:
    with Balancer(cluster.nodes) as balancer:
        async with cluster_service(balancer.url, tmp_path, qdrant_timeout_s=20) as client:
            copies = shard_copies(cluster)
            # The premise: three shards, each on two different nodes.
            assert sorted(copies) == [0, 1, 2] and all(len(peers) == 2 for peers in copies.values()), copies

            for i in range(DOCUMENTS):
                await put(client, f"docs/{i}.md", sections(3, words=f"topic{i} shared words"), team=f"t{i % 3}")
            before = await counts(client)
            assert before == (DOCUMENTS, DOCUMENTS * 3)
            queries = ["shared words", "topic3 section1", "topic7 sentence4"]
            expected = {q: await search_ids(client, q) for q in queries}
            assert all(expected.values())

            cluster.nodes[0].kill()  # the node that bootstrapped the cluster: a single URL would be lost
            begin = time.monotonic()
            # Its copies are marked dead a few seconds later; searches must answer all along.
            while time.monotonic() - begin < 8:
                for query in queries:
                    assert await search_ids(client, query) == expected[query]
                assert await counts(client) == before
                assert (await readiness(client)).status_code == 200
                await asyncio.sleep(0.2)
            # Writes go on too. A write whose shard's leader (medium ordering) was the dead node
            # fails once with a retryable 503, and that node is dropped as leader: a client retries.
            deadline = time.monotonic() + 30
            body = {"uri": "docs/after.md", "content": sections(2, words="written after the loss"), "metadata": {}}
            while (written := await client.put("/api/v1/documents", json=body)).status_code == 503:
                assert time.monotonic() < deadline, written.text
                await asyncio.sleep(0.5)
            assert written.status_code == 200, written.text
            assert await counts(client) == (DOCUMENTS + 1, DOCUMENTS * 3 + 2)
            assert ("docs/after.md", 0) in await search_ids(client, "written after the loss")

            cluster.nodes[1].kill()  # now the shard the two dead nodes shared has no copy
            deadline = time.monotonic() + 30
            while (answer := await readiness(client)).status_code == 200:
                assert time.monotonic() < deadline, "still ready with a shard lost"
                await asyncio.sleep(0.2)
            assert answer.status_code == 503
            body = answer.json()
            assert body["error"]["code"] == "STORE_UNAVAILABLE", body
            assert body["error"]["details"]["cause"] == "SERVER_UNAVAILABLE"
            assert answer.headers.get("Retry-After") == "5"
