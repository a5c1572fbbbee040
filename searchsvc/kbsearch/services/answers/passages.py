"""The passages of a retrieved chunk an extractive answer may use, read from its markdown blocks.

Prose is cut into sentences, lists into items (and, under a heading, the whole list as steps), and
code blocks and tables stand alone. A sentence that introduces what follows it (it ends with ":", or
says "the following", "below", "for example") carries that block with it; one ending with ":" whose
block is not in the chunk is never used. Bounds: a sentence at most MAX_SENTENCE_CHARS, a code block
MAX_BLOCK_CHARS or MAX_BLOCK_LINES (cut at a line, and saying so), a table MAX_TABLE_ROWS rows (the
header and the rows closest to the question), and what is embedded of a passage MAX_EMBED_CHARS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kbsearch.chunker.inline import plain
from kbsearch.chunker.mdblocks import Block, ListItem, markdown_blocks
from kbsearch.chunker.sentences import MIN_WORDS, split_sentences, terms, word_count
from kbsearch.models import SearchHit

__all__ = ["MAX_BLOCK_CHARS", "MAX_BLOCK_LINES", "Passage", "PassageKind", "passages"]

MAX_EMBED_CHARS = 400
MAX_BLOCK_CHARS = 2400  # a longer code block is cut at a line, and says so
MAX_BLOCK_LINES = 40  # and so is one of more lines
MAX_LIST_CHARS = 700  # a longer unordered list is offered item by item only
MAX_TABLE_ROWS = 8  # a longer table keeps its header and the rows closest to the question
MAX_SENTENCE_CHARS = 600

PassageKind = Literal["sentence", "item", "steps", "code", "table"]

_FORWARD = re.compile(r"\b(following|below|as follows|for example|example|like this|like so|e\.g\.)", re.IGNORECASE)
# Verbs a how-to step starts with ("Add ...", "Run ..."): imperative sentences.
_IMPERATIVE = frozenset(
    """add apply build change check choose click configure copy create define delete deploy disable download edit
    enable ensure export generate give go import install list log login make mount navigate open patch pass point
    provide push put register remove replace restart run save select set specify start stop switch sync tell
    update upgrade use verify visit wait write""".split()  # noqa: SIM905
)


@dataclass(frozen=True, slots=True)
class Passage:
    """A piece of a chunk an answer may use: a sentence (with the block it introduces) or a block alone."""

    n: int  # the chunk's number in the ledger
    order: int  # its place in the chunk
    kind: PassageKind
    sentence: str  # plain text; for a block alone, its caption
    block: str | None  # the fenced code, list or table it carries, as markdown
    step: bool  # what a how-to answer is made of: an ordered-list item, an imperative, code
    covers: frozenset[int]  # the orders of passages that would repeat it (a list's items, the same block)

    def embedded_text(self) -> str:
        text = self.sentence if self.block is None else f"{self.sentence}\n{_block_words(self.block)}"
        return text[:MAX_EMBED_CHARS]

    def full_text(self) -> str:
        return self.sentence if self.block is None else f"{self.sentence}\n{self.block}"


def passages(n: int, hit: SearchHit, question_terms: set[str]) -> list[Passage]:
    """The passages of one retrieved chunk, in document order."""
    blocks = markdown_blocks(hit.content)
    found: list[Passage] = []
    heading = (hit.headings[-1] if hit.headings else None) or hit.title or ""
    # The order each block's standalone passage gets, so that a sentence carrying it can cover it.
    order = 0
    block_order: dict[int, int] = {}
    for index, block in enumerate(blocks):
        block_order[index] = order
        order += (
            1
            + (len(block.items) if block.kind == "list" else 0)
            + (len(split_sentences(plain(block.text))) if block.kind == "paragraph" else 0)
        )
    brought: set[int] = set()  # the orders the passages found so far bring with them, kept as they come
    counted = 0
    for index, block in enumerate(blocks):
        for passage in found[counted:]:
            brought |= passage.covers
        counted = len(found)
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        carried = following if following is not None and following.kind in ("code", "list", "table") else None
        base = block_order[index]
        if block.kind == "heading":
            heading = plain(block.text)
        elif block.kind == "paragraph":
            found.extend(_prose(n, base, block, carried, block_order.get(index + 1), question_terms))
        elif block.kind == "list":
            whole = _list_markdown(list(block.items))
            ordered = sum(item.ordered and item.depth == 0 for item in block.items) >= 2
            if base not in brought and (ordered or (len(block.items) >= 2 and len(whole) <= MAX_LIST_CHARS)):
                # The list as a whole, under its heading: a how-to answer wants all the steps, in order.
                covers = frozenset(range(base + 1, base + 1 + len(block.items)))
                found.append(Passage(n, base, "steps", heading, whole, ordered, covers))
            found.extend(_items(n, base, block, carried, block_order.get(index + 1), question_terms))
        elif block.kind in ("code", "table"):
            previous = blocks[index - 1] if index > 0 else None
            caption = heading
            if previous is not None and previous.kind == "paragraph":
                last = split_sentences(plain(previous.text))[-1:]
                if last and last[0].endswith(":") and word_count(last[0]) < MIN_WORDS:
                    caption = last[0].rstrip(":").strip()  # "Homebrew:", "Export to a backup:"
            if base in brought:
                continue  # the sentence introducing it brings it
            kind: PassageKind = "code" if block.kind == "code" else "table"
            found.append(Passage(n, base, kind, caption, _rendered(block, question_terms), kind == "code", frozenset()))
    return found


def _prose(
    n: int, base: int, block: Block, carried: Block | None, carried_order: int | None, question_terms: set[str]
) -> list[Passage]:
    found = []
    sentences = split_sentences(plain(block.text))
    for i, sentence in enumerate(sentences):
        last = i == len(sentences) - 1
        introduces = sentence.endswith(":") or bool(_FORWARD.search(sentence))
        if last and carried is not None and introduces and word_count(sentence) >= MIN_WORDS:
            covers = _covered(carried, carried_order)
            rendered = _rendered(carried, question_terms)
            found.append(Passage(n, base + 1 + i, "sentence", _short(sentence), rendered, True, covers))
        elif sentence.endswith(":") or word_count(sentence) < MIN_WORDS:
            continue  # a lead-in whose content is not here, or a fragment
        else:
            step = _imperative(sentence)
            found.append(Passage(n, base + 1 + i, "sentence", _short(sentence), None, step, frozenset()))
    return found


def _items(
    n: int, base: int, block: Block, carried: Block | None, carried_order: int | None, question_terms: set[str]
) -> list[Passage]:
    found = []
    items = block.items
    for i, item in enumerate(items):
        text = plain(item.text)
        order = base + 1 + i
        if word_count(text) < MIN_WORDS:
            continue
        nested = [child for child in _children(items, i) if child.depth > item.depth]  # the items under this one
        step = item.ordered or _imperative(text)
        if item.code is not None and (text.endswith(":") or _FORWARD.search(text)):
            found.append(Passage(n, order, "item", _short(text), item.code, True, frozenset()))
        elif text.endswith(":") and nested:
            covers = frozenset(range(order + 1, order + 1 + len(nested)))
            found.append(Passage(n, order, "item", _short(text), _list_markdown(nested), step, covers))
        elif text.endswith(":") and i == len(items) - 1 and carried is not None and carried.kind != "list":
            covers = _covered(carried, carried_order)
            found.append(Passage(n, order, "item", _short(text), _rendered(carried, question_terms), True, covers))
        elif text.endswith(":"):
            continue
        else:
            found.append(Passage(n, order, "item", _short(text), None, step, frozenset()))
    return found


def _children(items: tuple[ListItem, ...], i: int) -> list[ListItem]:
    children = []
    for item in items[i + 1 :]:
        if item.depth <= items[i].depth:
            break
        children.append(item)
    return children


def _covered(block: Block, order: int | None) -> frozenset[int]:
    if order is None:
        return frozenset()
    extra = len(block.items) if block.kind == "list" else 0
    return frozenset(range(order, order + 1 + extra))


def _imperative(sentence: str) -> bool:
    first = sentence.lstrip("`'\"(").split(" ", 1)[0].lower().strip(",:")
    return first in _IMPERATIVE


def _short(sentence: str) -> str:
    sentence = sentence.replace("\u00a0", " ")  # "24\u00a0hours" reads, and is searched for, as "24 hours"
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return sentence
    return sentence[: MAX_SENTENCE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def _rendered(block: Block, question_terms: set[str]) -> str:
    """A block as the answer shows it: code verbatim (cut at a line when very long), lists and tables as plain text."""
    if block.kind == "code":
        return _bounded_code(block.text)
    if block.kind == "list":
        return _list_markdown(list(block.items))
    return _bounded_table(block.text, question_terms)


def _bounded_code(code: str) -> str:
    lines = code.split("\n")
    if len(code) <= MAX_BLOCK_CHARS and len(lines) <= MAX_BLOCK_LINES + 2:
        return code
    fence = lines[0].strip()[:3]
    kept: list[str] = []
    size = 0
    for line in lines[:-1]:
        if size + len(line) > MAX_BLOCK_CHARS or len(kept) > MAX_BLOCK_LINES:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join([*kept, "# …", fence])


def _list_markdown(items: list[ListItem]) -> str:
    lines: list[str] = []
    counters: dict[int, int] = {}
    top = min((item.depth for item in items), default=0)
    for item in items:
        depth = item.depth - top
        counters = {d: c for d, c in counters.items() if d <= depth}
        counters[depth] = counters.get(depth, 0) + 1
        marker = f"{counters[depth]}." if item.ordered else "-"
        lines.append(f"{'   ' * depth}{marker} {plain(item.text)}")
        if item.code is not None:
            lines.extend(f"{'   ' * (depth + 1)}{line}" if line else "" for line in item.code.split("\n"))
    return "\n".join(lines)


def _bounded_table(table: str, question_terms: set[str]) -> str:
    rows = [plain(row) for row in table.split("\n")]
    if len(rows) <= MAX_TABLE_ROWS + 2:
        return "\n".join(rows)
    head, body = rows[:2], rows[2:]
    ranked = sorted(range(len(body)), key=lambda i: -len(question_terms & terms(body[i])))[:MAX_TABLE_ROWS]
    return "\n".join([*head, *(body[i] for i in sorted(ranked))])


def _block_words(block: str) -> str:
    """A block's text for the embedder: without fences and table rules, which say nothing."""
    lines = [line for line in block.split("\n") if not line.lstrip().startswith(("```", "~~~", "|-", "| -", "|:"))]
    return " ".join(" ".join(lines).split())
