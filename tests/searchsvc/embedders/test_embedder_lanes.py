"""TurnLock: a waiting query goes before waiting document runs, and each line keeps its order."""

from __future__ import annotations

import threading
import time

from kbsearch.embedders.lanes import TurnLock


def waiting(lock: TurnLock, count: int, timeout: float = 30) -> None:
    """Until `count` threads wait in the lock's lines."""
    end = time.monotonic() + timeout
    while sum(len(line) for line in lock._lines.values()) < count:
        assert time.monotonic() < end, "the threads never queued"
        time.sleep(0.001)


def test_queries_go_first_in_arrival_order_then_documents_in_arrival_order():
    lock = TurnLock()
    order: list[str] = []
    threads: list[threading.Thread] = []

    def take(name: str, query: bool) -> None:
        with lock.hold(query=query):
            order.append(name)

    with lock.hold(query=False):  # a document run in progress
        for n, (name, query) in enumerate([("doc 1", False), ("query 1", True), ("doc 2", False), ("query 2", True)]):
            thread = threading.Thread(target=take, args=(name, query))
            thread.start()
            threads.append(thread)
            waiting(lock, n + 1)
    for thread in threads:
        thread.join(timeout=30)
    assert order == ["query 1", "query 2", "doc 1", "doc 2"]


def test_a_document_that_keeps_taking_the_lock_lets_a_waiting_query_in_at_the_next_run():
    lock = TurnLock()
    runs: list[str] = []
    query_queued = threading.Event()

    def document() -> None:
        for run in range(50):
            with lock.hold(query=False):
                runs.append(f"run {run}")
                if run == 2:
                    query_queued.wait(timeout=30)
                    waiting(lock, 1)

    writer = threading.Thread(target=document)
    writer.start()

    def query() -> None:
        query_queued.set()
        with lock.hold(query=True):
            runs.append("query")

    asker = threading.Thread(target=query)
    asker.start()
    writer.join(timeout=30)
    asker.join(timeout=30)
    assert runs.index("query") == 3  # straight after the run in progress, not after the document
