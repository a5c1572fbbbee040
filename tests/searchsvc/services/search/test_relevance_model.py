"""The relevance model (services/search/ranking.py): in [0, 1], monotone in the evidence, and the order of results."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbsearch.models import SearchHit
from kbsearch.services.search.ranking import (
    FEATURES,
    Evidence,
    PageEvidence,
    Relevance,
    RelevanceModel,
    collapse_pages,
    shipped_model,
    with_relevance,
)
from kbsearch.store.bm25 import Bm25Encoder

MODEL = RelevanceModel(
    intercept=-6.0, weights={"cosine": 2.0, "top_cosine": 5.0, "share": 1.5, "more": 0.2, "coverage": 1.0}
)
unit = st.floats(0.0, 1.0, allow_nan=False)
cosines = st.floats(-1.0, 1.0, allow_nan=False)


def evidence(cosine=0.5, top_cosine=0.5, share=1.0, more=0.0, coverage=0.0, top_coverage=0.0) -> Evidence:
    return Evidence(cosine, top_cosine, share, more, coverage, top_coverage)


def hit(uri: str, score: float, similarity: float | None, text: str = "some text", chunk: int = 0) -> SearchHit:
    return SearchHit(
        id=f"{uri}#{chunk}",
        score=score,
        uri=uri,
        chunk_index=chunk,
        total_chunks=3,
        content=f"{text} {uri} {chunk}",
        title=None,
        headings=[],
        metadata={"path": uri},
        source_identifier="s",
        similarity=similarity,
    )


@given(cosines, cosines, unit, st.floats(0, 5), unit, unit)
def test_relevance_is_in_the_unit_interval(c, t, s, m, v, w):
    value = MODEL.of(evidence(c, t, s, m, v, w))
    assert 0.0 <= value <= 1.0


@pytest.mark.parametrize("feature", FEATURES)
@given(low=unit, delta=unit)
def test_more_evidence_never_lowers_relevance(feature, low, delta):
    base = evidence()
    lower = base.__class__(**{**{f: getattr(base, f) for f in FEATURES}, feature: low})
    higher = base.__class__(**{**{f: getattr(base, f) for f in FEATURES}, feature: low + delta})
    assert MODEL.of(lower) <= MODEL.of(higher)


def test_a_negative_weight_or_an_unknown_feature_is_refused_by_name():
    with pytest.raises(ValueError, match="monotone"):
        RelevanceModel(intercept=0.0, weights={"cosine": -1.0})
    with pytest.raises(ValueError, match="bm42"):
        RelevanceModel(intercept=0.0, weights={"bm42": 1.0})
    with pytest.raises(ValueError, match="monotone"):
        RelevanceModel(intercept=math.nan, weights={"cosine": 1.0})


# Each local model with its own fitted relevance (bench.calibrate fit --embedder NAME --write).
FITTED = ("all-MiniLM-L6-v2", "bge-small-en-v1.5", "use-multilingual-v3")


@pytest.mark.parametrize("embedder", FITTED)
def test_each_fitted_embedders_model_is_shipped_and_an_unknown_one_falls_back_to_the_curve(embedder):
    model = shipped_model(embedder)
    assert model is not None and set(model.weights) <= set(FEATURES)
    assert shipped_model("no-such-model") is None
    curve = Relevance(0.35, 12.0)
    assert curve.of_evidence(evidence(cosine=0.35)) == 0.5  # the old curve, cosine alone


page_hits = st.lists(
    st.tuples(st.integers(0, 6), st.floats(0.0, 3.0, allow_nan=False), st.one_of(st.none(), cosines)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200)
@given(page_hits, st.integers(1, 10), st.booleans())
def test_results_are_sorted_by_relevance_and_each_page_once(raw, limit, collapse):
    hits = sorted(
        (hit(f"docs/p{p}.md", score, sim, chunk=i) for i, (p, score, sim) in enumerate(raw)), key=lambda h: -h.score
    )
    relevance = Relevance(0.35, 12.0, MODEL)
    tokens = Bm25Encoder().tokens
    evidence = PageEvidence(tokens("some text p3"), tokens, lambda _metadata, _path: 1.0)
    out = collapse_pages(hits, limit, relevance, evidence) if collapse else with_relevance(hits, relevance, evidence)
    values = [h.relevance for h in out]
    assert all(v is not None and 0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values, reverse=True)
    if collapse:
        assert len({h.uri for h in out}) == len(out) <= limit
    assert all(h.relevance == 0.0 for h in out if h.similarity is None)


def test_the_page_evidence_order_is_kept_by_a_model_over_the_share_and_the_querys_best_cosine():
    # Page b's chunk has the higher cosine, page a the higher page score: a model that weighs the
    # page only by its share of the best score keeps the evidence's order, and calibrates it by the query.
    hits = [hit("docs/a.md", 1.0, 0.40), hit("docs/b.md", 0.6, 0.55)]
    kept = Relevance(0.35, 12.0, RelevanceModel(-4.0, {"top_cosine": 6.0, "share": 2.0}))
    out = collapse_pages(hits, 5, kept)
    assert [h.uri for h in out] == ["docs/a.md", "docs/b.md"]
    assert out[0].relevance is not None and out[1].relevance is not None and out[0].relevance > out[1].relevance
    # Without a model: the old way, the page evidence's order and the curve over each cosine.
    old = collapse_pages(hits, 5, Relevance(0.35, 12.0))
    assert [h.uri for h in old] == ["docs/a.md", "docs/b.md"]
    assert [h.relevance for h in old] == [Relevance(0.35, 12.0).of(0.40), Relevance(0.35, 12.0).of(0.55)]


@pytest.mark.parametrize("embedder", FITTED)
@settings(max_examples=200)
@given(raw=page_hits)
def test_each_shipped_model_orders_pages_as_the_page_evidence_does(embedder, raw):
    hits = sorted(
        (hit(f"docs/p{p}.md", score, sim, chunk=i) for i, (p, score, sim) in enumerate(raw)), key=lambda h: -h.score
    )
    tokens = Bm25Encoder().tokens
    evidence = PageEvidence(tokens("some text p3"), tokens, lambda _metadata, _path: 1.0)
    fitted = collapse_pages(hits, 30, Relevance(0.35, 12.0, shipped_model(embedder)), evidence)
    curve = collapse_pages(hits, 30, Relevance(0.35, 12.0), evidence)
    # Hits without a vector get 0 and sink; among the others the order is the page evidence's.
    assert [h.uri for h in fitted if h.similarity is not None] == [h.uri for h in curve if h.similarity is not None]


def test_a_page_alone_is_relevant_when_it_holds_the_questions_words_and_not_otherwise():
    # The README's example: one page, a one-word question with a low cosine (0.28 under MiniLM).
    relevance = Relevance(0.35, 12.0, shipped_model("all-MiniLM-L6-v2"))
    tokens = Bm25Encoder().tokens
    page = [hit("install.md", 1.0, 0.28, text="Run helm install to deploy the chart.")]
    on_topic = collapse_pages(page, 5, relevance, PageEvidence(tokens("deploy"), tokens, lambda _m, _p: 1.0))
    off_topic = collapse_pages(
        page, 5, relevance, PageEvidence(tokens("terraform state locking with s3"), tokens, lambda _m, _p: 1.0)
    )
    assert (on_topic[0].relevance or 0.0) >= 0.5 > (off_topic[0].relevance or 0.0)


def test_near_equal_pages_are_told_apart_by_their_place_and_tied_pages_share_one():
    # MLQuestions' shape: ten short passages whose page scores sit within 1% of the best. Their shares are all
    # about 1, so only the place separates the best page from the rest; two pages scored alike share a place.
    relevance = Relevance(0.35, 12.0, shipped_model("all-MiniLM-L6-v2"))
    hits = [hit(f"docs/p{i}.md", 1.0 - 0.001 * i, 0.7) for i in range(10)]
    out = collapse_pages(hits, 10, relevance)
    values = [h.relevance or 0.0 for h in out]
    assert [h.uri for h in out] == [h.uri for h in hits]
    assert values[0] - values[1] >= 0.1 and values[1] > values[-1]
    tied = collapse_pages(
        [hit("docs/a.md", 1.0, 0.7), hit("docs/b.md", 1.0, 0.7), hit("docs/c.md", 0.5, 0.7)], 3, relevance
    )
    assert tied[0].relevance == tied[1].relevance > (tied[2].relevance or 0.0)


def test_the_querys_best_cosine_is_read_over_its_ten_best_pages_whatever_the_limit():
    # The fit saw ten pages a question: a page ranked eleventh does not lift the others' relevance.
    relevance = Relevance(0.35, 12.0, RelevanceModel(-3.0, {"top_cosine": 6.0, "inverse_rank": 1.0}))
    hits = [hit(f"docs/p{i}.md", 1.0 - 0.01 * i, 0.3) for i in range(10)] + [hit("docs/late.md", 0.5, 0.9)]
    top_three = collapse_pages(hits, 3, relevance)
    without_it = collapse_pages(hits[:10], 3, relevance)
    assert [h.relevance for h in top_three] == [h.relevance for h in without_it]
