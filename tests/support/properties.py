"""Hypothesis settings for the property tests of parsers of untrusted input, and a hang detector.

`CI=true` (what CI sets) derandomizes: the examples then follow from the test alone, so a run is
reproducible. Elsewhere the examples are random, so each developer's run explores new ones. No
deadline: a loaded machine makes single examples slow; hangs are caught by `within` instead.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

from hypothesis import HealthCheck, settings

T = TypeVar("T")

settings.register_profile(
    "kb-ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
settings.register_profile(
    "kb-dev",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
PROFILE = settings.get_profile("kb-ci" if os.environ.get("CI", "").lower() == "true" else "kb-dev")


def properties(max_examples: int) -> settings:
    """The profile for this run, with `max_examples` examples."""
    return settings(PROFILE, max_examples=max_examples)


def within(seconds: float, call: Callable[[], T]) -> T:
    """`call()`, failing the test if it has not returned after `seconds` (a hang detector, not a timing test).

    It runs in a daemon thread: a call that never returns is left behind instead of stalling the run.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread as it is
            error.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"did not finish within {seconds:.0f} s: a hang or superlinear work")
    if error:
        raise error[0]
    return result[0]
