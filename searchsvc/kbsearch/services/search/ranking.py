"""From ranked chunks to ranked pages: one hit per page, the newest version first, and a relevance in [0, 1].

A page is every version of one document (services/documents/versions.py) in one source. Its hits collapse
into one result: the best chunk of the version shown (the newest that matched, unless the caller
asked for a version), the other versions that matched, and how many more of its chunks did.
Identical chunk texts (a page copied into two places) collapse into the first.

A page ranks by page-level evidence (PageEvidence), from its chunks' fused scores:

- its best chunk's score plus a little of its next best ones': a page that answers in two places
  is likelier the page than one with a single lucky chunk;
- times (1 + TITLE_WEIGHT x its title lane): BM25 of the question over each candidate chunk's
  title, heading path and file name, IDF over the candidates, the page's best chunk, divided by
  the best page's. Sibling pages share their body words; their titles are what tells them apart
  ("the Go client", "the cluster variant");
- times its document's weight (services/search/pageweights.py): what its source or its path's role
  says of it, unless the question names that role.

Relevance is absolute, unlike fusion's per-query normalised scores: a logistic curve over the
cosine of the query and the page's best chunk under the service's own embedder, calibrated on the
docs QA dev set (bench/docsqa.py; see docs/user/api.md). A nonsense query gets a low relevance
whatever the fusion makes of it.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from kbsearch.models import SearchHit
from kbsearch.services.documents.versions import newest_first_key

__all__ = ["PageEvidence", "Relevance", "collapse_pages", "with_relevance"]

# How much a page's next best chunks add to its best one's score (second, third).
NEXT_CHUNK_WEIGHTS = (0.1, 0.05)
# How much the title lane at its best (1.0) multiplies a page's score. Tuned on the docs QA dev set
# (bench/docsqa.py) to a round figure.
TITLE_WEIGHT = 0.3
# BM25 over short fields (a title and a heading path of a few words).
_K1, _B = 1.2, 0.75


@dataclass(frozen=True, slots=True)
class Relevance:
    """relevance = 1 / (1 + exp(-steepness * (similarity - midpoint))), for the embedder the service runs."""

    midpoint: float
    steepness: float

    def of(self, similarity: float | None) -> float:
        if similarity is None:
            return 0.0
        return round(1.0 / (1.0 + math.exp(-self.steepness * (similarity - self.midpoint))), 4)


@dataclass(frozen=True, slots=True)
class PageEvidence:
    """What a page's rank weighs besides its chunks' scores, for one query."""

    query_stems: list[str]  # the question's stems, by the keyword lane's tokenizer
    stems: Callable[[str], list[str]]  # that tokenizer
    weight: Callable[[Mapping[str, object], str], float]  # a document's weight from its metadata and path


@dataclass(slots=True)
class _Page:
    hits: list[SearchHit] = field(default_factory=list)  # best first
    title_lane: float = 0.0  # [0, 1]
    weight: float = 1.0

    @property
    def chunk_score(self) -> float:
        nexts = [hit.score for hit in self.hits[1 : 1 + len(NEXT_CHUNK_WEIGHTS)]]
        return self.hits[0].score + sum(w * s for w, s in zip(NEXT_CHUNK_WEIGHTS, nexts, strict=False))

    @property
    def score(self) -> float:
        return self.chunk_score * (1.0 + TITLE_WEIGHT * self.title_lane) * self.weight


def with_relevance(hits: list[SearchHit], relevance: Relevance) -> list[SearchHit]:
    return [replace(hit, relevance=relevance.of(hit.similarity)) for hit in hits]


def collapse_pages(
    hits: list[SearchHit], limit: int, relevance: Relevance, evidence: PageEvidence | None = None
) -> list[SearchHit]:
    """At most `limit` hits, one per page, best page first (hits must come best first)."""
    pages: dict[tuple[str | None, str], _Page] = {}
    for hit in hits:
        pages.setdefault((hit.source_identifier, hit.page_key or hit.uri), _Page()).hits.append(hit)
    if evidence is not None:
        _weigh(list(pages.values()), evidence)
    ranked = sorted(pages.values(), key=lambda page: -page.score)
    seen_texts: set[str] = set()
    out: list[SearchHit] = []
    for page in ranked:
        shown = _shown(page.hits)
        digest = hashlib.sha256(shown.content.encode("utf-8", "surrogatepass")).hexdigest()
        if digest in seen_texts:
            continue
        seen_texts.add(digest)
        versions = {hit.version for hit in page.hits if hit.version is not None}
        others = sorted((v for v in versions if v != shown.version), key=newest_first_key)
        same_document = sum(1 for hit in page.hits if hit.uri == shown.uri) - 1
        best_similarity = max((h.similarity for h in page.hits if h.similarity is not None), default=None)
        out.append(
            replace(
                shown,
                score=round(page.score, 6),
                similarity=best_similarity,
                relevance=relevance.of(best_similarity),
                other_versions=others,
                more_matches=same_document,
            )
        )
        if len(out) == limit:
            break
    return out


def _weigh(pages: list[_Page], evidence: PageEvidence) -> None:
    """Each page's title lane and weight for this query."""
    fields = {id(hit): evidence.stems(_title_field(hit)) for page in pages for hit in page.hits}
    lane = _bm25(evidence.query_stems, list(fields.values()))
    for page in pages:
        page.title_lane = max(lane(fields[id(hit)]) for hit in page.hits)
        hit = page.hits[0]
        page.weight = evidence.weight(hit.metadata, _path(hit))
    best = max((page.title_lane for page in pages), default=0.0)
    for page in pages:
        page.title_lane = page.title_lane / best if best > 0 else 0.0


def _title_field(hit: SearchHit) -> str:
    """A chunk's title, heading path and file name: what names the page and the section it is in."""
    file = _path(hit).rsplit("/", 1)[-1].rsplit(".", 1)[0].replace("_", " ").replace("-", " ")
    return " ".join([hit.title or "", *hit.headings, file])


def _path(hit: SearchHit) -> str:
    path = hit.metadata.get("path")
    return path if isinstance(path, str) and path else hit.uri


def _bm25(query: list[str], fields: list[list[str]]) -> Callable[[list[str]], float]:
    """BM25 of `query` over one of `fields`, with IDF and mean length over the distinct fields given."""
    distinct = {tuple(f) for f in fields}
    n = len(distinct)
    df: Counter[str] = Counter(term for f in distinct for term in set(f))
    mean = sum(len(f) for f in distinct) / n if n else 1.0
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in set(query) if df[t]}

    def score(field_stems: list[str]) -> float:
        tf = Counter(field_stems)
        norm = _K1 * (1.0 - _B + _B * len(field_stems) / max(mean, 1e-9))
        return sum(w * tf[t] * (_K1 + 1.0) / (tf[t] + norm) for t, w in idf.items() if tf[t])

    return score


def _shown(hits: list[SearchHit]) -> SearchHit:
    """The best chunk of the newest version that matched."""
    newest = min((hit.version for hit in hits), key=newest_first_key)
    return next(hit for hit in hits if hit.version == newest)
