"""The AsciiDoc and PDF converters on real files nobody here wrote (tests/fixtures/realworld/README.md).

What a reader and a search need from them: the document's title, its section headings, words
that are words (no runs glued together), letters rather than ligatures, and no raw markup.
"""

from __future__ import annotations

import base64
import re

import pytest

from kbsearch.chunker import MarkdownChunker
from kbsearch.chunker.blocks import parse_blocks
from kbsearch.convert.formats import CONVERTERS
from tests.support.paths import REPO_ROOT

REAL = REPO_ROOT / "tests" / "fixtures" / "realworld"
_ALPHA = re.compile(r"[^\W\d_]+")
LIGATURES = "\ufb00\ufb01\ufb02\ufb03\ufb04\ufb05\ufb06"
# Share of alphabetic tokens longer than 20 letters: English prose has almost none (the issue's
# glued PDF had 17.7%, its Word twin 0.01%).
GLUED_SHARE = 0.01


def glued_share(text: str) -> float:
    tokens = _ALPHA.findall(text)
    return sum(len(t) > 20 for t in tokens) / max(len(tokens), 1)


def converted(fmt: str, name: str) -> tuple[str, str | None, list[str]]:
    """(text, title, headings as the chunker parses them) of a real file; its name gives the fallback title "File"."""
    text = CONVERTERS[fmt].convert((REAL / ("asciidoc" if fmt == "adoc" else fmt) / name).read_bytes()).text
    title = MarkdownChunker(200, 800).chunk(text, name="https://example.test/file.bin").title
    return text, title, [b.text for b in parse_blocks(text) if b.kind == "heading"]


# --- AsciiDoc ------------------------------------------------------------------------------------

