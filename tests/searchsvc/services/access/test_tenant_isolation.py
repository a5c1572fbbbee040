"""Two teams on one service: neither observes, overwrites nor learns the names of the other's data.

Regression tests of the attack findings on the embedding cache, writes over another scope and
the 409 for a URI another source holds. They run the real app with its real cache in front of
the hashing embedder, and read the cache's own counters: a hit is what a timing probe measures.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import httpx
import pytest

from kbsearch.embedders.cache import CachedEmbedder
from tests.support.hashing import HashingEmbedder
from tests.support.service import running_service

ADMIN, A_READER, A_WRITER, B_READER, B_WRITER = "admin-t1", "a-read-t2", "a-write-t3", "b-read-t4", "b-write-t5"
B_SECRET = "The zebrafish merger closes on the fourth of March."


def entry(name: str, token: str, sources: str, write: bool = False) -> str:
    return f'  - name: {name}\n    token: "{token}"\n    write: {str(write).lower()}\n    sources: {sources}\n'


TOKENS = "tokens:\n" + "".join(
    (
        entry("admin", ADMIN, '["*"]', write=True),
        entry("a-reader", A_READER, '["team-a/*"]'),
        entry("a-writer", A_WRITER, '["team-a/*"]', write=True),
        entry("b-reader", B_READER, '["team-b/*"]'),
        entry("b-writer", B_WRITER, '["team-b/*"]', write=True),
    )
)


def sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def document(uri: str, content: str, source: str | None) -> dict:
    return {"uri": uri, "content": content, "metadata": {"sourceIdentifier": source} if source else {}}


@pytest.fixture
async def service(tmp_path: Path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    cache = CachedEmbedder(HashingEmbedder(), max_entries=1000)
    async with running_service("edge", tmp_path / "data", tokens_file=tokens, embedder=cache) as client:
        for team in ("a", "b"):  # a search of a scope with no source embeds nothing
            uri = f"https://git.example/{team}/intro.md"
            answer = await put(client, ADMIN, uri, "# Intro\n\nHello.", f"team-{team}/docs")
            assert answer.status_code == 200, answer.text
        client.cache = cache  # type: ignore[attr-defined]
        yield client


async def put(client: httpx.AsyncClient, token: str, uri: str, content: str, source: str | None) -> httpx.Response:
    return await client.put("/api/v1/documents", json=document(uri, content, source), headers=bearer(token))


async def search(client: httpx.AsyncClient, token: str, query: str) -> None:
    response = await client.post("/api/v1/search", json={"query": query}, headers=bearer(token))
    assert response.status_code == 200, response.text


async def test_another_teams_query_is_never_a_cache_hit(service):
    cache: CachedEmbedder = service.cache
    hits, misses = cache.hits, cache.misses
    await search(service, B_READER, B_SECRET)
    await search(service, B_READER, B_SECRET)
    assert (cache.hits - hits, cache.misses - misses) == (1, 1)  # team b's own repeat is served from the cache
    await search(service, A_READER, B_SECRET)  # team a guessing what b searched for
    assert (cache.hits - hits, cache.misses - misses) == (1, 2)


async def test_sentences_another_teams_ask_embedded_are_never_a_cache_hit(service):
    cache: CachedEmbedder = service.cache
    body = f"# Plans\n\n{B_SECRET} Nobody outside the team knows the date yet."
    assert (await put(service, B_WRITER, "https://git.example/b/plans.md", body, "team-b/docs")).status_code == 200
    question = {"question": "When does the merger close?"}
    asked = await service.post("/api/v1/ask", json=question, headers=bearer(B_READER))
    assert asked.status_code == 200, asked.text
    assert "zebrafish" in asked.text  # b's ask embedded b's sentences
    hits = cache.hits
    await search(service, A_READER, B_SECRET)
    assert cache.hits == hits


async def test_a_writer_learns_nothing_from_chunks_embedded(service):
    text = "# Runbook\n\n" + " ".join(f"Step {i}: restart the ingest worker and check its queue." for i in range(30))
    b = await put(service, B_WRITER, "https://git.example/b/runbook.md", text, "team-b/docs")
    assert b.json()["chunksEmbedded"] == b.json()["chunks"] > 0
    a = await put(service, A_WRITER, "https://git.example/a/runbook.md", text, "team-a/docs")
    assert a.json()["chunksEmbedded"] == a.json()["chunks"]  # as if b's copy did not exist
    again = await put(service, B_WRITER, "https://git.example/b/runbook-copy.md", text, "team-b/docs")
    assert again.json()["chunksEmbedded"] == 0  # b's own repeated page is still reused


@pytest.mark.parametrize("owner", [None, "team-b/docs"])
async def test_a_scoped_writer_cannot_take_over_a_document_outside_its_scope(service, owner):
    uri = "https://git.example/shared/page.md"
    assert (await put(service, ADMIN, uri, "# Page\n\nthe original text", owner)).status_code == 200
    # A DELETE cannot touch it, and neither may a PUT that would replace it.
    deleted = await service.delete("/api/v1/documents", params={"uri": uri}, headers=bearer(A_WRITER))
    assert deleted.json()["chunksDeleted"] == 0
    taken = await put(service, A_WRITER, uri, "# Page\n\nteam a's text now", "team-a/docs")
    assert taken.status_code == 409, taken.text
    assert taken.json()["error"]["code"] == "URI_OWNED_BY_OTHER_SOURCE"
    assert "team-b" not in taken.text
    same = await put(service, A_WRITER, uri, "# Page\n\nthe original text", "team-a/docs")
    assert same.status_code == 409  # not even an `unchanged`
    listed = await service.get("/api/v1/documents", params={"uriPrefix": uri}, headers=bearer(ADMIN))
    [record] = listed.json()["documents"]
    original = sha256("# Page\n\nthe original text")
    assert (record["metadata"].get("sourceIdentifier"), record["checksum"]) == (owner, original)


async def test_the_conflict_never_names_the_owner_even_to_an_unrestricted_token(service):
    # The operator writes with such a token and copies the answer into the other team's status.
    uri = "https://git.example/mirror/readme.md"
    assert (await put(service, B_WRITER, uri, "# Readme\n\nb's copy", "team-b/mirror")).status_code == 200
    for token in (ADMIN, A_WRITER):
        taken = await put(service, token, uri, "# Readme\n\na's copy", "team-a/mirror")
        assert taken.status_code == 409
        assert "team-b" not in taken.text and taken.json()["error"]["details"] == {}


class StallingEmbedder(HashingEmbedder):
    """Holds any text containing STALL until `release` is set, as a slow model would."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts):
        if any("STALL" in t for t in texts):
            self.stalled.set()
            self.release.wait(timeout=120)
        return super().embed_documents(texts)


