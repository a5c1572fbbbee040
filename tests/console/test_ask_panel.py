"""The ask panel over plain HTTP: CSRF, scope, escaping and citation chips, with the extractive answerer."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import httpx
import pytest

from tests.console.support import csrf_of
from tests.support.service import running_service

if TYPE_CHECKING:
    from kbsearch.schemas.ask import AskCitation

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
    # The test embedder's cosines are not MiniLM's: every retrieved chunk counts as relevant here
    # (relevance gating is tested in tests/searchsvc/api/test_api_pages.py).
    async with running_service("edge", tmp_path / "data", relevance_threshold=0.0, ask_min_relevance=0.0) as client:
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
        rollback = "/ui/document?uri=https%3A%2F%2Fgit.example.com%2Fops%2Frollback.md&amp;chunk="
        assert chips and all(link.startswith(rollback) and link.endswith("#passage") for link in chips)
        assert "<script>alert" not in fragment.text
        page = await service.get(html.unescape(chips[0]).split("#")[0])
        assert page.status_code == 200 and '<div class="passage" id="passage"' in page.text

        whole = await service.post("/ui/ask", data={"question": question, "csrf_token": csrf})  # without JavaScript
        assert whole.status_code == 200 and "<!doctype html>" in whole.text and 'class="chip"' in whole.text


def citation(n: int, uri: str, title: str, *, chunk_index: int) -> AskCitation:
    """Citation [n] of one chunk of `uri`, as the answerer hands it to the panel."""
    from kbsearch.schemas.ask import AskCitation

    return AskCitation(
        n=n, id="x", uri=uri, title=title, headings=[], chunk_index=chunk_index, source_identifier=None, quote="q"
    )


def test_only_verified_markers_become_chips_and_the_answer_is_escaped() -> None:
    from kbsearch.console.ask import answer_with_chips

    cited = citation(2, "https://git.example.com/a b.md", "<b>A</b>", chunk_index=4)
    html = str(answer_with_chips("Use <script>x</script> [2] but not [7].", [cited]))
    assert html == (
        "Use &lt;script&gt;x&lt;/script&gt; "
        '<a class="chip" href="/ui/document?uri=https%3A%2F%2Fgit.example.com%2Fa+b.md&amp;chunk=4#passage" '
        'title="&lt;b&gt;A&lt;/b&gt;">2</a> but not [7].'
    )


ARCHIVE = "https://git.example.com/archive/rollback.md"
ARCHIVE_DOC = (
    "# Archived rollbacks\n\n## Rolling back an old deployment\n\n"
    "An archived deployment is rolled back with kubectl rollout undo as well.\n"
)


def cited_uris(fragment: str) -> set[str]:
    links = re.findall(r'<a class="chip" href="/ui/document\?uri=([^"&#]+)&amp;chunk=\d+#passage"', fragment)
    return {unquote(link) for link in links}


@pytest.mark.parametrize(
    "form", [{"source": "archive/docs"}, {"uri_prefix": "https://git.example.com/archive/"}], ids=["source", "prefix"]
)
async def test_the_ask_panel_filters_like_the_search_form(tmp_path: Path, form: dict[str, str]) -> None:
    async with ask_app(tmp_path) as service:
        body = {"uri": ARCHIVE, "content": ARCHIVE_DOC, "metadata": {"sourceIdentifier": "archive/docs"}}
        assert (await service.put("/api/v1/documents", json=body)).status_code == 200
        csrf = await csrf_of(service)
        asked = {"question": "How do I roll back a failed deployment with kubectl rollout undo?", "csrf_token": csrf}
        everywhere = await service.post("/ui/ask", data=asked, headers={"HX-Request": "true"})
        narrowed = await service.post("/ui/ask", data=asked | form, headers={"HX-Request": "true"})
        page = await service.post("/ui/ask", data=asked | form)  # without JavaScript: the filter stays in the form
    assert {ARCHIVE, "https://git.example.com/ops/rollback.md"} <= cited_uris(everywhere.text)
    assert narrowed.status_code == 200 and cited_uris(narrowed.text) == {ARCHIVE}
    assert cited_uris(page.text) == {ARCHIVE}
    value = next(iter(form.values()))
    kept = (f'<option value="{value}" selected>', f'name="uri_prefix" type="text" value="{value}"')
    assert any(field in page.text for field in kept)


async def test_a_bad_uri_prefix_in_the_ask_panel_is_said_plainly(tmp_path: Path) -> None:
    async with ask_app(tmp_path) as service:
        csrf = await csrf_of(service)
        data = {"question": "How do I roll back?", "uri_prefix": "https://git.example.com/\x07", "csrf_token": csrf}
        fragment = await service.post("/ui/ask", data=data, headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert '<p class="alert" role="alert">uri must not contain control characters' in fragment.text


def test_code_in_an_answer_is_shown_as_code_and_its_brackets_are_not_chips() -> None:
    from kbsearch.console.ask import answer_with_chips

    cited = citation(1, "https://git.example.com/a.md", "A", chunk_index=0)
    answer = "Add the option [1]:\n\n```yaml\nitems[1]: <b>\n```\n\nThen sync [1]."
    html = str(answer_with_chips(answer, [cited]))
    assert "<pre><code>items[1]: &lt;b&gt;\n</code></pre>" in html
    assert html.count('class="chip"') == 2 and "```" not in html
    unterminated = str(answer_with_chips("Run [1]:\n\n```\nls [1]", [cited]))
    assert unterminated.endswith("<pre><code>ls [1]</code></pre>")


async def test_a_citation_names_its_pdf_page_and_its_version(tmp_path: Path) -> None:
    import base64

    from tests.support.formatfiles import pdf_pages

    manual = pdf_pages(
        "Installing the quasar controller: apply its manifests to the cluster. " * 8,
        "Upgrading the quasar controller: read the release notes, then apply the new manifests. " * 8,
    )
    async with ask_app(tmp_path) as service:
        pdf = {
            "uri": "https://git.example.com/ops/2.4/manual.pdf",
            "content": base64.b64encode(manual).decode("ascii"),
            "contentEncoding": "base64",
            "metadata": {"sourceIdentifier": "ops/docs"},
        }
        assert (await service.put("/api/v1/documents", json=pdf)).status_code == 200
        question = "How do I upgrade the quasar controller after reading the release notes?"
        asked = (await service.post("/api/v1/ask", json={"question": question})).json()
        cited = [c for c in asked["citations"] if c["uri"] == pdf["uri"]]
        assert cited and cited[0]["page"] == 2 and cited[0]["version"] == "2.4" and cited[0]["cell"] is None
        assert all(s.get("page") is None for s in asked["sourcesRetrieved"] if s["uri"] != pdf["uri"])

        csrf = await csrf_of(service)
        fragment = await service.post(
            "/ui/ask", data={"question": question, "csrf_token": csrf}, headers={"HX-Request": "true"}
        )
        assert '<span class="location">page 2</span>' in fragment.text
        assert '<span class="version">version 2.4</span>' in fragment.text
