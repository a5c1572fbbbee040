"""Literal search: the chunks that hold the query's text as written, most occurrences first.

The engine narrows: a phrase condition on the content's full-text index (the query's word tokens in
order, lowercased, punctuation aside) inside the same filter as the caller's scope, ranked as hybrid
search ranks. Here, the chunks it returned are kept only if their content holds the text character
for character (case-folded unless the search is case-sensitive), each scored by how often it does.
So `--dry-run=server` finds `--dry-run=server` and not "dry run server", and `ERR_CONN_RESET` with
`caseSensitive` not `err_conn_reset`. The index matches whole words: `CONN_RES` does not find
`ERR_CONN_RESET`.

Bounds: the query is at most MAX_LITERAL_CHARS (schemas/search.py); at most MAX_FETCH chunks of the
engine's are checked, each once with str.count (linear in its length).
"""

from __future__ import annotations

from dataclasses import replace

from kbsearch.models import SearchHit

__all__ = ["by_occurrences", "literal_hits", "occurrences"]


def occurrences(text: str, content: str, *, case_sensitive: bool) -> int:
    """How many times `text` occurs in `content` (non-overlapping), as written or case-folded."""
    if not case_sensitive:
        text, content = text.casefold(), content.casefold()
    return content.count(text) if text else 0


def literal_hits(hits: list[SearchHit], text: str, *, case_sensitive: bool) -> list[SearchHit]:
    """The hits whose content holds `text`, each scored by its occurrences, most first (ties: engine order)."""
    kept = []
    for hit in hits:
        found = occurrences(text, hit.content, case_sensitive=case_sensitive)
        if found:
            kept.append(replace(hit, score=float(found)))
    return by_occurrences(kept)


def by_occurrences(hits: list[SearchHit]) -> list[SearchHit]:
    """Highest score first, stable: collapsing and relevance do not decide a literal search's order."""
    return sorted(hits, key=lambda hit: -hit.score)
