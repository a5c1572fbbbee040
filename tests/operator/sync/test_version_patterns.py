"""Version patterns run on RE2: linear in the path, refused at spec time when RE2 cannot run them.

The time checks are hang detectors (a match takes microseconds; the limit is seconds).
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kboperator.errors import InvalidSpecError
from kboperator.sync.documents import version_of, version_pattern

HANG_S = 20.0  # a hang detector for a busy machine: every case here takes milliseconds
PROPERTIES = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def test_the_exponential_pattern_of_the_report_answers_at_once() -> None:
    """Regression: under Python's `re` 24 characters took 6 s, doubling with each one."""
    pattern = version_pattern(r"docs/(?P<version>(\w+)+)/")
    started = time.monotonic()
    assert version_of(pattern, "docs/" + "a" * 24 + "!") is None
    assert version_of(pattern, "docs/" + "a" * 100_000 + "!") is None
    assert time.monotonic() - started < HANG_S
    assert version_of(pattern, "docs/v1_4/intro.md") == "v1_4"


@pytest.mark.parametrize(
    "pattern",
    [
        r"docs/(?P<version>[^/]+)/\1",  # a backreference
        r"docs/(?P<version>[^/]+)(?=/)",  # lookahead
        r"(?<=docs/)(?P<version>[^/]+)/",  # lookbehind
        r"docs/(?P<version>(?>a+))/",  # an atomic group
    ],
)
def test_what_only_a_backtracking_engine_runs_is_an_invalid_spec(pattern: str) -> None:
    with pytest.raises(InvalidSpecError, match="not a regular expression RE2 runs"):
        version_pattern(pattern)


def test_the_version_group_and_the_length_are_still_required() -> None:
    with pytest.raises(InvalidSpecError, match="no group named 'version'"):
        version_pattern(r"docs/(?P<v>[^/]+)/")
    with pytest.raises(InvalidSpecError, match="1-512 characters"):
        version_pattern("(?P<version>a)" + "b" * 600)


def test_the_documented_layouts_still_work() -> None:
    pattern = version_pattern(r"content/docs/(?P<version>[^/]+)/")
    assert version_of(pattern, "content/docs/2.21/setup/ünïcode.md") == "2.21"
    assert version_of(pattern, "content/other/2.21/setup.md") is None
    docusaurus = version_pattern(r"versioned_docs/version-(?P<version>[0-9.]+)/")
    assert version_of(docusaurus, "versioned_docs/version-3.1/a.md") == "3.1"


# Regex-ish fragments, among them the nested quantifiers that backtrack exponentially in `re`.
atoms = st.sampled_from(["a", r"\w", ".", "[^/]", "[a-c]", r"\d", "(a|aa)", "(a|a?)", "(a*)", "(\\w+)"])
quantifiers = st.sampled_from(["", "+", "*", "?", "{1,3}", "+?", "*?"])


@st.composite
def regexish(draw: st.DrawFn, depth: int = 2) -> str:
    parts = draw(st.lists(st.tuples(atoms, quantifiers), min_size=1, max_size=4))
    body = "".join(atom + quantifier for atom, quantifier in parts)
    if depth and draw(st.booleans()):
        body = "(" + body + "|" + draw(regexish(depth - 1)) + ")" + draw(quantifiers)
    return body


@PROPERTIES
@given(inner=regexish(), prefix=st.sampled_from(["", "docs/", "^docs/"]), n=st.integers(1, 5000))
@example(inner=r"(\w+)+", prefix="docs/", n=5000)
@example(inner="(a|aa)+(a|a?)+", prefix="", n=5000)
def test_generated_patterns_never_hang_and_agree_with_re_on_short_paths(inner: str, prefix: str, n: int) -> None:
    pattern = prefix + "(?P<version>" + inner + ")/"
    compiled = version_pattern(pattern)  # every fragment above is one RE2 runs
    started = time.monotonic()
    for path in ("docs/" + "a" * n + "!", "docs/" + "a" * n + "/x.md", "a/" * n):
        version_of(compiled, path)
    assert time.monotonic() - started < HANG_S
    for short in ("docs/a/x.md", "docs/aaa/", "docs/ab1/x", "a/", "docs//"):
        # Short paths keep Python's backtracking cheap: the same matches, the same leftmost start.
        found = re.search(pattern, short)
        assert (version_of(compiled, short) is not None) is bool(found and found.group("version")), (pattern, short)
    assert version_of(compiled, "docs/a/x.md") == version_of(compiled, "docs/a/x.md")  # deterministic
