"""Include/exclude glob matching on repository paths, with `**` and exclude always winning.

Glob syntax (matched against the whole '/'-separated path from the repository root):
- `*` any characters within one path segment, `?` one character within a segment;
- `[abc]`, `[a-z]`, `[!abc]` a character class (never matches '/');
- `{md,mdx}` alternatives within one segment (not nested);
- `**` as a whole segment: zero or more segments (`**/*.md` matches `a.md` and `x/y/a.md`);
- a trailing '/' means everything below that folder (`drafts/` is `drafts/**`);
- `\\` escapes the next character.
`*.md` therefore matches only top-level files; write `**/*.md` for any depth.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kboperator.errors import InvalidSpecError

_MAX_GLOB = 1024


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Translate one glob into an anchored regex; raise InvalidSpecError when it is malformed."""
    problem = _problem(pattern)
    if problem:
        raise InvalidSpecError(f"invalid glob {pattern!r}: {problem}")
    if pattern.endswith("/"):
        pattern += "**"
    segments = pattern.split("/")
    out = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment(pattern, segment) + ("" if last else "/"))
    return re.compile("^" + "".join(out) + "$", re.DOTALL)


def _problem(pattern: str) -> str | None:
    if not isinstance(pattern, str) or not pattern:
        return "it is empty"
    if len(pattern) > _MAX_GLOB:
        return f"it is longer than {_MAX_GLOB} characters"
    if "\0" in pattern:
        return "it contains a NUL character"
    if pattern.startswith("/"):
        return "paths are relative to the repository root; drop the leading '/'"
    segments = pattern.rstrip("/").split("/")
    if any(segment == "" for segment in segments):
        return "it contains an empty path segment ('//')"
    if any(segment in (".", "..") for segment in segments):
        return "'.' and '..' segments are not allowed"
    if any("**" in segment and segment != "**" for segment in segments):
        return "'**' must be a whole path segment, as in 'docs/**/*.md'"
    return None


def _segment(pattern: str, segment: str) -> str:
    """Translate one path segment that is not `**`."""
    out: list[str] = []
    i, n = 0, len(segment)
    in_brace = False
    while i < n:
        char = segment[i]
        if char == "\\":
            if i + 1 == n:
                raise InvalidSpecError(f"invalid glob {pattern!r}: it ends with a lone '\\'")
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = _class_end(segment, i)
            if end < 0:
                raise InvalidSpecError(f"invalid glob {pattern!r}: unclosed '['")
            body = segment[i + 1 : end]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            if not body or "--" in body:
                raise InvalidSpecError(f"invalid glob {pattern!r}: empty or ambiguous '[...]' class")
            # Escape everything but ranges, so no character means anything special to `re`.
            body = "".join(c if c.isalnum() or c == "-" else "\\" + c for c in body)
            out.append(f"[^/{body}]" if negate else f"(?!/)[{body}]")
            i = end + 1
            continue
        elif char == "{":
            if in_brace:
                raise InvalidSpecError(f"invalid glob {pattern!r}: nested '{{' is not supported")
            in_brace = True
            out.append("(?:")
        elif char == "," and in_brace:
            out.append("|")
        elif char == "}" and in_brace:
            in_brace = False
            out.append(")")
        else:
            out.append(re.escape(char))
        i += 1
    if in_brace:
        raise InvalidSpecError(f"invalid glob {pattern!r}: unclosed '{{'")
    regex = "".join(out)
    try:
        re.compile(regex)
    except re.error as exc:
        raise InvalidSpecError(f"invalid glob {pattern!r}: {exc}") from None
    return regex


def _class_end(segment: str, start: int) -> int:
    """Index of the ']' closing the class opened at `start`, or -1."""
    i = start + 1
    if i < len(segment) and segment[i] in "!^":
        i += 1
    if i < len(segment) and segment[i] == "]":  # a leading ']' is a literal member
        i += 1
    while i < len(segment):
        if segment[i] == "]":
            return i
        i += 1
    return -1


class PathFilter:
    """Decides which repository paths are documents: included by a glob and excluded by none."""

    def __init__(self, include: Iterable[str], exclude: Iterable[str] = ()) -> None:
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        if not self.include:
            raise InvalidSpecError("at least one include glob is required")
        self._include = [compile_glob(pattern) for pattern in self.include]
        self._exclude = [compile_glob(pattern) for pattern in self.exclude]

    def matches(self, path: str) -> bool:
        if any(regex.match(path) for regex in self._exclude):
            return False
        return any(regex.match(path) for regex in self._include)

    def __repr__(self) -> str:
        return f"PathFilter(include={self.include!r}, exclude={self.exclude!r})"
