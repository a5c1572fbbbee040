"""Chinese and Japanese word segmentation for the keyword lane (kbsearch.store.bm25 is its one user).

Script ranges decide, cheaply: a text (a chunk, a query) is Japanese when kana make at least a
tenth of its Han and kana characters, else its Han runs are Chinese; a run holding kana is
Japanese whatever its text. Chinese runs go to jieba-rs (rjieba: its dictionary inside the wheel,
tags for parts of speech); a word is indexed with its search-mode sub-words ("存储资源" gives
"存储", "资源" and itself), so a query word found inside a longer document word still matches.
Japanese runs go to SudachiPy with its small dictionary, split mode A (the shortest units), each
morpheme indexed by its normalised form (its lemma: "使っ" -> "使う"). Function words are dropped
by part of speech: particles, prepositions, conjunctions, pronouns, modal particles, interjections
and punctuation in Chinese; particles, auxiliary verbs and symbols in Japanese.

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
    from sudachipy import Dictionary, Tokenizer

Language = Literal["zh", "ja"]

PIECE_CHARS = 4096
_HAN = "\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_KANA = "\u3041-\u309f\u30a1-\u30ff\u31f0-\u31ff"
_ANY = re.compile(f"[{_HAN}{_KANA}]")
_KANA_CHAR = re.compile(f"[{_KANA}]")
_RUNS = re.compile(f"[{_HAN}{_KANA}]+|[^{_HAN}{_KANA}]+")
# jieba's tags (ICTCLAS): u* particles (的, 了), p prepositions, c conjunctions, r pronouns,
# y modal particles, e interjections, o onomatopoeia, x non-words.
_ZH_DROP = frozenset("upcryeox")
_JA_DROP = frozenset({"助詞", "助動詞", "補助記号", "空白"})


@dataclass(frozen=True, slots=True)
class Piece:
    """One word of a run: its surface and the terms it is indexed by (none: a function word)."""

    surface: str
    terms: tuple[str, ...]


def has_cjk(text: str) -> bool:
    return _ANY.search(text) is not None


def language(text: str) -> Language:
    """The language of a text's Han runs: Japanese when kana are at least a tenth of its CJK characters."""
    kana = len(_KANA_CHAR.findall(text))
    return "ja" if kana and kana * 10 >= len(_ANY.findall(text)) else "zh"


def runs(word: str) -> list[str]:
    """A word token cut where it changes between CJK and other characters ("pod的" -> "pod", "的")."""
    return _RUNS.findall(word)


def pieces(run: str, lang: Language) -> list[Piece]:
    """The words of one CJK run, in order, their surfaces joined giving the run back."""
    lang = "ja" if _KANA_CHAR.search(run) else lang
    out: list[Piece] = []
    for start in range(0, len(run), PIECE_CHARS):
        part = run[start : start + PIECE_CHARS]
        out.extend(_japanese(part) if lang == "ja" else _chinese(part))
    return out


def terms(run: str, lang: Language) -> list[str]:
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
