"""One rule for a sourceIdentifier on every path it enters by, and 422 (never 503) for text the store cannot hold."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.searchsvc.api_fixtures import counts, list_all, put, sections

# Each one broke a path before: accepted by PUT but not deletable, 200 on an empty path, 503 from the store.
BAD_IDS = {
    "empty": "",
    "newline": "team/docs\n",
    "tab": "a\tb",
    "DEL": "a\x7fb",
    "C1 control": "a\x85b",
    "513 characters": "s" * 513,
    "lone surrogate": "team/\ud800",
    "replacement character": "team/\ufffd",
}
GOOD_IDS = {"operator style": "team-a/docs", "longest": "n" * 512, "spaces and accents": "équipe docs/été"}


def raw_json(value: object) -> bytes:
    """JSON that may carry lone surrogates, as a hostile client would send them."""
    return json.dumps(value).encode()


async def send(client, method: str, path: str, body: object | None = None, **params):
    content = raw_json(body) if body is not None else None
    headers = {"content-type": "application/json"} if body is not None else {}
    return await client.request(method, path, content=content, headers=headers, params=params or None)


def assert_refused(response, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert field in error["message"], error["message"]
    assert "retry-after" not in response.headers


@pytest.fixture
async def seeded(api):
    await put(api, "keep.md", sections(2), sourceIdentifier="s")
    return api


@pytest.mark.parametrize("case", sorted(BAD_IDS))
async def test_a_bad_source_identifier_is_refused_on_every_path(seeded, case):
    bad = BAD_IDS[case]
    before = await counts(seeded)
    put_body = {"uri": "new.md", "content": "hello", "metadata": {"sourceIdentifier": bad}}
    assert_refused(await send(seeded, "PUT", "/api/v1/documents", put_body), "sourceIdentifier")
    search_paths = [
        {"sourceIdentifier": bad},
        {"sourceIdentifier": ["s", bad]},
        {"metadata": {"sourceIdentifier": bad}},
    ]
    for search_filter in search_paths:
        body = {"query": "alpha", "filter": search_filter}
        assert_refused(await send(seeded, "POST", "/api/v1/search", body), "sourceIdentifier")
    if "\ud800" not in bad:  # a URL cannot carry a lone surrogate; UTF-8 decoding leaves U+FFFD instead
        assert_refused(
            await send(seeded, "DELETE", "/api/v1/documents", uri="keep.md", sourceIdentifier=bad), "sourceIdentifier"
        )
        assert_refused(await send(seeded, "GET", "/api/v1/documents", sourceIdentifier=bad), "sourceIdentifier")
        assert_refused(await send(seeded, "GET", "/api/v1/search", q="alpha", sourceIdentifier=bad), "sourceIdentifier")
        response = await seeded.delete("/api/v1/sources/" + quote(bad, safe=""))
        assert_refused(response, "sourceIdentifier")
    assert await counts(seeded) == before


async def test_invalid_utf8_in_a_url_is_refused_not_replaced(seeded):
    # %FF decodes to U+FFFD; deleting or listing "team/\ufffd" would act on another identifier.
    assert_refused(await seeded.delete("/api/v1/sources/team%2F%FF"), "sourceIdentifier")
    assert_refused(await seeded.get("/api/v1/documents?sourceIdentifier=team%FF"), "sourceIdentifier")


@pytest.mark.parametrize("case", sorted(GOOD_IDS))
async def test_a_good_source_identifier_works_on_every_path(api, case):
    source = GOOD_IDS[case]
    await put(api, "a.md", sections(2), sourceIdentifier=source)
    await put(api, "b.md", sections(1), sourceIdentifier="other")
    assert [d["uri"] for d in await list_all(api, sourceIdentifier=source)] == ["a.md"]
    body = {"query": "alpha beta", "mode": "keyword", "filter": {"sourceIdentifier": [source]}}
    found = (await api.post("/api/v1/search", json=body)).json()["results"]
    assert found and {r["uri"] for r in found} == {"a.md"}
    found = (await api.get("/api/v1/search", params={"q": "alpha beta", "sourceIdentifier": source})).json()
    assert {r["uri"] for r in found["results"]} == {"a.md"}
    kept = await api.delete("/api/v1/documents", params={"uri": "a.md", "sourceIdentifier": "other"})
    assert kept.json()["chunksDeleted"] == 0
    deleted = await api.delete("/api/v1/sources/" + quote(source, safe=""))
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"sourceIdentifier": source, "documentsDeleted": 1, "chunksDeleted": 2}
    assert [d["uri"] for d in await list_all(api)] == ["b.md"]


BAD_FILTER_TEXT = {
    "uriPrefix with a lone surrogate": ({"query": "alpha", "filter": {"uriPrefix": "a\udc80"}}, "uriPrefix"),
    "uriPrefix with a newline": ({"query": "alpha", "filter": {"uriPrefix": "a\nb"}}, "uriPrefix"),
    "metadata value with a lone surrogate": ({"query": "alpha", "filter": {"metadata": {"k": "\ud83d"}}}, "metadata"),
    "metadata key with a lone surrogate": ({"query": "alpha", "filter": {"metadata": {"\ud83d": "v"}}}, "metadata"),
    "query with a lone surrogate": ({"query": "alpha \ud800"}, "query"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILTER_TEXT))
async def test_text_the_store_cannot_hold_is_422_not_a_retryable_503(seeded, case):
    body, field = BAD_FILTER_TEXT[case]
    assert_refused(await send(seeded, "POST", "/api/v1/search", body), field)


async def test_uris_in_query_parameters_follow_the_uri_rule(seeded):
    assert_refused(await send(seeded, "DELETE", "/api/v1/documents", uri="keep.md\n"), "uri")
    assert_refused(await send(seeded, "GET", "/api/v1/documents", uriPrefix="k\x00"), "uriPrefix")
    assert_refused(await send(seeded, "GET", "/api/v1/search", q="alpha", uriPrefix="k\r"), "uriPrefix")
    assert await counts(seeded) == (1, 2)
