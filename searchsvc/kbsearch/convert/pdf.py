"""PDF (pypdf): the text layer, page by page, each page anchored so a hit can name and link its page.

pypdf reads text, not pictures: a scanned PDF without a text layer is refused (NO_TEXT_LAYER) rather
than indexed empty. An encrypted PDF opens only if its user password is empty (owner-only
protection, common for "no printing" PDFs); otherwise it is refused (ENCRYPTED_DOCUMENT).
"""

from __future__ import annotations

import io
import logging
import re

from pypdf import PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError

from kbsearch.convert.base import Anchor, ConversionError, Converted

__all__ = ["PdfConverter"]

# Fewer letters and digits than this across the whole file, with pages, means no usable text layer.
MIN_TEXT_CHARS = 16
_BLANK_RUNS = re.compile(r"\n{3,}")
_WORDS = re.compile(r"\w")


def _open(data: bytes) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except (DependencyError, NotImplementedError) as exc:
                raise ConversionError(
                    f"the PDF is encrypted with a method this service cannot open: {exc}", code="ENCRYPTED_DOCUMENT"
                ) from None
            if not opened:
                raise ConversionError(
                    "the PDF is encrypted with a password; index an unencrypted copy", code="ENCRYPTED_DOCUMENT"
                )
        return reader
    except PyPdfError as exc:
        raise ConversionError(f"the PDF cannot be read: {exc}", code="CORRUPT_DOCUMENT") from None


def _page_text(raw: str) -> str:
    lines = [line.rstrip() for line in raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


class PdfConverter:
    name = "pdf"
    version = 1
    binary = True

    def convert(self, data: bytes) -> Converted:
        reader = _open(data)
        parts: list[str] = []
        anchors: list[Anchor] = []
        offset = 0
        # pypdf logs every malformed object it works around; one bad file must not flood the log.
        logging.getLogger("pypdf").setLevel(logging.ERROR)
        try:
            pages = list(reader.pages)
            for number, page in enumerate(pages, start=1):
                text = _page_text(page.extract_text() or "")
                if not text:
                    continue
                anchors.append(Anchor(offset, page=number))
                parts.append(text)
                offset += len(text) + 2
        except FileNotDecryptedError:
            raise ConversionError("the PDF is encrypted with a password", code="ENCRYPTED_DOCUMENT") from None
        except (PyPdfError, KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
            # pypdf surfaces a broken object graph as whatever the lookup hit first.
            raise ConversionError(f"the PDF is damaged: {type(exc).__name__}: {exc}", code="CORRUPT_DOCUMENT") from None
        text = "\n\n".join(parts)
        if len(_WORDS.findall(text)) < MIN_TEXT_CHARS:
            raise ConversionError(
                f"the PDF has {len(pages)} page(s) but no text layer (a scan?); run OCR on it first",
                code="NO_TEXT_LAYER",
                details={"pages": len(pages)},
            )
        return Converted(text + "\n", tuple(anchors))
