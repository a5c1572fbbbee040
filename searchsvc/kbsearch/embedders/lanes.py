"""A lock taken in turns: queries in the order they came, all before any waiting document run."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class TurnLock:
    """One holder at a time; waiting queries go first, in arrival order, then documents, in arrival order.

    A call embeds in runs that each take the lock, so a waiting query waits for the run in
    progress and the queries ahead of it, never for the rest of another caller's texts.
    threading.Lock makes no such promise: the thread that releases it usually takes it straight back.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held = False
        self._lines: dict[bool, deque[object]] = {True: deque(), False: deque()}  # by `query`

    @contextmanager
    def hold(self, *, query: bool) -> Iterator[None]:
        me = object()
        line, queries = self._lines[query], self._lines[True]
        with self._changed:
            line.append(me)
            try:
                while self._held or line[0] is not me or (not query and queries):
                    self._changed.wait()
            finally:
                line.remove(me)
                self._changed.notify_all()  # the next in line may be free to go
            self._held = True
        try:
            yield
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()
