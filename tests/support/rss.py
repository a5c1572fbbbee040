"""A process's resident memory (VmRSS) from /proc, now and at its peak while something runs."""

from __future__ import annotations

import threading
from pathlib import Path


def rss_kib(pid: int) -> int | None:
    """VmRSS of `pid` in KiB; None for a process that has none (a zombie)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


class PeakRss(threading.Thread):
    """Samples VmRSS of `pid` every `interval_s` until `done` is set; `peak_kib` is the largest seen."""

    def __init__(self, pid: int, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval_s, self.peak_kib = pid, interval_s, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid) or 0)
            self.done.wait(self.interval_s)
