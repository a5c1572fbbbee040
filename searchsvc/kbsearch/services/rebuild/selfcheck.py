"""The check a rebuilt collection passes before it is swapped in: is it measurably worse than the current one?

Queries with known answers are made from the current collection itself, up to `queries` of them
(SEARCHSVC_REBUILD_CHECK_QUERIES, default 100), drawn in turn from every source:

- titles and headings: for documents picked per source in a stable pseudo-random order (by a hash
  of their answer, so the same collection gives the same queries), the title and the first heading
  no other answer shares, each answered by that document's answer;
- the query log: the most frequent queries of the last 7 days (at most a quarter of the queries)
  whose first answer in the current collection is the same in all three modes, answered by it
  (the answer comes from the current collection, which favours it: only a clear one is kept).

An *answer* is a page, not a URI: every version of one page (services/documents/versions.py: source and page
key) and every identical copy (the same content checksum) count as one, so a hit on the 2.10 copy
answers a query made from the 2.12 title. Both collections answer every query in hybrid, dense and
keyword mode; each query scores its reciprocal rank among the first 10 distinct answers (RR@10),
answers with equal scores ordered by their key, so the same collection rebuilt scores the same.

The verdict, per mode, is a paired test over the per-query differences d = RR(rebuilt) - RR(current):
a one-sided percentile bootstrap (2,000 resamples of the queries, a fixed seed, so it is
repeatable) gives the upper 95% confidence bound of mean(d). The rebuilt collection is refused when,
in some mode, that bound is below 0 (it is worse, with confidence) *and* mean(d) is below
-`margin` (worse by more than the margin, default 0.10 of MRR@10). A rebuild equal within noise, or
with too few queries to tell, swaps.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from kbsearch.aio.runtime import store_call
from kbsearch.commands import SearchQuery
from kbsearch.models import INCOMPLETE, DocumentRecord, SearchHit
from kbsearch.services.access.scope import Caller
from kbsearch.services.documents.versions import detect_version, newest_first_key
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.service import SearchService
from kbsearch.store.base import VectorStore

__all__ = ["Answers", "CheckQuery", "CheckResult", "build_check_set", "paired_upper_bound", "self_check"]

log = logging.getLogger(__name__)

Mode = Literal["hybrid", "dense", "keyword"]
Origin = Literal["title", "heading", "logged"]
MODES: tuple[Mode, ...] = get_args(Mode)
DEPTH = 10  # ranks that count: RR@10
FETCH = 3 * DEPTH  # pages fetched per query: versions and copies of one answer take several
LOGGED_SHARE = 4  # at most 1/LOGGED_SHARE of the queries come from the log (their answer is the current's)
LOGGED_CANDIDATES = 3  # logged queries read per one kept (those without one clear answer are left out)
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 30  # a fixed seed: the same per-query figures always give the same verdict
SCORE_DECIMALS = 4  # scores closer than this are a tie, broken by the answer's key
PAGE = 256
CHUNKS_READ_PER_DOCUMENT = 8
MAX_QUERY_CHARS = 1000  # a search body's limit (kbsearch.schemas.search)
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$")


class Answers:
    """Which documents are one answer: the versions of a page in a source, and identical copies anywhere.

    An answer's key is the smallest URI among its documents: stable, whatever order they are read in.
    """

    def __init__(self, records: Iterable[DocumentRecord]) -> None:
        self._parent: dict[str, str] = {}
        self.records: dict[str, DocumentRecord] = {}
        for record in records:
            self.records[record.uri] = record
            self._union(f"u:{record.uri}", f"p:{record.source_identifier}\0{_page(record)}")
            self._union(f"u:{record.uri}", f"c:{record.checksum}")
        self._key: dict[str, str] = {}
        for uri in sorted(self.records, reverse=True):
            self._key[self._find(f"u:{uri}")] = uri

    def of(self, uri: str, source: str | None = None, page_key: str | None = None) -> str:
        """The answer a document is (one the collection did not hold when read is its own page)."""
        if uri in self.records:
            return self._key[self._find(f"u:{uri}")]
        root = self._parent.get(f"p:{source}\0{page_key or uri}")
        return self._key[self._find(root)] if root is not None else uri

    def groups(self) -> dict[str, list[DocumentRecord]]:
        found: dict[str, list[DocumentRecord]] = defaultdict(list)
        for uri, record in sorted(self.records.items()):
            found[self.of(uri)].append(record)
        return found

    def _find(self, node: str) -> str:
        parent = self._parent.setdefault(node, node)
        while parent != node:
            grand = self._parent[parent]
            self._parent[node] = grand  # path halving
            node, parent = parent, self._parent.setdefault(grand, grand)
        return node

    def _union(self, a: str, b: str) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)


@dataclass(frozen=True, slots=True)
class CheckQuery:
    text: str
    expected: str  # the answer's key (Answers.of)
    origin: Origin
    source: str | None


@dataclass(frozen=True, slots=True)
class CheckSet:
    queries: list[CheckQuery]
    answers: Answers


@dataclass(slots=True)
class ModeVerdict:
    current: float  # MRR@10
    rebuilt: float
    difference: float  # mean of RR(rebuilt) - RR(current)
    upper: float  # its one-sided upper confidence bound
    wins: int  # queries where the rebuilt one ranks the answer higher
    losses: int
    by_origin: dict[str, float] = field(default_factory=dict)  # mean difference per query origin

    def worse(self, margin: float) -> bool:
        return self.upper < 0 and self.difference < -margin


@dataclass(slots=True)
class CheckResult:
    queries: int
    by_origin: dict[str, int]
    by_source: dict[str, int]
    margin: float
    modes: dict[str, ModeVerdict] = field(default_factory=dict)
    worse: list[str] = field(default_factory=list)  # modes where the rebuilt one is worse beyond the margin

    @property
    def passed(self) -> bool:
        return not self.worse

    @property
    def current(self) -> dict[str, float]:
        return {mode: v.current for mode, v in self.modes.items()}

    @property
    def rebuilt(self) -> dict[str, float]:
        return {mode: v.rebuilt for mode, v in self.modes.items()}

    def as_dict(self) -> dict[str, object]:
        return {
            "queries": self.queries,
            "byOrigin": self.by_origin,
            "bySource": self.by_source,
            "metric": f"mrr@{DEPTH}",
            "test": f"one-sided paired bootstrap over per-query RR@{DEPTH} ({RESAMPLES} resamples)",
            "confidence": CONFIDENCE,
            "margin": self.margin,
            "current": self.current,
            "rebuilt": self.rebuilt,
            "difference": {mode: v.difference for mode, v in self.modes.items()},
            "upperBound": {mode: v.upper for mode, v in self.modes.items()},
            "winsLosses": {mode: [v.wins, v.losses] for mode, v in self.modes.items()},
            "differenceByOrigin": {mode: v.by_origin for mode, v in self.modes.items()},
            "worseModes": self.worse,
            "passed": self.passed,
        }


async def build_check_set(
    store: VectorStore,
    search: SearchService,
    insights: InsightsService | None,
    caller: Caller,
    *,
    queries: int,
) -> CheckSet:
    """Up to `queries` queries with known answers, from every source's documents and the query log."""
    answers = Answers(await _live_records(store))
    logged = await _logged(search, insights, caller, answers, queries // LOGGED_SHARE)
    by_source: dict[str | None, list[DocumentRecord]] = defaultdict(list)
    for records in answers.groups().values():
        newest = min(records, key=lambda r: (newest_first_key(detect_version(r.uri, r.metadata).version), r.uri))
        by_source[newest.source_identifier].append(newest)
    pools = [
        _document_queries(store, search, caller, answers, sorted(records, key=lambda r: _stable(answers.of(r.uri))))
        for _, records in sorted(by_source.items(), key=lambda item: item[0] or "")
    ]
    made: list[CheckQuery] = []
    seen = {q.text for q in logged}
    wanted = queries - len(logged)
    while pools and len(made) < wanted:  # one from each source in turn, until the sources run dry
        for pool in list(pools):
            query = await anext(pool, None)
            while query is not None and query.text in seen:
                query = await anext(pool, None)
            if query is None:
                pools.remove(pool)
                continue
            seen.add(query.text)
            made.append(query)
            if len(made) == wanted:
                break
    return CheckSet(made + logged, answers)


async def self_check(
    current: SearchService,
    rebuilt: SearchService,
    check: CheckSet,
    caller: Caller,
    *,
    margin: float,
) -> CheckResult:
    queries = check.queries
    by_origin: dict[str, int] = defaultdict(int)
    by_source: dict[str, int] = defaultdict(int)
    for query in queries:
        by_origin[query.origin] += 1
        by_source[query.source or ""] += 1
    result = CheckResult(len(queries), dict(by_origin), dict(by_source), margin)
    for mode in MODES:
        now = [await _reciprocal_rank(current, q, mode, caller, check.answers) for q in queries]
        new = [await _reciprocal_rank(rebuilt, q, mode, caller, check.answers) for q in queries]
        differences = [b - a for a, b in zip(now, new, strict=True)]
        verdict = ModeVerdict(
            current=_mean(now),
            rebuilt=_mean(new),
            difference=_mean(differences),
            upper=round(paired_upper_bound(differences), 4),
            wins=sum(d > 0 for d in differences),
            losses=sum(d < 0 for d in differences),
            by_origin={
                origin: _mean([d for d, q in zip(differences, queries, strict=True) if q.origin == origin])
                for origin in sorted(by_origin)
            },
        )
        result.modes[mode] = verdict
        if verdict.worse(margin):
            result.worse.append(mode)
    log.info("rebuild self-check", extra={"check": result.as_dict()})
    return result


def paired_upper_bound(differences: list[float], confidence: float = CONFIDENCE) -> float:
    """The one-sided upper confidence bound of the mean difference (percentile bootstrap, fixed seed)."""
    if not differences:
        return 0.0
    values = np.asarray(differences, dtype=np.float64)
    if np.all(values == values[0]):
        return float(values[0])  # every resample has this mean
    rng = np.random.default_rng(SEED)
    means = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(axis=1)
    return float(np.quantile(means, confidence))


# --- the queries ------------------------------------------------------------------------------


async def _live_records(store: VectorStore) -> list[DocumentRecord]:
    records: list[DocumentRecord] = []
    cursor: str | None = None
    while True:
        page, cursor = await store_call(
            functools.partial(store.list_documents, source_identifier=None, uri_prefix=None, limit=PAGE, cursor=cursor)
        )
        records.extend(r for r in page if r.chunks > 0 and r.checksum != INCOMPLETE)
        if cursor is None:
            return records


async def _document_queries(
    store: VectorStore, search: SearchService, caller: Caller, answers: Answers, records: list[DocumentRecord]
) -> AsyncIterator[CheckQuery]:
    """Per document: its title, and its first heading that is not the title, each unless another answer has it."""
    for record in records:
        answer, source = answers.of(record.uri), record.source_identifier
        title = _clean(record.title or "")
        if title and not await _ambiguous(search, title, answer, caller, answers):
            yield CheckQuery(title, answer, "title", source)
        for heading in await _headings(store, record):
            text = _clean(heading)
            if text and text != title and not await _ambiguous(search, text, answer, caller, answers):
                yield CheckQuery(text, answer, "heading", source)
                break


async def _ambiguous(search: SearchService, text: str, answer: str, caller: Caller, answers: Answers) -> bool:
    """Whether another answer among the current top hits has `text` as its title, a heading, or in its text."""
    outcome = await search.search_unlogged(SearchQuery(query=text, limit=FETCH, mode="hybrid"), caller)
    return any(
        answers.of(hit.uri, hit.source_identifier, hit.page_key) != answer
        and (
            _clean(hit.title or "") == text
            or text in {_clean(h) for h in hit.headings}
            or text in _clean(hit.content)  # a heading inside the chunk is not on its heading path
        )
        for hit in outcome.hits
    )


async def _headings(store: VectorStore, record: DocumentRecord) -> list[str]:
    """The document's headings in order: from its stored body, else from its first chunks (text and heading paths)."""
    body = await store_call(store.get_body, record.uri)
    if body is not None and body.checksum == record.checksum:
        return _atx_headings(body.body)
    chunks = await store_call(store.document_chunks, record.uri, 0, min(record.chunks, CHUNKS_READ_PER_DOCUMENT))
    found = [heading for chunk in chunks for heading in (*chunk.headings, *_atx_headings(chunk.content))]
    return list(dict.fromkeys(found))


def _atx_headings(text: str) -> list[str]:
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (match := _ATX_HEADING.match(line)):
            found.append(match.group(1))
    return found


async def _logged(
    search: SearchService, insights: InsightsService | None, caller: Caller, answers: Answers, limit: int
) -> list[CheckQuery]:
    """The most frequent recent queries whose answer the current collection ranks first in every mode.

    The answer comes from the current collection, which favours it: only a query all three modes
    agree on has an answer clear enough to hold the rebuilt one to.
    """
    if insights is None or limit <= 0:
        return []
    made: list[CheckQuery] = []
    for entry in await insights.top_queries(caller, "7d", LOGGED_CANDIDATES * limit):
        text = _clean(entry.query)
        if not text:
            continue
        firsts = {tuple(await _ranked(search, text, mode, caller, answers))[:1] for mode in MODES}
        if len(firsts) == 1 and (first := firsts.pop()):
            record = answers.records.get(first[0])
            made.append(CheckQuery(text, first[0], "logged", record.source_identifier if record else None))
            if len(made) == limit:
                break
    return made


def _stable(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _page(record: DocumentRecord) -> str:
    return detect_version(record.uri, record.metadata).page


# --- scoring ----------------------------------------------------------------------------------


async def _reciprocal_rank(
    search: SearchService, query: CheckQuery, mode: Mode, caller: Caller, answers: Answers
) -> float:
    ranked = await _ranked(search, query.text, mode, caller, answers)
    return 1.0 / (ranked.index(query.expected) + 1) if query.expected in ranked else 0.0


async def _ranked(search: SearchService, text: str, mode: Mode, caller: Caller, answers: Answers) -> list[str]:
    """Distinct answers in rank order; equal scores ordered by the answer's key (the query is not logged)."""
    outcome = await search.search_unlogged(SearchQuery(query=text, limit=FETCH, mode=mode), caller)
    return _order(outcome.hits, answers)[:DEPTH]


def _order(hits: list[SearchHit], answers: Answers) -> list[str]:
    best: dict[str, float] = {}
    for hit in hits:
        key = answers.of(hit.uri, hit.source_identifier, hit.page_key)
        best[key] = max(best.get(key, -math.inf), round(hit.score, SCORE_DECIMALS))
    return sorted(best, key=lambda key: (-best[key], key))


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 1.0


def _clean(text: str) -> str:
    return " ".join(text.split())[:MAX_QUERY_CHARS]
