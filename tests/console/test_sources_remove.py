"""Removing a source that never synced a document from the console: a writer's session, its CSRF token,
the same delete REST calls; a reader, a source with documents or a missing token is refused."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import yaml

from tests.console.support import READER, WRITE, WRITER, ago, card, report, sign_in, sources_page
from tests.support.service import running_service

FAILED = {"phase": "error", "documents": 0, "syncedAt": "", "message": "fetch failed: repository not found"}


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, "the page carries the CSRF token"
    return match.group(1)


async def _remove(client: httpx.AsyncClient, source: str, csrf: str) -> httpx.Response:
    return await client.post("/ui/sources/remove", data={"source": source, "csrf_token": csrf})


async def _listed(client: httpx.AsyncClient) -> set[str]:
    body = (await client.get("/api/v1/sources", headers=WRITE)).json()
    return {s["sourceIdentifier"] for s in body["sources"]}


async def test_a_never_synced_source_is_removed_by_a_writer_only(tmp_path: Path) -> None:
    tokens = {
        "tokens": [
            {"name": "writer", "token": WRITER, "write": True, "sources": ["docs/*"]},
            {"name": "reader", "token": READER, "sources": ["docs/*"]},
        ]
    }
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(tokens))
    async with running_service("edge", tmp_path / "data", tokens_file=tmp_path / "tokens.yaml") as client:
        await report(client, "docs%2Ftypo", FAILED | {"syncedAt": ago(seconds=5)})
        await report(client, "docs%2Freal", FAILED | {"syncedAt": ago(seconds=5)})
        put = await client.put(
            "/api/v1/documents",
            json={
                "uri": "https://x/real.md",
                "content": "# Real\n\nA page.",
                "metadata": {"sourceIdentifier": "docs/real"},
            },
            headers=WRITE,
        )
        assert put.status_code in (200, 201), put.text

        # A reader sees the button but may not remove: the writer check of REST's delete.
        await sign_in(client, READER)
        page = await sources_page(client)
        typo = card(page, "docs/typo")
        assert "Remove docs/typo" in typo and "Remove docs/real" not in card(page, "docs/real")
        refused = await _remove(client, "docs/typo", _csrf(page))
        assert refused.status_code == 403 and "may read but not write" in refused.text
        assert "docs/typo" in await _listed(client)

        await client.post("/ui/logout", data={"csrf_token": _csrf(page)})
        await sign_in(client, WRITER)
        page = await sources_page(client)
        # Without the CSRF token: refused, nothing removed.
        assert (await _remove(client, "docs/typo", "")).status_code == 403
        assert "docs/typo" in await _listed(client)
        # A source with documents is not the console's to delete.
        kept = await _remove(client, "docs/real", _csrf(page))
        assert kept.status_code == 409 and "has 1 documents" in kept.text
        assert "docs/real" in await _listed(client)

        removed = await _remove(client, "docs/typo", _csrf(page))
        assert removed.status_code == 303 and removed.headers["location"] == "/ui/sources"
        assert "docs/typo" not in await _listed(client)
        assert ">docs/typo</a></h2>" not in await sources_page(client)
