"""Realistic markdown documents generated from SciFact abstracts (read at run time, never stored)."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator

from bench.common import SciFact

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _section(doc: dict[str, str], rng: random.Random, level: int = 2) -> str:
    """One abstract as a markdown section: heading, paragraphs, and sometimes a list, table or code."""
    parts = sentences(doc["text"]) or [doc["text"]]
    out = [f"{'#' * level} {doc['title'].rstrip('.')}", ""]
    # two or three paragraphs from the abstract's sentences
    cut = sorted(rng.sample(range(1, len(parts)), k=min(2, len(parts) - 1))) if len(parts) > 2 else []
    bounds = [0, *cut, len(parts)]
    for a, b in itertools.pairwise(bounds):
        out += [" ".join(parts[a:b]), ""]
    shape = rng.random()
    if shape < 0.35 and len(parts) >= 3:
        out += [f"{'#' * (level + 1)} Key points", ""]
        out += [f"- {s}" for s in rng.sample(parts, k=min(3, len(parts)))] + [""]
    elif shape < 0.5:
        out += [
            "| field | value |",
            "|---|---|",
            f"| corpus id | {doc['_id']} |",
            f"| sentences | {len(parts)} |",
            f"| characters | {len(doc['text'])} |",
            "",
        ]
    elif shape < 0.6:
        out += ["```yaml", f"id: {doc['_id']}", f"title: {doc['title'][:60]!r}", f"sentences: {len(parts)}", "```", ""]
    return "\n".join(out)


def markdown_documents(
    data: SciFact, count: int, per_doc: int = 5, seed: int = 7, offset: int = 0
) -> Iterator[tuple[str, str]]:
    """`count` (name, markdown) pairs, each a digest of `per_doc` abstracts with front matter."""
    rng = random.Random(seed)
    corpus = data.corpus[offset:]
    for n in range(count):
        group = corpus[(n * per_doc) % len(corpus) : (n * per_doc) % len(corpus) + per_doc] or corpus[:per_doc]
        title = f"Research digest {n + 1:04d}: {group[0]['title'].rstrip('.')[:70]}"
        words = [w.lower() for w in re.findall(r"[A-Za-z]{6,}", group[0]["title"])][:3]
        front = ["---", f"title: {title!r}", f"tags: [{', '.join(words) or 'digest'}]", "---", ""]
        body = [f"# {title}", "", f"This digest summarises {len(group)} studies.", ""]
        body += [_section(doc, rng) for doc in group]
        yield f"digest-{n + 1:04d}.md", "\n".join(front + body)


def large_markdown(data: SciFact, target_bytes: int = 100_000, seed: int = 11, offset: int = 3000) -> str:
    """One ~target_bytes markdown file: a handbook of many abstracts under chapter headings."""
    rng = random.Random(seed)
    out = ["# Research handbook", "", "A long reference document built from many study abstracts.", ""]
    size = 0
    for i, doc in enumerate(data.corpus[offset:]):
        if i % 10 == 0:
            out += [f"## Chapter {i // 10 + 1}", ""]
        section = _section(doc, rng, level=3)
        out += [section]
        size += len(section.encode()) + 1
        if size >= target_bytes:
            break
    return "\n".join(out)
