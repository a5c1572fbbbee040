"""The real search service app in-process for the sync-core tests, and plain-HTTP helpers to check it.

Test modules import the fixtures by name (`from tests.operator.search_service import service`),
so they do not depend on the shared conftest.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from kboperator.searchclient import SearchClient
from tests.support.service import running_service

BASE_URL = "http://localhost"


async def no_sleep(_delay: float) -> None:
    """Backoff without waiting: tests check the delays, not the clock."""


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A raw HTTP client of the real app (EdgeStore in tmp, hashing embedder); `.app` is the app."""
    async with running_service("edge", tmp_path / "service-data") as http:
        yield http


def asgi(service: httpx.AsyncClient) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=service.app)  # type: ignore[attr-defined]


@pytest.fixture
async def search_client(service: httpx.AsyncClient) -> AsyncIterator[SearchClient]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield client


async def listing(service: httpx.AsyncClient, source_id: str) -> dict[str, dict]:
    """The service's documents for a source, read with plain HTTP (not the code under test)."""
    documents, cursor = {}, None
    while True:
        params = {"sourceIdentifier": source_id, "limit": 1000, **({"cursor": cursor} if cursor else {})}
        response = await service.get("/api/v1/documents", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        documents.update({doc["uri"]: doc for doc in page["documents"]})
        cursor = page["nextCursor"]
        if cursor is None:
            return documents


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_uri(repo_path: Path, path: str) -> str:
    return "file://" + quote(str(repo_path.resolve()), safe="/") + "/" + quote(path, safe="/")
