"""A document reads back as it was written: headings, code and lists in place, front matter aside.

The body is kept in the store beside the chunks (store/base.py, a body point per document), so
REST, MCP and the console serve it whole, and a rebuild can re-chunk it without the sources.
"""

from __future__ import annotations

import html
from pathlib import Path

import httpx
import pytest

from kbsearch.deps import context_of
from kbsearch.models import StoredBody
from kbsearch.store.base import VectorStore
from tests.support.mcpclient import mcp_client, text_of
from tests.support.service import STORE_KINDS, running_service
from tests.support.service_process import ServiceProcess

FRONT_MATTER = "---\ntitle: Deploying the widget\ntags: [deploy]\n---\n"
BODY = (
    """# Deploying the widget

The widget ships as a container image. Read this page before the first deploy.

## Prerequisites

- a cluster running Kubernetes 1.27 or newer
- Helm 3
  - with the `diff` plugin, for upgrades
- a namespace of its own

## Install

Run these two commands; the second waits until the pods are ready:

```bash
helm repo add widgets https://charts.example.org
helm install widget widgets/widget --namespace widgets --create-namespace --wait
```

| Value | Default | Meaning |
|-------|---------|---------|
| replicas | 2 | pods behind the service |
| image.tag | latest | the image to run |

## Upgrade

1. Read the release notes.
2. Run `helm diff upgrade` and check what changes.
3. Run `helm upgrade`.

> **Note:** an upgrade never deletes the widget's volume.
"""
    + "\n".join(f"Paragraph {i} says something about widgets and their volumes." for i in range(40))
    + "\n"
)
CONTENT = FRONT_MATTER + BODY
URI = "git://widgets/docs/deploy.md"
SOURCE = "widgets-docs"


async def put(client: httpx.AsyncClient, uri: str = URI, content: str = CONTENT, source: str = SOURCE) -> None:
    body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": source}}
    response = await client.put("/api/v1/documents", json=body)
    assert response.status_code == 200, response.text


async def read_pages(client: httpx.AsyncClient, uri: str, max_chars: int) -> tuple[str, list[dict]]:
    pages: list[dict] = []
    start: int | None = 0
    while start is not None:
        response = await client.get(
            "/api/v1/documents/text", params={"uri": uri, "start": start, "maxChars": max_chars}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["start"] == start and len(page["text"]) <= max_chars
        pages.append(page)
        start = page["nextStart"]
    return "".join(p["text"] for p in pages), pages


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_document_read_back_page_by_page_is_what_was_put(store_kind: str, tmp_path: Path):
    async with running_service(store_kind, tmp_path, chunk_min_chars=200, chunk_max_chars=400) as client:
        await put(client)
        text, pages = await read_pages(client, URI, 97)
        assert len(pages) > 10 and pages[-1]["end"] == pages[-1]["totalChars"] == len(BODY)
        assert text == BODY  # every heading, fence, list item and table row, in place
        assert {p["title"] for p in pages} == {"Deploying the widget"}
        whole, _ = await read_pages(client, URI, 1_000_000)
        assert whole == BODY

        # The console's document page renders the same body: its code and every paragraph, in place.
        page = await client.get("/ui/document", params={"uri": URI})
        assert page.status_code == 200
        article = html.unescape(page.text.split('<article class="doc card"', 1)[1].split("</article>", 1)[0])
        assert "helm install widget widgets/widget --namespace widgets --create-namespace --wait" in article
        paragraphs = [article.index(f"Paragraph {i} says") for i in range(40)]
        assert paragraphs == sorted(paragraphs)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_new_version_replaces_the_body_and_a_delete_removes_it(store_kind: str, tmp_path: Path):
    async with running_service(store_kind, tmp_path) as client:
        store: VectorStore = context_of(client.app).store  # type: ignore[attr-defined]
        await put(client)
        edited = CONTENT.replace("Read this page", "Read this whole page")
        await put(client, content=edited)
        text, _ = await read_pages(client, URI, 100_000)
        assert text == BODY.replace("Read this page", "Read this whole page")
        stored = store.get_body(URI)
        assert stored is not None and stored.content == edited  # what was PUT, front matter included

        response = await client.delete("/api/v1/documents", params={"uri": URI})
        assert response.status_code == 200, response.text
        assert store.get_body(URI) is None
        missing = await client.get("/api/v1/documents/text", params={"uri": URI})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "DOCUMENT_NOT_FOUND"

        await put(client, uri="git://widgets/docs/other.md")
        response = await client.delete(f"/api/v1/sources/{SOURCE}")
        assert response.status_code == 200, response.text
        assert store.get_body("git://widgets/docs/other.md") is None


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_body_that_is_not_the_records_is_never_served(store_kind: str, tmp_path: Path):
    """A document written before bodies were kept (or whose body write was interrupted) reads from its chunks."""
    async with running_service(store_kind, tmp_path) as client:
        store: VectorStore = context_of(client.app).store  # type: ignore[attr-defined]
        await put(client)
        record = store.get_document(URI)
        assert record is not None
        stale = StoredBody(URI, SOURCE, "sha256:" + "0" * 64, record.version, "stale", "stale text")
        store.put_body(stale)
        assert store.get_body(URI) == stale
        text, _ = await read_pages(client, URI, 100_000)
        assert text != "stale text" and "Paragraph 39 says something" in text  # stitched from the chunks

        store.delete_body(URI, record.version)  # as written before bodies were kept
        assert store.get_body(URI) is None
        again, _ = await read_pages(client, URI, 100_000)
        assert again == text


def test_store_keeps_the_newest_body(store: VectorStore):
    newer = StoredBody("u", "s", "sha256:b", 20, "content b", "body b")
    store.put_body(newer)
    store.put_body(StoredBody("u", "s", "sha256:a", 10, "content a", "body a"))
    assert store.get_body("u") == newer
    store.delete_body("u", 19)
    assert store.get_body("u") == newer
    store.delete_body("u", 20)
    assert store.get_body("u") is None


async def test_fetch_document_over_mcp_is_the_document_as_written(tmp_path: Path):
    process = ServiceProcess(tmp_path / "service.log", {"SEARCHSVC_DATA_DIR": str(tmp_path / "data")}).start()
    try:
        process.wait_ready()
        body = {"uri": URI, "content": CONTENT, "metadata": {"sourceIdentifier": SOURCE}}
        assert process.client.put("/api/v1/documents", json=body).status_code == 200

        parts: list[str] = []
        start: int | None = 0
        async with mcp_client(f"http://127.0.0.1:{process.port}") as client:
            while start is not None:
                result = await client.call_tool("fetch_document", {"uri": URI, "start": start, "max_chars": 150})
                assert not result.is_error, text_of(result)
                parts.append(result.structured_content["text"])
                start = result.structured_content["nextStart"]
        assert "".join(parts) == BODY
    finally:
        process.stop()
