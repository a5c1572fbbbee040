"""Chinese, Japanese and Korean word segmentation for the keyword lane (kbsearch.store.bm25 is its one user).

Script ranges decide, cheaply: a run of Hangul is Korean; a text (a chunk, a query) is Japanese
when kana make at least a tenth of its Han and kana characters, else its Han runs are Chinese; a
run holding kana is Japanese whatever its text. Chinese runs go to jieba-rs (rjieba: its dictionary inside the wheel,
tags for parts of speech); a word is indexed with its search-mode sub-words ("存储资源" gives
"存储", "资源" and itself), so a query word found inside a longer document word still matches.
Japanese runs go to SudachiPy with its small dictionary, split mode A (the shortest units), each
morpheme indexed by its normalised form (its lemma: "使っ" -> "使う"). Function words are dropped
by part of speech: particles, prepositions, conjunctions, pronouns, modal particles, interjections
and punctuation in Chinese; particles, auxiliary verbs and symbols in Japanese.
Korean runs (a Hangul word: Korean puts spaces between words) go to MeCab-ko with mecab-ko-dic
(python-mecab-ko): nouns, roots, adverbs and foreign or Chinese-character words are indexed by
their surface, verbs and adjectives by their stem ("됩니다" -> "되"); particles, endings, affixes,
copulas, auxiliaries, determiners, pronouns, bound nouns and symbols are dropped.

Bounds: a run is segmented in pieces of at most PIECE_CHARS characters (SudachiPy refuses input
over 49,149 bytes; a piece is at most 4 * PIECE_CHARS bytes), so the work is linear in the text and
every piece's surface is its input: the pieces of a run joined give the run back.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from mecab import MeCab
    from sudachipy import Dictionary, Tokenizer

Language = Literal["zh", "ja"]
# A Hangul run is Korean whatever the text's language: its own script.
RunLanguage = Literal["zh", "ja", "ko"]

PIECE_CHARS = 4096
_HAN = "\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_KANA = "\u3041-\u309f\u30a1-\u30ff\u31f0-\u31ff"
# Syllables, conjoining jamo (and their extensions A and B), compatibility jamo (NFKC's halfwidth).
_HANGUL = "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff"
_ANY = re.compile(f"[{_HAN}{_KANA}{_HANGUL}]")
_HAN_KANA = re.compile(f"[{_HAN}{_KANA}]")
_KANA_CHAR = re.compile(f"[{_KANA}]")
_HANGUL_CHAR = re.compile(f"[{_HANGUL}]")
_HANGUL_RUN = re.compile(f"[{_HANGUL}]+")
_LINE = re.compile(r"[^\n]+")
_RUNS = re.compile(f"[{_HAN}{_KANA}]+|[{_HANGUL}]+|[^{_HAN}{_KANA}{_HANGUL}]+")
# jieba's tags (ICTCLAS): u* particles (的, 了), p prepositions, c conjunctions, r pronouns,
# y modal particles, e interjections, o onomatopoeia, x non-words.
_ZH_DROP = frozenset("upcryeox")
_JA_DROP = frozenset({"助詞", "助動詞", "補助記号", "空白"})
# mecab-ko-dic's tags (Sejong): the content words kept; a compound tag ("VV+EF") by its first.
# NNG/NNP nouns, NR numerals, VV/VA verb and adjective stems, MAG adverbs, XR roots, SL/SH/SN
# foreign, Chinese-character and number words, UNKNOWN an unknown word (kept: it may be a name).
_KO_KEEP = frozenset({"NNG", "NNP", "NR", "VV", "VA", "MAG", "XR", "SL", "SH", "SN", "UNKNOWN"})
_KO_STEM = frozenset({"VV", "VA"})


@dataclass(frozen=True, slots=True)
class Piece:
    """One word of a run: its surface and the terms it is indexed by (none: a function word)."""

    surface: str
    terms: tuple[str, ...]


def has_cjk(text: str) -> bool:
    return _ANY.search(text) is not None


def has_hangul(text: str) -> bool:
    return _HANGUL_CHAR.search(text) is not None


def is_hangul(run: str) -> bool:
    """Whether a run of runs() is Hangul (its first character tells)."""
    return _HANGUL_CHAR.match(run) is not None


def language(text: str) -> Language:
    """The language of a text's Han runs: Japanese when kana are at least a tenth of its Han and kana."""
    kana = len(_KANA_CHAR.findall(text))
    return "ja" if kana and kana * 10 >= len(_HAN_KANA.findall(text)) else "zh"


