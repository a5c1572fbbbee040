"""The conversion worker's bounds, on real inputs: memory and CPU limits hold, a killed child is an error."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kbsearch.convert import ConversionError, ConversionLimits, ConversionWorker
from tests.support.formatfiles import pdf_pages

# A page BeautifulSoup turns into a tree of millions of nodes: ~4 MB of HTML needs > 500 MiB to convert.
HUGE_TABLE = ("<table>" + "<tr><td>cell text</td><td>more</td></tr>" * 100_000 + "</table>").encode()
# Cheap in memory, expensive in time: a few seconds of CPU at least on any machine of today.
LONG_TABLE = ("<table>" + "<tr><td>cell text</td><td>more</td></tr>" * 60_000 + "</table>").encode()


def refused(worker: ConversionWorker, fmt: str, data: bytes) -> ConversionError:
    with pytest.raises(ConversionError) as caught:
        worker.convert(fmt, data)
    return caught.value


def test_a_conversion_over_the_memory_limit_fails_alone_and_the_next_one_works():
    worker = ConversionWorker(ConversionLimits(memory_bytes=192 * 1_048_576, cpu_seconds=60, wall_seconds=120))
    error = refused(worker, "html", HUGE_TABLE)
    assert error.code == "CONVERSION_LIMIT_EXCEEDED" and "192 MiB" in error.message
    assert worker.convert("html", b"<p>small page</p>").text == "small page\n"


def test_a_conversion_over_the_cpu_limit_is_stopped():
    worker = ConversionWorker(ConversionLimits(memory_bytes=1024 * 1_048_576, cpu_seconds=1, wall_seconds=120))
    error = refused(worker, "html", LONG_TABLE)
    assert error.code == "CONVERSION_LIMIT_EXCEEDED" and "1 s of CPU" in error.message
    assert error.details == {"memoryBytes": 1024 * 1_048_576, "cpuSeconds": 1, "wallSeconds": 120}


def test_a_conversion_past_the_deadline_is_killed():
    worker = ConversionWorker(ConversionLimits(memory_bytes=1024 * 1_048_576, cpu_seconds=60, wall_seconds=0.5))
    error = refused(worker, "html", LONG_TABLE)
    assert error.code == "CONVERSION_LIMIT_EXCEEDED" and "longer than 0.5 s" in error.message
    assert not _alive(worker.last_pid)


def test_a_child_killed_from_outside_is_a_crash_error_not_a_hang():
    worker = ConversionWorker(ConversionLimits(memory_bytes=1024 * 1_048_576, cpu_seconds=60, wall_seconds=120))
    worker.convert("mdx", b"warm up the forkserver")
    outcome: list[BaseException] = []
    first_pid = worker.last_pid

    def run() -> None:
        try:
            worker.convert("html", LONG_TABLE)
        except ConversionError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    while worker.last_pid == first_pid:  # the child of this conversion has started
        time.sleep(0.01)
    os.kill(worker.last_pid, signal.SIGKILL)
    thread.join(timeout=60)
    [error] = outcome
    assert isinstance(error, ConversionError) and error.code == "CONVERSION_CRASHED"
    assert error.details == {"exitcode": -signal.SIGKILL}
    pages = worker.convert("pdf", pdf_pages("The worker goes on after a crash of one child."))
    assert "goes on after a crash" in pages.text


def _alive(pid: int | None) -> bool:
    try:
        os.kill(pid or 0, 0)
    except ProcessLookupError:
        return False
    return True
