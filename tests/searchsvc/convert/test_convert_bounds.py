"""Hostile AsciiDoc and PDF input: converted or refused with a stable code, in bounded time and output.

The AsciiDoc converter's bound (kbsearch/convert/asciidoc.py): work O(MAX_DEPTH * n), output at
most OUTPUT_FACTOR * n + 64 characters. Hypothesis generates AsciiDoc-ish documents from the
grammar's line shapes; hand-picked shapes that were quadratic before stay as regression tests.
Nothing a document names is read or fetched: a canary file and a local HTTP server prove it.
"""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbsearch.chunker import MarkdownChunker
from kbsearch.chunker.blocks import parse_blocks
from kbsearch.convert import ConversionError, ConversionLimits, ConversionWorker
from kbsearch.convert.asciidoc import OUTPUT_FACTOR, asciidoc_to_markdown
from kbsearch.convert.formats import CONVERTERS
from kbsearch.convert.pdf import MAX_TITLE_CHARS, escape_markdown_lines
from tests.support.formatfiles import pdf_pages
from tests.support.localhttp import local_http, url_of

# Generous: each case takes milliseconds; the bound proves termination on a busy machine.
DEADLINE_SECONDS = 20.0
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def within_bound(source: str) -> str:
    start = time.monotonic()
    out = asciidoc_to_markdown(source)
    assert time.monotonic() - start < DEADLINE_SECONDS
    assert len(out) <= OUTPUT_FACTOR * len(source) + 64, (len(out), len(source))
    return out


# --- AsciiDoc: generated -------------------------------------------------------------------------

_WORD = st.text(alphabet=st.sampled_from("abcXYZ09 _-.:;*+=~^|#<>[]{}/\\'`\t"), max_size=12)
_LINE = st.one_of(
    _WORD,
    st.builds(lambda w: f"= {w}", _WORD),
    st.builds(lambda n, w: "=" * n + " " + w + " " + "=" * n, st.integers(1, 7), _WORD),
    st.builds(lambda c, n: c * n, st.sampled_from("=-~^+._*/"), st.integers(1, 8)),  # underlines, delimiters
    st.sampled_from(["----", "....", "====", "****", "____", "++++", "////", "--", "|===", "+", "", "  ", "\t"]),
    st.builds(lambda w: f"{w}::", _WORD),
    st.builds(lambda w, d: f"{w};; {d}", _WORD, _WORD),
    st.builds(lambda w: f"  {w}", _WORD),  # literal paragraphs and definitions
    st.builds(lambda w: f"[{w}]", _WORD),  # block attributes
    st.sampled_from(['[cols="99999*"]', "[source,c]", "[verse]", "[synopsis]", "[NOTE]", "[quote]", "[listing]"]),
    st.builds(lambda w: f":{w or 'a'}: {w}" * 3, _WORD),  # attribute entries
    st.builds(lambda w: "{a}{" + w + "}" * 4, _WORD),  # attribute references
    st.builds(lambda w: f"include::{w}[]", _WORD),
    st.builds(lambda w: f"image::{w}[{w}]", _WORD),
    st.builds(lambda w: f"http:{w}[" * 3, _WORD),
    st.builds(lambda w: f"<<{w}" * 3, _WORD),
    st.builds(lambda w: f"|{w} |{w}", _WORD),
    st.builds(lambda w: f". {w}", _WORD),
    st.builds(lambda w: f"** {w}", _WORD),
    st.builds(lambda w: f".{w}", _WORD),
    st.builds(lambda w: f"NOTE: {w}", _WORD),
    st.builds(lambda w: f"// {w}", _WORD),
)


@PROPERTY
@given(st.lists(_LINE, max_size=60))
def test_generated_asciidoc_converts_within_the_stated_bound(lines: list[str]):
    source = "\n".join(lines)
    out = within_bound(source)
    assert out == asciidoc_to_markdown(source)  # the same input gives the same text
    assert "include::" not in out


