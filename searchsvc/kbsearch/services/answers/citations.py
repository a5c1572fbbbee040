"""Citations: numbering what an ask retrieved, and verifying the [n] markers of its answer.

The ledger numbers chunks 1..N across every search of one ask, in the order they were first
found; a chunk found again keeps its number. The filter reads the answer as it streams and
lets through only markers that point at a chunk in the ledger: `[9]` with no chunk 9 is removed
(with the space before it) and counted, and `[2, 9]` becomes `[2]`. It holds back only what it
cannot decide yet: a `[` that may still become a marker, and the spaces just before it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from kbsearch.chunker.sentences import closest_sentence, sentences
from kbsearch.models import SearchHit

# A marker: one to three digits, or several separated by commas ([1], [2, 3]). Longer numbers are
# years and the like, not citations.
MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_MARKER_PREFIX = re.compile(r"\[(?:\d{1,3}(?:\s*,\s*\d{1,3})*\s*,?\s*)?")
_MAX_MARKER_CHARS = 40
MAX_QUOTE_CHARS = 240


class RetrievalLedger:
    """The chunks one ask retrieved, numbered from 1, each once."""

    def __init__(self) -> None:
        self._hits: list[SearchHit] = []
        # By chunk id and the store whose text it carries: the same id from another store may differ.
        self._numbers: dict[tuple[str, str], int] = {}

    def add(self, hits: Iterable[SearchHit]) -> tuple[list[int], list[int]]:
        """Number `hits`; returns every hit's number, in order, and the numbers that are new."""
        numbers, new = [], []
        for hit in hits:
            key = (hit.id, hit.stores[0] if hit.stores else "")
            n = self._numbers.get(key)
            if n is None:
                self._hits.append(hit)
                n = self._numbers[key] = len(self._hits)
                new.append(n)
            numbers.append(n)
        return numbers, new

    def __contains__(self, n: object) -> bool:
        return isinstance(n, int) and 1 <= n <= len(self._hits)

    def __len__(self) -> int:
        return len(self._hits)

    def hit(self, n: int) -> SearchHit:
        return self._hits[n - 1]

    def numbered(self) -> list[tuple[int, SearchHit]]:
        return list(enumerate(self._hits, start=1))

    def renumber(self, first: Iterable[int]) -> dict[int, int]:
        """Number the chunks `first` names 1, 2, ... in that order, the others after them in their own
        order; returns old number -> new number. An extractive answer cites in reading order this way."""
        order = list(dict.fromkeys(n for n in first if n in self))
        order += [n for n in range(1, len(self._hits) + 1) if n not in set(order)]
        mapping = {old: new for new, old in enumerate(order, start=1)}
        self._hits = [self._hits[old - 1] for old in order]
        self._numbers = {key: mapping[n] for key, n in self._numbers.items()}
        return mapping


class CitationFilter:
    """Verifies citation markers in text that arrives in pieces; `feed` what comes, `finish` at the end."""

    def __init__(self, valid: Callable[[int], bool]) -> None:
        self._valid = valid
        self._held = ""
        self.cited: list[int] = []  # in order of first citation
        self.dropped = 0  # marker numbers that pointed at no retrieved chunk
        self.text = ""  # everything let through so far

    def feed(self, piece: str) -> str:
        return self._emit(self._scan(self._held + piece, final=False))

    def verbatim(self, piece: str) -> str:
        """Text let through unread (code): what was held back is decided first, as at the end."""
        return self._emit(self._scan(self._held, final=True) + piece)

    def finish(self) -> str:
        return self._emit(self._scan(self._held, final=True))

    def _emit(self, out: str) -> str:
        self.text += out
        return out

    def _scan(self, text: str, *, final: bool) -> str:
        out: list[str] = []
        i = 0
        self._held = ""
        while i < len(text):
            if text[i] != "[":
                out.append(text[i])
                i += 1
                continue
            marker = MARKER.match(text, i)
            if marker is not None:
                out.append(self._verified(marker.group(1), out))
                i = marker.end()
                continue
            rest = text[i:]
            if not final and len(rest) < _MAX_MARKER_CHARS and _MARKER_PREFIX.fullmatch(rest):
                self._held = rest  # may still become a marker
                break
            out.append("[")
            i += 1
        joined = "".join(out)
        if final:
            return joined
        # Spaces at the end may come right before a marker that will be dropped: hold them too.
        kept = joined.rstrip(" \t")
        self._held = joined[len(kept) :] + self._held
        return kept

    def _verified(self, numbers: str, out: list[str]) -> str:
        kept: list[int] = []
        for part in numbers.split(","):
            n = int(part)
            if not self._valid(n):
                self.dropped += 1
            elif n not in kept:
                kept.append(n)
        for n in kept:
            if n not in self.cited:
                self.cited.append(n)
        if not kept:
            # Drop the space before the marker too: "true [9]." reads "true.".
            while out and out[-1] in " \t":
                out.pop()
            return ""
        return "".join(f"[{n}]" for n in kept)


def citing_sentence(answer: str, n: int) -> str:
    """The sentence of `answer` that the first [n] marker belongs to ("x [n]." and "x. [n]" alike)."""
    position = answer.find(f"[{n}]")
    if position < 0:
        return answer
    before = MARKER.sub("", answer[:position]).rstrip(" \t.,;:!?")
    start = max(before.rfind(". "), before.rfind("! "), before.rfind("? "), before.rfind("\n"))
    return before[start + 1 :].strip()


def quote(hit: SearchHit, citing: str) -> str:
    """A short excerpt of the cited chunk: its sentence closest to the citing one."""
    best = closest_sentence(sentences(hit.content), citing) or hit.content.strip()
    if len(best) > MAX_QUOTE_CHARS:
        best = best[: MAX_QUOTE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return best
