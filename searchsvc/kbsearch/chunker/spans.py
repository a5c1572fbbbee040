"""Spans of a body for the chunker's split parts: lines, lines packed into parts, the prose splitter by windows.

Each loop states its variant: the work is linear in the text it is given.
"""

from __future__ import annotations

from collections.abc import Iterator

from semantic_text_splitter import TextSplitter

__all__ = ["line_spans", "pack_spans", "rstrip_end", "windowed"]


def line_spans(body: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    pos = start
    while pos < end:
        nl = body.find("\n", pos, end)
        line_end = end if nl < 0 else nl
        spans.append((pos, line_end))
        pos = line_end + 1
    return spans


def pack_spans(body: str, spans: list[tuple[int, int]], first_room: int, room: int) -> Iterator[tuple[int, int]]:
    """Consecutive line spans of `body` grouped into parts of at most `room` characters (the first `first_room`).

    Parts are balanced (a block of 1.1 rooms becomes two halves, not a full part and a scrap), and
    a line longer than the room is cut, at a space in the part's second half when there is one so
    that no word is cut. Both rooms count as at least 1, so every step advances.
    """
    if not spans:
        return
    room = max(1, room)
    total = spans[-1][1] - spans[0][0]
    parts = -(-total // room)
    target = max(1, min(room, total // max(1, parts) + total // (8 * max(1, parts)) + 1))
    limit = max(1, min(first_room, target))
    group: tuple[int, int] | None = None
    for start, end in spans:
        if group is not None and end - group[0] <= limit:
            group = (group[0], end)
            continue
        if group is not None:
            yield group
            limit = target
        # Variant: end - start, which falls by at least 1 on every turn (start < cut <= start + limit).
        while end - start > limit:
            space = body.rfind(" ", start + limit // 2 + 1, start + limit + 1)
            cut = space if space > start else start + limit
            yield start, cut
            start, limit = cut, target
        group = (start, end)
    if group is not None:
        yield group


def windowed(splitter: TextSplitter, text: str, window: int) -> Iterator[tuple[int, str]]:
    """`splitter.chunk_indices(text)`, computed `window` characters at a time.

    The last piece a window gives may be cut short by the window's end, so the next window starts
    where that piece started. Variant: the next window starts after this one (the piece it starts
    at is not the window's first), so `len(text) - start` falls on every turn.
    """
    start = 0
    while start < len(text):
        end = min(len(text), start + window)
        found = list(splitter.chunk_indices(text[start:end]))
        carry = end < len(text) and len(found) >= 2 and found[-1][0] > 0
        for offset, piece in found[:-1] if carry else found:
            yield start + offset, piece
        start = start + found[-1][0] if carry else end


def rstrip_end(body: str, start: int, end: int) -> int:
    while end > start and body[end - 1] in " \t\n":
        end -= 1
    return end
