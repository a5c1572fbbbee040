"""The sources page shows each source's judged questions, and beside them the searches that found little."""

from __future__ import annotations

from pathlib import Path

from kbsearch.deps import context_of
from tests.console.support import READER, WRITE, ago, card, report, sign_in, sources_page, writer_and_reader

HOSTILE = '<img src=x onerror="alert(1)">'


async def test_the_sources_page_shows_the_quality_and_what_searches_missed(tmp_path: Path) -> None:
    async with writer_and_reader(tmp_path) as client:
        for source in ("docs/a", "docs/b", "private/x"):
            body = {
                "uri": f"https://x/{source}.md",
                "content": "# Page\n\ntext",
                "metadata": {"sourceIdentifier": source},
            }
            assert (await client.put("/api/v1/documents", json=body, headers=WRITE)).status_code == 200
        failed = {
            "question": f"How does {HOSTILE} work?", "expected": ["docs/flux.md"], "rank": None,
            "missingFacts": ["1.21 gigawatts"],
        }  # fmt: skip
        await report(client, "docs/a", {
            "phase": "ok", "commit": "a" * 40, "documents": 1, "syncedAt": ago(minutes=3),
            "quality": {"questions": 4, "hitAt1": 0.5, "hitAt5": 0.75, "withFacts": 2, "factsShare": 0.5,
                        "failed": 1, "failedQuestions": [failed]},
        })  # fmt: skip
        await report(client, "docs/b", {
            "phase": "ok", "commit": "b" * 40, "documents": 1, "syncedAt": ago(minutes=3),
            "quality": {"questions": 0, "error": ".kb/questions.yaml: questions[0].expected: Field required"},
        })  # fmt: skip
        await report(client, "private/x", {
            "phase": "ok", "commit": "c" * 40, "documents": 1, "syncedAt": ago(minutes=3),
            "quality": {"questions": 3, "hitAt1": 0.3333, "hitAt5": 0.3333, "failed": 0},
        })  # fmt: skip
        # A search that finds nothing, within the reader's scope, and one outside it.
        for query, source in (("zyxwvut quux", "docs/a"), ("secret private plans", "private/x")):
            search = {"query": query, "mode": "keyword", "filter": {"sourceIdentifier": source}}
            assert (await client.post("/api/v1/search", json=search, headers=WRITE)).status_code == 200
        await context_of(client.app).query_log.flush()  # type: ignore[attr-defined]

        await sign_in(client, READER)
        page = await sources_page(client)
        a, b = card(page, "docs/a"), card(page, "docs/b")
        assert "4 judged questions" in a and "hit@1 50%" in a and "hit@5 75%" in a
        assert "answers with their facts 50% of 2" in a
        assert "1 failed question" in a and "<code>docs/flux.md</code> not in the top 5" in a
        assert "“1.21 gigawatts”" in a
        assert HOSTILE not in page and "&lt;img src=x onerror=" in a  # escaped
        assert "Judged questions: no figures" in b and "questions[0].expected: Field required" in b
        missed = page[page.index("Searches that found little") :]
        assert "zyxwvut quux" in missed
        # Out of the reader's scope: neither the source's figures nor its searches.
        assert "private/x" not in page and "33%" not in page and "secret private plans" not in page
