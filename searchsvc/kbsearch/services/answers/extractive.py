"""Extractive answers: the passages of the retrieved chunks that answer the question, with no language model.

Each retrieved chunk is cut into passages (passages.py: prose sentences, list items, and code
blocks and tables on their own, a sentence carrying the block it introduces).

Every passage is embedded with the service's own embedder, in one batch with the question, and
scored by cosine similarity plus its lexical overlap with the question's content words (code-ish
tokens such as `--sync-option` or `CreateNamespace=true` count double, words rare among the
retrieved chunks more), plus a bonus for what the question asks for: steps (ordered list items,
imperative sentences, code) for "how do I", definitions for "what is". Only passages whose
similarity reaches `min_similarity` are eligible, so "nothing relevant" stays a similarity
judgement. The best `max_sentences` passages form the answer, at most MAX_PER_CHUNK_IN_ANSWER from
one chunk; the passage right after a chosen sentence joins it when it holds question words the
sentence lacks. The chunks follow one another best first, and within a chunk the passages keep the
document's order. Prose is plain text (no emphasis or link syntax, inline code kept); code keeps
its fences and is passed on verbatim.

Bound on the embedding work of one answer: at most MAX_CANDIDATES passages of at most
MAX_EMBED_CHARS characters each, plus the question, in one embedding call (with MiniLM on 2 cores
a few hundred milliseconds).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from kbsearch.aio.runtime import embed_call
from kbsearch.chunker.inline import CODE_SPAN
from kbsearch.chunker.sentences import terms
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.services.answers.citations import RetrievalLedger
from kbsearch.services.answers.passages import Passage, passages

__all__ = ["Extract", "Piece", "answer_pieces", "extract"]

MAX_CANDIDATES = 160
MAX_PASSAGES_PER_CHUNK = 40
MAX_PER_CHUNK_IN_ANSWER = 2  # an answer from one chunk alone repeats it; prefer breadth

# Tuned on the Argo CD docs dev set (bench/docsqa.py) to round figures, not to its last decimal.
LEXICAL_WEIGHT = 0.35
BLOCK_LEXICAL_SHARE = 0.6  # of a block standing alone under its heading (a list, code, a table)
INTENT_BONUS = 0.08
RANK_PENALTY = 0.05  # per place a chunk's page stands below the first page in the search

Piece = tuple[str, bool]  # (text, verbatim): verbatim text is code, never read for citation markers

_HOWTO = re.compile(
    r"\b(how\s+(do|can|could|should|would|to|does)|way\s+to|steps?\s+to|is\s+there\s+a\s+way|can\s+(i|we|you))\b",
    re.IGNORECASE,
)
_WHAT_IS = re.compile(
    r"\b(what\s+(is|are|'s|does\s+.{1,60}\s+mean)|what's|define|meaning\s+of|difference\s+between)\b", re.IGNORECASE
)
# "what is the default", "defaults to", "by default": the answer must lead with the value.
_DEFAULT = re.compile(r"\bdefault(s|ed)?\b", re.IGNORECASE)
# A command on one line of prose: `kubectl apply -f x.yaml`, `helm install ...` (a word, then arguments).
_COMMAND_SPAN = re.compile(r"`[a-z][\w.-]*\s+[^`\n]*[-./=][^`\n]*`")
_DEFINITION = re.compile(
    r"^[^.!?]{0,80}?\b(is|are)\s+(an?|the|one|used|responsible|how|what|when)\b|\b(refers\s+to|means|is\s+defined\s+as)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Extract:
    """A passage chosen for an answer, with its cosine similarity to the question and its score."""

    passage: Passage
    similarity: float
    score: float
    # The passage right after it too, when it says more of what was asked ("The default is 50MB.").
    more: Passage | None = None

    @property
    def n(self) -> int:
        return self.passage.n

    @property
    def sentence(self) -> str:
        return self.passage.sentence


def _cited(sentence: str, n: int) -> str:
    """The sentence with its marker before the final punctuation: "Pods restart [2].", "Run this [2]:"."""
    body = sentence.rstrip()
    end = body[-1] if body and body[-1] in ".!?:" else ""
    if not body:
        return f"[{n}]"
    return f"{body[: len(body) - len(end)].rstrip()} [{n}]{end}"


async def extract(
    question: str,
    ledger: RetrievalLedger,
    embedder: EmbeddingProvider,
    *,
    max_sentences: int,
    min_similarity: float,
) -> list[Extract]:
    """The passages of an extractive answer, in answer order; [] when nothing is relevant."""
    question_terms = terms(question, question=True)
    candidates: list[Passage] = []
    seen: set[str] = set()
    for n, hit in ledger.numbered():
        for passage in passages(n, hit, question_terms)[:MAX_PASSAGES_PER_CHUNK]:
            key = " ".join(passage.full_text().lower().split())
            if key not in seen and len(candidates) < MAX_CANDIDATES:
                seen.add(key)
                candidates.append(passage)
    if not candidates:
        return []
    vectors = np.asarray(
        # The query lane: an answer's caller waits, and must not wait behind another team's documents.
        await embed_call(embedder.embed_query_lane, [question, *(p.embedded_text() for p in candidates)]),
        dtype=np.float32,
    )
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarities = vectors[1:] @ vectors[0]
    howto, what_is = bool(_HOWTO.search(question)), bool(_WHAT_IS.search(question))
    weights = _term_weights(question_terms, [hit.content for _, hit in ledger.numbered()])
    place = _page_places(ledger)
    scored = [
        Extract(p, float(s), _score(p, float(s), weights, place[p.n], howto=howto, what_is=what_is))
        for p, s in zip(candidates, similarities, strict=True)
    ]
    chosen = _choose(scored, question_terms, max_sentences=max_sentences, min_similarity=min_similarity)
    if not chosen:
        return chosen
    if howto:
        chosen = _with_command(chosen, scored, min_similarity, max_sentences)
    if _DEFAULT.search(question):
        chosen = _default_first(chosen, scored, min_similarity, max_sentences)
    return chosen


def _is_command(passage: Passage) -> bool:
    """Whether a passage shows how to do it: a fenced code block, or a command in the line's inline code."""
    if passage.block is not None and passage.block.lstrip().startswith(("```", "~~~")):
        return True
    return bool(_COMMAND_SPAN.search(passage.full_text()))


