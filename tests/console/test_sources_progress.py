"""A running sync's progress: reported alone to the sync-status endpoint, shown on the sources page
("syncing 25 of 126, started 12 s ago"), ended by the outcome, never brought back by a late report."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.console.support import READER, WRITE, WRITER, ago, card, sign_in, sources_page, writer_and_reader
from tests.support.service import running_service


async def test_progress_is_shown_until_the_outcome_and_a_late_one_is_dropped(tmp_path: Path) -> None:
    async with writer_and_reader(tmp_path) as client:
        status = "/api/v1/sources/docs%2Fnew/status"
        started = ago(seconds=12)
        # A first sync: no outcome yet, only progress.
        put = await client.put(
            status,
            json={"progress": {"stage": "syncing", "done": 25, "total": 126, "startedAt": started}},
            headers=WRITE,
        )
        assert put.status_code == 200, put.text
        body = put.json()
        assert body["stored"] and body["sync"] is None
        assert (body["progress"]["done"], body["progress"]["total"], body["progress"]["stage"]) == (25, 126, "syncing")
        listed = {
            s["sourceIdentifier"]: s for s in (await client.get("/api/v1/sources", headers=WRITE)).json()["sources"]
        }
        assert listed["docs/new"]["sync"] is None and listed["docs/new"]["progress"]["done"] == 25

        await sign_in(client, READER)
        new = card(await sources_page(client), "docs/new")
        assert re.search(r"syncing 25 of 126 .*started <time[^>]*>1[2-9] s ago</time>", new), new
        assert "no sync reported" not in new and '<progress max="126" value="25">' in new

        # The outcome ends it.
        ended = ago(seconds=1)
        outcome = {"phase": "ok", "commit": "a" * 40, "documents": 126, "syncedAt": ended}
        assert (await client.put(status, json=outcome, headers=WRITE)).json()["stored"]
        listed = {
            s["sourceIdentifier"]: s for s in (await client.get("/api/v1/sources", headers=WRITE)).json()["sources"]
        }
        assert listed["docs/new"]["progress"] is None and listed["docs/new"]["sync"]["phase"] == "ok"
        # A late progress report of that sync (it started before the outcome) is dropped.
        late = await client.put(
            status,
            json={"progress": {"stage": "syncing", "done": 120, "total": 126, "startedAt": started}},
            headers=WRITE,
        )
        assert late.status_code == 200 and late.json()["stored"] is False and late.json()["progress"] is None
        done = card(await sources_page(client), "docs/new")
        assert "syncing" not in done and "phase-ok" in done

        # The next sync's progress keeps the last outcome beside it.
        again = {"progress": {"stage": "fetching", "startedAt": ago(seconds=0)}}
        assert (await client.put(status, json=again, headers=WRITE)).json()["stored"]
        both = {
            s["sourceIdentifier"]: s for s in (await client.get("/api/v1/sources", headers=WRITE)).json()["sources"]
        }
        assert both["docs/new"]["sync"]["commit"] == "a" * 40 and both["docs/new"]["progress"]["stage"] == "fetching"
        assert "fetching the repository" in card(await sources_page(client), "docs/new")


async def test_a_progress_report_is_checked(tmp_path: Path) -> None:
    tokens = {"tokens": [{"name": "writer", "token": WRITER, "write": True, "sources": ["*"]}]}
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(tokens))
    async with running_service("edge", tmp_path / "data", tokens_file=tmp_path / "tokens.yaml") as client:
        status = "/api/v1/sources/docs%2Fx/status"
        for body, words in (
            (
                {"progress": {"stage": "syncing", "done": 5, "total": 3, "startedAt": ago(seconds=1)}},
                "progress.done is 5",
            ),
            ({"progress": {"stage": "syncing", "startedAt": ago(seconds=1)}, "phase": "ok"}, "progress alone"),
            ({"documents": 3}, "phase and syncedAt"),
            ({"progress": {"stage": "syncing", "startedAt": "9999-01-01T00:00:00Z"}}, "ahead of this service's clock"),
        ):
            answer = await client.put(status, json=body, headers=WRITE)
            assert answer.status_code == 422, answer.text
            assert words in answer.text
