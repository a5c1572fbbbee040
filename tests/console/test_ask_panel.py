"""The ask panel over plain HTTP: CSRF, scope, escaping and citation chips, with the extractive answerer."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from tests.console.test_http import csrf_of
from tests.support.service import running_service

DOCS = {
    "https://git.example.com/ops/rollback.md": (
        "# Rollbacks\n\n## Rolling back a deployment\n\n"
        "A failed deployment is rolled back with kubectl rollout undo. "
        "The previous ReplicaSet is scaled up again while the new one is scaled down <script>alert(1)</script>.\n"
    ),
    "https://git.example.com/kitchen/bread.md": (
        "# Bread\n\n## Baking\n\nMix flour, water, yeast and salt, then knead the dough for ten minutes.\n"
    ),
}


@asynccontextmanager
async def ask_app(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with running_service("edge", tmp_path / "data") as client:
        for uri, content in DOCS.items():
            body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": "ops/docs"}}
            assert (await client.put("/api/v1/documents", json=body)).status_code == 200
        yield client


async def test_asking_needs_the_csrf_token(tmp_path: Path) -> None:
    async with ask_app(tmp_path) as service:
        await csrf_of(service)
        response = await service.post("/ui/ask", data={"question": "How do I roll back a deployment?"})
        assert response.status_code == 403


async def test_an_answer_cites_chunks_with_chips_that_open_them(tmp_path: Path) -> None:
    async with ask_app(tmp_path) as service:
        csrf = await csrf_of(service)
        question = "How do I roll back a failed deployment with kubectl rollout undo?"
        fragment = await service.post(
            "/ui/ask", data={"question": question, "csrf_token": csrf}, headers={"HX-Request": "true"}
        )
        assert fragment.status_code == 200 and fragment.text.lstrip().startswith('<div id="answer"')
        chips = re.findall(r'<a class="chip" href="([^"]+)"', fragment.text)
        rollback = "/ui/document?uri=https%3A%2F%2Fgit.example.com%2Fops%2Frollback.md#chunk-"
        assert chips and all(link.startswith(rollback) for link in chips)
        assert "<script>alert" not in fragment.text
        page = await service.get(chips[0].split("#")[0])
        assert page.status_code == 200 and f'id="{chips[0].split("#")[1]}"' in page.text

        whole = await service.post("/ui/ask", data={"question": question, "csrf_token": csrf})  # without JavaScript
        assert whole.status_code == 200 and "<!doctype html>" in whole.text and 'class="chip"' in whole.text


def test_only_verified_markers_become_chips_and_the_answer_is_escaped() -> None:
    from kbsearch.console.ask import answer_with_chips
    from kbsearch.schemas import AskCitation

    cited = AskCitation(
        n=2,
        id="x",
        uri="https://git.example.com/a b.md",
        title="<b>A</b>",
        headings=[],
        chunkIndex=4,
        sourceIdentifier=None,
        quote="q",
    )
    html = str(answer_with_chips("Use <script>x</script> [2] but not [7].", [cited]))
    assert html == (
        "Use &lt;script&gt;x&lt;/script&gt; "
        '<a class="chip" href="/ui/document?uri=https%3A%2F%2Fgit.example.com%2Fa%20b.md#chunk-4" '
        'title="&lt;b&gt;A&lt;/b&gt;">2</a> but not [7].'
    )
