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

Relevance is absolute, unlike fusion's per-query normalised scores, and it is what orders the
results: a small logistic model (RelevanceModel) over the page's evidence (its best chunk's
cosine with the query under the service's own embedder, the query's best cosine (raw, and through
the embedder's curve, which saturates), its page score
as a share of the best page's, its place among the pages (1 / (1 + pages scored above it)), how
far the best page leads the next one where it holds the question's words, its further matches),
fitted on judged questions with `python -m bench.calibrate` and shipped as data per embedder
(relevance_models.json); the query-level inputs are read over its ten best pages. An embedder
with no fitted model falls back to the old curve over the cosine alone (Relevance.of). A nonsense
query gets a low relevance whatever the fusion makes of it: its cosines are low.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources

from kbsearch.models import SearchHit
from kbsearch.services.documents.versions import newest_first_key

__all__ = [
    "FEATURES",
    "Evidence",
    "PageEvidence",
    "Relevance",
    "RelevanceModel",
    "collapse_pages",
    "shipped_model",
    "with_relevance",
]

# How much a page's next best chunks add to its best one's score (second, third).
NEXT_CHUNK_WEIGHTS = (0.1, 0.05)
# How much the title lane at its best (1.0) multiplies a page's score. Tuned on the docs QA dev set
# (bench/docsqa.py) to a round figure.
TITLE_WEIGHT = 0.3
# BM25 over short fields (a title and a heading path of a few words).
_K1, _B = 1.2, 0.75


# The model's inputs, by name (relevance_models.json names its weights by these).
FEATURES = (
    "cosine", "top_cosine", "share", "more", "coverage", "top_coverage", "lead", "covered_lead", "inverse_rank",
    "top_on_topic",
)  # fmt: skip
# The query-level inputs (best cosine, best coverage) are read over its best pages by score, as many as the fit
# saw a question return (bench/calibrate.py asks for 10), so a caller's limit does not move them.
STATS_PAGES = 10


@dataclass(frozen=True, slots=True)
class Evidence:
    """One hit's evidence for one query, each feature larger when the hit is likelier right."""

    cosine: float  # cosine of the query and the hit's best chunk (0 without a vector)
    top_cosine: float  # the best cosine of any hit of the query: how on-topic the corpus is for it
    share: float  # the hit's ranking score over the best hit's, in [0, 1]
    more: float  # log(1 + further chunks of the page that matched)
    coverage: float = 0.0  # the share of the question's stems its title, headings and text hold
    top_coverage: float = 0.0  # the best coverage of any hit of the query
    # How far the hit's score leads the best other hit's, over the best (0 below the top; 1 alone). Monotone
    # in the hit's own score, like share, so a model over these keeps the page evidence's order.
    lead: float = 0.0
    covered_lead: float = 0.0  # lead x top_coverage: a page alone leads only where the question's words are
    # 1 / (1 + hits scored above it): its place, which reads alike on every corpus where the share does not (a
    # corpus of near-duplicate passages has ten pages at share 0.99). Monotone in the hit's own score too.
    inverse_rank: float = 0.0
    # The embedder's own curve (Relevance.of) over top_cosine: on topic or not, saturating, so a corpus whose
    # cosines run high (MLQuestions: 0.74 at the top, against 0.65 on docs) is not read as likelier right.
    top_on_topic: float = 0.0


@dataclass(frozen=True, slots=True)
class RelevanceModel:
    """relevance = 1 / (1 + exp(-(intercept + sum of weight x feature))), every weight >= 0 (monotone)."""

    intercept: float
    weights: Mapping[str, float]

    def __post_init__(self) -> None:
        unknown = set(self.weights) - set(FEATURES)
        if unknown:
            raise ValueError(f"relevance model: unknown features {sorted(unknown)}; known: {list(FEATURES)}")
        negative = sorted(name for name, w in self.weights.items() if not w >= 0 or not math.isfinite(w))
        if negative or not math.isfinite(self.intercept):
            raise ValueError(f"relevance model: weights must be finite and >= 0 (monotone), not {negative}")

    def of(self, evidence: Evidence) -> float:
        z = self.intercept + sum(w * getattr(evidence, name) for name, w in self.weights.items())
        return round(_sigmoid(z), 4)


@dataclass(frozen=True, slots=True)
class Relevance:
    """The service's relevance: the fitted model when its embedder has one, else the curve over the cosine,
    relevance = 1 / (1 + exp(-steepness * (similarity - midpoint)))."""

    midpoint: float
    steepness: float
    model: RelevanceModel | None = None

    def of(self, similarity: float | None) -> float:
        """The curve over the cosine alone (what a hit with no other evidence gets without a model)."""
        if similarity is None:
            return 0.0
        return round(_sigmoid(self.steepness * (similarity - self.midpoint)), 4)

    def of_evidence(self, evidence: Evidence) -> float:
        if self.model is None:
            return self.of(evidence.cosine)
        return self.model.of(evidence)

    def ranked(
        self,
        hits: list[SearchHit],
        scores: list[float],
        mores: list[int],
        query_stems: list[str] | None = None,
        stems: Callable[[str], list[str]] | None = None,
    ) -> list[SearchHit]:
        """`hits` (with their similarity, best score first) given their relevance, highest first (stable:
        ties keep the order). Without a model, the old way: the score's order, the curve's relevance."""
        top_score = max(scores, default=0.0)
        descending = sorted(scores, reverse=True)
        runner_up = descending[1] if len(scores) > 1 else 0.0
        best = sorted(range(len(hits)), key=lambda i: -scores[i])[:STATS_PAGES]
        top_cosine = max((s for i in best if (s := hits[i].similarity) is not None), default=0.0)
        covers = [
            coverage(query_stems, stems(" ".join([hit.title or "", *hit.headings, _file_name(hit), hit.content])))
            if query_stems is not None and stems is not None
            else 0.0
            for hit in hits
        ]
        top_cover = max((covers[i] for i in best), default=0.0)
        on_topic = self.of(top_cosine)
        scored = [
            # No vector, no evidence of meaning: relevance 0, whatever the keyword lane made of it.
            replace(
                hit,
                relevance=0.0
                if hit.similarity is None
                else self.of_evidence(
                    Evidence(
                        cosine=hit.similarity,
                        top_cosine=top_cosine,
                        share=min(max(score / top_score, 0.0), 1.0) if top_score > 0 else 0.0,
                        more=math.log1p(max(more, 0)),
                        coverage=cover,
                        top_coverage=top_cover,
                        lead=(lead := _lead(score, top_score, runner_up)),
                        covered_lead=lead * top_cover,
                        inverse_rank=1.0 / (1 + _above(score, descending)),
                        top_on_topic=on_topic,
                    )
                ),
            )
            for hit, score, more, cover in zip(hits, scores, mores, covers, strict=True)
        ]
        if self.model is None:
            return scored
        return sorted(scored, key=lambda hit: -(hit.relevance or 0.0))


def shipped_model(embedder_model: str) -> RelevanceModel | None:
    """The fitted model shipped for `embedder_model` (relevance_models.json), None when it has none."""
    text = resources.files("kbsearch.services.search").joinpath("relevance_models.json").read_text("utf-8")
    entry = json.loads(text)["models"].get(embedder_model)
    if entry is None:
        return None
    return RelevanceModel(
        intercept=float(entry["intercept"]), weights={k: float(v) for k, v in entry["weights"].items()}
    )


def coverage(query_stems: list[str], text_stems: list[str]) -> float:
    """The share of the question's distinct stems that the text holds (0 for a question of stop words alone)."""
    asked = set(query_stems)
    return len(asked & set(text_stems)) / len(asked) if asked else 0.0


def _above(score: float, descending: list[float]) -> int:
    """How many of `descending` (sorted high to low) are strictly above `score`: ties share a place."""
    return bisect.bisect_left(descending, -score, key=lambda s: -s)


def _lead(score: float, top_score: float, runner_up: float) -> float:
    """How far `score` leads the best other score, as a share of the best (0 for any but the best)."""
    if top_score <= 0 or score < top_score:
        return 0.0
    return min(max((score - runner_up) / top_score, 0.0), 1.0)


def _file_name(hit: SearchHit) -> str:
    return _path(hit).rsplit("/", 1)[-1]


def _sigmoid(z: float) -> float:
    if z < -700:
        return 0.0
    return 1.0 / (1.0 + math.exp(-z))


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


def with_relevance(
    hits: list[SearchHit], relevance: Relevance, evidence: PageEvidence | None = None
) -> list[SearchHit]:
    """Chunk hits (not collapsed), each with its relevance, highest first."""
    query_stems, stems = (evidence.query_stems, evidence.stems) if evidence is not None else (None, None)
    return relevance.ranked(hits, [hit.score for hit in hits], [0] * len(hits), query_stems, stems)


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
    scores: list[float] = []
    mores: list[int] = []
    # Every distinct page gets its relevance before the cut: the model, not the page score, decides the top `limit`.
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
                other_versions=others,
                more_matches=same_document,
            )
        )
        scores.append(page.score)
        mores.append(same_document)
    query_stems, stems = (evidence.query_stems, evidence.stems) if evidence is not None else (None, None)
    return relevance.ranked(out, scores, mores, query_stems, stems)[:limit]


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
