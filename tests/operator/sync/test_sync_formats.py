"""A repository mixing every format, synced end to end: converted files indexed, bad ones listed with codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kboperator.git.repo import RepoCache
from kboperator.models import RepoSpec, SyncSpec
from kboperator.searchclient import SearchClient
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import BASE_URL, asgi, file_uri, listing, no_sleep, sha256
from tests.support.formatfiles import (
    code_cell,
    docx_file,
    encrypted_pdf,
    markdown_cell,
    notebook,
    pdf_pages,
    scanned_pdf,
)
from tests.support.git import WorkRepo

SOURCE = "team/mixed"
INCLUDE = ("**/*.{md,mdx,rst,adoc,html,ipynb,txt,pdf,docx}",)


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache"), concurrency=3)


def _design(document) -> None:
    document.add_heading("Design record 7", level=1)
    document.add_paragraph("We chose sharding by cluster for the application controller.")


GOOD = {
    "README.md": "# Handbook\n\nStart here.\n",
    "docs/intro.mdx": "import X from './x';\n\n# Intro\n\n<Note>Docusaurus page about onboarding.</Note>\n",
    "docs/api.rst": "API\n===\n\nSphinx page about the :ref:`webhook <hooks>` endpoint.\n",
    "docs/setup.adoc": "= Setup\n\nAntora page about installing the agent.\n",
    "docs/ref.html": "<html><body><nav>Menu</nav><main><h1>Reference</h1><p>Generated flags.</p></main></body></html>",
    "notes.txt": "Plain notes about the weekly review.\n",
    "nb/tour.ipynb": notebook([markdown_cell("# Tour\n\nA notebook tour of the metrics.\n"), code_cell("plot()")]),
    "records/design.docx": docx_file(_design),
    # Pages longer than a chunk: a hit names the page its chunk starts on.
    "manuals/ops.pdf": pdf_pages("Backups run nightly at two. " * 30, "Restores need the operator role. " * 20),
}
BAD = {
    "manuals/scan.pdf": (scanned_pdf(), "NO_TEXT_LAYER"),
    "manuals/locked.pdf": (encrypted_pdf("secret plan " * 10), "ENCRYPTED_DOCUMENT"),
    "records/fake.docx": (pdf_pages("really a PDF"), "CONTENT_TYPE_MISMATCH"),
}


async def test_a_repository_mixing_formats_is_mirrored_and_bad_files_are_listed_with_codes(
    engine: SyncEngine, service: httpx.AsyncClient, tmp_path: Path
) -> None:
    repo = WorkRepo(tmp_path / "mixed")
    for path, content in GOOD.items():
        repo.write(path, content)
    for path, (content, _) in BAD.items():
        repo.write(path, content)
    repo.write("images/logo.png", b"\x89PNG\r\n\x1a\n\x00\x00")  # not selected by the globs
    repo.commit("mixed formats")
    spec = SyncSpec(source_id=SOURCE, repo=RepoSpec(str(repo.path)), allow_local=True, include=INCLUDE)

    result = await engine.sync(prepare(spec), None)

    assert result.ok and result.failed == []
    documents = await listing(service, SOURCE)
    expected = {
        file_uri(repo.path, path): sha256(data if isinstance(data, bytes) else data.encode())
        for path, data in GOOD.items()
    }
    assert {uri: doc["checksum"] for uri, doc in documents.items()} == expected
    assert {issue.path: issue.code for issue in result.skipped} == {path: code for path, (_, code) in BAD.items()}
    assert result.added == len(GOOD)

    async def top(query: str) -> dict:
        body = {"query": query, "mode": "keyword", "limit": 1}
        return (await service.post("/api/v1/search", json=body)).json()["results"][0]

    restores = await top("restores need the operator role")
    assert restores["uri"] == file_uri(repo.path, "manuals/ops.pdf") and restores["page"] == 2
    assert (await top("notebook tour metrics"))["cell"] == 1
    assert (await top("sharding by cluster"))["title"] == "Design record 7"
    assert (await top("webhook endpoint"))["title"] == "API"

    # A changed PDF is re-sent; the unchanged files stay unchanged on the next full reconcile.
    repo.write("manuals/ops.pdf", pdf_pages("Backups run hourly now. " * 30, "Restores need a ticket. " * 30))
    repo.commit("hourly backups")
    again = await engine.sync(prepare(spec), None)
    assert again.modified == 1 and again.unchanged == len(GOOD) - 1
    assert (await top("backups hourly"))["page"] == 1
