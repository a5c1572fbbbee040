"""The check a rebuilt collection passes before it is swapped in: is it as good as the current one?

The evaluation set is made from the collection itself: for a sample of documents, their title and
headings, each answered by that document; and the most frequent recent queries of the query log,
each answered by the document the current collection ranks first today. Both collections answer
every query in every search mode; the score is MRR@10 over distinct documents. The rebuilt one
passes when, in no mode, it scores more than `margin` below the current one.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal, get_args

from kbsearch.aio.runtime import store_call
from kbsearch.models import DocumentRecord
from kbsearch.schemas import SearchRequest
from kbsearch.services.access.scope import Caller
from kbsearch.services.insights import InsightsService
from kbsearch.services.search import SearchService
from kbsearch.store.base import VectorStore

__all__ = ["CheckQuery", "CheckResult", "build_check_set", "self_check"]

log = logging.getLogger(__name__)

Mode = Literal["hybrid", "dense", "keyword"]
MODES: tuple[Mode, ...] = get_args(Mode)
DEPTH = 10  # ranks that count: MRR@10
HEADINGS_PER_DOCUMENT = 2
CHUNKS_READ_PER_DOCUMENT = 8
MAX_QUERY_CHARS = 1000  # SearchRequest's limit
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$")


@dataclass(frozen=True, slots=True)
class CheckQuery:
    text: str
    expected: str  # the URI that answers it
    origin: Literal["title", "heading", "logged"]


@dataclass(slots=True)
class CheckResult:
    queries: int
    by_origin: dict[str, int]
    margin: float
    current: dict[str, float]
    rebuilt: dict[str, float]
    worse: list[str] = field(default_factory=list)  # modes where the rebuilt one falls beyond the margin

    @property
    def passed(self) -> bool:
        return not self.worse

    def as_dict(self) -> dict[str, object]:
        return {
            "queries": self.queries,
            "byOrigin": self.by_origin,
            "metric": f"mrr@{DEPTH}",
            "margin": self.margin,
            "current": self.current,
            "rebuilt": self.rebuilt,
            "worseModes": self.worse,
            "passed": self.passed,
        }


async def build_check_set(
    store: VectorStore,
    search: SearchService,
    insights: InsightsService | None,
    caller: Caller,
    *,
    documents: int,
    logged: int,
) -> list[CheckQuery]:
    """Queries with known answers, from the current collection and its query log."""
    candidates: dict[str, set[str]] = defaultdict(set)  # query text -> URIs it was made from
    origins: dict[str, Literal["title", "heading"]] = {}
    records: list[DocumentRecord] = []
    cursor: str | None = None
    # Point ids are name-based UUIDs, so the first page in id order is a sample spread over the URIs.
    while len(records) < documents:
        page, cursor = await store_call(
            functools.partial(
                store.list_documents,
                source_identifier=None,
                uri_prefix=None,
                limit=min(256, documents - len(records)),
                cursor=cursor,
            )
        )
        records.extend(r for r in page if r.chunks > 0)
        if cursor is None:
            break
    for record in records[:documents]:
        if record.title:
            key = _clean(record.title)
            candidates[key].add(record.uri)
            origins.setdefault(key, "title")
        seen: list[str] = []
        for heading in await _headings(store, record):
            key = _clean(heading)
            if key and key != _clean(record.title or "") and key not in seen:
                seen.append(key)
        for key in seen[:HEADINGS_PER_DOCUMENT]:
            candidates[key].add(record.uri)
            origins.setdefault(key, "heading")
    # A title or heading shared by several documents ("Overview", or the same page in two versions)
    # has no single answer: among the sample, and among what the current collection finds for it.
    queries = []
    for text, uris in candidates.items():
        if len(uris) == 1 and not await _shared(search, text, next(iter(uris)), caller):
            queries.append(CheckQuery(text, next(iter(uris)), origins[text]))
    if insights is not None and logged > 0 and insights.query_log.store is not None:
        top = (await insights.insights(caller, "7d")).top_queries[:logged]
        for entry in top:
            text = _clean(entry.query)
            if not text:
                continue
            hits = await _ranked(search, text, "hybrid", caller)
            if hits:
                queries.append(CheckQuery(text, hits[0], "logged"))
    return queries


async def self_check(
    current: SearchService,
    rebuilt: SearchService,
    queries: list[CheckQuery],
    caller: Caller,
    *,
    margin: float,
) -> CheckResult:
    by_origin: dict[str, int] = defaultdict(int)
    for query in queries:
        by_origin[query.origin] += 1
    result = CheckResult(len(queries), dict(by_origin), margin, {}, {})
    for mode in MODES:
        result.current[mode] = await _mrr(current, queries, mode, caller)
        result.rebuilt[mode] = await _mrr(rebuilt, queries, mode, caller)
        if result.rebuilt[mode] < result.current[mode] - margin:
            result.worse.append(mode)
    log.info("rebuild self-check", extra=result.as_dict())
    return result


async def _mrr(search: SearchService, queries: list[CheckQuery], mode: Mode, caller: Caller) -> float:
    if not queries:
        return 1.0
    total = 0.0
    for query in queries:
        ranked = await _ranked(search, query.text, mode, caller)
        if query.expected in ranked:
            total += 1.0 / (ranked.index(query.expected) + 1)
    return round(total / len(queries), 4)


async def _shared(search: SearchService, text: str, uri: str, caller: Caller) -> bool:
    """Whether another document among the current top hits has `text` as its title, a heading, or in its text."""
    outcome = await search.search_unlogged(SearchRequest(query=text, limit=3 * DEPTH, mode="hybrid"), caller)
    return any(
        hit.uri != uri
        and (
            _clean(hit.title or "") == text
            or text in {_clean(h) for h in hit.headings}
            or text in _clean(hit.content)  # a heading inside the chunk is not on its heading path
        )
        for hit in outcome.hits
    )


async def _ranked(search: SearchService, text: str, mode: Mode, caller: Caller) -> list[str]:
    """Distinct document URIs in rank order, from the top chunks (the query is not logged)."""
    outcome = await search.search_unlogged(SearchRequest(query=text, limit=3 * DEPTH, mode=mode), caller)
    uris = list(dict.fromkeys(hit.uri for hit in outcome.hits))
    return uris[:DEPTH]


async def _headings(store: VectorStore, record: DocumentRecord) -> list[str]:
    """The document's headings in order: from its stored body, else from its chunks' heading paths."""
    body = await store_call(store.get_body, record.uri)
    if body is not None and body.checksum == record.checksum:
        found, fenced = [], False
        for line in body.body.splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            elif not fenced and (match := _ATX_HEADING.match(line)):
                found.append(match.group(1))
        return found
    chunks = await store_call(store.document_chunks, record.uri, 0, min(record.chunks, CHUNKS_READ_PER_DOCUMENT))
    return [heading for chunk in chunks for heading in chunk.headings]


def _clean(text: str) -> str:
    return " ".join(text.split())[:MAX_QUERY_CHARS]
