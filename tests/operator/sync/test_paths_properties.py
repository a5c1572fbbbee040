"""Generated globs and paths: matching terminates in time linear in the input, agrees with a reference
matcher (fnmatch per segment, the documented glob syntax) and gives the same answer every time.

Globs are generated as tokens, then rendered twice: as the glob text PathFilter parses, and as the
reference's own form. The time checks are hang detectors (a match takes microseconds; the limit is
seconds), never a performance figure.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kboperator.errors import InvalidSpecError
from kboperator.sync.paths import MAX_GLOB, MAX_GLOBS, PathFilter

PROPERTIES = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
HANG_S = 20.0  # a hang detector for a busy machine: every case here takes milliseconds

LITERALS = "ab.-_ü"
SPECIALS = "*?[]{},!\\"


@dataclass(frozen=True)
class Token:
    kind: str  # lit, esc, star, any, class, brace
    text: str = ""
    negate: bool = False
    alternatives: tuple[str, ...] = ()

    def glob(self) -> str:
        if self.kind == "lit":
            return self.text
        if self.kind == "esc":
            return "\\" + self.text
        if self.kind == "star":
            return "*"
        if self.kind == "any":
            return "?"
        if self.kind == "class":
            return "[" + ("!" if self.negate else "") + self.text + "]"
        return "{" + ",".join(self.alternatives) + "}"

    def fnmatch_forms(self) -> list[str]:
        """The token in fnmatch's syntax; a brace gives one form per alternative."""
        if self.kind in ("lit", "esc"):
            return [f"[{self.text}]" if self.text in "*?[" else self.text]
        if self.kind == "brace":
            return list(self.alternatives)
        return [self.glob()]


Segment = tuple[Token, ...] | None  # None: a `**` segment


def _class_body() -> st.SearchStrategy[str]:
    member = st.sampled_from(["a", "b", "c", ".", "a-c", "a-b", "b-c", "ü"])
    return st.lists(member, min_size=1, max_size=3).map("".join).filter(lambda body: "--" not in body)


tokens = st.one_of(
    st.builds(Token, st.just("lit"), st.sampled_from(LITERALS)),
    st.builds(Token, st.just("esc"), st.sampled_from(SPECIALS)),
    st.builds(Token, st.just("star")),
    st.builds(Token, st.just("any")),
    st.builds(Token, st.just("class"), _class_body(), st.booleans()),
    st.builds(
        Token,
        st.just("brace"),
        alternatives=st.lists(st.text("ab.", max_size=2), min_size=1, max_size=3).map(tuple),
    ),
)


def _valid_segment(segment: tuple[Token, ...]) -> bool:
    text = "".join(token.glob() for token in segment)
    return "**" not in text and text not in (".", "..")


segments = st.one_of(
    st.just(None),
    st.lists(tokens, min_size=1, max_size=4).map(tuple).filter(_valid_segment),
)


@dataclass(frozen=True)
class Glob:
    segments: tuple[Segment, ...]
    trailing_slash: bool

    @property
    def text(self) -> str:
        body = "/".join("**" if s is None else "".join(t.glob() for t in s) for s in self.segments)
        return body + ("/" if self.trailing_slash else "")


globs = st.builds(Glob, st.lists(segments, min_size=1, max_size=5).map(tuple), st.booleans())
# "\udce9": a byte of a path that is not UTF-8, as git's paths arrive (surrogateescape).
path_segments = st.text(LITERALS + SPECIALS + "c\n\udce9", min_size=1, max_size=4)
paths = st.lists(path_segments, min_size=1, max_size=6).map("/".join)


