"""Backup of a three-node cluster (3 shards, 2 copies) by export and import of every point, through
the documented command (`python -m kbsearch.store.backup`), then a wipe and a restore."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.searchsvc.api_fixtures import counts, put, sections
from tests.searchsvc.store.cluster_support import COLLECTION, cluster_service, search_ids
from tests.support.qdrant import Balancer, QdrantCluster, wipe

DOCUMENTS = 30
COLLECTIONS = (COLLECTION, f"{COLLECTION}_querylog")


def backup(action: str, url: str, collection: str, file: Path) -> str:
    env = {**os.environ, "SEARCHSVC_QDRANT_URL": url}
    done = subprocess.run(
        [sys.executable, "-m", "kbsearch.store.backup", action, collection, str(file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


async def test_export_wipe_import_gives_back_every_point(
    cluster: QdrantCluster,
    tmp_path: Path,
) -> None:
    with Balancer(cluster.nodes) as balancer:
        queries = ["shared words", "topic3 section1", "topic17 sentence4"]
        async with cluster_service(balancer.url, tmp_path / "before") as client:
            for i in range(DOCUMENTS):
                await put(
                    client, f"docs/{i}.md", sections(3, words=f"topic{i} shared words"), sourceIdentifier=f"s{i % 3}"
                )
            before = await counts(client)
            sources = (await client.get("/api/v1/sources")).json()["sources"]
            expected = {q: await search_ids(client, q) for q in queries}
        node = cluster.nodes[1].client()
        points = {c: node.count(c, exact=True).count for c in COLLECTIONS}
        for c in COLLECTIONS:
            assert f"exported {points[c]} points" in backup("export", balancer.url, c, tmp_path / f"{c}.jsonl")

        wipe(node)
        # The service creates the empty collections, as on a new cluster.
        async with cluster_service(balancer.url, tmp_path / "after") as client:
            assert await counts(client) == (0, 0)
        for c in COLLECTIONS:
            assert f"imported {points[c]} points" in backup("import", balancer.url, c, tmp_path / f"{c}.jsonl")
        assert {c: node.count(c, exact=True).count for c in COLLECTIONS} == points
        node.close()

        async with cluster_service(balancer.url, tmp_path / "restored") as client:
            assert await counts(client) == before == (DOCUMENTS, DOCUMENTS * 3)
            assert (await client.get("/api/v1/sources")).json()["sources"] == sources
            for q in queries:
                assert await search_ids(client, q) == expected[q]
