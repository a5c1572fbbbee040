"""The sources page shows each source's freshness as its syncer reported it, within the caller's scope."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from tests.console.support import READER, WRITE, WRITER, ago, card, report, sign_in, sources_page, writer_and_reader


def freshness(commit: str, lag: float, searchable: str) -> dict:
    seen = (datetime.fromisoformat(searchable.replace("Z", "+00:00")) - timedelta(seconds=lag)).isoformat()
    return {"remoteCommit": commit, "seenAt": seen, "searchableAt": searchable, "lagSeconds": lag}


async def test_the_sources_page_shows_last_success_age_and_push_to_searchable_lag(tmp_path: Path) -> None:
    async with writer_and_reader(tmp_path) as client:
        for source in ("docs/a", "docs/b", "docs/old", "private/x"):
            put = await client.put(
                "/api/v1/documents",
                json={
                    "uri": f"https://x/{source}.md",
                    "content": "# Page\n\ntext",
                    "metadata": {"sourceIdentifier": source},
                },
                headers=WRITE,
            )
            assert put.status_code == 200, put.text
        ended = ago(hours=2)
        await report(client, "docs/a", {
            "phase": "ok", "commit": "a" * 40, "documents": 1, "syncedAt": ended,
            "lastSuccessAt": ended, "freshness": freshness("a" * 40, 3.2, ended),
        })  # fmt: skip
        # The latest sync failed: the page still says how fresh the index is, from the last success.
        await report(client, "docs/b", {
            "phase": "error", "message": "the repository refused the token", "syncedAt": ago(minutes=1),
            "lastSuccessAt": ago(days=2), "freshness": freshness("b" * 40, 75.0, ago(days=2)),
        })  # fmt: skip
        # A syncer older than freshness reports: its ok report is its last success; no lag known.
        await report(
            client, "docs/old", {"phase": "ok", "commit": "c" * 40, "documents": 1, "syncedAt": ago(minutes=7)}
        )
        await report(client, "private/x", {
            "phase": "ok", "commit": "d" * 40, "documents": 1, "syncedAt": ended,
            "lastSuccessAt": ago(hours=5), "freshness": freshness("d" * 40, 4321.0, ended),
        })  # fmt: skip

        listed = {
            s["sourceIdentifier"]: s["sync"]
            for s in (await client.get("/api/v1/sources", headers=WRITE)).json()["sources"]
        }
        assert listed["docs/a"]["freshness"]["lagSeconds"] == 3.2
        assert listed["docs/a"]["freshness"]["remoteCommit"] == "a" * 40
        assert listed["docs/old"]["freshness"] is None and listed["docs/old"]["lastSuccessAt"] is None

        await sign_in(client, WRITER)
        page = await sources_page(client)  # the writer's scope: every source
        assert "5 h ago" in card(page, "private/x") and "72 min" in card(page, "private/x")

        await sign_in(client, READER)
        page = await sources_page(client)
        a, b, old = card(page, "docs/a"), card(page, "docs/b"), card(page, "docs/old")
        assert "Last success" in a and "2 h ago" in a
        assert "Push → searchable" in a and "3.2 s" in a and "a" * 12 in a
        assert "2 d ago" in b and "75 s" in b and "the repository refused the token" in b
        assert "7 min ago" in old and "<dd>—</dd>" in old.split("Push → searchable")[1][:40]
        # Out of the reader's scope: neither the source nor its figures.
        assert "private/x" not in page and "d" * 12 not in page and "72 min" not in page
