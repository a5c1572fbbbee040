"""Include/exclude glob matching on repository paths, with `**` and exclude always winning.

Glob syntax (matched against the whole '/'-separated path from the repository root):
- `*` any characters within one path segment, `?` one character within a segment;
- `[abc]`, `[a-z]`, `[!abc]` a character class (never matches '/');
- `{md,mdx}` alternatives within one segment (not nested);
- `**` as a whole segment: zero or more segments (`**/*.md` matches `a.md` and `x/y/a.md`);
- a trailing '/' means everything below that folder (`drafts/` is `drafts/**`);
- `\\` escapes the next character.
`*.md` therefore matches only top-level files; write `**/*.md` for any depth.

Globs compile to RE2 (sync.linear), never to a backtracking engine: matching a path takes time
linear in its length however the globs are written (PathFilter states the bound).
"""

from __future__ import annotations

from collections.abc import Iterable

from kboperator.errors import InvalidSpecError
from kboperator.sync.linear import LinearPattern, PatternError, escape

# The CRD's limits (crds/knowledgesources.yaml), held for `knowledge-sync` too.
MAX_GLOB = 512
MAX_GLOBS = 100
_SLASH = ord("/")


def compile_glob(pattern: str) -> LinearPattern:
    """One glob as an RE2 pattern matched against a whole path; InvalidSpecError when it is malformed."""
    return _compile(_translate(pattern), [pattern])


def _translate(pattern: str) -> str:
    """The RE2 source of one glob (unanchored). Runs of `**` segments become one: they match the same."""
    problem = _problem(pattern)
    if problem:
        raise InvalidSpecError(f"invalid glob {pattern!r}: {problem}")
    if pattern.endswith("/"):
        pattern += "**"
    segments: list[str] = []
    for segment in pattern.split("/"):
        if not (segment == "**" and segments and segments[-1] == "**"):
            segments.append(segment)
    out = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment(pattern, segment) + ("" if last else "/"))
    return "".join(out)


def _compile(regex: str, patterns: list[str]) -> LinearPattern:
    try:
        return LinearPattern("(?s)" + regex)
    except PatternError as exc:
        shown = patterns[0] if len(patterns) == 1 else patterns
        raise InvalidSpecError(f"invalid glob {shown!r}: {exc}") from None


def _problem(pattern: str) -> str | None:
    if not isinstance(pattern, str) or not pattern:
        return "it is empty"
    if len(pattern) > MAX_GLOB:
        return f"it is longer than {MAX_GLOB} characters"
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
            out.append(escape(segment[i + 1]))
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
            out.append(_class(pattern, segment[i + 1 : end]))
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
            out.append(escape(char))
        i += 1
    if in_brace:
        raise InvalidSpecError(f"invalid glob {pattern!r}: unclosed '{{'")
    return "".join(out)


def _class(pattern: str, body: str) -> str:
    """A `[...]` class (its body) as an RE2 class that never matches '/'."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    if not body or "--" in body:
        raise InvalidSpecError(f"invalid glob {pattern!r}: empty or ambiguous '[...]' class")
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            low, high = ord(body[i]), ord(body[i + 2])
            if low > high:
                raise InvalidSpecError(f"invalid glob {pattern!r}: range {body[i : i + 3]!r} is out of order")
            ranges.append((low, high))
            i += 3
        else:
            ranges.append((ord(body[i]), ord(body[i])))
            i += 1
    if negate:
        members = "".join(_range(low, high) for low, high in ranges)
        return f"[^/{members}]"
    # '/' separates segments: cut it out of every range, e.g. [+-0] is [+-.0].
    kept: list[tuple[int, int]] = []
    for low, high in ranges:
        if low <= _SLASH <= high:
            kept += [(low, _SLASH - 1)] if low < _SLASH else []
            kept += [(_SLASH + 1, high)] if high > _SLASH else []
        else:
            kept.append((low, high))
    return "[" + "".join(_range(low, high) for low, high in kept) + "]"


def _range(low: int, high: int) -> str:
    return escape(chr(low)) if low == high else f"{escape(chr(low))}-{escape(chr(high))}"


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
    """Decides which repository paths are documents: included by a glob and excluded by none.

    Bound: the includes are one RE2 alternation and the excludes another, so `matches` costs two
    passes of RE2 over the path, O(len(path)) each on its DFA and at most O(len(path) * total glob
    length) on its NFA; at most MAX_GLOBS globs of MAX_GLOB characters each.
    """

    def __init__(self, include: Iterable[str], exclude: Iterable[str] = ()) -> None:
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        if not self.include:
            raise InvalidSpecError("at least one include glob is required")
        for kind, globs in (("include", self.include), ("exclude", self.exclude)):
            if len(globs) > MAX_GLOBS:
                raise InvalidSpecError(f"at most {MAX_GLOBS} {kind} globs are allowed, not {len(globs)}")
        self._include = _union(self.include)
        self._exclude = _union(self.exclude) if self.exclude else None

    def matches(self, path: str) -> bool:
        if self._exclude is not None and self._exclude.fullmatch(path):
            return False
        return self._include.fullmatch(path)

    def __repr__(self) -> str:
        return f"PathFilter(include={self.include!r}, exclude={self.exclude!r})"


def _union(globs: tuple[str, ...]) -> LinearPattern:
    sources = [_translate(glob) for glob in globs]
    for glob, source in zip(globs, sources, strict=True):
        _compile(source, [glob])  # each on its own first, so an error names the glob at fault
    return _compile("(?:" + "|".join(sources) + ")", list(globs))
