"""PDF (pdfminer.six): the text layer, page by page, each page anchored so a hit can name and link its page.

Why pdfminer.six: it places every glyph and infers the spaces between words from the gaps
between them (LAParams.word_margin), so justified text whose words are set apart by positioning
alone, with no space character in the file, still reads as words. pypdf and PDFium (pypdfium2)
both glued such lines into one token (bench/LOG.md, "PDF extractors").

The text is then made plain markdown-safe text:
- NFKC-normalised, so ligatures (`ﬁ`, `ﬂ`) become letters a search matches (the BM25 encoder
  NFKC-normalises queries and chunks too, kbsearch.store.bm25);
- every line-leading markdown marker is escaped (`#`, `>`, bullets, `1.`, `|`, fences, setext
  underlines, HTML), so a table column of `#` never becomes a heading and no line becomes a table;
- the document's title is its `/Title` metadata when that is sane (control characters removed,
  at most MAX_TITLE_CHARS, at least one letter), put first as the H1 the chunker takes as title.

A scanned PDF without a text layer is refused (NO_TEXT_LAYER) rather than indexed empty. An
encrypted PDF opens only if its user password is empty (owner-only protection, common for "no
printing" PDFs); otherwise it is refused (ENCRYPTED_DOCUMENT).

Bound: the clean-up and escaping are one pass each over the extracted text; the output is at most
18 characters per extracted one (NFKC's largest expansion, U+FDFA; a ligature gives 2 or 3) plus
one backslash per line, and a title of at most MAX_TITLE_CHARS + 4. pdfminer itself runs under the
conversion worker's memory, CPU and wall-clock limits (worker.py).
"""

from __future__ import annotations

import io
import logging
import re
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pdfminer
from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import LAParams, LTContainer, LTFigure, LTTextContainer
from pdfminer.pdfdocument import PDFDocument, PDFEncryptionError, PDFPasswordIncorrect
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pdfminer.pdfparser import PDFParser
from pdfminer.pdftypes import resolve1
from pdfminer.psexceptions import PSException
from pdfminer.utils import decode_text

from kbsearch.convert.base import Anchor, ConversionError, Converted

__all__ = ["MAX_TITLE_CHARS", "PdfConverter", "data_dirs", "escape_markdown_lines"]

# Fewer letters and digits than this across the whole file, with pages, means no usable text layer.
MIN_TEXT_CHARS = 16
# A real title fits in a line; a longer /Title is cut at a word boundary below this.
MAX_TITLE_CHARS = 300
_BLANK_RUNS = re.compile(r"\n{3,}")
_WORDS = re.compile(r"\w")
_SPACES = re.compile(r"\s+")
_SPACE_RUNS = re.compile(r"[ \t]{2,}")
# What makes a line block markdown: ATX headings, quotes, bullets, fences, tables (`|`, `:--`),
# setext underlines and thematic breaks, HTML blocks, `!!!` admonitions; and ordered-list numbers (`1.`, `1)`).
_LINE_MARKER = re.compile(r"[#>*+\-|`~=_:<!?]")
_ORDERED = re.compile(r"\d{1,9}(?=[.)](?:\s|$))")
# Titles that name a file rather than the document (what a printer driver fills in).
_FILE_TITLE = re.compile(r"\.(?:docx?|dvi|tex|pdf|indd|pptx?|xlsx?|odt|rtf|txt|md|html?)$", re.IGNORECASE)
# Damaged files surface as whatever pdfminer's lookup hit first.
_DAMAGED = (PSException, KeyError, ValueError, TypeError, AttributeError, IndexError, AssertionError,
            zlib.error, EOFError, OverflowError)  # fmt: skip


