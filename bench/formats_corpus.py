"""The Argo CD docs pages rewritten into every format the service converts, by real tools.

pandoc (Debian's package) writes reStructuredText, AsciiDoc, plain text, HTML and notebooks
(one run per format over all pages joined by marker paragraphs, then split again: 5 runs instead
of 2,275) and Word files (one run per page). PDFs are printed from pandoc's HTML by fpdf2 (its
write_html, DejaVu fonts; images left out, as pandoc could not fetch them either). MDX is the
markdown page with an MDX import line in front, as a page moved to Docusaurus starts. Each HTML
page is wrapped in a site's chrome: a header with a navigation menu of 40 page titles and a
footer, the same on every page, so navigation that leaks into the index would show.

    python -m bench.formats_corpus --corpus /tmp/argocd-docs --out /tmp/kb-formats
"""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

FORMATS = ("markdown", "mdx", "rst", "adoc", "html", "txt", "ipynb", "docx", "pdf")
EXTENSION = {"markdown": ".md", "mdx": ".mdx", "rst": ".rst", "adoc": ".adoc", "html": ".html", "txt": ".txt",
             "ipynb": ".ipynb", "docx": ".docx", "pdf": ".pdf"}  # fmt: skip
_JOINED = {"rst": "rst", "adoc": "asciidoc", "txt": "plain", "html": "html5"}
_MARKER = "KBSPLITMARKER{:04d}"
_FONTS = Path("/usr/share/fonts/truetype/dejavu")


def pages(corpus: Path) -> list[Path]:
    return sorted(p.relative_to(corpus) for p in (corpus / "docs").rglob("*.md"))


