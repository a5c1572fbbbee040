"""Documents of every format through PUT /api/v1/documents: converted, searchable, located; bad files refused."""

from __future__ import annotations

import base64
import hashlib

from tests.searchsvc.api_fixtures import counts, list_all
from tests.support.formatfiles import (
    code_cell,
    docx_file,
    encrypted_pdf,
    markdown_cell,
    notebook,
    pdf_pages,
    scanned_pdf,
    stream_output,
    zip_bomb_docx,
)
from tests.support.service import running_service

WORDS = "reconciliation loop drift detection"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def put_file(client, uri: str, data: bytes, **extra):
    body = {"uri": uri, "content": b64(data), "contentEncoding": "base64", "metadata": {"sourceIdentifier": "s"}}
    return await client.put("/api/v1/documents", json=body | extra)


async def search(client, query: str, mode: str = "keyword") -> list[dict]:
    # Chunk-level: the same guide in several formats has identical chunk texts, which pages collapse.
    body = {"query": query, "mode": mode, "limit": 20, "collapse": False}
    response = await client.post("/api/v1/search", json=body)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def manual_pages() -> bytes:
    return pdf_pages(
        "Installing the controller: apply the manifests to the argocd namespace. " * 8,
        "Upgrading the controller: read the release notes, then apply the new manifests. " * 8,
        "Uninstalling the controller: delete the namespace and the custom resource definitions. " * 8,
    )


async def test_a_pdf_is_indexed_from_its_bytes_and_each_hit_names_its_page(api):
    data = manual_pages()
    response = await put_file(api, "https://git.example/r/blob/main/docs/manual.pdf", data)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "created"
    assert response.json()["checksum"] == sha(data)  # of the file's bytes: what a syncer compares
    pages = {hit["page"] for hit in await search(api, "uninstalling namespace custom resource definitions")}
    assert 3 in pages
    best = (await search(api, "upgrading release notes"))[0]
    assert best["page"] == 2 and best["cell"] is None and "Upgrading" in best["content"]
    again = await put_file(api, "https://git.example/r/blob/main/docs/manual.pdf", data)
    assert again.json() | {"status": "unchanged", "chunksEmbedded": 0} == again.json()


async def test_a_notebook_hit_names_its_cell(api):
    data = notebook(
        [
            markdown_cell("# Drift report\n\nThis notebook measures " + WORDS + "."),
            code_cell("report = measure()", outputs=[stream_output("stream", name="stdout", text="x = 1\n" * 100_000)]),
            markdown_cell("## Conclusion\n\nThe sharded controller halves the sync latency."),
        ]
    )
    response = await api.put("/api/v1/documents", json={"uri": "nb/drift.ipynb", "content": data.decode()})
    assert response.status_code == 200, response.text
    hit = (await search(api, "sharded controller halves latency"))[0]
    assert hit["uri"] == "nb/drift.ipynb" and hit["cell"] == 3 and hit["page"] is None
    assert hit["headings"] == ["Drift report", "Conclusion"]


def _handbook(document):
    document.add_heading("Operator handbook", level=1)
    document.add_heading("Rotating credentials", level=2)
    document.add_paragraph("Rotate the repository credentials every ninety days. " * 5)


TEXT_FORMATS = {
    "guide.mdx": (
        "import X from 'x';\n\n# Guide\n\n<Tabs>\n  <TabItem>\n    The "
        + WORDS
        + " runs here.\n  </TabItem>\n</Tabs>\n"
    ),
    "guide.rst": "Guide\n=====\n\nThe " + WORDS + " runs here.\n\n.. toctree::\n\n   other\n",
    "guide.adoc": "= Guide\n:x: y\n\nThe " + WORDS + " runs here.\n",
    "guide.html": (
        "<html><body><nav>Home</nav><main><h1>Guide</h1><p>The " + WORDS + " runs here.</p></main></body></html>"
    ),
    "guide.txt": "Guide\n\nThe " + WORDS + " runs here.\n",
}


async def test_every_text_format_is_converted_by_its_extension_and_found_with_its_title(api):
    for name, content in TEXT_FORMATS.items():
        response = await api.put("/api/v1/documents", json={"uri": f"docs/{name}", "content": content})
        assert response.status_code == 200, (name, response.text)
    response = await put_file(api, "docs/guide.docx", docx_file(_handbook))
    assert response.status_code == 200, response.text
    hits = {hit["uri"]: hit for hit in await search(api, WORDS)}
    assert set(hits) == {f"docs/{name}" for name in TEXT_FORMATS}
    for name in ("guide.mdx", "guide.rst", "guide.adoc", "guide.html"):
        assert hits[f"docs/{name}"]["title"] == "Guide", name
        assert hits[f"docs/{name}"]["content"] == "# Guide\n\nThe " + WORDS + " runs here.", name
    word = (await search(api, "rotate repository credentials ninety days"))[0]
    assert word["uri"] == "docs/guide.docx"
    assert word["title"] == "Operator handbook" and word["headings"][0] == "Operator handbook"
    assert "## Rotating credentials" in word["content"]


