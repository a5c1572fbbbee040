"""Shared fixtures for the API tests: the real app on each store, and document builders."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.service import STORE_KINDS, running_service


@pytest.fixture(params=STORE_KINDS)
async def api(request, tmp_path):
    """An HTTP client for the real app, once per store kind."""
    async with running_service(request.param, tmp_path / "data") as client:
        client.store_kind = request.param
        yield client


def sha(content: str) -> str:
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def sections(count: int, *, words: str = "alpha beta gamma", tag: str = "") -> str:
    """Markdown with `count` sections of ~650 characters: one chunk each at the default size."""
    parts = []
    for i in range(count):
        body = " ".join(f"{words} section{i}{tag} sentence{j}." for j in range(16))
        parts.append(f"## Section {i}\n\n{body}\n")
    return "\n".join(parts)


async def put(client, uri: str, content: str, **metadata) -> dict:
    response = await client.put("/api/v1/documents", json={"uri": uri, "content": content, "metadata": metadata})
    assert response.status_code == 200, response.text
    return response.json()


async def list_all(client, **params) -> list[dict]:
    documents, cursor = [], None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        page = (await client.get("/api/v1/documents", params=query)).json()
        documents.extend(page["documents"])
        cursor = page["nextCursor"]
        if cursor is None:
            return documents


async def chunk_indexes(client, uri: str) -> list[int]:
    """Every chunk of one document that search can reach, by index."""
    body = {"query": "alpha beta gamma section", "limit": 100, "mode": "keyword", "filter": {"uriPrefix": uri}}
    body["collapse"] = False  # every chunk, not one result per page
    results = (await client.post("/api/v1/search", json=body)).json()["results"]
    return sorted(r["chunkIndex"] for r in results if r["uri"] == uri)


async def counts(client) -> tuple[int, int]:
    store = (await client.get("/api/v1/status")).json()["store"]
    return store["documents"], store["chunks"]
