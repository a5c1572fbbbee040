"""ThrottledProgress: snapshots on each stage, then at most every N documents or every few seconds."""

from __future__ import annotations

import asyncio
import datetime
import itertools

import pytest

from kboperator.sync.progress import DocumentDone, Phase, Planned
from kboperator.sync.reporting import Snapshot, ThrottledProgress

STARTED = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A sink that keeps what it was sent; `gate` holds each send until the test opens it."""

    def __init__(self, *, gated: bool = False, fail: bool = False) -> None:
        self.seen: list[Snapshot] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.fail = fail

    async def __call__(self, snapshot: Snapshot) -> None:
        await self.gate.wait()
        self.seen.append(snapshot)
        if self.fail:
            raise RuntimeError("the API said no")


def done(path: str, action: str = "ingest") -> DocumentDone:
    return DocumentDone("ns/src", path, action, "skipped" if action == "read" else "added")  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_each_stage_is_sent_then_documents_only_every_n() -> None:
    sink, clock = Recorder(), Clock()
    progress = ThrottledProgress("ns/src", [sink], started_at=STARTED, every=10, interval_s=30.0, clock=clock)
    progress(Phase("ns/src", "fetching"))
    await settle()
    progress(Phase("ns/src", "reading"))
    await settle()
    progress(Planned("ns/src", True, 126, 0, 1))
    progress(done("binary.png", "read"))  # skipped while reading: not one of the 126
    await settle()
    for n in range(25):
        clock.now += 0.2
        progress(done(f"doc{n}.md"))
        await settle()
    assert [(s.stage, s.done, s.total) for s in sink.seen] == [
        ("fetching", 0, None),
        ("reading", 0, None),
        ("syncing", 0, 126),
        ("syncing", 10, 126),
        ("syncing", 20, 126),
    ]
    assert sink.seen[-1].summary == "20/126" and sink.seen[-1].message == "syncing 20 of 126 documents"
    assert sink.seen[0].summary == "fetching" and sink.seen[0].started_at == STARTED
    final = await progress.close()
    assert final is not None and (final.done, final.total) == (25, 126)  # the caller writes it


async def test_a_slow_trickle_is_sent_every_interval_not_per_document() -> None:
    sink, clock = Recorder(), Clock()
    progress = ThrottledProgress("ns/src", [sink], started_at=STARTED, every=1000, interval_s=5.0, clock=clock)
    progress(Planned("ns/src", False, 40, 3, 0))
    await settle()
    for n in range(40):  # one document a second
        clock.now += 1.0
        progress(done(f"doc{n}.md"))
        await settle()
    assert [s.done for s in sink.seen] == [0, 5, 10, 15, 20, 25, 30, 35, 40]
    assert progress.sends == 9  # 40 documents, 9 writes


async def test_a_fast_sync_is_written_at_most_once_per_min_gap() -> None:
    sink, clock = Recorder(), Clock()
    progress = ThrottledProgress("ns/src", [sink], started_at=STARTED, every=100, interval_s=5.0, clock=clock)
    progress(Planned("ns/src", True, 3000, 0, 0))
    await settle()
    for n in range(3000):  # a thousand documents a second
        clock.now += 0.001
        progress(done(f"doc{n}.md"))
        await settle()
    sent = [s.done for s in sink.seen]
    assert len(sent) <= 4 and sent[0] == 0  # not 30 sends: one a second
    assert all(later - earlier >= 999 for earlier, later in itertools.pairwise(sent))


async def test_sends_never_overlap_and_a_busy_sink_gets_the_latest_counts() -> None:
    sink, clock = Recorder(gated=True), Clock()
    progress = ThrottledProgress("ns/src", [sink], started_at=STARTED, every=1, interval_s=0.0, clock=clock)
    progress(Planned("ns/src", True, 500, 0, 0))
    await settle()
    for n in range(500):  # all while the first send is held
        progress(done(f"doc{n}.md"))
    await settle()
    sink.gate.set()
    await settle()
    # The first send (0 done), then the one folded send of everything that fell due meanwhile.
    assert [s.done for s in sink.seen] == [0, 500]
    final = await progress.close()
    assert final is not None and final.done == 500


async def test_close_waits_for_the_send_in_flight_and_starts_no_other() -> None:
    sink, clock = Recorder(gated=True), Clock()
    progress = ThrottledProgress("ns/src", [sink], started_at=STARTED, every=1, interval_s=0.0, clock=clock)
    progress(Planned("ns/src", True, 2, 0, 0))
    await settle()
    progress(done("a.md"))
    progress(done("b.md"))
    closing = asyncio.ensure_future(progress.close())
    await settle()
    assert not closing.done()  # the held send is awaited
    sink.gate.set()
    final = await closing
    assert [s.done for s in sink.seen] == [0]  # the outcome's writer writes 2 of 2, not a late snapshot
    assert final is not None and final.done == 2


async def test_a_failing_sink_never_fails_the_sync_and_others_still_hear(caplog: pytest.LogCaptureFixture) -> None:
    broken, good, clock = Recorder(fail=True), Recorder(), Clock()
    progress = ThrottledProgress("ns/src", [broken, good], started_at=STARTED, every=1, min_gap_s=0, clock=clock)
    progress(Planned("ns/src", True, 3, 0, 0))
    for n in range(3):
        await settle()
        progress(done(f"doc{n}.md"))
    await settle()
    await progress.close()
    assert [s.done for s in good.seen] == [0, 1, 2, 3]
    assert len(broken.seen) == 4  # asked again each time
    assert sum("progress not reported" in r.message for r in caplog.records) == 1  # logged once per sync


async def test_a_sync_with_nothing_to_do_sends_nothing() -> None:
    sink = Recorder()
    progress = ThrottledProgress("ns/src", [sink], started_at=STARTED)
    assert await progress.close() is None
    assert sink.seen == []


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="every"):
        ThrottledProgress("ns/src", [], started_at=STARTED, every=0)
    with pytest.raises(ValueError, match="min_gap_s"):
        ThrottledProgress("ns/src", [], started_at=STARTED, min_gap_s=-1)


async def test_an_api_refusal_is_logged_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    # kubernetes' ApiException prints its headers and body on lines of their own: unstamped lines a log
    # reader cannot place (the kube tests' RBAC check reads each 403 line by its time stamp).
    from kubernetes.client.exceptions import ApiException

    async def refused(_: object) -> None:
        raise ApiException(status=403, reason="Forbidden", http_resp=None)

    progress = ThrottledProgress("ns/src", [refused], started_at=STARTED, every=1, min_gap_s=0, clock=Clock())
    progress(Planned("ns/src", True, 1, 0, 0))
    await settle()
    await progress.close()
    (line,) = [r.getMessage() for r in caplog.records if "progress not reported" in r.message]
    assert "\n" not in line and line.endswith("ApiException 403 Forbidden")
