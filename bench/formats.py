"""Format robustness: the Argo CD docs in every format, each indexed as its own source, the 80 questions asked.

The pages come from bench/formats_corpus.py (pandoc, fpdf2). One real service (uvicorn in a
thread, Qdrant Edge in a temporary directory, the bundled MiniLM on the default backend) takes
every page of every format through PUT /api/v1/documents (PDF and Word base64-encoded), each
format as source `<format>`. Each question of ../shared/eval/argocd-docs/questions.jsonl is then
searched (hybrid, the default) within each source; chunks map back to their page (path without
the format's extension) and the ranked pages are scored: hit@5 (a `relevant` page among the first
five) and MRR@10 (1/rank of the first relevant page within ten). `also_relevant` is not counted.

Conversion throughput is measured apart, with the service's ConversionWorker (a child process per
page under the default limits), so the figure is the converter's and not the embedder's.

    python -m bench.formats_corpus --corpus /tmp/argocd-docs --out /tmp/kb-formats
    python -m bench.formats --pages /tmp/kb-formats --questions ../shared/eval/argocd-docs/questions.jsonl

With --real, one row per format over real files nobody here wrote (tests/fixtures/realworld, see
its README), each converted by the ConversionWorker: conversion success, the share of alphabetic
tokens over 20 letters (words glued together), headings recovered of those the author wrote,
titles right, ligatures left. No service, no model:

    python -m bench.formats --real tests/fixtures/realworld
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    http_client,
    load_average,
    load_text,
    local_embedder,
    print_table,
    run_service,
    service_cache,
    write_result,
)
from bench.formats_corpus import EXTENSION, FORMATS

NAME = "formats"
BINARY = {"pdf", "docx"}
TARGET, TARGET_PDF = 0.05, 0.10  # hit@5 within this of markdown's


def _files(pages: Path, fmt: str) -> list[Path]:
    return sorted((pages / fmt).rglob(f"*{EXTENSION[fmt]}"))


def _page(uri: str, fmt: str) -> str:
    path = uri.split(f"/{fmt}/", 1)[1]
    return path[: -len(EXTENSION[fmt])] + ".md"


def conversion_throughput(pages: Path, fmt: str) -> dict[str, float]:
    from kbsearch.convert import ConversionError, ConversionLimits, ConversionWorker
    from kbsearch.settings import Settings

    settings = Settings()
    worker = ConversionWorker(
        ConversionLimits(settings.conversion.convert_memory_mb * 1_048_576, settings.conversion.convert_cpu_seconds,
                         settings.conversion.convert_wall_seconds),
        concurrency=1,
    )  # fmt: skip
    files = _files(pages, fmt)
    size = failed = 0
    start = time.monotonic()
    for file in files:
        data = file.read_bytes()
        size += len(data)
        try:
            worker.convert(fmt, data)
        except ConversionError:
            failed += 1
    seconds = time.monotonic() - start
    rates = {"pagesPerSecond": round(len(files) / seconds, 1), "mbPerSecond": round(size / seconds / 1e6, 2)}
    return {"pages": len(files), "failed": failed, "seconds": round(seconds, 2), **rates}


def ingest(client: Any, pages: Path, fmt: str) -> dict[str, Any]:
    codes: dict[str, int] = {}
    chunks = 0
    start = time.monotonic()
    for file in _files(pages, fmt):
        rel = file.relative_to(pages / fmt).as_posix()
        body: dict[str, Any] = {"uri": f"https://bench.local/{fmt}/{rel}", "metadata": {"sourceIdentifier": fmt}}
        if fmt in BINARY:
            body |= {"content": base64.b64encode(file.read_bytes()).decode(), "contentEncoding": "base64"}
        else:
            body["content"] = file.read_text()
        response = client.put("/api/v1/documents", json=body)
        if response.status_code == 200:
            chunks += response.json()["chunks"]
        else:
            code = response.json()["error"]["code"]
            codes[code] = codes.get(code, 0) + 1
    return {"seconds": round(time.monotonic() - start, 1), "chunks": chunks, "refused": codes}


def score(client: Any, fmt: str, questions: list[dict[str, Any]]) -> dict[str, float]:
    hits = reciprocal = 0.0
    for question in questions:
        body = {"query": question["question"], "limit": 50, "filter": {"sourceIdentifier": fmt}}
        response = client.post("/api/v1/search", json=body)
        response.raise_for_status()
        ranked: list[str] = []
        for result in response.json()["results"]:
            page = _page(result["uri"], fmt)
            if page not in ranked:
                ranked.append(page)
        relevant = set(question["relevant"])
        first = next((rank for rank, page in enumerate(ranked[:10], start=1) if page in relevant), None)
        hits += first is not None and first <= 5
        reciprocal += 1 / first if first else 0.0
    return {"hit@5": round(hits / len(questions), 4), "mrr@10": round(reciprocal / len(questions), 4)}


# The real files' titles (None: the file names none, so the URI's name is the title) and the
# section headings their authors wrote (a PDF's text layer has none: its title is its one heading).
REAL_FILES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "asciidoc/asciidoc.1.txt": ("adoc", "ASCIIDOC(1)", ("ASCIIDOC(1)", "NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS",
                                "EXIT STATUS", "BUGS", "AUTHOR", "RESOURCES", "SEE ALSO", "COPYING")),
    "asciidoc/a2x.1.txt": ("adoc", "A2X(1)", ("A2X(1)", "NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS",
                           "OUTPUT FILES", "RESOURCES", "EXAMPLES", "REQUISITES", "CONF FILES", "BUGS", "AUTHOR",
                           "SEE ALSO", "COPYING")),
    "asciidoc/code-filter-readme.txt": ("adoc", "AsciiDoc Code Filter",
                                        ("AsciiDoc Code Filter", "Files", "Installation", "Help")),
    "asciidoc/asciidoc-graphviz-sample.txt": ("adoc", "Graphviz filter for AsciiDoc", (
        "Graphviz filter for AsciiDoc", "Introduction", "Examples", "Simple", "Using options", "Using Layout",
        "Layout")),
    "pdf/example.pdf": ("pdf", "PDF Example Document", ("PDF Example Document",)),
    "pdf/imagemagick-images.pdf": ("pdf", "imagemagick-images", ("imagemagick-images",)),
    "pdf/bytes.pdf": ("pdf", None, ()),
    "pdf/Seige_of_Vicksburg_Sample_OCR.pdf": ("pdf", None, ()),
    "pdf/crazyones.pdf": ("pdf", None, ()),
    "pdf/pdflatex-outline.pdf": ("pdf", None, ()),
}  # fmt: skip
_ALPHA = re.compile(r"[^\W\d_]+")
_LIGATURES = re.compile("[\ufb00-\ufb06]")


def real_world(folder: Path) -> dict[str, dict[str, Any]]:
    """Per format: files, converted, glued-token share, headings recovered, titles right, ligatures."""
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.chunker.blocks import parse_blocks
    from kbsearch.convert import ConversionError, ConversionLimits, ConversionWorker
    from kbsearch.settings import Settings

    conversion = Settings().conversion
    limits = ConversionLimits(conversion.convert_memory_mb * 1_048_576, conversion.convert_cpu_seconds,
                              conversion.convert_wall_seconds)  # fmt: skip
    worker = ConversionWorker(limits, concurrency=1)
    chunker = MarkdownChunker()  # the default chunk sizes: only the title is read from it
    rows: dict[str, dict[str, Any]] = {}
    for path, (fmt, title, headings) in REAL_FILES.items():
        row = rows.setdefault(fmt, {"files": 0, "converted": 0, "tokens": 0, "tokensOver20": 0, "headings": 0,
                                    "headingsFound": 0, "titlesRight": 0, "ligatures": 0, "seconds": 0.0,
                                    "wrong": []})  # fmt: skip
        row["files"] += 1
        row["headings"] += len(headings)
        start = time.monotonic()
        try:
            text = worker.convert(fmt, (folder / path).read_bytes()).text
        except ConversionError as exc:
            row["wrong"].append(f"{path}: {exc.code}")
            continue
        finally:
            row["seconds"] += time.monotonic() - start
        row["converted"] += 1
        tokens = _ALPHA.findall(text)
        row["tokens"] += len(tokens)
        row["tokensOver20"] += sum(len(t) > 20 for t in tokens)
        row["ligatures"] += len(_LIGATURES.findall(text))
        found = {b.text for b in parse_blocks(text) if b.kind == "heading"}
        row["headingsFound"] += len(set(headings) & found)
        got = chunker.chunk(text, name="https://bench.local/file.bin").title
        if got == (title or "File"):
            row["titlesRight"] += 1
        else:
            row["wrong"].append(f"{path}: title {got!r}")
    for row in rows.values():
        row["shareOver20"] = round(row["tokensOver20"] / max(row["tokens"], 1), 5)
        row["seconds"] = round(row["seconds"], 2)
    return rows


def report_real_world(folder: Path) -> None:
    load_before = load_average()
    rows = real_world(folder)
    headers = ["format", "files", "converted", "tokens > 20 letters", "headings recovered", "titles right",
               "ligatures", "seconds"]  # fmt: skip
    print_table(headers, [[fmt, r["files"], r["converted"], f"{100 * r['shareOver20']:.2f}%",
                           f"{r['headingsFound']}/{r['headings']}", f"{r['titlesRight']}/{r['files']}",
                           r["ligatures"], r["seconds"]] for fmt, r in rows.items()])  # fmt: skip
    for fmt, r in rows.items():
        for wrong in r["wrong"]:
            print(f"{fmt}: {wrong}")
    print(load_text())
    write_result(NAME + "-real", {"loadAtStart": load_before, "results": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", type=Path, help="real files (tests/fixtures/realworld): the per-format quality rows")
    parser.add_argument("--pages", type=Path, help="bench/formats_corpus.py's output")
    parser.add_argument("--questions", type=Path)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--tag", default="", help="suffix of the result file, for runs over part of the formats")
    args = parser.parse_args()
    if args.real:
        report_real_world(args.real)
        return
    if not args.pages or not args.questions:
        parser.error("--pages and --questions are required (or --real)")
    from kbsearch.settings import Settings

    formats = [f for f in args.formats.split(",") if f]
    questions = [json.loads(line) for line in args.questions.read_text().splitlines() if line.strip()]
    load_before = load_average()
    throughput = {fmt: conversion_throughput(args.pages, fmt) for fmt in formats if fmt not in ("markdown", "txt")}
    print("conversion:", json.dumps(throughput), flush=True)
    embedder = service_cache(local_embedder(), 200_000)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kb-bench-formats-") as data_dir:
        settings = Settings(data_dir=Path(data_dir), max_pending_writes=1000)
        with run_service(settings, embedder=embedder) as service, http_client(service.base_url) as client:
            for fmt in formats:
                results[fmt] = {"ingest": ingest(client, args.pages, fmt)}
                results[fmt] |= score(client, fmt, questions)
                print(fmt, json.dumps(results[fmt]), flush=True)
    base = results.get("markdown", {}).get("hit@5")
    rows = []
    for fmt in formats:
        r = results[fmt]
        delta = r["hit@5"] - base if base is not None else float("nan")
        met = delta >= -(TARGET_PDF if fmt == "pdf" else TARGET) if base is not None else None
        ok = {True: "yes", False: "NO", None: "-"}[met]
        conv = throughput.get(fmt, {})
        rows.append([fmt, r["hit@5"], r["mrr@10"], round(delta, 4), ok, r["ingest"]["chunks"],
                     json.dumps(r["ingest"]["refused"]) if r["ingest"]["refused"] else "-",
                     conv.get("pagesPerSecond", "-"), conv.get("mbPerSecond", "-")])  # fmt: skip
    headers = ["format", "hit@5", "MRR@10", "vs md", "target", "chunks", "refused", "conv pages/s", "conv MB/s"]
    print_table(headers, rows)
    print(load_text())
    write_result(NAME + args.tag, {"loadAtStart": load_before, "questions": len(questions), "results": results,
                        "conversion": throughput})  # fmt: skip


if __name__ == "__main__":
    main()