def _pandoc(args: list[str], source: str | None = None) -> str:
    done = subprocess.run(
        ["nice", "-n", "10", "pandoc", "-f", "gfm", "--wrap=none", *args],
        input=source, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def _joined(corpus: Path, paths: list[Path], fmt: str) -> dict[Path, str]:
    """One pandoc run over every page, split again at the marker paragraphs."""
    source = "\n\n".join(f"{_MARKER.format(i)}\n\n{(corpus / p).read_text()}" for i, p in enumerate(paths))
    out = _pandoc(["-t", _JOINED[fmt]], source)
    parts = re.split(r"(?:<p>)?KBSPLITMARKER(\d{4})(?:</p>)?\n", out)
    texts = {paths[int(parts[i])]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    assert len(texts) == len(paths), (fmt, len(texts), len(paths))
    return texts


def _joined_notebooks(corpus: Path, paths: list[Path]) -> dict[Path, str]:
    """One pandoc run to a notebook of every page, its cells split again at the marker cells."""
    source = "\n\n".join(f"{_MARKER.format(i)}\n\n{(corpus / p).read_text()}" for i, p in enumerate(paths))
    # pandoc embeds a notebook's images as attachments and stops at one it cannot fetch: alt text only.
    source = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", source)
    whole = json.loads(_pandoc(["-t", "ipynb"], source))
    notebooks: dict[Path, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for cell in whole["cells"]:
        if cell["cell_type"] != "markdown":
            current.append(cell)
            continue
        # pandoc joins consecutive paragraphs into one markdown cell: a marker may sit mid-cell.
        pieces = re.split(r"KBSPLITMARKER(\d{4})", "".join(cell.get("source") or []))
        for i, piece in enumerate(pieces):
            if i % 2 == 1:
                current = notebooks.setdefault(paths[int(piece)], [])
            elif piece.strip():
                current.append({**cell, "source": piece.strip(), "id": f"{len(current)}"})
    assert len(notebooks) == len(paths), (len(notebooks), len(paths))
    return {path: json.dumps(whole | {"cells": cells}, indent=1) for path, cells in notebooks.items()}


def _site(title: str, body: str, menu: str) -> str:
    body = re.sub(r"<img[^>]*>", "", body)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} - Argo CD</title></head>"
        f"<body><header><a href='/'>Argo CD</a><nav><ul>{menu}</ul></nav></header>"
        f"<main><article>{body}</article></main>"
        "<footer>Copyright The Argo Authors. Docs built with pandoc.</footer></body></html>"
    )


def _pdf_html(body_html: str) -> str:
    """pandoc's HTML as fpdf2's write_html takes it: no images, no in-page links, plain table cells."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(body_html, "html.parser")
    for img in soup.find_all("img"):
        img.decompose()
    for link in soup.find_all("a"):
        link.unwrap()
    for cell in soup.find_all(["td", "th"]):
        for inner in cell.find_all(True):
            inner.unwrap()
    return str(soup)


def _pdf(body_html: str, plain: str) -> tuple[bytes, bool]:
    """The page printed by fpdf2 from HTML; when write_html cannot lay it out, its plain text. (pdf, laid out)"""
    from fpdf import FPDF, FontFace

    def new() -> FPDF:
        pdf = FPDF()
        pdf.add_font("dejavu", fname=str(_FONTS / "DejaVuSans.ttf"))
        pdf.add_font("dejavu", style="B", fname=str(_FONTS / "DejaVuSans-Bold.ttf"))
        pdf.add_font("dejavu", style="I", fname=str(_FONTS / "DejaVuSans-Oblique.ttf"))
        pdf.add_font("dejavu", style="BI", fname=str(_FONTS / "DejaVuSans-BoldOblique.ttf"))
        pdf.add_font("dejavumono", fname=str(_FONTS / "DejaVuSansMono.ttf"))
        pdf.set_font("dejavu", size=10)
        pdf.add_page()
        return pdf

    mono = FontFace(family="dejavumono")
    try:
        pdf = new()
        pdf.write_html(_pdf_html(body_html), font_family="dejavu", tag_styles={"code": mono, "pre": mono})
        return bytes(pdf.output()), True
    except Exception:  # noqa: BLE001 - fpdf2's HTML layout covers a subset; the text still makes a PDF
        pdf = new()
        pdf.multi_cell(0, 5, plain)
        return bytes(pdf.output()), False


def _pdf_file(body_html: str, plain: str, out: Path) -> bool:
    """Write one page's PDF (in a worker process: fpdf2's layout is pure Python); whether HTML layout worked."""
    data, laid_out = _pdf(body_html, plain)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return laid_out


def build(corpus: Path, out: Path) -> dict[str, dict[str, float]]:
    """Write every page in every format under out/<format>/; returns seconds and failures per format."""
    paths = pages(corpus)
    report: dict[str, dict[str, float]] = {}
    for fmt in FORMATS:
        (out / fmt).mkdir(parents=True, exist_ok=True)

    def target(fmt: str, path: Path) -> Path:
        return out / fmt / path.with_suffix(EXTENSION[fmt])

    def write(fmt: str, path: Path, data: str | bytes) -> None:
        file = target(fmt, path)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(data.encode() if isinstance(data, str) else data)

    start = time.monotonic()
    for path in paths:
        text = (corpus / path).read_text()
        write("markdown", path, text)
        write("mdx", path, "import Admonition from '@theme/Admonition';\n\n" + text)
    report["markdown"] = report["mdx"] = {"seconds": time.monotonic() - start, "failed": 0}
    titles = []
    for path in paths:
        first = re.search(r"^# (.+)$", (corpus / path).read_text(), re.MULTILINE)
        titles.append(first.group(1) if first else path.stem)
    menu = "".join(f"<li><a href='/{i}'>{html.escape(t)}</a></li>" for i, t in enumerate(titles[:40]))
    joined_html: dict[Path, str] = {}
    joined_plain: dict[Path, str] = {}
    for fmt in ("rst", "adoc", "txt", "html"):
        start = time.monotonic()
        if fmt not in ("html", "txt") and all(target(fmt, p).exists() for p in paths):  # a rerun keeps its files
            report[fmt] = {"seconds": 0.0, "failed": 0}
            continue
        texts = _joined(corpus, paths, fmt)
        joined_plain = texts if fmt == "txt" else joined_plain
        for path, text in texts.items():
            write(fmt, path, _site(titles[paths.index(path)], text, menu) if fmt == "html" else text)
        joined_html = texts if fmt == "html" else joined_html
        report[fmt] = {"seconds": time.monotonic() - start, "failed": 0}

    laid_out: list[bool] = []

    def per_page(fmt: str, path: Path) -> bool:
        if target(fmt, path).exists():
            return True
        try:
            if fmt == "pdf":
                data, html_ok = _pdf(joined_html[path], joined_plain[path])
                laid_out.append(html_ok)
                write(fmt, path, data)
            else:
                target(fmt, path).parent.mkdir(parents=True, exist_ok=True)
                _pandoc(["-t", fmt, "-o", str(target(fmt, path)), str(corpus / path)])
        except Exception as exc:  # noqa: BLE001 - a page the tool cannot write is counted, not fatal
            print(f"{fmt}: {path}: {type(exc).__name__}: {str(exc)[:120]}")
            return False
        return True

    start = time.monotonic()
    for path, notebook in _joined_notebooks(corpus, paths).items():
        write("ipynb", path, notebook)
    report["ipynb"] = {"seconds": time.monotonic() - start, "failed": 0}
    start = time.monotonic()
    todo = [p for p in paths if not target("pdf", p).exists()]
    with ProcessPoolExecutor(2) as processes:
        jobs = [processes.submit(_pdf_file, joined_html[p], joined_plain[p], target("pdf", p)) for p in todo]
        laid_out.extend(job.result() for job in jobs)
    report["pdf"] = {"seconds": time.monotonic() - start, "failed": 0, "plainTextOnly": laid_out.count(False)}
    print("pdf", report["pdf"], flush=True)
    for fmt in ("docx",):
        start = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            ok = list(pool.map(lambda p, f=fmt: per_page(f, p), paths))
        report[fmt] = {"seconds": time.monotonic() - start, "failed": ok.count(False)}
        if fmt == "pdf":
            report[fmt]["plainTextOnly"] = laid_out.count(False)
        print(fmt, report[fmt], flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="a checkout of corpus.bundle")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(build(args.corpus, args.out))


if __name__ == "__main__":
    main()