@PROPERTY
@given(st.lists(st.sampled_from(["====", "____", "****", "--", "|===", "----", "....", "x", "", "  y"]), max_size=200))
def test_unbalanced_and_nested_delimiters_stay_within_the_bound(lines: list[str]):
    within_bound("\n".join(lines))


# --- AsciiDoc: shapes that were superlinear --------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "http:" * 60_000,  # every position a URL candidate: a rescan per candidate was quadratic
        "see http:" + "x" * 200_000 + "[",
        "<<" * 100_000,
        "xref:" * 50_000,
        "image:" * 50_000,
        "a" + "::b" * 60_000,  # label marks that never end the line
        "= a" + " " * 100_000 + "b",  # a heading's trailing-space scan
        "\n".join("=" * (4 + k) for k in range(600)),  # 600 nested example blocks, never closed
        "\n".join(("_" * (4 + k)) for k in range(300)) + "\n" + "x\n" * 1000,  # deep quotes: `> ` per level
        ":a: " + "x" * 5000 + "\n" + "{a}" * 5000,  # attribute expansion budget
        '[cols="1000000*"]\n|===\n|a\n|===',  # cols= wider than the table
        "----\n" + "`" * 100_000 + "\n----",  # the fence must outgrow the longest backtick run, once
        "  x\n" * 20_000,  # one literal paragraph
        "x\n" + "=" * 100_000,  # an underline far longer than its title
    ],
    ids=lambda s: repr(s[:24]),
)
def test_shapes_that_were_superlinear_convert_within_the_bound(source: str):
    within_bound(source)


def test_a_table_with_an_oversized_cols_attribute_adds_no_empty_columns():
    out = asciidoc_to_markdown('[cols="1000000*"]\n|===\n|a |b\n|===\n')
    assert out == "| a | b |\n|---|---|\n"


