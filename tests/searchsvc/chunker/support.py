"""The chunker tests' inputs and checks, and `in_child`, which runs one of this module's runners in a
child process (tests/searchsvc/chunker/test_chunker.py's hostile and bad inputs)."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys

from kbsearch.chunker import MarkdownChunker
from kbsearch.chunker.embedtext import readable_text
from kbsearch.models import ParsedDocument
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


WORDS = [
    "cluster",
    "operator",
    "helm",
    "chart",
    "values",
    "namespace",
    "pod",
    "service",
    "ingress",
    "secret",
    "config",
    "map",
    "volume",
    "replica",
    "deployment",
    "rollout",
    "upgrade",
    "install",
    "search",
    "index",
    "chunk",
    "vector",
    "embedding",
    "query",
]


def prose(paragraphs: int, seed: int = 1, lo: int = 80, hi: int = 250) -> str:
    """Paragraphs of random words, each between `lo` and `hi` characters."""
    rnd = random.Random(seed)
    out = []
    for _ in range(paragraphs):
        target = rnd.randint(lo, hi)
        words: list[str] = []
        while len(" ".join(words)) < target - 12:
            words.append(rnd.choice(WORDS))
        out.append(" ".join(words).capitalize() + ".")
    return "\n\n".join(out)


def check_offsets(doc: ParsedDocument) -> None:
    """Chunks are the body's text in order: a slice of it, or a split block's part re-opened."""
    assert [c.index for c in doc.chunks] == list(range(len(doc.chunks)))
    for c in doc.chunks:
        assert c.text == c.text.strip() and c.text
        covered = doc.body[c.start : c.end]
        assert covered == c.text or set(covered.splitlines()) <= set(c.text.splitlines()) | {""}
        assert c.embed_text.endswith(readable_text(c.text))


def _binaryish() -> str:
    rnd = random.Random(3)
    chars = [
        rnd.choice((rnd.randint(1, 0x7F), rnd.randint(0x80, 0xD7FF), rnd.randint(0xE000, 0x10FFFF)))
        for _ in range(1 << 18)
    ]
    return "".join(map(chr, chars))


def _crlf_markdown() -> str:
    return ("# Title\n\nSetext\n------\n\n" + prose(400) + "\n\n```\ncode\n```\n").replace("\n", "\r\n")


HOSTILE = {
    "one_mib_single_line": lambda: ("lorem ipsum dolor sit amet " * 40_000)[: 1 << 20],
    "one_mib_line_without_spaces": lambda: "x" * (1 << 20),
    "nested_list_10000_levels": lambda: "- " * 10_000 + "deep",
    "nested_ordered_list_10000_levels": lambda: "1. " * 10_000 + "deep",
    "nested_quotes_10000_levels": lambda: "> " * 10_000 + "deep",
    "nested_list_items_10000_lines": lambda: "\n".join(" " * (i % 64) + "- item" for i in range(10_000)),
    "binaryish_text": _binaryish,
    "crlf_line_endings": _crlf_markdown,
    "one_mib_of_newlines": lambda: "\n" * (1 << 20),
    "hundred_thousand_fences": lambda: "```\n" * 100_000,
    # Issue 27: 1,300 levels of block quotes in 850 KB (47 s), and a 5,000-row table (12 s).
    "quotes_deeper_each_line_1300": lambda: "\n".join(">" * i + f" level {i}" for i in range(1, 1301)),
    "table_5000_rows": lambda: "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | value {i} |" for i in range(5000)),
    # Front matter that crashed the process (libyaml's composer recursing 30,000 deep) or the request.
    "yaml_front_matter_nested_30000": lambda: "---\na: " + "[" * 30_000 + "\n---\n" + prose(3),
    "yaml_front_matter_compact_sequences": lambda: "---\n" + "- " * 30_000 + "x\n---\n" + prose(3),
    "json_front_matter_nested_60000": lambda: '{"a": ' + "[" * 60_000 + "\n\n" + prose(3),
    "toml_front_matter_nested_30000": lambda: "+++\na = " + "[" * 30_000 + "\n+++\n" + prose(3),
    "yaml_front_matter_billion_laughs": lambda: (
        "---\na: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in itertools.pairwise("abcdefghij"))
        + "title: *j\n---\n"
        + prose(3)
    ),
}


def run_hostile(name: str) -> dict:
    """Runs in a child process: chunk one hostile input and report on the result."""
    content = HOSTILE[name]()
    doc = MarkdownChunker(500, 800).chunk(content)
    check_offsets(doc)
    report = {"chunks": len(doc.chunks), "max_len": max((len(c.text) for c in doc.chunks), default=0)}
    report["front_matter"] = doc.body != content  # what was parsed as front matter left the body
    if name == "crlf_line_endings":
        lf = MarkdownChunker(500, 800).chunk(content.replace("\r\n", "\n"))
        report["same_as_lf"] = [c.text for c in lf.chunks] == [c.text for c in doc.chunks]
        report["headings"] = sorted({h for c in doc.chunks for h in c.headings})
        report["has_cr"] = any("\r" in c.embed_text for c in doc.chunks)
    return report


def in_child(runner: str, name: str, timeout: int) -> dict:
    """`runner(name)` of this module (support) in a child process, so that a hang or a quadratic blowup ends in
    a failed test instead of a stuck run; the bound is generous and is not a timing test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "searchsvc"), env.get("PYTHONPATH")) if p)
    code = (
        f"import json, sys; from tests.searchsvc.chunker.support import {runner}; "
        f"print(json.dumps({runner}(sys.argv[1])))"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code, name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


BAD_INPUT = {
    "unterminated_fence": lambda: "# T\n\nIntro:\n\n```python\n" + "\n".join(f"x{i} = {i}" for i in range(300)),
    "one_mib_code_block": lambda: "Run:\n\n```\n" + "\n".join(f"echo {i}" for i in range(140_000)) + "\n```\n",
    "table_10000_rows": lambda: "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | value {i} |" for i in range(10_000)),
    "unterminated_front_matter": lambda: "---\ntitle: Open\n" + prose(30),
    "nested_lists_50_levels": lambda: "\n".join("  " * i + f"- level {i} " + "word " * 20 for i in range(50)),
}


