"""Sentences of markdown chunks and answers: for extractive answers and for citation quotes."""

from __future__ import annotations

import re

# A sentence ends at . ! or ? followed by space and something that can start a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[*_`]?[A-Z0-9])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
_WORD = re.compile(r"\w+", re.UNICODE)
MIN_WORDS = 4  # shorter lines are labels and fragments, not statements
MAX_SENTENCE_CHARS = 400
# Words too common to tell two sentences apart.
_STOPWORDS = frozenset(
    """the a an and or of to in on for with by at from is are was were be been it its this that these those as
    not no can could should would will do does did has have had you your we our they their i""".split()  # noqa: SIM905
)


def sentences(markdown: str) -> list[str]:
    """The statements of a markdown text, in order: prose sentences and list items.

    Headings, code blocks, tables and lines of markup are left out: they are what a chunk is
    about or how it is shown, not sentences an answer could quote. Very long sentences are cut.
    """
    found: list[str] = []
    paragraph: list[str] = []
    in_code = False

    def flush() -> None:
        if paragraph:
            for sentence in _SENTENCE_END.split(" ".join(paragraph)):
                _keep(found, sentence)
            paragraph.clear()

    for raw in markdown.splitlines():
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            in_code = not in_code
            flush()
            continue
        if in_code or not line or line.startswith(("#", "|", "<", "---", "===")):
            flush()
            continue
        if _LIST_MARK.match(line):
            flush()
            line = _LIST_MARK.sub("", line)
        paragraph.append(line)
    flush()
    return found


def _keep(found: list[str], sentence: str) -> None:
    sentence = sentence.strip()
    if len(_WORD.findall(sentence)) < MIN_WORDS:
        return
    if len(sentence) > MAX_SENTENCE_CHARS:
        sentence = sentence[: MAX_SENTENCE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    found.append(sentence)


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and len(w) > 1}


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