async def test_content_type_overrides_the_extension_and_base64_text_is_accepted(api):
    rst = "Title\n=====\n\n.. toctree::\n\n   navigation-only\n\nBody " + WORDS + ".\n"
    response = await api.put(
        "/api/v1/documents",
        json={
            "uri": "no-extension",
            "content": b64(rst.encode()),
            "contentEncoding": "base64",
            "contentType": "text/x-rst",
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["checksum"] == sha(rst.encode())
    [hit] = await search(api, WORDS)
    assert hit["content"] == "# Title\n\nBody " + WORDS + "." and hit["title"] == "Title"
    assert await search(api, "navigation-only") == []


BAD_FILES = {
    "an encrypted PDF": ("enc.pdf", lambda: encrypted_pdf("the plan " * 20), "ENCRYPTED_DOCUMENT"),
    "a scanned PDF": ("scan.pdf", lambda: scanned_pdf(), "NO_TEXT_LAYER"),
    "a corrupt PDF": ("bad.pdf", lambda: manual_pages()[:2000], "CORRUPT_DOCUMENT"),
    "a zip bomb .docx": ("bomb.docx", zip_bomb_docx, "ARCHIVE_BOMB"),
    "a PDF named .docx": ("fake.docx", lambda: pdf_pages("x" * 100), "CONTENT_TYPE_MISMATCH"),
    "markdown named .pdf": ("fake.pdf", lambda: b"# Not a PDF\n", "CONTENT_TYPE_MISMATCH"),
    "a PDF named .md": ("fake.md", lambda: pdf_pages("x" * 100), "CONTENT_TYPE_MISMATCH"),
    "invalid UTF-8 markdown": ("latin1.md", lambda: "café".encode("latin-1"), "INVALID_UTF8"),
    "invalid UTF-8 reST": ("latin1.rst", lambda: "Title\n=====\n\ncafé".encode("latin-1"), "INVALID_UTF8"),
    "a broken notebook": ("broken.ipynb", lambda: b'{"cells": [', "CORRUPT_DOCUMENT"),
}


async def test_each_bad_file_is_a_422_with_a_stable_code_and_leaves_nothing_behind(api):
    for case, (uri, make, code) in BAD_FILES.items():
        response = await put_file(api, uri, make())
        assert response.status_code == 422, (case, response.text)
        error = response.json()["error"]
        assert error["code"] == code and error["message"], case
        assert await counts(api) == (0, 0) and await list_all(api) == [], case
    # The service is unharmed: the next document goes in.
    assert (await put_file(api, "ok.pdf", manual_pages())).status_code == 200


async def test_a_bad_file_keeps_the_previous_version_of_the_document(api):
    assert (await put_file(api, "m.pdf", manual_pages())).status_code == 200
    before = await list_all(api)
    assert (await put_file(api, "m.pdf", scanned_pdf())).json()["error"]["code"] == "NO_TEXT_LAYER"
    assert await list_all(api) == before
    assert (await search(api, "upgrading release notes"))[0]["uri"] == "m.pdf"


async def test_request_errors_name_the_problem(api):
    cases = [
        ({"uri": "a.pdf", "content": "not base64!", "contentEncoding": "base64"}, "INVALID_BASE64"),
        ({"uri": "a.pdf", "content": "%PDF-1.7 as text"}, "BASE64_REQUIRED"),
        ({"uri": "a.md", "content": "x", "contentType": "application/x-msdownload"}, "UNSUPPORTED_CONTENT_TYPE"),
        ({"uri": "a.md", "content": "x", "contentEncoding": "gzip"}, "VALIDATION_ERROR"),
    ]
    for body, code in cases:
        response = await api.put("/api/v1/documents", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["code"] == code, body


async def test_size_limits_count_decoded_bytes_and_the_converted_text(tmp_path):
    data = manual_pages()
    async with running_service("edge", tmp_path / "a", max_source_bytes=len(data) - 1) as client:
        response = await put_file(client, "m.pdf", data)
        assert response.status_code == 413
        assert response.json()["error"]["details"] == {"bytes": len(data), "limit": len(data) - 1}
    async with running_service("edge", tmp_path / "b", max_source_bytes=len(data)) as client:
        assert (await put_file(client, "m.pdf", data)).status_code == 200
    # The base64 text is a third longer than the file; only the file's own bytes count.
    async with running_service("edge", tmp_path / "c", max_document_bytes=len(data) * 2) as client:
        markdown = ("word " * (len(data) // 5 * 2)).encode()[: len(data) * 2]
        assert len(b64(markdown)) > len(data) * 2
        assert (await put_file(client, "big.md", markdown)).status_code == 200
    async with running_service("edge", tmp_path / "d", max_document_bytes=1000) as client:
        response = await put_file(client, "m.pdf", data)
        assert response.status_code == 413 and "converts to" in response.json()["error"]["message"]
