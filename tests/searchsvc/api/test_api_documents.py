"""Document writes through the HTTP API, on both stores: idempotency, replacement, deletes."""

from __future__ import annotations

import asyncio

from tests.searchsvc.api_fixtures import chunk_indexes, counts, list_all, put, sections, sha


async def test_put_creates_then_is_unchanged(api):
    content = sections(3)
    first = await put(api, "docs/a.md", content, sourceIdentifier="team/docs")
    assert first == {
        "uri": "docs/a.md",
        "status": "created",
        "checksum": sha(content),
        "chunks": 3,
        "chunksEmbedded": 3,
    }
    again = await put(api, "docs/a.md", content, sourceIdentifier="team/docs")
    assert again["status"] == "unchanged"
    assert again["chunksEmbedded"] == 0
    assert again["chunks"] == 3


async def test_checksum_is_sha256_of_exact_utf8_bytes(api):
    content = "# Café ☕\r\n\r\nnaïve text with trailing spaces   \n"
    assert (await put(api, "u.md", content))["checksum"] == sha(content)


async def test_metadata_change_updates_without_embedding(api):
    content = sections(2)
    await put(api, "a.md", content, team="x")
    changed = await put(api, "a.md", content, team="y")
    assert changed["status"] == "updated"
    assert changed["chunksEmbedded"] == 0
    hits = (await api.post("/api/v1/search", json={"query": "alpha", "filter": {"metadata": {"team": "y"}}})).json()
    assert {h["uri"] for h in hits["results"]} == {"a.md"}
    stale = (await api.post("/api/v1/search", json={"query": "alpha", "filter": {"metadata": {"team": "x"}}})).json()
    assert stale["results"] == []


