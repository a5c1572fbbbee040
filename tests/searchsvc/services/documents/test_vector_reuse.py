"""Stored vectors reused by the text embedded: across versioned copies and a team's sources, never across teams.

Reuse must change nothing a reader sees: the vectors stored for reused chunks are the ones the real
MiniLM gives for those texts, and search results are the same with reuse on and off.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from kbsearch.deps import context_of
from kbsearch.embedders.cache import CachedEmbedder
from kbsearch.models import chunk_point_id
from tests.searchsvc.api_fixtures import sections
from tests.support.hashing import HashingEmbedder
from tests.support.service import STORE_KINDS, running_service

ADMIN, A_WRITER, B_WRITER = "admin-t1", "a-write-t3", "b-write-t5"
TOKENS = (
    "tokens:\n"
    '  - name: admin\n    token: "admin-t1"\n    write: true\n    sources: ["*"]\n'
    '  - name: a-writer\n    token: "a-write-t3"\n    write: true\n    sources: ["team-a/*"]\n'
    '  - name: b-writer\n    token: "b-write-t5"\n    write: true\n    sources: ["team-b/*"]\n'
)


async def put(client: httpx.AsyncClient, uri: str, content: str, source: str | None, token: str = ADMIN) -> dict:
    body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": source} if source else {}}
    response = await client.put("/api/v1/documents", json=body, headers={"authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS)
    return path


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_an_all_sources_writer_reuses_within_the_team_of_the_source(tmp_path, tokens, store_kind):
    # The operator's token sees every source but writes for one team at a time, and copies what a
    # write answers into that team's status: its bound is the team, not what it could read.
    page = sections(4)
    async with running_service(store_kind, tmp_path / "data", tokens_file=tokens) as client:
        assert (await put(client, "v1/guide.md", page, "team-a/docs-v1"))["chunksEmbedded"] == 4
        copy = await put(client, "v2/guide.md", page, "team-a/docs-v2")
        assert (copy["status"], copy["chunks"], copy["chunksEmbedded"]) == ("created", 4, 0)
        parts = page.split("\n## ")
        reordered = "\n## ".join([parts[0], parts[3], parts[1], parts[2]])  # the same sections, moved
        moved = await put(client, "v3/guide.md", reordered + "\n## Section 9\n\nA new closing section.\n", "team-a/v3")
        assert (moved["chunks"], moved["chunksEmbedded"]) == (5, 1)  # keyed by the text, not the chunk's place
        assert (await put(client, "b/guide.md", page, "team-b/docs"))["chunksEmbedded"] == 4
        assert (await put(client, "none/guide.md", page, None))["chunksEmbedded"] == 4
        assert (await put(client, "solo/guide.md", page, "solo"))["chunksEmbedded"] == 4  # no team: itself only


async def test_a_scoped_writer_reuses_across_its_own_sources_only(tmp_path, tokens):
    page = sections(3, words="delta epsilon zeta")
    async with running_service("edge", tmp_path / "data", tokens_file=tokens) as client:
        assert (await put(client, "b/x.md", page, "team-b/docs", B_WRITER))["chunksEmbedded"] == 3
        # team b holds the text: team a's writer must not learn it (embedded in full)...
        assert (await put(client, "a/x.md", page, "team-a/one", A_WRITER))["chunksEmbedded"] == 3
        # ...but reuses its own team's copy in another of its sources.
        assert (await put(client, "a/y.md", page, "team-a/two", A_WRITER))["chunksEmbedded"] == 0


async def test_concurrent_writes_share_texts_being_embedded_within_the_team_only(tmp_path, tokens):
    # Two versions' sources synced at once: neither has stored the page yet, so only the texts
    # shared while being embedded (and the cache) can save the second embedding; never across teams.
    cache = CachedEmbedder(HashingEmbedder(), max_entries=1000)
    page = sections(4, words="eta theta iota")
    async with running_service("edge", tmp_path / "data", tokens_file=tokens, embedder=cache) as client:
        misses = cache.misses
        await asyncio.gather(
            put(client, "v1/p.md", page, "team-a/v1"),
            put(client, "v2/p.md", page, "team-a/v2"),
        )
        assert cache.misses - misses == 4
        await put(client, "b/p.md", page, "team-b/docs")
        assert cache.misses - misses == 8


async def test_reuse_source_keeps_the_lookup_to_the_writers_own_source(tmp_path, tokens):
    page = sections(3)
    async with running_service("edge", tmp_path / "data", tokens_file=tokens, vector_reuse="source") as client:
        assert (await put(client, "v1/p.md", page, "team-a/v1"))["chunksEmbedded"] == 3
        assert (await put(client, "v1/copy.md", page, "team-a/v1"))["chunksEmbedded"] == 0
        assert (await put(client, "v2/p.md", page, "team-a/v2"))["chunksEmbedded"] == 3


PAGES = {
    "rollback.md": "# Rolling back\n\nTo undo a release, run `argocd app rollback` with the history id. "
    "The previous manifests are applied again and auto-sync is turned off so it does not re-apply the "
    "broken revision.\n\n## Pruning\n\nResources created by the broken release are pruned only when prune "
    "is enabled for the application.",
    "sso.md": "# Single sign-on\n\nDex is bundled for OIDC and SAML providers. Configure the connector in "
    "argocd-cm under dex.config, then map groups to roles in argocd-rbac-cm.\n\n## Groups\n\nGroup claims "
    "come from the identity provider's token; a missing claim gives the default role only.",
}
QUERIES = ["how do I go back to the previous release", "login with our company identity provider", "prune"]


async def _sync_versions(client: httpx.AsyncClient, versions: list[str]) -> list[dict]:
    answers = []
    for version in versions:  # each version a source of its own, as a team's versioned sites are
        for name, text in PAGES.items():
            answers.append(await put(client, f"{version}/{name}", text, f"team-a/{version}"))
    return answers


@pytest.mark.slow
async def test_reuse_changes_neither_the_stored_vectors_nor_the_results(tmp_path, tokens, minilm):
    versions = ["v1", "v2", "v3"]
    outcome: dict[str, tuple[list[dict], dict[str, list[float]], list[list[tuple[str, float]]]]] = {}
    for reuse in ("readable", "off"):
        data = tmp_path / reuse
        async with running_service("edge", data, embedder=minilm, tokens_file=tokens, vector_reuse=reuse) as client:
            answers = await _sync_versions(client, versions)
            store = context_of(client.app).serving.store  # type: ignore[attr-defined]
            ids = [chunk_point_id(a["uri"], i) for a in answers for i in range(a["chunks"])]
            vectors = store.get_dense_vectors(ids)
            results = []
            for query in QUERIES:
                response = await client.post(
                    "/api/v1/search",
                    json={"query": query, "limit": 50, "collapse": False},  # every hit: no tie cut at the limit
                    headers={"authorization": f"Bearer {ADMIN}"},
                )
                assert response.status_code == 200, response.text
                results.append([(h["uri"], h["score"]) for h in response.json()["results"]])
            outcome[reuse] = (answers, vectors, results)
    on, off = outcome["readable"], outcome["off"]
    embedded_on = [a["chunksEmbedded"] for a in on[0]]
    assert sum(embedded_on[len(PAGES) :]) == 0  # every later version reused every vector
    assert all(a["chunksEmbedded"] == a["chunks"] > 0 for a in off[0])  # reuse off: all embedded
    assert on[1].keys() == off[1].keys() and len(on[1]) == sum(a["chunks"] for a in on[0])
    for point_id, vector in on[1].items():
        assert vector == off[1][point_id]  # the reused vector is the very one MiniLM gives
    assert all(on[2])
    for with_reuse, without in zip(on[2], off[2], strict=True):
        # The same hits with the same scores; identical copies tie, and the engine orders ties its own way.
        assert [score for _, score in with_reuse] == [score for _, score in without]
        assert sorted(with_reuse) == sorted(without)
