"""Scoped access with static tokens: a caller sees exactly its sources, on every read path.

The leak tests look for team b's names, URIs and words anywhere in what team a receives, so a
count, a source name or a chunk of b in any field fails them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from kbsearch.app import create_app
from kbsearch.errors import ConfigurationError
from kbsearch.settings import Settings
from tests.support.scoped_access import (
    A_DOCS,
    A_WRITER,
    ADMIN,
    B_DOCS,
    B_WORD,
    HASHED,
    NOBODY,
    ORPHAN,
    TEAM_A,
    TOKENS,
    assert_no_b,
    bearer,
    content,
    entry,
    tokens_yaml,
)
from tests.support.service import CHALLENGE, STORE_KINDS, running_service


@pytest.fixture(params=STORE_KINDS)
async def service(request, tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS)
    async with running_service(request.param, tmp_path / "data", tokens_file=path) as client:
        for uri, source in {**A_DOCS, **B_DOCS}.items():
            body = {
                "uri": uri,
                "content": content(uri, source),
                "metadata": {"sourceIdentifier": source, "team": source[5]},
            }
            response = await client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))
            assert response.status_code == 200, response.text
        orphan = {"uri": ORPHAN, "content": content(ORPHAN, "none"), "metadata": {"team": "a"}}
        assert (await client.put("/api/v1/documents", json=orphan, headers=bearer(ADMIN))).status_code == 200
        yield client


async def get(client: httpx.AsyncClient, path: str, token: str, **params) -> httpx.Response:
    response = await client.get(path, params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    body = response.json()
    body.pop("query", None)  # a search echoes the caller's own query, a source status its own path
    if path.startswith("/api/v1/sources/"):
        body.pop("sourceIdentifier")
    assert_no_b(json.dumps(body))
    return response


SEARCH_FILTERS = [
    {},
    {"sourceIdentifier": "team-b/docs"},
    {"sourceIdentifier": ["team-a/docs", "team-b/docs"]},
    {"uriPrefix": "https://git.example/b/"},
    {"metadata": {"team": "b"}},
    {"metadata": {"team": "a"}},
]


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword", "literal"])
async def test_search_never_returns_another_teams_chunks(service, mode):
    a_chunks = None
    for search_filter in SEARCH_FILTERS:
        for limit in (1, 2, 100):
            for query in (f"{B_WORD} secrets", "shared words about deploys"):
                body = {"query": query, "mode": mode, "limit": limit, "filter": search_filter, "collapse": False}
                response = await service.post("/api/v1/search", json=body, headers=bearer(TEAM_A))
                assert response.status_code == 200, response.text
                results = response.json()["results"]
                assert_no_b(json.dumps(results))
                assert all(r["sourceIdentifier"] == "team-a/docs" for r in results)
                if search_filter in ({}, {"metadata": {"team": "a"}}) and query.startswith("shared"):
                    # The scope is inside the engine query: `limit` is filled from a's chunks.
                    if limit == 100:
                        a_chunks = len(results)
                    else:
                        assert len(results) == limit
        got = await get(service, "/api/v1/search", TEAM_A, q=B_WORD, mode=mode, sourceIdentifier="team-b/docs")
        assert got.json()["results"] == []
    assert a_chunks is not None and a_chunks >= len(A_DOCS)
    everything = await service.post(
        "/api/v1/search", json={"query": B_WORD, "mode": mode, "limit": 100}, headers=bearer(ADMIN)
    )
    assert any(r["sourceIdentifier"] == "team-b/docs" for r in everything.json()["results"])


async def test_listings_counts_and_sources_hold_only_the_callers_sources(service):
    for params in ({}, {"sourceIdentifier": "team-b/docs"}, {"uriPrefix": "https://git.example/b/"}):
        seen, cursor = [], None
        while True:
            page = (
                await get(
                    service, "/api/v1/documents", TEAM_A, limit=1, **params, **({"cursor": cursor} if cursor else {})
                )
            ).json()
            seen += [d["uri"] for d in page["documents"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == ([] if params else sorted(seen)) or set(seen) == set(A_DOCS)
        assert set(seen) <= set(A_DOCS)
        if not params:
            assert set(seen) == set(A_DOCS)
    sources = (await get(service, "/api/v1/sources", TEAM_A)).json()["sources"]
    assert [s["sourceIdentifier"] for s in sources] == ["team-a/docs"]
    a_status = (await get(service, "/api/v1/sources/team-a%2Fdocs", TEAM_A)).json()
    assert a_status["documents"] == len(A_DOCS)
    hidden = (await get(service, "/api/v1/sources/team-b%2Fdocs", TEAM_A)).json()
    unknown = (await service.get("/api/v1/sources/team-b%2Fnone", headers=bearer(TEAM_A))).json()
    assert {k: v for k, v in hidden.items() if k != "sourceIdentifier"} == {
        k: v for k, v in unknown.items() if k != "sourceIdentifier"
    }
    assert hidden["documents"] == hidden["chunks"] == 0
    store = (await get(service, "/api/v1/status", TEAM_A)).json()["store"]
    assert store["documents"] == len(A_DOCS) and store["chunks"] == a_status["chunks"]
    admin = (await service.get("/api/v1/status", headers=bearer(ADMIN))).json()["store"]
    assert admin["documents"] == len(A_DOCS) + len(B_DOCS) + 1


async def test_the_status_shows_a_rebuilds_global_counts_and_message_only_to_every_source_callers(service):
    admin = (await service.get("/api/v1/status", headers=bearer(ADMIN))).json()["rebuild"]
    assert {"state", "message", "documents", "check"} <= admin.keys()
    for token in (TEAM_A, A_WRITER, NOBODY, HASHED):
        scoped = (await get(service, "/api/v1/status", token)).json()["rebuild"]
        assert scoped == {"state": admin["state"]}


async def test_an_exact_source_scope_from_a_hashed_token(service):
    sources = (await get(service, "/api/v1/sources", HASHED)).json()["sources"]
    assert [s["sourceIdentifier"] for s in sources] == ["team-a/docs"]


async def test_a_caller_without_sources_gets_empty_answers(service):
    for mode in ("hybrid", "dense", "keyword"):
        body = {"query": "shared words", "mode": mode}
        response = await service.post("/api/v1/search", json=body, headers=bearer(NOBODY))
        assert response.status_code == 200 and response.json()["results"] == []
    assert (await get(service, "/api/v1/documents", NOBODY)).json() == {"documents": [], "nextCursor": None}
    assert (await get(service, "/api/v1/sources", NOBODY)).json() == {"sources": []}
    store = (await get(service, "/api/v1/status", NOBODY)).json()["store"]
    assert (store["documents"], store["chunks"]) == (0, 0)


async def test_documents_without_a_source_are_seen_only_by_every_source_callers(service):
    admin = (await service.get("/api/v1/documents", params={"uriPrefix": ORPHAN}, headers=bearer(ADMIN))).json()
    assert [d["uri"] for d in admin["documents"]] == [ORPHAN]
    scoped = await get(service, "/api/v1/documents", TEAM_A, uriPrefix=ORPHAN)
    assert scoped.json()["documents"] == []


async def test_deleting_another_teams_document_looks_like_deleting_a_missing_one(service):
    b_uri = next(iter(B_DOCS))
    hidden = await service.delete("/api/v1/documents", params={"uri": b_uri}, headers=bearer(A_WRITER))
    missing = await service.delete("/api/v1/documents", params={"uri": b_uri + "x"}, headers=bearer(A_WRITER))
    assert hidden.status_code == missing.status_code == 200
    assert hidden.json()["chunksDeleted"] == missing.json()["chunksDeleted"] == 0
    reader = await service.delete("/api/v1/documents", params={"uri": b_uri}, headers=bearer(TEAM_A))
    assert reader.status_code == 403
    source = await service.delete("/api/v1/sources/team-b%2Fdocs", headers=bearer(A_WRITER))
    assert source.status_code == 403 and source.json()["error"]["code"] == "SOURCE_FORBIDDEN"
    still = (await service.get("/api/v1/sources/team-b%2Fdocs", headers=bearer(ADMIN))).json()
    assert still["documents"] == len(B_DOCS)
    own = await service.delete("/api/v1/documents", params={"uri": next(iter(A_DOCS))}, headers=bearer(A_WRITER))
    assert own.status_code == 200 and own.json()["chunksDeleted"] > 0


async def test_writers_write_only_the_sources_their_patterns_match(service):
    body = {"uri": "https://git.example/new.md", "content": "hello", "metadata": {"sourceIdentifier": "team-b/docs"}}
    refused = await service.put("/api/v1/documents", json=body, headers=bearer(A_WRITER))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "SOURCE_FORBIDDEN"
    unsourced = await service.put("/api/v1/documents", json={"uri": "x.md", "content": "x"}, headers=bearer(A_WRITER))
    assert unsourced.status_code == 403
    taken = {"uri": next(iter(B_DOCS)), "content": "mine", "metadata": {"sourceIdentifier": "team-a/docs"}}
    conflict = await service.put("/api/v1/documents", json=taken, headers=bearer(A_WRITER))
    assert conflict.status_code == 409
    assert_no_b(conflict.text.replace(next(iter(B_DOCS)), ""))
    before = (await get(service, "/api/v1/sources", TEAM_A)).json()["sources"]  # the glob is resolved now
    body["metadata"]["sourceIdentifier"] = "team-a/new"
    assert (await service.put("/api/v1/documents", json=body, headers=bearer(A_WRITER))).status_code == 200
    after = (await get(service, "/api/v1/sources", TEAM_A)).json()["sources"]
    # A new source of this replica reaches the glob's callers at once, not after the catalog's lifetime.
    assert [s["sourceIdentifier"] for s in before] == ["team-a/docs"]
    assert [s["sourceIdentifier"] for s in after] == ["team-a/docs", "team-a/new"]
    read_only = await service.put("/api/v1/documents", json=body, headers=bearer(TEAM_A))
    assert read_only.status_code == 403


async def test_every_api_call_needs_a_token_with_a_tokens_file(service):
    for path in ("/api/v1/documents", "/api/v1/sources", "/api/v1/status", "/api/v1/search?q=x"):
        response = await service.get(path)
        assert response.status_code == 401 and response.headers["www-authenticate"] == CHALLENGE
    for open_path in ("/healthz", "/readyz"):
        assert (await service.get(open_path)).status_code == 200


# --- hostile input -------------------------------------------------------------------------


async def test_hostile_tokens_are_refused_and_never_logged(service, caplog):
    caplog.set_level("DEBUG")
    huge = "h" * 100_000
    cases: list[dict[str, bytes | str]] = [
        {"authorization": f"Bearer {huge}"},
        {"authorization": "Bearer tökén-ünïcode".encode()},
        {"authorization": "Bearer \u00e9t\u00e9".encode("latin-1")},
        {"authorization": f"Basic {TEAM_A}"},
        {"authorization": f"Bearer{TEAM_A}"},
        {"authorization": f"Bearer {TEAM_A}x"},
    ]
    for headers in cases:
        response = await service.get("/api/v1/sources", headers=headers)
        assert response.status_code == 401, headers
        assert huge not in response.text
    for query in ({"access_token": TEAM_A}, {"access_token": huge[:2000]}):
        alone = await service.get("/api/v1/sources", params=query)
        with_header = await service.get("/api/v1/sources", params=query, headers=bearer(TEAM_A))
        assert alone.status_code == with_header.status_code == 401
        assert TEAM_A not in with_header.text
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records if r.name.startswith("kbsearch"))
    assert logged and "hhhh" not in logged and "ünïcode" not in logged and TEAM_A not in logged


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_the_bearer_scheme_is_case_insensitive(service, scheme):
    response = await service.get("/api/v1/sources", headers={"authorization": f"{scheme} {TEAM_A}"})
    assert response.status_code == 200
    assert [s["sourceIdentifier"] for s in response.json()["sources"]] == ["team-a/docs"]


# --- the tokens file -----------------------------------------------------------------------


def replace_file(path: Path, text: str) -> None:
    """As a Secret volume does: a new file swapped in, never a half-written one."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