def escape_markdown_lines(text: str) -> str:
    """`text` with each line's leading markdown marker backslash-escaped and indentation dropped."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        number = _ORDERED.match(line)
        if _LINE_MARKER.match(line):
            line = "\\" + line  # CommonMark unescapes `\#` to `#` when it renders
        elif number:
            line = f"{number.group(0)}\\{line[number.end() :]}"  # `1.` -> `1\.`
        out.append(line)
    return "\n".join(out)


def _clean(text: str) -> str:
    """NFKC (ligatures to letters), control characters out, space and blank-line runs folded."""
    text = unicodedata.normalize("NFKC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c)[0] != "C")
    # A justified line has its space glyphs and wider gaps: pdfminer reports both, so runs fold to one.
    lines = [_SPACE_RUNS.sub(" ", line).rstrip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def pdf_title(raw: Any) -> str | None:
    """A /Title value as a one-line title, or None when it is empty, junk or a file name."""
    raw = resolve1(raw)
    if isinstance(raw, bytes):
        title = decode_text(raw)
    elif isinstance(raw, str):
        title = raw
    else:
        return None
    title = unicodedata.normalize("NFKC", title)
    title = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in title)
    title = _SPACES.sub(" ", title).strip().removeprefix("Microsoft Word - ").strip()
    if len(title) > MAX_TITLE_CHARS:
        cut = title.rfind(" ", 0, MAX_TITLE_CHARS)
        title = title[: cut if cut > MAX_TITLE_CHARS // 2 else MAX_TITLE_CHARS].rstrip() + " …"
    title = title.strip("# ")
    if not any(c.isalpha() for c in title) or _FILE_TITLE.search(title) or title.lower() == "untitled":
        return None
    return title


def _open(data: bytes) -> PDFDocument:
    try:
        return PDFDocument(PDFParser(io.BytesIO(data)), password="")
    except PDFPasswordIncorrect:
        raise ConversionError(
            "the PDF is encrypted with a password; index an unencrypted copy", code="ENCRYPTED_DOCUMENT"
        ) from None
    except PDFEncryptionError as exc:
        raise ConversionError(
            f"the PDF is encrypted with a method this service cannot open: {exc}", code="ENCRYPTED_DOCUMENT"
        ) from None
    except _DAMAGED as exc:
        raise ConversionError(f"the PDF cannot be read: {type(exc).__name__}: {exc}", code="CORRUPT_DOCUMENT") from None


def _title(document: PDFDocument) -> str | None:
    for info in document.info:
        if isinstance(info, dict) and "Title" in info:
            return pdf_title(info["Title"])
    return None


def _boxes(container: LTContainer[Any]) -> Iterator[str]:
    """The text boxes of a page, and of the figures (form XObjects) on it, in reading order."""
    stack: list[Iterator[Any]] = [iter(container)]
    while stack:  # a loop, not recursion: figures nest as deep as the file says
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif isinstance(item, LTTextContainer):
            yield item.get_text().rstrip("\n")  # each of its lines ends in "\n", the last one too
        elif isinstance(item, LTFigure):
            stack.append(iter(item))


def _pages(document: PDFDocument) -> list[str]:
    """Each page's text boxes in reading order, one per line: a page reads as one paragraph, as pypdf read it,
    and the blank line between pages is where the chunker prefers to split (a hit names the right page)."""
    manager = PDFResourceManager(caching=True)
    # all_texts: text inside figures gets the same layout analysis (word spaces from glyph gaps);
    # detect_vertical: rotated or vertical lines are read as lines, not one box per letter.
    device = PDFPageAggregator(manager, laparams=LAParams(all_texts=True, detect_vertical=True))
    interpreter = PDFPageInterpreter(manager, device)
    pages = []
    for page in PDFPage.create_pages(document):
        interpreter.process_page(page)
        pages.append("\n".join(_boxes(device.get_result())))
    return pages


class PdfConverter:
    name = "pdf"
    version = 2  # 2: pdfminer.six (spaces from glyph gaps), NFKC, escaped markdown, /Title
    binary = True

    def convert(self, data: bytes) -> Converted:
        # pdfminer logs every malformed object it works around; one bad file must not flood the log.
        logging.getLogger("pdfminer").setLevel(logging.ERROR)
        document = _open(data)
        try:
            title = _title(document)
            raw_pages = _pages(document)
        except PDFPasswordIncorrect:
            raise ConversionError("the PDF is encrypted with a password", code="ENCRYPTED_DOCUMENT") from None
        except _DAMAGED as exc:
            raise ConversionError(f"the PDF is damaged: {type(exc).__name__}: {exc}", code="CORRUPT_DOCUMENT") from None
        if not raw_pages:
            raise ConversionError("the PDF has no pages", code="CORRUPT_DOCUMENT")
        head = f"# {title}\n\n" if title else ""
        parts: list[str] = []
        anchors: list[Anchor] = []
        offset = len(head)
        for number, raw in enumerate(raw_pages, start=1):
            text = escape_markdown_lines(_clean(raw))
            if not text:
                continue
            # The title belongs to the first page with text: its anchor starts at 0, before the title.
            anchors.append(Anchor(0 if not anchors else offset, page=number))
            parts.append(text)
            offset += len(text) + 2
        body = "\n\n".join(parts)
        if len(_WORDS.findall(body)) < MIN_TEXT_CHARS:
            raise ConversionError(
                f"the PDF has {len(raw_pages)} page(s) but no text layer (a scan?); run OCR on it first",
                code="NO_TEXT_LAYER",
                details={"pages": len(raw_pages)},
            )
        return Converted(head + body + "\n", tuple(anchors))


def data_dirs() -> tuple[str, ...]:
    """Folders pdfminer reads at conversion time: its character maps, loaded for CID fonts by encoding name."""
    return (str(Path(pdfminer.__file__).parent / "cmap"),)