# --- AsciiDoc: nothing is read or fetched ----------------------------------------------------------


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "canary.adoc"
    path.write_text("CANARY-7f3a secret: the service's token\n")
    return path


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that records every request made to it."""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"CANARY-REMOTE")

        def log_message(self, *args: object) -> None:
            pass

    with local_http(Handler) as server:
        yield url_of(server), requests


def test_include_and_block_macros_never_read_a_file_or_fetch_a_url(canary: Path, http_server):
    base, requests = http_server
    source = "\n".join(
        [
            "= Leak",
            "",
            f"include::{canary}[]",
            f"include::{base}/inc.adoc[]",
            f"include::../../{canary.name}[]",
            "----",
            f"include::{canary}[lines=1]",
            "----",
            f"image::{canary}[]",
            f"image::{base}/i.svg[]",
            f"video::{base}/v.mp4[]",
            f"audio::{canary}[]",
            "sys::[cat /proc/self/environ]",
            f"eval::[open('{canary}').read()]",
            f"template::[{canary}]",
            f"link:{base}/l[a link]",
            "",
            "The body.",
        ]
    )
    for out in (asciidoc_to_markdown(source), CONVERTERS["adoc"].convert(source.encode()).text):
        assert "CANARY" not in out
        assert "::" not in out.replace(f"link:{base}", "")
        assert out.startswith("# Leak\n") and "The body." in out
    assert requests == []


def test_an_image_leaves_its_alt_text_and_nothing_of_its_target(canary: Path):
    out = asciidoc_to_markdown(f"image::{canary}[The deployment diagram]\n")
    assert out == "The deployment diagram\n"


# --- PDF ---------------------------------------------------------------------------------------------

BODY = "The rollout plan covers the staging and production clusters in order."


def pdf_title_of(title: str) -> str:
    text = CONVERTERS["pdf"].convert(pdf_pages(BODY, title=title)).text
    return MarkdownChunker(100, 400).chunk(text, name="https://example.test/plan.pdf").title


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("", "Plan"),  # empty: the file name instead
        ("   \t ", "Plan"),
        ("\x00\x01\x07\x08\x7f", "Plan"),  # control characters only
        ("Rollout\x00 plan\x07\n\x0b", "Rollout plan"),
        ("Déploiement ☃\x00\x07\u200b", "Déploiement ☃"),  # written as UTF-16 (not Latin-1)
        ("report.docx", "Plan"),  # a file name, as printer drivers fill it in
        ("Microsoft Word - Rollout.docx", "Plan"),
        ("Rollout ﬁnal plan", "Rollout final plan"),  # NFKC: a ligature becomes letters
        ("## Rollout plan #", "Rollout plan"),
    ],
)
def test_a_lying_pdf_title_is_cleaned_or_ignored(title: str, expected: str):
    assert pdf_title_of(title) == expected


def test_a_ten_thousand_character_pdf_title_is_cut_to_a_bounded_line():
    title = pdf_title_of("Rollout plan " * 770)  # 10,010 characters
    assert title.startswith("Rollout plan Rollout plan") and len(title) <= MAX_TITLE_CHARS + 2


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_any_pdf_title_gives_one_bounded_line_without_control_characters(title: str):
    text = CONVERTERS["pdf"].convert(pdf_pages(BODY, title=title)).text
    first = text.split("\n", 1)[0]
    if first.startswith("# "):
        assert len(first) <= MAX_TITLE_CHARS + 4
        assert all(c.isprintable() for c in first)
    assert BODY in text.replace("\n", " ")


def test_a_pdf_table_with_a_hash_column_becomes_no_headings_and_no_table():
    rows = "\n".join(
        f"# Description Level {i}\n| {i} | control | L{i % 3} |\n|---|---|---|\n- item\n1. first" for i in range(30)
    )
    text = CONVERTERS["pdf"].convert(pdf_pages(rows, title="Application Security Standard")).text
    blocks = parse_blocks(text)
    assert [b.text for b in blocks if b.kind == "heading"] == ["Application Security Standard"]
    assert not [b for b in blocks if b.kind in ("table", "list", "quote", "code")]
    assert MarkdownChunker(100, 400).chunk(text).title == "Application Security Standard"


def test_a_pdf_of_only_hashes_and_pipes_is_refused_as_having_no_text():
    with pytest.raises(ConversionError) as caught:
        CONVERTERS["pdf"].convert(pdf_pages("# | # | ## |\n" * 200, "|||\n###\n" * 100))
    assert caught.value.code == "NO_TEXT_LAYER"


def test_hostile_pdfs_through_the_conversion_worker_convert_or_get_a_stable_code():
    worker = ConversionWorker(ConversionLimits(512 * 1_048_576, 30, 60.0), concurrency=1)
    cases = {
        "hashes": pdf_pages("# | # |\n" * 300),
        "long title": pdf_pages(BODY, title="x" * 10_000),
        "control title": pdf_pages(BODY, title="\x00" * 500),
    }
    outcomes = {}
    for name, data in cases.items():
        try:
            outcomes[name] = worker.convert("pdf", data).text.split("\n", 1)[0][:20]
        except ConversionError as exc:
            outcomes[name] = exc.code
    assert outcomes == {"hashes": "NO_TEXT_LAYER", "long title": "# " + "x" * 18, "control title": BODY[:20]}


_MARKUP_LINE = st.lists(
    st.sampled_from(["#", "##", ">", "-", "*", "+", "1.", "2)", "|", ":--", "---", "===", "```", "~~~", "<div>", "!!!",
                     "???", "    ", "\t", " ", "x", "note", "|---|", "[a]:", "_", "***", "\\"]),
    max_size=6,
).map(" ".join)  # fmt: skip


@PROPERTY
@given(st.lists(_MARKUP_LINE, max_size=30))
def test_escaped_pdf_text_is_read_by_the_chunker_as_paragraphs_only(lines: list[str]):
    text = escape_markdown_lines("\n".join(lines))
    assert {b.kind for b in parse_blocks(text)} <= {"paragraph"}
    assert len(text) <= 2 * len("\n".join(lines)) + 1
