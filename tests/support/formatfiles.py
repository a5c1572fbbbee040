"""Real files of every format the service converts, made at test time by the libraries that write them.

PDFs by fpdf2 (pages of text, an image-only "scan", encryption), Word files by
python-docx, notebooks by nbformat; the text formats are written out here as their authors would.
"""

from __future__ import annotations

import io
import zipfile

import nbformat
from docx import Document
from fpdf import FPDF
from fpdf.enums import EncryptionMethod
from PIL import Image


def pdf_pages(
    *pages: str, title: str | None = None, encryption: tuple[str, str, EncryptionMethod] | None = None
) -> bytes:
    """A PDF with one page per string, each with a real text layer; `/Title` and encryption optional.

    `encryption` is (user password, owner password, method).
    """
    pdf = FPDF()
    if title is not None:
        pdf.set_title(title)
    if encryption is not None:
        user, owner, method = encryption
        pdf.set_encryption(owner_password=owner, user_password=user, encryption_method=method)
    pdf.set_font("helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def long_pdf(pages: int) -> bytes:
    """Many pages of real text (one page repeated, one content stream shared): small, but slow to extract."""
    from pypdf import PdfReader, PdfWriter

    page = PdfReader(io.BytesIO(pdf_pages("slow pages of lorem ipsum dolor sit amet " * 12))).pages[0]
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf(text: str, password: str = "s3cret") -> bytes:
    """A PDF that opens only with `password` (AES-256)."""
    return pdf_pages(text, encryption=(password, password + "-owner", EncryptionMethod.AES_256))


def owner_only_pdf(text: str) -> bytes:
    """A PDF encrypted with an empty user password: anyone may read it, as viewers do."""
    return pdf_pages(text, encryption=("", "owner", EncryptionMethod.AES_128))


def scanned_pdf(pages: int = 2) -> bytes:
    """Pages that are only pictures, like a scanner's output: no text layer at all."""
    pdf = FPDF()
    picture = Image.new("L", (200, 100), color=255)
    for x in range(20, 180):
        picture.putpixel((x, 50), 0)
    for _ in range(pages):
        pdf.add_page()
        pdf.image(picture, x=10, y=10, w=100)
    return bytes(pdf.output())


def docx_file(build) -> bytes:  # type: ignore[no-untyped-def]
    """A .docx written by python-docx; `build` adds the content to the Document."""
    document = Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_bomb_docx(inflated_bytes: int = 64 * 1_048_576) -> bytes:
    """A real .docx whose document.xml inflates from a few hundred KiB to `inflated_bytes`."""
    base = docx_file(lambda d: d.add_paragraph("harmless"))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for info in source.infolist():
            if info.filename == "word/document.xml":
                continue
            bomb.writestr(info, source.read(info.filename))
        with bomb.open("word/document.xml", "w", force_zip64=True) as part:
            chunk = b" " * 1_048_576
            for _ in range(inflated_bytes // len(chunk)):
                part.write(chunk)
    return out.getvalue()


def notebook(cells: list[nbformat.NotebookNode]) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nb.cells = cells
    return nbformat.writes(nb).encode("utf-8")


markdown_cell = nbformat.v4.new_markdown_cell
code_cell = nbformat.v4.new_code_cell
stream_output = nbformat.v4.new_output
