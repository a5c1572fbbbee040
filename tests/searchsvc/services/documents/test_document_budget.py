"""A document past its budget (chunks, characters of chunks, seconds of chunking) gets 422 DOCUMENT_TOO_COMPLEX
naming the limit, and nothing of it is stored: a new document stays absent, a replaced one keeps its old text.
A chunking child that dies answers 503 CHUNKER_CRASHED, and its pool is replaced."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time

import pytest

from kbsearch.aio.deadline import DeadlineExceeded, call_with_deadline
from kbsearch.aio.pool import WorkPool
from kbsearch.chunker import MarkdownChunker
from kbsearch.deps import context_of
from kbsearch.errors import OverloadedError, UnavailableError
from kbsearch.services.access.scope import Caller, SourceScope
from kbsearch.services.documents.budget import writer_of
from kbsearch.services.documents.chunk_processes import ChunkProcesses
from tests.searchsvc.api_fixtures import counts, put, sections
from tests.support.hashing import HashingEmbedder
from tests.support.service import running_service


async def refused(client, uri: str, content: str) -> dict:
    response = await client.put(
        "/api/v1/documents", json={"uri": uri, "content": content, "metadata": {"sourceIdentifier": "team-a/docs"}}
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "DOCUMENT_TOO_COMPLEX"
    return error


async def absent(client, uri: str) -> bool:
    return (await client.get("/api/v1/documents/text", params={"uri": uri})).status_code == 404


async def test_too_many_chunks_is_refused_with_nothing_stored(tmp_path):
    async with running_service("edge", tmp_path / "data", max_document_chunks=3) as client:
        error = await refused(client, "a/many.md", sections(10))
        assert error["details"]["limit"] == "chunks" and error["details"]["max"] == 3
        assert error["details"]["chunks"] > 3
        assert await absent(client, "a/many.md")
        assert await counts(client) == (0, 0)


async def test_a_refused_replacement_leaves_the_stored_version_whole(tmp_path):
    async with running_service("edge", tmp_path / "data", max_document_chunk_chars=3000) as client:
        first = await put(client, "a/doc.md", sections(2, tag="old"), sourceIdentifier="team-a/docs")
        error = await refused(client, "a/doc.md", sections(12, tag="new"))
        assert error["details"]["limit"] == "chunkChars" and error["details"]["chunkChars"] > 3000
        text = (await client.get("/api/v1/documents/text", params={"uri": "a/doc.md"})).json()["text"]
        assert "section0old" in text and "new" not in text
        assert await counts(client) == (1, first["chunks"])


async def test_chunking_past_its_deadline_is_refused_and_the_service_goes_on(tmp_path):
    # 1 MiB of markdown takes far more than a millisecond of CPU to chunk on any machine.
    big = sections(1500)
    async with running_service("edge", tmp_path / "data", chunk_seconds=0.001) as client:
        error = await refused(client, "a/big.md", big)
        assert error["details"] == {"limit": "chunkSeconds", "max": 0.001}
        assert await absent(client, "a/big.md")
        assert (await client.get("/readyz")).status_code == 200


def test_the_cpu_budget_interrupts_a_pure_python_loop_and_leaves_the_thread_usable():
    def spin() -> None:
        while True:
            pass

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        call_with_deadline(0.2, spin)
    assert time.monotonic() - started < 20  # it ends; the loop alone never would
    assert call_with_deadline(0.05, time.sleep, 0.5) is None  # waiting costs no CPU time: not interrupted
    # Quick calls whose budget runs out as they return: no exception lands after the call.
    for _ in range(500):
        with contextlib.suppress(DeadlineExceeded):
            call_with_deadline(0.0001, sum, range(1000))
    assert [time.sleep(0) for _ in range(100)] and call_with_deadline(5, lambda: 41 + 1) == 42


async def test_one_writers_backlog_takes_one_slot_and_another_writer_runs_at_once():
    pool = WorkPool(slots=2, share=1, per_writer=8)
    release = threading.Event()
    running: list[str] = []

    def work(name: str) -> str:
        running.append(name)
        release.wait(30)
        return name

    backlog = [asyncio.create_task(pool.run("team-a", work, f"a{n}")) for n in range(5)]
    while not running:  # noqa: ASYNC110 - a list a thread fills, not an event
        await asyncio.sleep(0.01)
    other = asyncio.create_task(pool.run("team-b", work, "b0"))
    while "b0" not in running:  # noqa: ASYNC110 - b's work starts although a has five waiting
        await asyncio.sleep(0.01)
    assert running == ["a0", "b0"]
    release.set()
    assert await asyncio.gather(*backlog, other) == ["a0", "a1", "a2", "a3", "a4", "b0"]


async def test_a_writer_past_its_queue_gets_429_too_many_writes():
    pool = WorkPool(slots=1, share=1, per_writer=2)
    release = threading.Event()
    held = [asyncio.create_task(pool.run("team-a", release.wait, 30)) for _ in range(2)]
    await asyncio.sleep(0.05)
    with pytest.raises(OverloadedError) as refusal:
        await pool.run("team-a", release.wait, 30)
    assert refusal.value.code == "TOO_MANY_WRITES" and refusal.value.retryable
    release.set()
    await asyncio.gather(*held)


def test_the_writer_is_the_scoped_token_or_the_sources_team():
    operator = Caller("operator", True, SourceScope.everything())
    assert writer_of(operator, "team-a/docs") == writer_of(operator, "team-a/handbook")
    assert writer_of(operator, "team-a/docs") != writer_of(operator, "team-b/docs")
    scoped = Caller("team-a", True, SourceScope(("team-a*",)))
    # A glob scope cannot buy more shares by writing under many source names.
    assert writer_of(scoped, "team-a1/x") == writer_of(scoped, "team-a2/x")


async def test_one_teams_queued_writes_past_its_bound_get_429_and_another_teams_write_goes_through(tmp_path):
    gate = threading.Event()

    class GatedEmbedder(HashingEmbedder):
        def embed_documents(self, texts):
            gate.wait(timeout=300)
            return super().embed_documents(texts)

    def body(uri: str, source: str) -> dict:
        return {"uri": uri, "content": f"words of {uri}", "metadata": {"sourceIdentifier": source}}

    settings = {"max_pending_writes": 10, "max_pending_writes_per_writer": 2}
    async with running_service("edge", tmp_path / "d", embedder=GatedEmbedder(), **settings) as client:
        held = [asyncio.create_task(client.put("/api/v1/documents", json=body(f"a{n}", "team-a/docs"))) for n in (0, 1)]
        while context_of(client.app).documents._pending < 2:  # noqa: ASYNC110 - a counter, not an event
            await asyncio.sleep(0.01)
        refused = await client.put("/api/v1/documents", json=body("a2", "team-a/handbook"))  # the same team
        other = asyncio.create_task(client.put("/api/v1/documents", json=body("b0", "team-b/docs")))
        while context_of(client.app).documents._pending < 3:  # noqa: ASYNC110 - team b's write was taken
            await asyncio.sleep(0.01)
        gate.set()
        assert [r.status_code for r in await asyncio.gather(*held, other)] == [200, 200, 200]
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "TOO_MANY_WRITES" and refused.json()["error"]["details"]["limit"] == 2


def test_a_killed_chunking_child_answers_503_and_the_next_document_is_chunked():
    processes = ChunkProcesses(MarkdownChunker(500, 800), 1)
    try:
        assert processes.chunk(5, "# One\n\nwords", "one.md").chunks[0].text == "# One\n\nwords"
        outcome: list[BaseException] = []

        def long_chunking() -> None:
            try:
                processes.chunk(600, "- a\n" * 400_000, "long.md")
            except UnavailableError as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=long_chunking)
        waiting.start()
        time.sleep(1)
        for pid in list(processes._pool._processes):  # the pool's children (the executor's own map)
            os.kill(pid, signal.SIGKILL)
        waiting.join(60)
        assert outcome and outcome[0].code == "CHUNKER_CRASHED" and outcome[0].status_code == 503
        assert processes.chunk(5, "# Two\n\nwords", "two.md").title == "Two"  # a new pool took its place
    finally:
        processes.close()
