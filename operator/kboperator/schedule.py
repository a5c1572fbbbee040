"""Sync schedules: `@every <duration>`, cron descriptors and 5-field cron, all in UTC."""

from __future__ import annotations

import datetime
import functools
import math
import re
from dataclasses import dataclass

from croniter import croniter

from kboperator.errors import InvalidSpecError

_EVERY = re.compile(r"^@every\s+((?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h))+)$")
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
# Cron gaps are measured from a fixed instant, so a spec cannot turn valid or invalid with the
# clock; a Monday at midnight, a second early so that its own minute counts.
_CRON_REFERENCE = datetime.datetime(2001, 1, 1, tzinfo=datetime.UTC) - datetime.timedelta(seconds=1)
_CRON_SAMPLES = 1500
_CRON_SPAN = datetime.timedelta(days=32)  # every hour, weekday and day-of-month pattern recurs


def utcnow() -> datetime.datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.datetime.now(datetime.UTC)


def format_time(when: datetime.datetime) -> str:
    """RFC 3339 with a Z, to the second, as Kubernetes writes times."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    """The inverse of format_time; None for absent or unreadable values."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as 90s, 15m or 1h30m."""
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(text))


@dataclass(frozen=True)
class Schedule:
    """When syncs are due: a fixed interval, or a cron expression."""

    text: str
    interval: float | None = None

    @classmethod
    def parse(cls, text: str, *, min_interval: float = 0.0) -> Schedule:
        """Parse a spec.schedule; InvalidSpecError says what is wrong.

        A schedule that runs more often than every `min_interval` seconds is refused: each run
        fetches and writes status, so a tiny interval is a busy loop against git and the API.
        """
        text = " ".join(text.split())
        every = _EVERY.match(text)
        if every:
            seconds = parse_duration(every.group(1))
            if seconds <= 0:
                raise InvalidSpecError(f"schedule {text!r}: the interval must be positive")
            schedule = cls(text, seconds)
        elif text in _DESCRIPTORS or (len(text.split(" ")) == 5 and croniter.is_valid(text)):
            schedule = cls(text)
        else:
            raise InvalidSpecError(f"schedule {text!r} is neither '@every <duration>' nor a 5-field cron expression")
        gap = schedule.interval if schedule.interval is not None else _shortest_cron_gap(text, min_interval)
        if gap < min_interval:
            raise InvalidSpecError(
                f"schedule {text!r} runs every {gap:g}s, more often than this operator allows: "
                f"at least {min_interval:g}s (KBOPERATOR_MIN_SYNC_INTERVAL_SECONDS)"
            )
        return schedule

    def next_after(self, when: datetime.datetime) -> datetime.datetime:
        """The first planned time strictly after `when`."""
        if self.interval is not None:
            return when + datetime.timedelta(seconds=self.interval)
        return croniter(self.text, when.astimezone(datetime.UTC)).get_next(datetime.datetime)


@functools.lru_cache(maxsize=256)  # the timer re-parses every spec on each call
def _shortest_cron_gap(text: str, enough: float) -> float:
    """The shortest gap between two consecutive runs, or any gap already below `enough`."""
    if enough <= 60:
        return 60.0  # cron's resolution is the minute: no two runs are closer
    runs = croniter(text, _CRON_REFERENCE)
    first = previous = runs.get_next(datetime.datetime)
    shortest = math.inf
    for _ in range(_CRON_SAMPLES):
        current = runs.get_next(datetime.datetime)
        shortest = min(shortest, (current - previous).total_seconds())
        if shortest < enough or current - first > _CRON_SPAN:
            break
        previous = current
    return shortest
