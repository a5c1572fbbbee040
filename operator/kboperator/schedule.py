"""Sync schedules: `@every <duration>`, cron descriptors and 5-field cron, all in UTC."""

from __future__ import annotations

import datetime
import random
import re
from dataclasses import dataclass

from croniter import croniter

from kboperator.errors import InvalidSpecError

_EVERY = re.compile(r"^@every\s+((?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h))+)$")
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def utcnow() -> datetime.datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc)


def format_time(when: datetime.datetime) -> str:
    """RFC 3339 with a Z, to the second, as Kubernetes writes times."""
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    def parse(cls, text: str) -> Schedule:
        """Parse a spec.schedule; InvalidSpecError says what is wrong."""
        text = " ".join(text.split())
        every = _EVERY.match(text)
        if every:
            seconds = parse_duration(every.group(1))
            if seconds <= 0:
                raise InvalidSpecError(f"schedule {text!r}: the interval must be positive")
            return cls(text, seconds)
        if text in _DESCRIPTORS or (len(text.split(" ")) == 5 and croniter.is_valid(text)):
            return cls(text)
        raise InvalidSpecError(
            f"schedule {text!r} is neither '@every <duration>' nor a 5-field cron expression"
        )

    def next_after(self, when: datetime.datetime) -> datetime.datetime:
        """The first planned time strictly after `when`."""
        if self.interval is not None:
            return when + datetime.timedelta(seconds=self.interval)
        return croniter(self.text, when.astimezone(datetime.timezone.utc)).get_next(datetime.datetime)


def jittered(seconds: float, fraction: float = 0.1) -> float:
    """A delay stretched by up to `fraction`, so that retries of many sources do not align."""
    return seconds * (1 + random.uniform(0, fraction))
