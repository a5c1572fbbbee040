"""Keyword and hybrid hit@5 on a small judged Chinese/Japanese/Korean/mixed set, before and after CJK segmentation.

tests/fixtures/multilingual: 25 short pages (Chinese, Japanese, Korean, English pages with a Chinese
and a Korean section, code with Japanese and with Korean comments, English distractors) and 44 judged
questions (same language, mixed, and a question in one language about a page in another). Each
page is chunked by the service's MarkdownChunker, embedded by the real local model, and loaded into
a fresh Qdrant Edge collection once per encoder: "before" is the keyword encoder of kb-bm25-en-v2
(read from git, commit e93f8fd), "after" today's. hit@5 counts a question whose page is among the
first 5 distinct pages, hit@1 one whose page is first (on a set this small a single shared word
often reaches the top 5; the first place tells more).

    python -m bench.multilingual
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import load_text, print_table, write_result

NAME = "multilingual"
HERE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "multilingual"
BEFORE = "e93f8fd"  # main before the CJK tokenizer


def old_encoder() -> Any:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:searchsvc/kbsearch/store/bm25.py"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "bm25_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("bm25_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bm25_before"] = module
    spec.loader.exec_module(module)
    return module.Bm25Encoder()


def evaluate(encoder: Any, pages: dict[str, Any], dense: dict[str, list[list[float]]], questions, qdense) -> dict:
    from kbsearch.models import ChunkPoint, CollectionSignature, Fusion, SearchFilter
    from kbsearch.store.edge.store import EdgeStore

    store = EdgeStore(Path(tempfile.mkdtemp()), "ml")
    store.open(CollectionSignature("local", "bench", len(next(iter(qdense))), encoder.name))
    points = []
    for name, parsed in pages.items():
        sparse = encoder.encode_chunks([c.embed_text for c in parsed.chunks])
        for c, d, s in zip(parsed.chunks, dense[name], sparse, strict=True):
            points.append(
                ChunkPoint(
                    uri=name,
                    source_identifier="bench/ml",
                    chunk_index=c.index,
                    total_chunks=len(parsed.chunks),
                    text=c.text,
                    text_hash=hashlib.sha256(c.embed_text.encode()).hexdigest(),
                    title=parsed.title,
                    tags=[],
                    headings=c.headings,
                    dense=d,
                    sparse=s,
                )
            )
    store.upsert_chunks(points)
    out: dict[str, Any] = {}
    for mode in ("keyword", "hybrid"):
        hits_by_kind: dict[str, list[int]] = {}
        firsts: list[int] = []  # the page ranked first: separates a precise match from a lucky one
        for q, qd in zip(questions, qdense, strict=True):
            hits = store.search(
                mode=mode,
                dense=qd if mode == "hybrid" else None,
                sparse=encoder.encode_query(q["q"]),
                filter=SearchFilter(),
                limit=20,
                candidates=100,
                fusion=Fusion(),
            )
            ranked = list(dict.fromkeys(h.uri for h in hits))[:5]
            hits_by_kind.setdefault(q["kind"].split(":")[0], []).append(int(q["page"] in ranked))
            firsts.append(int(ranked[:1] == [q["page"]]))
        every = [h for v in hits_by_kind.values() for h in v]
        out[mode] = {"hit@5": round(sum(every) / len(every), 3), "hit@1": round(sum(firsts) / len(firsts), 3)} | {
            k: f"{sum(v)}/{len(v)}" for k, v in sorted(hits_by_kind.items())
        }
    store.close()
    return out


def main() -> int:
    from bench.common import local_embedder
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.store.bm25 import Bm25Encoder

    start_load = load_text()
    chunker = MarkdownChunker(500, 800, 0)
    pages = {p.name: chunker.chunk(p.read_text()) for p in sorted((HERE / "pages").glob("*.md"))}
    questions = [json.loads(line) for line in (HERE / "questions.jsonl").read_text().splitlines() if line]
    embedder = local_embedder()
    dense = {
        n: [list(map(float, v)) for v in embedder.embed_documents([c.embed_text for c in p.chunks])]
        for n, p in pages.items()
    }
    qdense = [list(map(float, embedder.embed_query(q["q"]))) for q in questions]
    result = {"pages": len(pages), "questions": len(questions), "loadAtStart": start_load, "model": embedder.model}
    for label, encoder in (("before", old_encoder()), ("after", Bm25Encoder())):
        result[label] = {"encoder": encoder.name, **evaluate(encoder, pages, dense, questions, qdense)}
    write_result(NAME, result)
    kinds = [k for k in result["after"]["keyword"] if not k.startswith("hit@")]
    rows = [
        [
            label,
            mode,
            result[label][mode]["hit@5"],
            result[label][mode]["hit@1"],
            *(result[label][mode][k] for k in kinds),
        ]
        for label in ("before", "after")
        for mode in ("keyword", "hybrid")
    ]
    print(f"[multilingual] {len(pages)} pages, {len(questions)} questions ({load_text()})")
    print_table(["encoder", "mode", "hit@5", "hit@1", *kinds], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
