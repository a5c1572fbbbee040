"""Word .docx (mammoth): paragraph styles become headings ("Heading 1" -> #), lists, tables; images dropped.

A .docx is a zip archive. Its directory is checked before anything is inflated, so a zip bomb is
refused from a few hundred bytes of metadata (ARCHIVE_BOMB); the worker's memory limit backs that up.
"""

from __future__ import annotations

import io
import zipfile

import mammoth
import mammoth.images

from kbsearch.convert.base import ConversionError, Converted
from kbsearch.convert.htmltext import html_to_markdown

__all__ = ["MAX_ENTRIES", "MAX_RATIO", "MAX_UNPACKED_BYTES", "DocxConverter", "check_archive"]

# A real .docx is a few dozen parts that unpack to a few MiB; the limits leave a wide margin.
MAX_UNPACKED_BYTES = 256 * 1_048_576
MAX_ENTRIES = 10_000
# Deflate reaches ~1000:1 only on degenerate input; XML of real documents stays under ~30:1.
MAX_RATIO = 200
# Below this a part's ratio does not matter: it cannot cost much whatever it says.
_SMALL_PART = 1_048_576

_STYLE_MAP = """
p[style-name='Title'] => h1:fresh
p[style-name='Subtitle'] => h2:fresh
"""


def check_archive(archive: zipfile.ZipFile) -> None:
    """Refuse archives whose directory promises more than a document can need."""
    infos = archive.infolist()
    if len(infos) > MAX_ENTRIES:
        raise ConversionError(f"the .docx holds {len(infos)} files (limit {MAX_ENTRIES})", code="ARCHIVE_BOMB")
    total = sum(info.file_size for info in infos)
    if total > MAX_UNPACKED_BYTES:
        raise ConversionError(
            f"the .docx would unpack to {total} bytes (limit {MAX_UNPACKED_BYTES}): a zip bomb?",
            code="ARCHIVE_BOMB",
            details={"unpackedBytes": total, "limit": MAX_UNPACKED_BYTES},
        )
    for info in infos:
        if info.file_size > _SMALL_PART and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ConversionError(
                f"the .docx part {info.filename!r} inflates {info.file_size // max(info.compress_size, 1)}:1 "
                f"(limit {MAX_RATIO}:1): a zip bomb?",
                code="ARCHIVE_BOMB",
            )
    if "word/document.xml" not in archive.namelist():
        raise ConversionError(
            "the file is a zip archive but not a Word document (no word/document.xml)", code="CONTENT_TYPE_MISMATCH"
        )


class DocxConverter:
    name = "docx"
    version = 1
    binary = True

    def convert(self, data: bytes) -> Converted:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                check_archive(archive)
            result = mammoth.convert_to_html(
                io.BytesIO(data),
                style_map=_STYLE_MAP,
                convert_image=mammoth.images.img_element(lambda image: {}),  # alt text only, never the bytes
                external_file_access=False,  # a linked image is never opened (mammoth's default, said here)
            )
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, KeyError) as exc:
            raise ConversionError(f"the .docx is damaged: {exc}", code="CORRUPT_DOCUMENT") from None
        except ValueError as exc:  # mammoth's XML reader on malformed parts
            raise ConversionError(f"the .docx is damaged: {exc}", code="CORRUPT_DOCUMENT") from None
        text, _ = html_to_markdown(str(result.value), whole=True)
        return Converted(text)
