"""Sync schedules: @every durations, descriptors, 5-field cron, and times as Kubernetes writes them."""

from __future__ import annotations

import datetime

import pytest

from kboperator.errors import InvalidSpecError
from kboperator.schedule import Schedule, format_time, parse_duration, parse_time

NOON = datetime.datetime(2024, 1, 1, 12, 30, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("text", "seconds"), [("1h", 3600), ("1h30m", 5400), ("45s", 45), ("500ms", 0.5), ("1.5m", 90)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert Schedule.parse(f"@every {text}").next_after(NOON) == NOON + datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@hourly", datetime.datetime(2024, 1, 1, 13, 0, tzinfo=datetime.UTC)),
        ("@daily", datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.UTC)),
        ("*/20 * * * *", datetime.datetime(2024, 1, 1, 12, 40, tzinfo=datetime.UTC)),
        ("0  3 * * 1-5", datetime.datetime(2024, 1, 2, 3, 0, tzinfo=datetime.UTC)),
    ],
)
def test_cron(text: str, expected: datetime.datetime) -> None:
    assert Schedule.parse(text).next_after(NOON) == expected


@pytest.mark.parametrize(
    "text", ["", "@every", "@every 0s", "@every 1d", "hourly", "* * * *", "* * * * * *", "61 * * * *"]
)
def test_invalid_schedules_are_spec_errors(text: str) -> None:
    with pytest.raises(InvalidSpecError, match="schedule"):
        Schedule.parse(text)


def test_times_round_trip_to_the_second_in_utc() -> None:
    local = NOON.astimezone(datetime.timezone(datetime.timedelta(hours=2))).replace(microsecond=123)
    assert format_time(local) == "2024-01-01T12:30:00Z"
    assert parse_time("2024-01-01T12:30:00Z") == NOON
    assert parse_time(None) is None and parse_time("yesterday") is None


@pytest.mark.parametrize(
    ("text", "minimum", "interval"),
    [
        ("@every 1ms", 60, "0.001s"),
        ("@every 30s", 60, "30s"),
        ("*/5 * * * *", 600, "300s"),
        ("0,1 * * * *", 120, "60s"),  # uneven: the shortest gap counts, wherever it falls
        ("58 23 * * *", 0, None),  # below any minimum only when the minimum is above it
    ],
)
def test_schedules_firing_more_often_than_the_minimum_are_spec_errors(
    text: str, minimum: float, interval: str | None
) -> None:
    if interval is None:
        assert Schedule.parse(text, min_interval=minimum).text == text
        return
    with pytest.raises(InvalidSpecError) as caught:
        Schedule.parse(text, min_interval=minimum)
    assert f"every {interval}" in str(caught.value) and f"{minimum:g}s" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "minimum"), [("@every 1m", 60), ("* * * * *", 60), ("@hourly", 3600), ("0 9,17 * * 1-5", 3600)]
)
def test_schedules_at_or_above_the_minimum_are_accepted(text: str, minimum: float) -> None:
    assert Schedule.parse(text, min_interval=minimum).text == text
