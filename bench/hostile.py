"""Hostile markdown: how long each parser of untrusted text takes on the shapes that used to stall it.

Each shape is built at a quarter of `--size` and at `--size` characters (1 MiB by default, the
service's document limit) and run through the chunker (front matter, blocks, packing, embed
text), the citation sentence splitter, the extractive answer's passages and the BM25 tokenizer.
`growth` is the time at full size over the time at a quarter: about 4 when the work is linear,
16 when it is quadratic. `out/in` is the chunk text produced over the input. No model, no
service, no SciFact: `python -m bench.hostile [--size N] [--shape NAME]`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.common import load_average, load_text, parser, print_table, write_result

SCIFACT_UNUSED = "unused: this benchmark makes its own data"


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _lines(make: Callable[[int], str], size: int) -> str:
    out, total, i = [], 0, 1
    while total < size:
        line = make(i)
        out.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(out)


def _wide_table(size: int) -> str:
    header = "| " + " | ".join(name.ljust(296) for name in ("Name", "Type", "Description")) + " |"
    separator = "| " + " | ".join("-" * 296 for _ in range(3)) + " |"
    return header + "\n" + separator + "\n" + _lines(lambda i: f"| option{i} | string | sets {i} |", size)


SHAPES: dict[str, Callable[[int], str]] = {
    # Issue 27's three: 1,300 levels of nested block quotes in 850 KB, one 1 MB line, 5,000 rows.
    "quotes_deeper_each_line": lambda n: _lines(lambda i: ">" * i + f" level {i}", n),
    "quotes_1300_deep_lines": lambda n: _lines(lambda i: ">" * 1300 + f" line {i} of the quote", n),
    "one_line_of_words": lambda n: _repeat("lorem ipsum dolor sit amet ", n),
    "one_line_no_spaces": lambda n: "x" * n,
    "table_rows": lambda n: "| a | b |\n|---|---|\n" + _lines(lambda i: f"| {i} | value {i} |", n),
    "table_header_900_wide": _wide_table,
    "lists_nested_deep": lambda n: _lines(lambda i: "  " * (i % 400) + f"- item {i}", n),
    "headings_alternating": lambda n: _repeat("###### deep\n\n# top\n\n", n),
    "fences_never_closed": lambda n: _repeat("```\n", n),
    "html_blocks": lambda n: _repeat("<div>\n\ntext <span>\n\n", n),
    "emphasis_and_links_unclosed": lambda n: _repeat("*a _b [c](d `e ~~f **g <b ", n),
    "code_spans_unbalanced": lambda n: _lines(lambda i: "`" * (i % 50 + 1) + " code. Then", n),
    "sentences_no_end": lambda n: _repeat("word. word ", n),
}


def _stages() -> dict[str, Callable[[str], Any]]:
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.chunker.sentences import sentences
    from kbsearch.models import SearchHit
    from kbsearch.services.answers.passages import passages
    from kbsearch.store.bm25 import Bm25Encoder

    chunker = MarkdownChunker(500, 800)
    encoder = Bm25Encoder()

    def hit(text: str) -> SearchHit:
        return SearchHit(id="h", score=1.0, uri="u", chunk_index=0, total_chunks=1, content=text, title="t",
                         headings=[], metadata={}, source_identifier=None)  # fmt: skip

    return {
        "chunk": chunker.chunk,
        "sentences": sentences,
        "passages": lambda text: passages(1, hit(text), {"value", "item"}),
        "bm25": encoder.tokens,
    }


def _timed(stage: Callable[[str], Any], text: str) -> tuple[float, Any]:
    started = time.perf_counter()
    out = stage(text)
    return time.perf_counter() - started, out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    cli = parser("hostile", __doc__, scifact=SCIFACT_UNUSED)
    cli.add_argument("--size", type=int, default=1 << 20, help="characters at full size (default 1 MiB)")
    cli.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only these shapes")
    cli.add_argument("--stage", action="append", help="only these stages (chunk, sentences, passages, bm25)")
    args = cli.parse_args(argv)
    stages = {k: v for k, v in _stages().items() if not args.stage or k in args.stage}
    load_before = load_average()
    rows, results = [], []
    for name in args.shape or list(SHAPES):
        for stage_name, stage in stages.items():
            quarter, _ = _timed(stage, SHAPES[name](args.size // 4))
            text = SHAPES[name](args.size)
            seconds, out = _timed(stage, text)
            produced = sum(len(c.text) for c in out.chunks) if stage_name == "chunk" else None
            result = {
                "shape": name,
                "stage": stage_name,
                "chars": len(text),
                "seconds": round(seconds, 3),
                "quarterSeconds": round(quarter, 3),
                "growth": round(seconds / max(quarter, 1e-4), 1),
                "outPerIn": round(produced / len(text), 2) if produced is not None else None,
            }
            results.append(result)
            rows.append([name, stage_name, len(text), seconds, result["growth"], result["outPerIn"] or "-"])
            print_table(["shape", "stage", "chars", "seconds", "growth", "out/in"], rows[-1:])
    print(f"\nhostile markdown, {load_text(load_before)} before, {load_text()} after")
    print_table(["shape", "stage", "chars", "seconds", "growth", "out/in"], rows)
    result = {"loadBefore": load_before, "size": args.size, "results": results}
    write_result("hostile", result)
    return result


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    worst = max(result["results"], key=lambda r: r["seconds"])
    figure = f"slowest {worst['shape']}/{worst['stage']}: {worst['seconds']} s at {worst['chars']} chars"
    return figure, "every shape under 5 s at 1 MiB", "met" if worst["seconds"] < 5 else "NOT met"


if __name__ == "__main__":
    main()