def runs(word: str) -> list[str]:
    """A word token cut where its script changes: Han and kana, Hangul, other ("pod的" -> "pod", "的")."""
    return _RUNS.findall(word)


def pieces(run: str, lang: RunLanguage) -> list[Piece]:
    """The words of one CJK run, in order, their surfaces joined giving the run back."""
    if is_hangul(run):
        return korean_runs(run).get(0, [])
    segment = _japanese if lang == "ja" or _KANA_CHAR.search(run) else _chinese
    out: list[Piece] = []
    for start in range(0, len(run), PIECE_CHARS):
        out.extend(segment(run[start : start + PIECE_CHARS]))
    return out


def terms(run: str, lang: RunLanguage) -> list[str]:
    return [term for piece in pieces(run, lang) for term in piece.terms]


def _chinese(text: str) -> list[Piece]:
    import rjieba  # its import loads the dictionary (~0.5 s): only when Chinese text comes

    return [
        Piece(word, () if tag[:1] in _ZH_DROP else tuple(rjieba.cut_for_search(word))) for word, tag in rjieba.tag(text)
    ]


def _japanese(text: str) -> list[Piece]:
    return [
        Piece(m.surface(), () if m.part_of_speech()[0] in _JA_DROP else (m.normalized_form(),))
        for m in _sudachi().tokenize(text)
    ]


def korean_runs(text: str) -> dict[int, list[Piece]]:
    """The pieces of every Hangul run of a text, by the run's offset. MeCab reads whole lines, not
    word by word: "파드의" alone is a noun pair, in "파드의 로그를" its particle is seen as one."""
    morphemes: list[tuple[int, int, bool, str]] = []  # start, end, kept, term
    for line in _LINE.finditer(text):
        if not _HANGUL_CHAR.search(line.group()):
            continue
        start, end = line.span()
        while start < end:  # windows of at most PIECE_CHARS, cut at a space when there is one
            stop = end if end - start <= PIECE_CHARS else text.rfind(" ", start + 1, start + PIECE_CHARS)
            stop = stop if stop > start else start + PIECE_CHARS
            morphemes.extend(_morphemes(text[start:stop], start))
            start = stop
    out: dict[int, list[Piece]] = {}
    i = 0
    for run in _HANGUL_RUN.finditer(text):
        a, b = run.span()
        while i < len(morphemes) and morphemes[i][1] <= a:
            i += 1
        pieces, at, j = [], a, i
        while j < len(morphemes) and morphemes[j][0] < b:
            m_start, m_end, kept, term = morphemes[j]
            lo, hi = max(m_start, at), min(m_end, b)
            if lo > at:  # not in MeCab's output: kept whole, so no character is lost
                pieces.append(Piece(text[at:lo], (text[at:lo],)))
            if hi > lo:
                whole = (lo, hi) == (m_start, m_end)
                pieces.append(Piece(text[lo:hi], ((term if whole else text[lo:hi]),) if kept else ()))
                at = hi
            j += 1
        if at < b:
            pieces.append(Piece(text[at:b], (text[at:b],)))
        out[a] = pieces
    return out


def _morphemes(text: str, offset: int) -> list[tuple[int, int, bool, str]]:
    out = []
    for m in _mecab().parse(text):
        start, end = m.span.start, m.span.end
        tag = m.pos.split("+")[0]
        stem = tag in _KO_STEM and m.feature.expression  # an inflected form: indexed by its stem
        term = m.feature.expression.split("/")[0] if stem else text[start:end]
        out.append((offset + start, offset + end, tag in _KO_KEEP, term))
    return out


_lock = threading.Lock()
_dictionary: list[Dictionary] = []
_local = threading.local()


def _sudachi() -> Tokenizer:
    # A Sudachi tokenizer is not thread-safe; the dictionary (memory-mapped) is shared.
    tokenizer: Tokenizer | None = getattr(_local, "tokenizer", None)
    if tokenizer is None:
        from sudachipy import Dictionary, SplitMode

        with _lock:
            if not _dictionary:
                _dictionary.append(Dictionary(dict="small"))
        tokenizer = _local.tokenizer = _dictionary[0].tokenizer(SplitMode.A)
    return tokenizer


def _mecab() -> MeCab:
    # One tagger per thread (MeCab's tagger is shared state); its dictionary loads in ~20 ms.
    tagger: MeCab | None = getattr(_local, "mecab", None)
    if tagger is None:
        from mecab import MeCab

        tagger = _local.mecab = MeCab()
    return tagger