def reference(glob: Glob, path: str) -> bool:
    """The documented semantics, built from the tokens: fnmatch per segment (braces expanded);
    `**` is any number of segments, a trailing one (or a trailing '/') one or more."""
    wanted: list[list[str] | None] = []
    for segment in glob.segments:
        if segment is None:
            wanted.append(None)
        else:
            forms = itertools.product(*(token.fnmatch_forms() for token in segment))
            wanted.append(["".join(form) for form in forms])
    if glob.trailing_slash:
        wanted.append(None)
    parts = path.split("/")

    @functools.cache
    def match(g: int, p: int) -> bool:
        if g == len(wanted):
            return p == len(parts)
        options = wanted[g]
        if options is None:
            first = p + 1 if g == len(wanted) - 1 else p  # a trailing `**` takes at least one segment
            return any(match(g + 1, q) for q in range(first, len(parts) + 1))
        if p == len(parts):
            return False
        return any(fnmatch.fnmatchcase(parts[p], option) for option in options) and match(g + 1, p + 1)

    return match(0, 0)


@PROPERTIES
@given(glob=globs, path=paths)
@example(glob=Glob((None, None, None), False), path="a")
@example(glob=Glob(((Token("class", "a-c", True),),), False), path="/")
def test_a_glob_matches_as_the_reference_does(glob: Glob, path: str) -> None:
    try:
        path_filter = PathFilter([glob.text])
    except InvalidSpecError as exc:
        pytest.fail(f"a glob of the documented syntax was refused: {glob.text!r}: {exc}")
    assert path_filter.matches(path) is reference(glob, path), (glob.text, path)
    assert path_filter.matches(path) is path_filter.matches(path)  # deterministic


hostile_segments = st.lists(st.sampled_from(["**", "*", "*a*", "*?*", "a", "[!b]*", "{a,aa}*"]), min_size=1)


@PROPERTIES
@given(
    parts=hostile_segments.map(lambda s: s[:100]),
    depth=st.integers(1, 2000),
    tail=st.sampled_from(["a.md", "b", "", "x!"]),
)
def test_matching_terminates_quickly_on_hostile_globs(parts: list[str], depth: int, tail: str) -> None:
    glob = "/".join(parts)[:MAX_GLOB].rstrip("/") or "**"
    try:
        path_filter = PathFilter([glob], [glob + "/b"] if len(glob) < MAX_GLOB - 2 else [])
    except InvalidSpecError:
        return  # a cut that left a malformed glob: refused at spec time, which is the point
    started = time.monotonic()
    for path in ("a/" * depth + tail, "a" * depth * 2 + tail, ("a" * 7 + "/") * (depth // 4 + 1)):
        path_filter.matches(path)
    assert time.monotonic() - started < HANG_S


def test_twelve_consecutive_globstars_match_at_once() -> None:
    """Regression: twelve `**` backtracked exponentially under Python's `re` and froze the operator."""
    path_filter = PathFilter(["/".join(["**"] * 12) + "/x.md"], ["/".join(["**"] * 12) + "/y"])
    started = time.monotonic()
    assert not path_filter.matches("a/" * 30 + "z.md")
    assert path_filter.matches("a/" * 30 + "x.md")
    assert not path_filter.matches("a/" * 5000 + "z.md")
    assert time.monotonic() - started < HANG_S


def test_the_number_of_globs_is_capped() -> None:
    PathFilter(["*.md"] * MAX_GLOBS, ["*.txt"] * MAX_GLOBS)
    with pytest.raises(InvalidSpecError, match=f"at most {MAX_GLOBS} include globs"):
        PathFilter(["*.md"] * (MAX_GLOBS + 1))
    with pytest.raises(InvalidSpecError, match=f"at most {MAX_GLOBS} exclude globs"):
        PathFilter(["*.md"], ["*.txt"] * (MAX_GLOBS + 1))


def test_the_longest_globs_allowed_still_match_at_once() -> None:
    longest = ["/".join(["*a*?"] * (MAX_GLOB // 5))[:MAX_GLOB].rstrip("/")] * MAX_GLOBS
    path_filter = PathFilter(longest, longest)
    started = time.monotonic()
    for path in ("a" * 4096, "a/" * 2048, ("ab/" * 1400)[:4096]):
        path_filter.matches(path)
    assert time.monotonic() - started < HANG_S
