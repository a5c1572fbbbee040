"""Generated markdown, from the grammar's own blocks: the chunker terminates in time proportional to
the input, keeps every chunk within max_chars, produces at most OUTPUT_FACTOR times the input,
loses no word (each is in a chunk's text or heading path), and gives the same chunks every time.

Documents are built from tables of any width and length (headers padded wider than a chunk),
fences never closed, lists and block quotes nested deep, front matter in YAML/TOML/JSON after blank
lines and a BOM, HTML blocks, CRLF/CR line ends, long lines, NULs, combining and right-to-left
text, with every chunk-size setting the service's settings allow. Each generated word is a
marker (`w17`) that must come back in some chunk. Examples Hypothesis once found are kept below
as explicit @example cases.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kbsearch.chunker import MarkdownChunker
from kbsearch.chunker.inline import plain, readable
from kbsearch.chunker.markdown import OUTPUT_FACTOR
from kbsearch.chunker.mdblocks import markdown_blocks
from kbsearch.models import ParsedDocument
from tests.support.properties import properties, within

# Seconds a chunking may take: a hang detector (a generated document takes milliseconds).
HANG_BASE_S = 20.0
HANG_PER_MIB_S = 120.0

ODD_TEXT = st.sampled_from(
    ["\x00", "e\u0301", "\u05e9\u05dc\u05d5\u05dd", "\u202e", "\u0627\u0644\u0633", "\ufeff", " "]
)


@st.composite
def words(draw: st.DrawFn, markers: list[str], most: int = 12) -> str:
    out = []
    for _ in range(draw(st.integers(1, most))):
        marker = f"w{len(markers)}"
        markers.append(marker)
        out.append(marker + (draw(ODD_TEXT) if draw(st.integers(0, 9)) == 0 else ""))
    return " ".join(out)


@st.composite
def block(draw: st.DrawFn, markers: list[str]) -> str:
    kind = draw(
        st.sampled_from(["heading", "paragraph", "table", "fence", "list", "quote", "html", "admonition", "long"])
    )
    if kind == "heading":
        return "#" * draw(st.integers(1, 6)) + " " + draw(words(markers, 6))
    if kind == "paragraph":
        lines = draw(st.integers(1, 6))
        return "\n".join(draw(words(markers)) + draw(st.sampled_from(["", ".", ":", "!"])) for _ in range(lines))
    if kind == "table":
        columns = draw(st.integers(1, 6))
        pad = draw(st.sampled_from([0, 0, 40, 400, 1000]))  # a formatter pads the header to the widest cell
        header = "| " + " | ".join(draw(words(markers, 2)).ljust(pad) for _ in range(columns)) + " |"
        separator = "|" + "|".join("-" * max(3, pad) for _ in range(columns)) + "|"
        rows = [
            "| " + " | ".join(draw(words(markers, 3)) for _ in range(columns)) + " |"
            for _ in range(draw(st.integers(0, 30)))
        ]
        return "\n".join([header, separator, *rows])
    if kind == "fence":
        fence = draw(st.sampled_from(["```", "~~~", "````"]))
        info = draw(st.sampled_from(["", "yaml", "python title='x'", "x" * 900]))
        body = [draw(words(markers, 8)) for _ in range(draw(st.integers(0, 20)))]
        closed = draw(st.booleans())
        return "\n".join([fence + info, *body, *([fence] if closed else [])])
    if kind == "list":
        items = []
        for _ in range(draw(st.integers(1, 15))):
            depth = draw(st.integers(0, 40))
            marker = draw(st.sampled_from(["-", "*", "1.", "+"]))
            items.append("  " * depth + marker + " " + draw(words(markers, 8)))
        return "\n".join(items)
    if kind == "quote":
        depth = draw(st.integers(1, 200))
        return "\n".join(">" * draw(st.integers(1, depth)) + " " + draw(words(markers, 6)) for _ in range(4))
    if kind == "html":
        return draw(
            st.sampled_from(["<div>\n{}\n</div>", '<p align="center">{}</p>', "<details>\n\n{}\n\n</details>"])
        ).format(draw(words(markers, 6)))
    if kind == "admonition":
        return '!!! note "' + draw(words(markers, 2)) + '"\n    ' + draw(words(markers, 8))
    # A long line: of words, or a run with no space in it (its pieces are not whole words).
    if draw(st.booleans()):
        return " ".join(draw(words(markers, 12)) for _ in range(draw(st.integers(10, 80))))
    return "z" * draw(st.integers(1000, 6000))


FRONT_MATTER = st.sampled_from(
    [
        "",
        "---\ntitle: A page\ntags: [a, b]\n---\n",
        "+++\ntitle = 'A page'\n+++\n",
        '{\n  "title": "A page"\n}\n',
        "---\na: &a [x, x]\nb: [*a, *a]\n---\n",
        "---\nnot: [closed\n---\n",
        "---\ntitle: open and never closed\n",
    ]
)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    markers: list[str] = []
    blocks = [draw(block(markers)) for _ in range(draw(st.integers(1, 10)))]
    separators = [draw(st.sampled_from(["\n\n", "\n", "\n\n\n"])) for _ in blocks]
    body = "".join(b + s for b, s in zip(blocks, separators, strict=True))
    lead = draw(st.sampled_from(["", "\ufeff", "\n\n", "\ufeff\n"]))
    text = lead + draw(FRONT_MATTER) + body
    newline = draw(st.sampled_from(["\n", "\n", "\r\n", "\r"]))
    return text.replace("\n", newline), markers


# min_chars >= 50, max_chars >= 100, min <= max, 0 <= overlap < min: ChunkSettings' bounds.
@st.composite
def chunk_settings(draw: st.DrawFn) -> tuple[int, int, int]:
    high = draw(st.integers(100, 4000))
    low = draw(st.integers(50, high))
    return low, high, draw(st.integers(0, low - 1))


def chunked(text: str, sizes: tuple[int, int, int]) -> ParsedDocument:
    budget = HANG_BASE_S + HANG_PER_MIB_S * len(text) / (1 << 20)
    return within(budget, lambda: MarkdownChunker(*sizes).chunk(text))


def check_invariants(text: str, markers: list[str], sizes: tuple[int, int, int]) -> None:
    doc = chunked(text, sizes)
    _, high, overlap = sizes
    produced = [c.text for c in doc.chunks]
    assert all(len(t) <= high for t in produced), max(len(t) for t in produced)
    # Each chunk repeats at most `overlap` characters of the one before it.
    assert sum(map(len, produced)) <= OUTPUT_FACTOR * len(doc.body) + high + overlap * len(produced)
    # Every word of the body comes back in some chunk: in its text, or in its heading path (a heading
    # the path names is not repeated as text). Front matter is not body: its words may not.
    found = set()
    for chunk in doc.chunks:
        found.update(re.findall(r"w\d+", chunk.text + " " + " ".join(chunk.headings)))
    in_body = set(re.findall(r"w\d+", doc.body))
    lost = [m for m in markers if m in in_body and m not in found]
    assert not lost, lost[:10]
    again = MarkdownChunker(*sizes).chunk(text)
    assert [(c.text, c.start, c.end, c.embed_text) for c in again.chunks] == [
        (c.text, c.start, c.end, c.embed_text) for c in doc.chunks
    ]


@properties(max_examples=40)
@given(documents(), chunk_settings())
# Found by Hypothesis: a table header padded wider than the chunk, split without repeating it.
@example(("| w0" + " " * 1200 + " |\n|" + "-" * 1200 + "|\n| w1 |\n", ["w0", "w1"]), (50, 100, 0))
# A run of empty sections longer than a chunk once kept only its last heading's words.
@example(
    ("".join(f"###### w{2 * i}\n\n# w{2 * i + 1}\n\n" for i in range(40)), [f"w{i}" for i in range(80)]), (50, 100, 0)
)
# Sibling headings before a block too large for a chunk (an unclosed fence) were dropped as "in the path".
@example(
    (
        "# w0\x00\n\n# w1\x00\n\n```\n\n# w2\x00 w3\x00 w4\x00 w5\n\n# w6\x00\n\n"
        + "".join(f"# w{i}\n\n" for i in range(7, 16)),
        [f"w{i}" for i in range(16)],
    ),
    (50, 100, 0),
)
# A heading's first part overran max_chars by the indentation the prose splitter trims.
@example(
    ("###### w0\n\n" + "\n".join(" " * 60 + " ".join(f"w{10 * i + j + 1}" for j in range(10)) for i in range(6)),
     [f"w{i}" for i in range(61)]),
    (54, 233, 18),
)  # fmt: skip
# The lead-in of a one-item list too large for a chunk was dropped (the list is split as prose).
@example(("w0\n\n- " + " ".join(f"w{i}" for i in range(1, 41)) + "\n", [f"w{i}" for i in range(41)]), (50, 100, 0))
# Overlap on a run without spaces: each chunk repeats up to `overlap` characters (part of the bound).
@example(("# w0\n\n" + "z" * 1000 + "\n\n# w1\n", ["w0", "w1"]), (50, 100, 37))
def test_generated_markdown_chunks_within_bounds(document: tuple[str, list[str]], sizes: tuple[int, int, int]) -> None:
    text, markers = document
    check_invariants(text, markers, sizes)


def test_the_hang_detector_fails_a_call_that_does_not_return() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match="did not finish"):
        within(0.2, lambda: time.sleep(5))
    assert time.monotonic() - started < 5


@properties(max_examples=60)
@given(documents())
def test_the_answer_reader_of_generated_markdown_is_bounded(document: tuple[str, list[str]]) -> None:
    # mdblocks, the view extractive answers and citations read chunks through, over the same documents.
    text, _ = document
    budget = HANG_BASE_S + HANG_PER_MIB_S * len(text) / (1 << 20)
    blocks = within(budget, lambda: markdown_blocks(text))
    # A block's text is its own source plus at most two fences; a list repeats its items' text.
    out = sum(len(b.text) + sum(len(i.text) + len(i.code or "") for i in b.items) for b in blocks)
    assert out <= 3 * len(text) + 16 * len(blocks)
    assert [(b.kind, b.text, b.items) for b in markdown_blocks(text)] == [(b.kind, b.text, b.items) for b in blocks]


INLINE_PIECES = [
    *"ab `*_~[]()<>!&;#{}%-/:\n\\",
    "&amp;",
    "&#1;",
    "<!--",
    "-->",
    "](",
    "**",
    "<b>",
    "{{<",
    ">}}",
    "\x00",
]
INLINE_TEXT = st.lists(st.sampled_from(INLINE_PIECES), max_size=400).map("".join)


@properties(max_examples=200)
@given(INLINE_TEXT)
def test_the_inline_stripper_never_grows_its_input(text: str) -> None:
    assert len(plain(text)) <= len(text)
    assert len(readable(text)) <= len(text)
    assert plain(text) == plain(text)


@pytest.mark.parametrize(
    "shape",
    ["[" * 200_000, "*a" * 100_000, "_a" * 100_000, "`" * 200_000, "[a](" * 50_000, "<a " * 70_000, "~~a" * 70_000],
)
def test_the_inline_stripper_is_linear_on_openers_never_closed(shape: str) -> None:
    # Bounded patterns: about MAX_SPAN steps per start position, so 200 KB take well under a second.
    assert len(within(HANG_BASE_S, lambda: plain(shape))) <= len(shape)
