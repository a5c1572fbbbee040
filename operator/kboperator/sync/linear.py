"""Regular expressions that run in time linear in the text: the operator's one owner of RE2.

Python's `re` backtracks: `docs/(?P<version>(\\w+)+)/` against 24 characters of a path took 6 s,
doubling with each character, and held the interpreter lock while it did. RE2 (package
`google-re2`) compiles a pattern to automata and never backtracks. The bound: a match costs
O(len(text)) steps on RE2's DFA, and at most O(len(text) * len(pattern)) when the DFA's memory
budget runs out and RE2 falls back to its NFA; the operator caps every pattern it takes (512
characters for a version pattern and a glob), so both are linear in the path's length.

RE2 refuses what only a backtracking engine can do (backreferences `\\1`, lookaround `(?=`,
`(?!`, `(?<=`, possessive and atomic groups): such a pattern is an invalid spec, never retried.
`\\w`, `\\d` and `\\s` are ASCII-only in RE2 (Python's are Unicode); `[^/]+` takes any character.
"""

from __future__ import annotations

from collections.abc import Mapping

import re2

__all__ = ["LinearPattern", "PatternError", "escape"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to its author, not logged to stderr by RE2


class PatternError(ValueError):
    """RE2 refused the pattern: a syntax error, or a construct that needs backtracking."""


class LinearPattern:
    """One compiled RE2 pattern over str; every method runs in time linear in the text."""

    def __init__(self, pattern: str) -> None:
        try:
            self._compiled = re2.compile(pattern, options=_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
            raise PatternError(text) from None
        self.pattern = pattern

    @property
    def groupindex(self) -> Mapping[str, int]:
        return dict(self._compiled.groupindex)

    def search_group(self, text: str, group: str) -> str | None:
        """The named group of the first match anywhere in `text`; None when there is no match."""
        match = self._compiled.search(_encodable(text))
        if match is None:
            return None
        value = match.group(group)
        return value if isinstance(value, str) else None

    def fullmatch(self, text: str) -> bool:
        """Whether the pattern matches the whole of `text`."""
        return self._compiled.fullmatch(_encodable(text)) is not None


def _encodable(text: str) -> str:
    """`text` as RE2 can take it: a git path that is not UTF-8 holds surrogates (surrogateescape),
    which RE2 cannot encode; each such byte becomes U+FFFD, one character, as `?` expects."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def escape(char: str) -> str:
    """One character as a literal that RE2 reads the same inside and outside a `[...]` class."""
    return char if char.isascii() and char.isalnum() else f"\\x{{{ord(char):x}}}"
