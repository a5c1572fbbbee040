"""A wall-clock deadline for pure-Python work in a worker thread.

A thread cannot be killed, but CPython can raise an exception in it asynchronously
(PyThreadState_SetAsyncExc): the thread sees it at its next bytecode boundary. The chunker is
pure Python (markdown-it-py and our own loops), so a document that would chunk for minutes stops
within moments of its deadline and frees its thread. Native code (a regular expression, the Rust
text splitter) finishes its current call first: the deadline then lands when it returns.

The exception derives from BaseException so that no `except Exception` in the interrupted code
swallows it, and it is only ever raised while `func` runs: the watchdog and the thread agree
under a lock, and the thread clears one that was set but not yet raised before it leaves.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DeadlineExceeded", "call_with_deadline"]

T = TypeVar("T")


class DeadlineExceeded(BaseException):
    """`func` ran past its deadline and was interrupted (or finished just as it passed)."""


class _Watch:
    def __init__(self, thread_id: int) -> None:
        self.lock = threading.Lock()
        self.thread_id = thread_id
        self.finished = False
        self.fired = False

    def fire(self) -> None:
        with self.lock:
            if self.finished:
                return
            self.fired = _set_async_exc(self.thread_id, DeadlineExceeded) == 1

    def finish(self) -> bool:
        with self.lock:
            self.finished = True
            return self.fired


def call_with_deadline(seconds: float, func: Callable[..., T], *args: object) -> T:
    """`func(*args)` in this thread, interrupted with DeadlineExceeded after `seconds` of wall time."""
    watch = _Watch(threading.get_ident())
    timer = threading.Timer(seconds, watch.fire)
    timer.daemon = True
    fired = False
    try:
        timer.start()
        try:
            result = func(*args)
        finally:
            timer.cancel()
            if watch.finish():
                fired = True
                _set_async_exc(watch.thread_id, None)  # one set but not raised yet must not land later
    except DeadlineExceeded:
        fired = True
    if fired:
        raise DeadlineExceeded(f"still running after {seconds:g} s")
    return result


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> int:
    """Raise `exc` in the thread at its next bytecode boundary; None clears a pending one."""
    pending = ctypes.py_object(exc) if exc is not None else None
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), pending))
