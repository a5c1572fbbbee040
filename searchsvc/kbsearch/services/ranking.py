"""From ranked chunks to ranked pages: one hit per page, the newest version first, and a relevance in [0, 1].

A page is every version of one document (services/versions.py) in one source. Its hits collapse
into one result: the best chunk of the version shown (the newest that matched, unless the caller
asked for a version), the other versions that matched, and how many more of its chunks did.
Identical chunk texts (a page copied into two places) collapse into the first.

A page ranks by its best chunk's fused score plus a little of its second-best chunk's: a page
that answers in two places is likelier the page than one with a single lucky chunk.

Relevance is absolute, unlike fusion's per-query normalised scores: a logistic curve over the
cosine of the query and the page's best chunk under the service's own embedder, calibrated on the
docs QA dev set (bench/docsqa.py; see docs/user/api.md). A nonsense query gets a low relevance
whatever the fusion makes of it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace

from kbsearch.models import SearchHit
from kbsearch.services.versions import newest_first_key

__all__ = ["Relevance", "collapse_pages", "with_relevance"]

# How much a page's second-best chunk adds to its best one's score.
SECOND_CHUNK_WEIGHT = 0.1


@dataclass(frozen=True, slots=True)
class Relevance:
    """relevance = 1 / (1 + exp(-steepness * (similarity - midpoint))), for the embedder the service runs."""

    midpoint: float
    steepness: float

    def of(self, similarity: float | None) -> float:
        if similarity is None:
            return 0.0
        return round(1.0 / (1.0 + math.exp(-self.steepness * (similarity - self.midpoint))), 4)


@dataclass(slots=True)
class _Page:
    hits: list[SearchHit] = field(default_factory=list)  # best first

    @property
    def score(self) -> float:
        second = self.hits[1].score if len(self.hits) > 1 else 0.0
        return self.hits[0].score + SECOND_CHUNK_WEIGHT * second


def with_relevance(hits: list[SearchHit], relevance: Relevance) -> list[SearchHit]:
    return [replace(hit, relevance=relevance.of(hit.similarity)) for hit in hits]


def collapse_pages(hits: list[SearchHit], limit: int, relevance: Relevance) -> list[SearchHit]:
    """At most `limit` hits, one per page, best page first (hits must come best first)."""
    pages: dict[tuple[str | None, str], _Page] = {}
    for hit in hits:
        pages.setdefault((hit.source_identifier, hit.page_key or hit.uri), _Page()).hits.append(hit)
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


def _shown(hits: list[SearchHit]) -> SearchHit:
    """The best chunk of the newest version that matched."""
    newest = min((hit.version for hit in hits), key=newest_first_key)
    return next(hit for hit in hits if hit.version == newest)