def _with_command(chosen: list[Extract], scored: list[Extract], min_similarity: float, most: int) -> list[Extract]:
    """A how-to answer quotes the command or code that does it: when no chosen passage holds one, the
    best-scoring eligible passage that does joins it (from a chunk the answer already cites first, else
    from any retrieved chunk), in the weakest chosen one's place when the answer is full."""
    if any(_is_command(e.passage) or (e.more is not None and _is_command(e.more)) for e in chosen):
        return chosen
    held = {(e.n, e.passage.order) for e in chosen}
    cited = {e.n for e in chosen}
    commands = [e for e in scored if e.similarity >= min_similarity and _is_command(e.passage)]
    commands = [e for e in commands if (e.n, e.passage.order) not in held]
    if not commands:
        return chosen
    best = max(commands, key=lambda e: (e.n in cited, e.score))
    return _in_answer_order([*_room(chosen, most), best])


def _room(chosen: list[Extract], most: int) -> list[Extract]:
    """The chosen passages with room for one more: without the weakest when `most` are chosen."""
    if len(chosen) < most:
        return chosen
    weakest = min(range(len(chosen)), key=lambda i: chosen[i].score)
    return [e for i, e in enumerate(chosen) if i != weakest]


def _default_first(chosen: list[Extract], scored: list[Extract], min_similarity: float, most: int) -> list[Extract]:
    """A question about a default is answered first by the passage that states one (a sentence, an item,
    a table row): the best-scoring such passage among those chosen, else among every eligible one, which
    then joins, in the weakest chosen one's place when the answer is full."""
    stating = [e for e in chosen if _DEFAULT.search(_answer_text(e))]
    if stating:
        lead = max(stating, key=lambda e: e.score)
        if lead.more is not None and not _DEFAULT.search(lead.passage.full_text()):
            # The value is in the sentence that joined the chosen one: it leads, the sentence follows.
            rest = [replace(lead, more=None) if e is lead else e for e in chosen]
            lead = Extract(lead.more, lead.similarity, lead.score)
            return [lead, *_room(rest, most - 1)] if most > 1 else chosen
    else:
        eligible = [e for e in scored if e.similarity >= min_similarity and _DEFAULT.search(e.passage.full_text())]
        if not eligible:
            return chosen
        lead = max(eligible, key=lambda e: e.score)
        chosen = _room(chosen, most)
    return [lead, *(e for e in chosen if e is not lead)]


def _answer_text(item: Extract) -> str:
    return item.passage.full_text() + ("" if item.more is None else "\n" + item.more.full_text())


def _in_answer_order(chosen: list[Extract]) -> list[Extract]:
    """A chunk's passages together, best chunk first; within a chunk, the document's order."""
    best: dict[int, float] = {}
    for item in sorted(chosen, key=lambda e: -e.score):
        best.setdefault(item.n, item.score)
    return sorted(chosen, key=lambda e: (-best[e.n], e.passage.order))


def _page_places(ledger: RetrievalLedger) -> dict[int, int]:
    """Each chunk's page's place in the search (0 for the first page), by its document's first chunk."""
    pages: dict[str, int] = {}
    return {n: pages.setdefault(hit.uri, len(pages)) for n, hit in ledger.numbered()}