async def wait_for_status(client, token: str, status: int, deadline_s: float = 15.0) -> None:
    """Poll (the file is checked at most once a second) until `token` gets `status`."""
    deadline = time.monotonic() + deadline_s
    while True:
        got = (await client.get("/api/v1/sources", headers=bearer(token))).status_code
        if got == status:
            return
        assert time.monotonic() < deadline, f"token still answers {got}, not {status}"
        await _pause()


async def _pause() -> None:
    import asyncio

    await asyncio.sleep(0.1)


async def test_a_changed_tokens_file_adds_and_drops_tokens_without_a_restart(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(tokens_yaml(entry("old", "old-token-1", '["*"]')))
    async with running_service("edge", tmp_path / "data", tokens_file=path) as client:
        assert (await client.get("/api/v1/sources", headers=bearer("old-token-1"))).status_code == 200
        assert (await client.get("/api/v1/sources", headers=bearer("new-token-2"))).status_code == 401
        replace_file(path, tokens_yaml(entry("new", "new-token-2", '["*"]')))
        await wait_for_status(client, "new-token-2", 200)
        assert (await client.get("/api/v1/sources", headers=bearer("old-token-1"))).status_code == 401


async def test_a_malformed_tokens_file_keeps_the_last_good_tokens(tmp_path, caplog):
    path = tmp_path / "tokens.yaml"
    path.write_text(tokens_yaml(entry("old", "old-token-1", '["*"]')))
    async with running_service("edge", tmp_path / "data", tokens_file=path) as client:
        caplog.set_level("INFO")
        replace_file(
            path, tokens_yaml(entry("broken", "leaky-token-9", '["*"]')).replace("write: false", "write: maybe")
        )
        deadline = time.monotonic() + 15
        while "tokens file not reloaded" not in caplog.text:
            assert time.monotonic() < deadline, "the malformed file was never reported"
            await client.get("/api/v1/sources", headers=bearer("old-token-1"))
            await _pause()
        assert (await client.get("/api/v1/sources", headers=bearer("old-token-1"))).status_code == 200
        assert (await client.get("/api/v1/sources", headers=bearer("leaky-token-9"))).status_code == 401
        record = next(
            r for r in caplog.records if r.getMessage() == "tokens file not reloaded; the previous tokens stay in use"
        )
        assert record.levelname == "ERROR" and "write" in record.reason  # type: ignore[attr-defined]
        assert "leaky-token-9" not in caplog.text
        # Fixed again: picked up again.
        replace_file(path, tokens_yaml(entry("fixed", "fixed-token-3", '["*"]')))
        await wait_for_status(client, "fixed-token-3", 200)


@pytest.mark.parametrize(
    "text",
    [
        "tokens: [",
        "tokens: {}",
        'tokens:\n  - name: a\n    token: "one-token"\n  - name: a\n    token: "other-token"\n',
        'tokens:\n  - name: a\n    token: " padded-secret "\n',
        'tokens:\n  - name: a\n    sha256: "abc"\n',
        'tokens:\n  - name: a\n    token: "x-secret"\n    sources: "team-a/*"\n',
    ],
)
def test_a_malformed_tokens_file_refuses_to_start(tmp_path, text):
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as raised:
        create_app(Settings(data_dir=tmp_path, tokens_file=path))
    assert "SEARCHSVC_TOKENS_FILE" in str(raised.value)
    assert "secret" not in str(raised.value) and "one-token" not in str(raised.value)


def test_a_missing_tokens_file_refuses_to_start(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read"):
        create_app(Settings(data_dir=tmp_path, tokens_file=tmp_path / "absent.yaml"))


async def test_legacy_tokens_are_two_implicit_entries_beside_the_file(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(tokens_yaml(entry("team-a-agent", TEAM_A, '["team-a/*"]')))
    async with running_service(
        "edge", tmp_path / "data", tokens_file=path, api_token="legacy-write-1", read_token="legacy-read-2"
    ) as client:
        body = {"uri": "b.md", "content": "b text", "metadata": {"sourceIdentifier": "team-b/docs"}}
        assert (await client.put("/api/v1/documents", json=body, headers=bearer("legacy-write-1"))).status_code == 200
        assert (await client.put("/api/v1/documents", json=body, headers=bearer("legacy-read-2"))).status_code == 403
        sources = (await client.get("/api/v1/sources", headers=bearer("legacy-read-2"))).json()["sources"]
        assert [s["sourceIdentifier"] for s in sources] == ["team-b/docs"]
        assert (await client.get("/api/v1/sources", headers=bearer(TEAM_A))).json()["sources"] == []


async def test_an_open_service_ignores_a_token_it_does_not_know(tmp_path):
    """Single-tenant on loopback: the operator may send its Secret's token to a service without tokens."""
    async with running_service("edge", tmp_path / "data") as client:
        body = {"uri": "a.md", "content": "a", "metadata": {"sourceIdentifier": "s"}}
        assert (await client.put("/api/v1/documents", json=body, headers=bearer("some-token"))).status_code == 200
        assert (await client.get("/api/v1/sources", headers=bearer("some-token"))).status_code == 200
    async with running_service("edge", tmp_path / "data2", api_token="write-token-1") as client:
        assert (await client.get("/api/v1/sources", headers=bearer("some-token"))).status_code == 200
        refused = await client.put("/api/v1/documents", json=body, headers=bearer("some-token"))
        assert refused.status_code == 401


async def test_the_access_log_names_the_caller_never_its_token(service, caplog):
    caplog.set_level("INFO", logger="kbsearch.access")
    await service.get("/api/v1/sources", headers=bearer(TEAM_A))
    (record,) = [r for r in caplog.records if r.name == "kbsearch.access"]
    assert record.caller == "team-a-agent"  # type: ignore[attr-defined]
    assert TEAM_A not in caplog.text