async def test_one_callers_burst_gets_429_and_leaves_another_callers_search_its_turn(tmp_path: Path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    embedder = StallingEmbedder()
    settings = {"max_concurrent_searches": 1, "max_searches_per_caller": 1}
    async with running_service("edge", tmp_path / "data", tokens_file=tokens, embedder=embedder, **settings) as client:
        for team in ("a", "b"):
            uri = f"https://git.example/{team}/intro.md"
            assert (await put(client, ADMIN, uri, "# Intro\n\nHello.", f"team-{team}/docs")).status_code == 200
        slow = asyncio.create_task(client.post("/api/v1/search", json={"query": "STALL"}, headers=bearer(A_READER)))
        assert await asyncio.to_thread(embedder.stalled.wait, 60)
        burst = await client.post("/api/v1/search", json={"query": "more"}, headers=bearer(A_READER))
        assert burst.status_code == 429, burst.text
        assert burst.json()["error"]["code"] == "TOO_MANY_SEARCHES" and burst.headers["retry-after"] == "1"
        waiting = asyncio.create_task(client.post("/api/v1/search", json={"query": "b"}, headers=bearer(B_READER)))
        embedder.release.set()
        assert (await slow).status_code == 200
        assert (await waiting).status_code == 200  # b was never refused for a's burst
