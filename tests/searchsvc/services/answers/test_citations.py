"""Citation markers verified in streamed text, numbering, quotes and sentences."""

from __future__ import annotations

import pytest

from kbsearch.chunker.sentences import sentences
from kbsearch.models import SearchHit
from kbsearch.services.answers.citations import CitationFilter, RetrievalLedger, citing_sentence, quote

VALID = {1, 2, 3}
TEXT = "Pods restart [1]. Nodes drain [2, 9]. Made up [9]. Years like [2023] stay; so do [a] and [ and x[]. End [3]"
EXPECTED = "Pods restart [1]. Nodes drain [2]. Made up. Years like [2023] stay; so do [a] and [ and x[]. End [3]"


def run(pieces: list[str]) -> tuple[list[str], CitationFilter]:
    citations = CitationFilter(VALID.__contains__)
    out = [citations.feed(piece) for piece in pieces]
    out.append(citations.finish())
    return out, citations


def test_whole_text():
    out, citations = run([TEXT])
    assert "".join(out) == EXPECTED == citations.text
    assert citations.cited == [1, 2, 3] and citations.dropped == 2


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_any_split_into_pieces_gives_the_same_text_and_never_a_dropped_marker(size):
    out, citations = run([TEXT[i : i + size] for i in range(0, len(TEXT), size)])
    assert "".join(out) == EXPECTED
    assert citations.cited == [1, 2, 3] and citations.dropped == 2
    assert not any("9]" in piece or "[9" in piece for piece in out)


def test_every_two_way_split():
    for cut in range(len(TEXT) + 1):
        out, _ = run([TEXT[:cut], TEXT[cut:]])
        assert "".join(out) == EXPECTED, cut


def test_text_is_held_back_only_while_a_marker_may_be_open():
    citations = CitationFilter(VALID.__contains__)
    assert citations.feed("Plain words") == "Plain words"
    assert citations.feed(" and a space ") == " and a space"  # the space may precede a dropped marker
    assert citations.feed("[") == ""
    assert citations.feed("1") == ""
    assert citations.feed("]") == " [1]"
    assert citations.feed(" [list] of things") == " [list] of things"
    assert citations.finish() == ""


def test_a_marker_of_only_dropped_numbers_takes_its_space_with_it():
    out, citations = run(["It is so ", "[7]", "[8].", " Next"])
    assert "".join(out) == "It is so. Next" and citations.dropped == 2 and citations.cited == []


def hit(uri: str, content: str = "text") -> SearchHit:
    return SearchHit(
        id=uri, score=1.0, uri=uri, chunk_index=0, total_chunks=1, content=content, title=None, headings=[],
        metadata={}, source_identifier=None,
    )  # fmt: skip


def test_the_ledger_numbers_each_chunk_once_across_searches():
    ledger = RetrievalLedger()
    assert ledger.add([hit("a"), hit("b")]) == ([1, 2], [1, 2])
    assert ledger.add([hit("b"), hit("c")]) == ([2, 3], [3])
    assert [h.uri for _, h in ledger.numbered()] == ["a", "b", "c"]
    assert 3 in ledger and 4 not in ledger and 0 not in ledger


def test_the_citing_sentence_and_the_quote():
    answer = "Rollbacks are quick [1]. The old ReplicaSet scales up again. [2] Done."
    assert citing_sentence(answer, 1) == "Rollbacks are quick"
    assert citing_sentence(answer, 2) == "The old ReplicaSet scales up again"
    chunk = hit(
        "u",
        "# Rollbacks\n\nA rollout is a change of pods. The old ReplicaSet scales up when you roll back. "
        "History keeps ten revisions.",
    )
    assert quote(chunk, "The old ReplicaSet scales up again") == "The old ReplicaSet scales up when you roll back."


def test_sentences_leave_out_headings_code_and_fragments():
    text = (
        "# Title\n\nFirst real sentence is here. Second one follows it!\n\n"
        "```\ncode is not a sentence at all\n```\n\n- a list item counts as one\n- tiny\n\n| a | table | row | here |\n"
    )  # the row after a blank line: right after the item, CommonMark reads it as the item's text
    assert sentences(text) == ["First real sentence is here.", "Second one follows it!", "a list item counts as one"]
