"""What the Qdrant cluster tests share: the collection's name, the service on the cluster, its
shards as the cluster's consensus says, and the hits of a search."""

from __future__ import annotations

import json
import urllib.request
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx

from kbsearch.settings import Settings
from kbsearch.store.factory import build_store
from tests.support.qdrant import QdrantCluster
from tests.support.service import running_service

COLLECTION = "knowledge"


def cluster_service(url: str, data_dir: Path, **settings: object) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """The service on the cluster at `url` (a balancer), its collection made with 3 shards of 2 copies each."""
    options: dict[str, object] = {
        "qdrant_url": url,
        "qdrant_shards": 3,
        "qdrant_replication_factor": 2,
        **settings,
        "collection": COLLECTION,
    }
    store = build_store(Settings(data_dir=data_dir, store="qdrant", **options).storage)  # type: ignore[arg-type]
    return running_service("qdrant", data_dir, store=store, **options)


def shard_placement(cluster: QdrantCluster) -> dict[str, Any]:
    """The collection's local and remote shards, as the first live node's consensus says."""
    node = next(n for n in cluster.nodes if n.alive())
    with urllib.request.urlopen(f"{node.url}/collections/{COLLECTION}/cluster", timeout=5) as answer:
        info: dict[str, Any] = json.loads(answer.read())["result"]
    return info


async def search_ids(client: httpx.AsyncClient, query: str) -> dict[tuple[str, int], float]:
    """The hits and their scores (equal scores come in no set order; which are kept at the cut is set)."""
    response = await client.post("/api/v1/search", json={"query": query, "limit": 20, "collapse": False})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    return {(r["uri"], r["chunkIndex"]): round(r["score"], 6) for r in results}
