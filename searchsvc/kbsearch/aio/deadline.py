"""A CPU-time budget for pure-Python work in a worker thread.

A thread cannot be killed, but CPython can raise an exception in it asynchronously
(PyThreadState_SetAsyncExc): the thread sees it at its next bytecode boundary. The chunker is
pure Python (markdown-it-py and our own loops), so a document that would chunk for minutes stops
within moments of its budget and frees its thread. Native code (a regular expression, the Rust
text splitter) finishes its current call first: the exception then lands when it returns.

The budget counts the thread's own CPU time (its POSIX thread CPU clock), not wall time: on a
loaded machine a document waits for the CPU without being charged for it, so the same document
gets the same answer whatever else runs. A watchdog thread sleeps for the budget still unused (CPU
time never runs faster than wall time), reads the clock and fires once it is spent.

The exception derives from BaseException so that no `except Exception` in the interrupted code
swallows it, and it is only ever raised while `func` runs: the watchdog and the thread agree
under a lock, and the thread clears one that was set but not yet raised before it leaves.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DeadlineExceeded", "call_with_deadline"]

T = TypeVar("T")


class DeadlineExceeded(BaseException):
    """`func` used up its CPU budget and was interrupted (or finished just as it did)."""


class _Watch(threading.Thread):
    def __init__(self, thread_id: int, seconds: float) -> None:
        super().__init__(name="cpu-budget", daemon=True)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread_id = thread_id
        self.clock = time.pthread_getcpuclockid(thread_id)
        self.until = time.clock_gettime(self.clock) + seconds
        self.fired = False

    def run(self) -> None:
        while not self.done.wait(max(0.0, self.until - time.clock_gettime(self.clock))):
            if time.clock_gettime(self.clock) >= self.until:
                with self.lock:
                    if not self.done.is_set():
                        self.fired = _set_async_exc(self.thread_id, DeadlineExceeded) == 1
                return

    def finish(self) -> bool:
        with self.lock:
            self.done.set()
            return self.fired


def call_with_deadline(seconds: float, func: Callable[..., T], *args: object) -> T:
    """`func(*args)` in this thread, interrupted with DeadlineExceeded after `seconds` of its CPU time."""
    watch = _Watch(threading.get_ident(), seconds)
    fired = False
    try:
        watch.start()
        try:
            result = func(*args)
        finally:
            if watch.finish():
                fired = True
                _set_async_exc(watch.thread_id, None)  # one set but not raised yet must not land later
    except DeadlineExceeded:
        fired = True
    if fired:
        raise DeadlineExceeded(f"still running after {seconds:g} s of CPU time")
    return result


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> int:
    """Raise `exc` in the thread at its next bytecode boundary; None clears a pending one."""
    pending = ctypes.py_object(exc) if exc is not None else None
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), pending))