def _score(
    passage: Passage, similarity: float, weights: dict[str, float], place: int, *, howto: bool, what_is: bool
) -> float:
    lexical = _overlap(weights, terms(passage.full_text()))
    if passage.kind in ("steps", "code", "table"):
        lexical *= BLOCK_LEXICAL_SHARE  # a long block holds many words by its size alone
    score = similarity + LEXICAL_WEIGHT * lexical
    if howto and passage.step:
        score += INTENT_BONUS
    if what_is and passage.kind == "sentence" and _DEFINITION.search(passage.sentence):
        score += INTENT_BONUS
    return score - RANK_PENALTY * place


def _term_weights(question_terms: set[str], chunks: list[str]) -> dict[str, float]:
    """The weight of each question term found in the retrieved chunks: rarer among them weighs more
    (1 + ln(chunks / chunks holding it)), and a code-ish term double. A term in no chunk cannot tell
    passages apart and is left out."""
    held = [terms(chunk) for chunk in chunks]
    weights = {}
    for term in question_terms:
        found = sum(term in chunk_terms for chunk_terms in held)
        if found:
            weights[term] = (1.0 + math.log(len(held) / found)) * (1.0 if term.isalnum() else 2.0)
    return weights


def _overlap(weights: dict[str, float], passage_terms: set[str]) -> float:
    """The share of the question's weighted terms the passage holds."""
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in passage_terms) / total if total else 0.0


def _choose(
    scored: list[Extract], question_terms: set[str], *, max_sentences: int, min_similarity: float
) -> list[Extract]:
    chosen: list[Extract] = []
    covered: set[tuple[int, int]] = set()  # what the chosen passages hold, and what they repeat
    blocks: set[str] = set()  # the same code block in two chunks (overlapping chunks, copied pages) once
    per_chunk: dict[int, int] = {}
    by_place = {(e.passage.n, e.passage.order): e.passage for e in scored}
    for item in sorted(scored, key=lambda e: -e.score):
        passage = item.passage
        if len(chosen) == max_sentences:
            break
        if item.similarity < min_similarity or per_chunk.get(passage.n, 0) >= MAX_PER_CHUNK_IN_ANSWER:
            continue
        holds = {(passage.n, passage.order), *((passage.n, order) for order in passage.covers)}
        if holds & covered or (passage.block is not None and passage.block in blocks):
            continue
        per_chunk[passage.n] = per_chunk.get(passage.n, 0) + 1
        following = by_place.get((passage.n, passage.order + 1))
        if passage.block is None and following is not None and _adds(passage, following, question_terms):
            more = {(following.n, following.order), *((following.n, order) for order in following.covers)}
            if not more & (covered | holds) and following.block not in blocks:
                item = replace(item, more=following)
                holds |= more
                if following.block is not None:
                    blocks.add(following.block)
        chosen.append(item)
        covered |= holds
        if passage.block is not None:
            blocks.add(passage.block)
    return _in_answer_order(chosen)


def _adds(passage: Passage, following: Passage, question_terms: set[str]) -> bool:
    """Whether the passage right after `passage` holds words of the question that `passage` does not."""
    return bool((terms(following.full_text()) & question_terms) - terms(passage.sentence))


def answer_pieces(extracts: list[Extract]) -> list[Piece]:
    """The answer's text in pieces: prose to read for markers, and code and inline code to pass on verbatim."""
    pieces: list[Piece] = []
    previous: Extract | None = None
    for item in extracts:
        if previous is not None:
            ends_in_block = previous.passage.block is not None or (
                previous.more is not None and previous.more.block is not None
            )
            joined = previous.n == item.n and not ends_in_block and item.passage.block is None
            pieces.append((" " if joined and item.passage.kind == "sentence" else "\n\n", False))
        sentence = item.passage.sentence
        if item.passage.kind in ("steps", "code", "table") and sentence and not sentence.endswith(":"):
            sentence += ":"  # a caption (the heading above the block) introduces it
        pieces.extend(_inline_pieces(_cited(sentence, item.n)))
        if item.more is not None and item.more.kind in ("sentence", "item"):
            pieces.extend(_inline_pieces(" " + _cited(item.more.sentence, item.n)))
        for block in (item.passage.block, item.more.block if item.more is not None else None):
            if block is not None:
                pieces.append(("\n\n", False))
                pieces.append((block, True))
        previous = item
    return pieces


def _inline_pieces(text: str) -> list[Piece]:
    pieces: list[Piece] = []
    position = 0
    for span in CODE_SPAN.finditer(text):
        if span.start() > position:
            pieces.append((text[position : span.start()], False))
        pieces.append((span.group(0), True))
        position = span.end()
    if position < len(text):
        pieces.append((text[position:], False))
    return pieces
