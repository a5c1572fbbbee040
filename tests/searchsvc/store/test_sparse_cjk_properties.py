# ruff: noqa: RUF001 - CJK punctuation is what these tests feed the tokenizer
"""The Chinese, Japanese and Korean tokenizer on generated text: it ends, its output is linear in its input,
every character of a CJK run is in a piece (indexed, or knowingly dropped as a function word),
and identifiers keep their English-lane tokens whatever CJK text surrounds them."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from kbsearch.store import cjk
from kbsearch.store.bm25 import MAX_TOKEN_CHARS, Bm25Encoder
from tests.support.properties import properties, within

ENCODER = Bm25Encoder()
# Han (common and extension A, a compatibility ideograph, an astral one), kana, the iteration mark.
CJK_CHARS = st.sampled_from("的了在是管理控制器副本滚动更新部署命名空间配额網絡策略㐀豈𠀀々") | st.characters(
    min_codepoint=0x3041, max_codepoint=0x30FF
)
RUN = st.text(alphabet=CJK_CHARS, min_size=1, max_size=80)
# Syllables (common words' and any), compatibility and conjoining jamo, an unassigned code point.
HANGUL_CHARS = st.sampled_from("클레임은유지됩니다파드의로그를배포하세요ㄱㅏ\u1100\u11a8\ud7b0\ua97f") | st.characters(
    min_codepoint=0xAC00, max_codepoint=0xD7A3
)
HANGUL_RUN = st.text(alphabet=HANGUL_CHARS, min_size=1, max_size=80)
IDENTIFIER = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
PIECES = st.one_of(
    RUN,
    HANGUL_RUN,
    IDENTIFIER,
    st.sampled_from([" ", "\n", "、", "。", "，", "ｶﾀｶﾅ", "kube-apiserver", "한국어", "ﾡ"]),
    st.text(max_size=10),
)
TEXT = st.lists(PIECES, max_size=30).map("".join)
# A Chinese word of n characters gives itself and at most 2n - 3 sub-words; kept generous.
PER_CHAR = 3


@properties(300)
@given(text=TEXT)
def test_tokens_are_linear_in_the_text_and_each_is_bounded(text: str) -> None:
    tokens = ENCODER.tokens(text)
    assert len(tokens) <= PER_CHAR * len(unicodedata.normalize("NFKC", text).casefold())
    assert all(0 < len(t) <= MAX_TOKEN_CHARS for t in tokens)


@properties(300)
@given(run=RUN, lang=st.sampled_from(["zh", "ja"]))
def test_every_character_of_a_run_is_in_a_piece_kept_or_knowingly_dropped(run: str, lang: cjk.Language) -> None:
    pieces = cjk.pieces(run, lang)
    assert "".join(p.surface for p in pieces) == run
    assert all(p.surface for p in pieces)
    assert cjk.terms(run, lang) == [t for p in pieces for t in p.terms]


@properties(300)
@given(run=HANGUL_RUN)
def test_every_character_of_a_hangul_run_is_in_a_piece_kept_or_knowingly_dropped(run: str) -> None:
    pieces = cjk.pieces(run, "ko")
    assert "".join(p.surface for p in pieces) == run
    assert all(p.surface for p in pieces)


@properties(200)
@given(text=TEXT)
def test_every_hangul_run_of_a_text_has_its_pieces_in_context(text: str) -> None:
    normal = unicodedata.normalize("NFKC", text).casefold()
    by_offset = cjk.korean_runs(normal)
    for at, pieces in by_offset.items():
        run = "".join(p.surface for p in pieces)
        assert run and normal[at : at + len(run)] == run and cjk.is_hangul(run)


@properties(200)
@given(
    identifier=IDENTIFIER,
    before=RUN | HANGUL_RUN,
    after=RUN | HANGUL_RUN,
    glue=st.sampled_from([" ", "、", "(", "`", "\n# "]),
)
def test_an_identifier_keeps_its_tokens_inside_cjk_text(identifier: str, before: str, after: str, glue: str) -> None:
    alone = ENCODER.tokens(identifier)
    mixed = ENCODER.tokens(before + glue + identifier + glue + after)
    if alone:  # a stopword alone ("the") has none
        assert alone[0] in mixed
    assert len(alone) <= 1  # \w+ keeps it whole: one token


@properties(100)
@given(text=TEXT)
def test_text_without_han_or_kana_is_tokenized_as_by_the_english_lane(text: str) -> None:
    plain = "".join(c for c in text if not cjk.has_cjk(unicodedata.normalize("NFKC", c)))
    normal = unicodedata.normalize("NFKC", plain).casefold()
    if not cjk.has_cjk(normal):
        words = bm25_words(normal)
        assert ENCODER.tokens(plain) == list(ENCODER._stemmer().stemWords(words))


def bm25_words(normal: str) -> list[str]:
    from kbsearch.store.bm25 import _WORD, STOPWORDS

    return [w for w in _WORD.findall(normal) if w not in STOPWORDS and len(w) <= MAX_TOKEN_CHARS]


def test_megabyte_cjk_inputs_of_hostile_shapes_finish() -> None:
    """A hang detector (128 Ki characters each, seconds here): one huge Han run, one huge katakana
    run (an unknown word to Sudachi), alternating scripts in one word token, 64 Ki one-character words,
    and the same shapes in Hangul."""
    shapes = ["管" * 2**17, "ア" * 2**17, "管a" * 2**16, "管 " * 2**16, "のa_" * 2**15]
    # Korean: one huge unknown run, one long line of words, a syllable and a letter alternating.
    shapes += ["갛" * 2**17, "파드의 " * 2**15, "의a" * 2**16]
    for text in shapes:
        vectors = within(300, lambda text=text: ENCODER.encode_chunks([text]))
        assert len(vectors) == 1