async def test_one_line_edit_of_a_100kb_document_embeds_at_most_two_chunks(api):
    content = sections(170)
    assert len(content.encode()) > 100_000
    created = await put(api, "big.md", content)
    assert created["chunksEmbedded"] == created["chunks"] >= 160
    lines = content.split("\n")
    middle = next(i for i in range(len(lines) // 2, len(lines)) if "sentence3." in lines[i])
    lines[middle] = lines[middle].replace("sentence3.", "sentence3, edited once.")
    edited = await put(api, "big.md", "\n".join(lines))
    assert edited["status"] == "updated"
    assert 1 <= edited["chunksEmbedded"] <= 2
    assert edited["chunks"] == created["chunks"]


async def test_shrink_leaves_exactly_the_new_chunks_and_grow_adds_them(api):
    await put(api, "s.md", sections(10))
    assert await chunk_indexes(api, "s.md") == list(range(10))
    shrunk = await put(api, "s.md", sections(2))
    assert shrunk["chunks"] == 2
    assert await chunk_indexes(api, "s.md") == [0, 1]
    assert await counts(api) == (1, 2)
    grown = await put(api, "s.md", sections(6, tag="g"))
    assert grown["chunks"] == 6
    assert await chunk_indexes(api, "s.md") == list(range(6))
    assert await counts(api) == (1, 6)


async def test_empty_content_removes_previous_chunks_but_keeps_the_document(api):
    await put(api, "e.md", sections(4))
    emptied = await put(api, "e.md", "  \n\t\n")
    assert emptied["chunks"] == 0 and emptied["status"] == "updated"
    assert await chunk_indexes(api, "e.md") == []
    [listed] = await list_all(api)
    assert listed["uri"] == "e.md" and listed["chunks"] == 0


async def test_delete_document_is_idempotent(api):
    await put(api, "d.md", sections(3))
    first = await api.delete("/api/v1/documents", params={"uri": "d.md"})
    assert first.json() == {"uri": "d.md", "chunksDeleted": 3}
    second = await api.delete("/api/v1/documents", params={"uri": "d.md"})
    assert second.status_code == 200 and second.json()["chunksDeleted"] == 0
    assert await list_all(api) == []


async def test_delete_source_removes_only_that_source(api):
    await put(api, "a.md", sections(2), sourceIdentifier="team/docs")
    await put(api, "b.md", sections(3), sourceIdentifier="team/docs")
    await put(api, "c.md", sections(1), sourceIdentifier="other")
    response = await api.delete("/api/v1/sources/team%2Fdocs")
    assert response.json() == {"sourceIdentifier": "team/docs", "documentsDeleted": 2, "chunksDeleted": 5}
    assert [d["uri"] for d in await list_all(api)] == ["c.md"]
    again = await api.delete("/api/v1/sources/team%2Fdocs")
    assert again.json()["documentsDeleted"] == 0


async def test_listing_pages_are_complete_filtered_and_stable_under_writes(api):
    for i in range(12):
        await put(api, f"docs/{i:02}.md", f"doc {i}", sourceIdentifier="s1")
    await put(api, "other/x.md", "x", sourceIdentifier="s2")

    seen, cursor, pages = [], None, 0
    while True:
        params = {"sourceIdentifier": "s1", "limit": 5} | ({"cursor": cursor} if cursor else {})
        page = (await api.get("/api/v1/documents", params=params)).json()
        seen.extend(d["uri"] for d in page["documents"])
        # writes between pages must not make existing documents skip or repeat
        await put(api, f"docs/new-{pages}.md", "late arrival", sourceIdentifier="s1")
        await put(api, "docs/03.md", f"rewritten {pages}", sourceIdentifier="s1")
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    originals = {f"docs/{i:02}.md" for i in range(12)}
    assert originals <= set(seen)
    assert len(seen) == len(set(seen))
    assert {d["uri"] for d in await list_all(api, uriPrefix="other/")} == {"other/x.md"}
    listed = {d["uri"]: d for d in await list_all(api, sourceIdentifier="s2")}
    assert listed["other/x.md"]["checksum"] == sha("x")
    assert listed["other/x.md"]["metadata"] == {"sourceIdentifier": "s2"}
    assert listed["other/x.md"]["ingestedAt"].endswith("Z")


async def test_bad_cursor_is_a_clear_422(api):
    response = await api.get("/api/v1/documents", params={"cursor": "not-a-cursor!"})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "INVALID_CURSOR"


async def test_sources_listing_counts_documents_and_chunks(api):
    await put(api, "a.md", sections(2), sourceIdentifier="s1")
    await put(api, "b.md", sections(1), sourceIdentifier="s1")
    await put(api, "c.md", sections(3), sourceIdentifier="s2")
    await put(api, "loose.md", sections(1))
    sources = {s["sourceIdentifier"]: s for s in (await api.get("/api/v1/sources")).json()["sources"]}
    assert set(sources) == {"s1", "s2"}
    assert (sources["s1"]["documents"], sources["s1"]["chunks"]) == (2, 3)
    assert (sources["s2"]["documents"], sources["s2"]["chunks"]) == (1, 3)
    assert sources["s1"]["lastIngestedAt"]


async def test_concurrent_puts_of_one_uri_never_mix_versions(api):
    versions = [sections(n, tag=f"v{n}") for n in (1, 7, 3, 9, 2, 5)]
    responses = await asyncio.gather(
        *(api.put("/api/v1/documents", json={"uri": "race.md", "content": v}) for v in versions)
    )
    assert all(r.status_code == 200 for r in responses)
    [record] = await list_all(api)
    winner = next(v for v in versions if sha(v) == record["checksum"])
    body = {"query": "alpha", "limit": 100, "mode": "keyword", "filter": {"uriPrefix": "race.md"}, "collapse": False}
    results = (await api.post("/api/v1/search", json=body)).json()["results"]
    assert sorted(r["chunkIndex"] for r in results) == list(range(record["chunks"]))
    assert all(r["content"] in winner for r in results)
    assert all(r["totalChunks"] == record["chunks"] for r in results)


async def test_a_document_owned_by_another_source_is_409_and_deletes_respect_the_owner(api):
    await put(api, "shared.md", "first", sourceIdentifier="a")
    taken = await api.put(
        "/api/v1/documents", json={"uri": "shared.md", "content": "second", "metadata": {"sourceIdentifier": "b"}}
    )
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "URI_OWNED_BY_OTHER_SOURCE"
    # Not even an unrestricted caller learns the owner: the operator copies this text into b's status.
    assert taken.json()["error"]["details"] == {}
    assert "'a'" not in taken.json()["error"]["message"]
    unowned = await api.put("/api/v1/documents", json={"uri": "shared.md", "content": "third"})
    assert unowned.status_code == 409

    not_mine = await api.delete("/api/v1/documents", params={"uri": "shared.md", "sourceIdentifier": "b"})
    assert not_mine.json() == {"uri": "shared.md", "chunksDeleted": 0}
    [listed] = await list_all(api)
    assert listed["checksum"] == sha("first")
    mine = await api.delete("/api/v1/documents", params={"uri": "shared.md", "sourceIdentifier": "a"})
    assert mine.json()["chunksDeleted"] == 1

    await put(api, "loose.md", "no source yet")
    adopted = await put(api, "loose.md", "no source yet", sourceIdentifier="b")
    assert adopted["status"] == "updated"


async def test_a_page_another_source_holds_is_embedded_again(api):
    # chunksEmbedded: 0 would tell this writer that the exact text exists in another source.
    content = sections(4)
    assert (await put(api, "b/guide.md", content, sourceIdentifier="team-b/docs"))["chunksEmbedded"] == 4
    assert (await put(api, "a/guide.md", content, sourceIdentifier="team-a/docs"))["chunksEmbedded"] == 4
    assert (await put(api, "none/guide.md", content))["chunksEmbedded"] == 4
    assert (await put(api, "none/copy.md", content))["chunksEmbedded"] == 0  # no source is one source too


async def test_a_page_repeated_in_another_document_is_not_embedded_again(api):
    # Versioned documentation: v1 and v2 of a site carry the same page under two paths.
    content = sections(4)
    first = await put(api, "docs/v1/guide.md", content, sourceIdentifier="team/docs")
    assert first["chunksEmbedded"] == 4
    copy = await put(api, "docs/v2/guide.md", content, sourceIdentifier="team/docs")
    assert (copy["status"], copy["chunks"], copy["chunksEmbedded"]) == ("created", 4, 0)
    edited = await put(
        api, "docs/v3/guide.md", content.replace("sentence1", "sentence one", 1), sourceIdentifier="team/docs"
    )
    assert edited["chunksEmbedded"] == 1
    body = {"query": "alpha", "limit": 20, "collapse": False}  # the three copies, not one page
    hits = (await api.post("/api/v1/search", json=body)).json()["results"]
    assert {"docs/v1/guide.md", "docs/v2/guide.md", "docs/v3/guide.md"} <= {h["uri"] for h in hits}
