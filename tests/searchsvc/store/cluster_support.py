"""What the Qdrant cluster tests share: the collection's name and the hits of a search."""

from __future__ import annotations

import httpx

COLLECTION = "knowledge"


async def search_ids(client: httpx.AsyncClient, query: str) -> dict[tuple[str, int], float]:
    """The hits and their scores (equal scores come in no set order; which are kept at the cut is set)."""
    response = await client.post("/api/v1/search", json={"query": query, "limit": 20, "collapse": False})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    return {(r["uri"], r["chunkIndex"]): round(r["score"], 6) for r in results}