def run_bad_input(name: str) -> dict:
    content = BAD_INPUT[name]()
    doc = MarkdownChunker(500, 800).chunk(content)
    check_offsets(doc)
    return {
        "chunks": len(doc.chunks),
        "max_len": max((len(c.text) for c in doc.chunks), default=0),
        "min_len": min((len(c.text) for c in doc.chunks), default=0),
        "empty": sum(not c.embed_text.strip() for c in doc.chunks),
    }


def _wide_table(width: int) -> str:
    """A table whose header row is padded to its widest cell, as markdown formatters do (issue 27)."""
    cell = (width - 4) // 3 - 2
    header = "| " + " | ".join(name.ljust(cell) for name in ("Name", "Type", "Description")) + " |"
    separator = "| " + " | ".join("-" * cell for _ in range(3)) + " |"
    rows = "\n".join(f"| option{i} | string | what option{i} sets |" for i in range(40))
    return f"# Options\n\nThe options:\n\n{header}\n{separator}\n{rows}\n"


def run_wide_table(width: str) -> dict:
    content = _wide_table(int(width))
    doc = MarkdownChunker(500, 800).chunk(content)
    check_offsets(doc)
    text = "\n".join(c.text for c in doc.chunks)
    return {
        "header_width": len(content.split("\n")[4]),
        "max_len": max(len(c.text) for c in doc.chunks),
        "total": len(text),
        "input": len(content),
        "rows": sum(f"| option{i} |" in text for i in range(40)),
        "headers": text.count("| Name"),
    }