ADOC = [
    ("asciidoc.1.txt", "ASCIIDOC(1)", {"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "BUGS"}),
    ("a2x.1.txt", "A2X(1)", {"NAME", "SYNOPSIS", "OPTIONS", "OUTPUT FILES", "RESOURCES", "EXAMPLES", "CONF FILES"}),
    ("code-filter-readme.txt", "AsciiDoc Code Filter", {"Files", "Installation", "Help"}),
    ("asciidoc-graphviz-sample.txt", "Graphviz filter for AsciiDoc", {"Introduction", "Examples", "Simple", "Layout"}),
]


@pytest.mark.parametrize(("name", "title", "sections"), ADOC)
def test_real_asciidoc_keeps_its_title_and_sections_and_no_raw_syntax(name: str, title: str, sections: set[str]):
    text, found_title, headings = converted("adoc", name)
    assert found_title == title
    assert sections <= set(headings), sorted(sections - set(headings))
    outside_code = re.sub(r"^(`{3,}).*?^\1$", "", text, flags=re.MULTILINE | re.DOTALL)
    for raw in (r"^\S.*::$", r"^\S.*;;\s", r"^\+$", r"^\[(verse|synopsis|source[^\]]*)\]$", r"^//", r"::\S*\[\]$"):
        assert not re.search(raw, outside_code, re.MULTILINE), raw
    assert not re.search(r"^[-=~^+]{4,}$", outside_code, re.MULTILINE)  # no underline left as text
    assert glued_share(text) < GLUED_SHARE


def test_the_man_page_reads_as_sections_with_its_options_as_a_list():
    text, _, _ = converted("adoc", "asciidoc.1.txt")
    assert text.startswith("# ASCIIDOC(1)\n\n## NAME\n\nasciidoc - converts an AsciiDoc text file to HTML or DocBook\n")
    assert "- **-a, --attribute='ATTRIBUTE'**\n  Define or delete document attribute." in text
    assert "```" not in text.split("## OPTIONS", 1)[1].split("## ", 1)[0]  # no listing opened by an underline


def test_the_issues_man_page_reproduction_gives_its_title_and_sections():
    source = (
        "guide(1)\n========\n\nNAME\n----\nguide - do things\n\nOPTIONS\n-------\n--force::\n"
        "\tOverwrite the target.\n+\nMore text.\n\ninclude::other.adoc[]\n"
    )
    text = CONVERTERS["adoc"].convert(source.encode()).text
    assert text == (
        "# guide(1)\n\n## NAME\n\nguide - do things\n\n## OPTIONS\n\n"
        "- **--force**\n  Overwrite the target.\n\n  More text.\n"
    )
    assert MarkdownChunker(100, 400).chunk(text).title == "guide(1)"


# --- PDF -----------------------------------------------------------------------------------------

PDF_TITLES = [
    ("example.pdf", "PDF Example Document"),  # its /Title
    ("imagemagick-images.pdf", "imagemagick-images"),  # its /Title, less the NUL it ends with
    ("bytes.pdf", "File"),  # /Title is a Word file's name: the URI's name instead
    ("Seige_of_Vicksburg_Sample_OCR.pdf", "File"),  # /Title `Binder1.pdf`: a file name too
    ("crazyones.pdf", "File"),  # no /Title
    ("pdflatex-outline.pdf", "File"),
]


@pytest.mark.parametrize(("name", "title"), PDF_TITLES)
def test_real_pdfs_take_a_sane_metadata_title_and_nothing_else_as_title(name: str, title: str):
    _, found, _ = converted("pdf", name)
    assert found == title


@pytest.mark.parametrize("name", [name for name, _ in PDF_TITLES])
def test_real_pdf_text_has_words_letters_and_no_markdown_structure(name: str):
    text, title, headings = converted("pdf", name)
    assert glued_share(text) < GLUED_SHARE
    assert not any(c in text for c in LIGATURES)
    assert headings == ([title] if title != "File" else [])  # the metadata title, if any, is the only heading
    body = text.split("\n", 1)[1] if text.startswith("# ") else text
    assert not re.search(r"^(#|>|[-*+] |\d+[.)] |\||```|===)", body, re.MULTILINE)


def test_ligatures_in_a_real_pdf_become_letters_a_search_matches():
    text, _, _ = converted("pdf", "crazyones.pdf")
    assert "The misfits. The rebels." in text and "see things differently" in text


def test_a_justified_real_latex_pdf_reads_as_separate_words():
    text, _, _ = converted("pdf", "pdflatex-outline.pdf")
    assert "Hello, here is some text without a meaning. This text should show what a" in text
    assert len(_ALPHA.findall(text)) > 1000


# --- through the service -------------------------------------------------------------------------


async def test_the_issues_reproduction_through_rest_reads_as_sections_and_finds_a_pdf_by_its_title(api):
    body = {
        "uri": "https://git.example/r/blob/main/guide.adoc",
        "contentType": "text/asciidoc",
        "content": "guide(1)\n========\n\nNAME\n----\nguide - do things\n\nOPTIONS\n-------\n--force::\n"
        "\tOverwrite the target.\n+\nMore text.\n\ninclude::other.adoc[]\n",
    }
    response = await api.put("/api/v1/documents", json=body)
    assert response.status_code == 200, response.text
    page = await api.get("/api/v1/documents/text", params={"uri": body["uri"]})
    assert page.status_code == 200, page.text
    assert page.json()["title"] == "guide(1)"
    assert page.json()["text"].startswith("# guide(1)\n\n## NAME\n\nguide - do things\n\n## OPTIONS\n")
    assert "```" not in page.json()["text"] and "include::" not in page.json()["text"]

    data = (REAL / "pdf" / "crazyones.pdf").read_bytes()
    pdf = {"uri": "docs/crazy.pdf", "content": base64.b64encode(data).decode(), "contentEncoding": "base64"}
    assert (await api.put("/api/v1/documents", json=pdf)).status_code == 200
    # "misﬁts" in the file: the ligature is letters in the index, so the plain word finds it.
    response = await api.post("/api/v1/search", json={"query": "misfits rebels", "mode": "keyword"})
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["uri"] == "docs/crazy.pdf"
