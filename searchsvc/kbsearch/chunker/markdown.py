"""The chunker: normalised text, front matter, then splitter-sized pieces with their heading paths."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version

from semantic_text_splitter import MarkdownSplitter

from kbsearch.chunker.embedtext import embed_text
from kbsearch.chunker.frontmatter import front_matter_tags, front_matter_title, split_front_matter
from kbsearch.chunker.outline import (
    Outline,
    clean_start,
    heading_stacks,
    headings_between,
    only_headings,
    scan,
    window_end,
)
from kbsearch.models import Chunk, ParsedDocument

# Bump when anything below changes chunk boundaries, heading paths or embed_text.
ALGORITHM_VERSION = 1

# The splitter's cost grows with the square of its input (a 1 MiB line takes 5-16 s), so it is fed
# windows of this many max-size chunks, cut at headings or paragraph starts where possible.
WINDOW_CHUNKS = 20


class MarkdownChunker:
    """Cuts markdown into chunks of `min_chars`..`max_chars` characters, sharing up to `overlap`."""

    def __init__(self, min_chars: int = 500, max_chars: int = 800, overlap: int = 0):
        if not 1 <= min_chars <= max_chars:
            raise ValueError(f"need 1 <= min_chars ({min_chars}) <= max_chars ({max_chars})")
        if not 0 <= overlap < min_chars:
            raise ValueError(f"need 0 <= overlap ({overlap}) < min_chars ({min_chars})")
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.overlap = overlap
        self._splitter = MarkdownSplitter((min_chars, max_chars), overlap=overlap, trim=True)
        self._window = max(16_384, WINDOW_CHUNKS * max_chars)
        # The splitter's version is included: an upgrade may move boundaries, and re-chunking is
        # cheap because unchanged chunk texts keep their vectors.
        self.fingerprint = (
            f"markdown-v{ALGORITHM_VERSION};min={min_chars};max={max_chars};overlap={overlap};"
            f"splitter={version('semantic-text-splitter')}"
        )

    def chunk(self, content: str) -> ParsedDocument:
        text = _normalise(content)
        meta, body = split_front_matter(text)
        outline = scan(body)
        title = front_matter_title(meta) or next((h.text for h in outline.headings if h.level == 1 and h.text), None)
        tags = front_matter_tags(meta)

        pieces = list(self._split(body, outline))
        stacks = heading_stacks([start for start, _ in pieces], outline.headings)
        chunks: list[Chunk] = []
        for i, (start, piece) in enumerate(pieces):
            end = start + len(piece)
            # A heading-only piece whose headings all reappear in the next chunk's path adds
            # nothing: those headings travel on as context. Otherwise the heading is kept.
            if i + 1 < len(pieces) and only_headings(body, start, end, outline):
                inside = headings_between(outline, start, end)
                if all(h in stacks[i + 1] for h in inside):
                    continue
            headings = [h.text for h in stacks[i] if h.text]
            chunks.append(
                Chunk(
                    index=len(chunks),
                    text=piece,
                    embed_text=embed_text(title, headings, tags, piece),
                    headings=headings,
                    start=start,
                    end=end,
                )
            )
        return ParsedDocument(title=title, tags=tags, body=body, chunks=chunks)

    def _split(self, body: str, outline: Outline) -> Iterator[tuple[int, str]]:
        """(offset, stripped text) of each piece, splitting the body one bounded window at a time."""
        pos, n = 0, len(body)
        while pos < n:
            hi = window_end(pos, n, outline, self._window)
            pieces = self._splitter.chunk_indices(body[pos:hi])
            next_pos = hi
            if hi < n and len(pieces) > 1 and clean_start(body, outline, pos + pieces[-1][0]):
                # The last piece of a window was cut short by the window, not by the markdown:
                # split it again with what follows (unless it starts inside a fence, where a
                # window must not begin).
                next_pos = pos + pieces[-1][0]
                pieces = pieces[:-1]
            for offset, piece in pieces:
                # The splitter's trim keeps some leading indentation; chunks are fully stripped.
                text = piece.strip()
                if text:
                    yield pos + offset + (len(piece) - len(piece.lstrip())), text
            pos = next_pos


def _normalise(content: str) -> str:
    # Lone surrogates (legal in JSON strings, illegal in UTF-8) would make the Rust splitter raise.
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        content = content.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if "\r" in content:
        content = content.replace("\r\n", "\n").replace("\r", "\n")
    return content.removeprefix("\ufeff")
