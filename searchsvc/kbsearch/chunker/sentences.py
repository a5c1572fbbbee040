"""Sentences and words of markdown chunks: for extractive answers and for citation quotes."""

from __future__ import annotations

import re

from kbsearch.chunker.inline import CODE_SPAN, plain
from kbsearch.chunker.mdblocks import markdown_blocks

__all__ = ["MIN_WORDS", "closest_sentence", "content_words", "sentences", "split_sentences", "terms", "word_count"]

# A sentence ends at . ! or ? followed by space and something that can start a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[*_`]?[A-Z0-9])")
_WORD = re.compile(r"\w+", re.UNICODE)
# What a term is: a word, or a code-ish token kept whole (--sync-option, CreateNamespace=true, a/b.c).
_TERM = re.compile(r"-{0,2}[A-Za-z0-9_$][\w$]*(?:[-./:=][\w$]+)*")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")  # CreateNamespace -> Create, Namespace
MIN_WORDS = 4  # shorter lines are labels and fragments, not statements
MAX_SENTENCE_CHARS = 400
# Words too common to tell two sentences apart.
_STOPWORDS = frozenset(
    """the a an and or of to in on for with by at from is are was were be been it its this that these those as
    not no can could should would will do does did has have had you your we our they their i""".split()  # noqa: SIM905
)
# Words of a question that say how it is asked, not what it is about.
_QUESTION_WORDS = _STOPWORDS | frozenset(
    """what which who whom whose when where why how there here any some all my me us if so then than
    just also get got want need way use using used make does doesn't dont don't isn't can't cant i'm""".split()  # noqa: SIM905
)


def split_sentences(text: str) -> list[str]:
    """The sentences of one paragraph of plain text; inline code is never cut.

    The one sentence splitter: the chunker's lead-ins, extractive answers and citation quotes use it.
    Linear: the code spans and the sentence ends are both in order, so one pointer walks the spans.
    """
    spans = [m.span() for m in CODE_SPAN.finditer(text)]
    found, start, k = [], 0, 0
    for end in _SENTENCE_END.finditer(text):
        while k < len(spans) and spans[k][1] <= end.start():
            k += 1
        if k < len(spans) and spans[k][0] < end.start():
            continue  # inside a code span
        found.append(text[start : end.start()].strip())
        start = end.end()
    found.append(text[start:].strip())
    return [s for s in found if s]


def sentences(markdown: str) -> list[str]:
    """The statements of a markdown text, in order: prose sentences and list items, as plain text.

    Headings, code blocks, tables and lines of markup are left out: they are what a chunk is
    about or how it is shown, not sentences an answer could quote. Very long sentences are cut.
    """
    found: list[str] = []
    for block in markdown_blocks(markdown):
        if block.kind == "paragraph":
            found.extend(_kept(s) for s in split_sentences(plain(block.text)) if _statement(s))
        elif block.kind == "list":
            found.extend(_kept(plain(item.text)) for item in block.items if _statement(plain(item.text)))
    return found


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def _statement(sentence: str) -> bool:
    return word_count(sentence) >= MIN_WORDS


def _kept(sentence: str) -> str:
    if len(sentence) > MAX_SENTENCE_CHARS:
        sentence = sentence[: MAX_SENTENCE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return sentence


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and len(w) > 1}


def _stem(word: str) -> str:
    """A light suffix strip, so that `deleting`, `deletes` and `deleted` meet; code-ish tokens stay whole."""
    if not word.isalpha() or len(word) <= 4:
        return word
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)].rstrip("e") if suffix != "s" else word[:-1]
    return word.rstrip("e")


def terms(text: str, *, question: bool = False) -> set[str]:
    """The terms of `text` for lexical overlap: stemmed words, plus code-ish tokens whole and in parts.

    `question`: leave out the words that say how a question is asked ("how do I", "what is").
    """
    stop = _QUESTION_WORDS if question else _STOPWORDS
    found: set[str] = set()
    for token in _TERM.findall(text):
        lowered = token.lower()
        if not lowered.strip("-").isalnum() and len(lowered) > 2:
            found.add(lowered)  # a code-ish token whole: --sync-option, createnamespace=true
        words = _WORD.findall(lowered) + [w.lower() for w in _CAMEL_PART.findall(token)]
        for word in words:
            if word not in stop and len(word) > 1:
                found.add(_stem(word))
    return found


def closest_sentence(candidates: list[str], to: str) -> str | None:
    """The candidate sharing the most content words with `to` (overlap over the candidate's size).

    Lexical, not embedded: it picks a quote for a citation the model already made, at no cost
    and the same with any embedder. Ties go to the earlier sentence; None when there are none.
    """
    target = content_words(to)
    best, best_score = None, -1.0
    for candidate in candidates:
        words = content_words(candidate)
        score = len(words & target) / (len(words) ** 0.5 or 1.0)
        if score > best_score:
            best, best_score = candidate, score
    return best
