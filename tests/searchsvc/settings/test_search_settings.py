"""Search settings: the fusion method and lane weights, read from SEARCHSVC_*, checked with clear errors."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from kbsearch.models import Fusion
from kbsearch.services.search.service import configured_fusion
from kbsearch.settings import Settings, describe


def problems(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    return describe(caught.value)


def test_defaults_are_the_best_measured_fusion():
    settings = Settings()
    assert (settings.search.fusion, settings.search.rrf_k) == ("dbsf", 2)
    assert (settings.search.fusion_dense_weight, settings.search.fusion_keyword_weight) == (1.0, 1.0)
    assert settings.search.fusion_full_scores is True
    assert configured_fusion(settings.search) == Fusion("dbsf", 2, 1.0, 1.0, full_scores=True)


def test_fusion_and_weights_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SEARCHSVC_FUSION", "rrf")
    monkeypatch.setenv("SEARCHSVC_FUSION_DENSE_WEIGHT", "0.5")
    monkeypatch.setenv("SEARCHSVC_FUSION_KEYWORD_WEIGHT", "2")
    monkeypatch.setenv("SEARCHSVC_FUSION_FULL_SCORES", "false")
    settings = Settings()
    assert (settings.search.fusion, settings.search.fusion_dense_weight, settings.search.fusion_keyword_weight) == (
        "rrf",
        0.5,
        2.0,
    )
    assert configured_fusion(settings.search) == Fusion("rrf", 2, 0.5, 2.0, full_scores=False)


def test_a_bad_full_scores_switch_is_refused_naming_the_variable(monkeypatch):
    message = problems(monkeypatch, SEARCHSVC_FUSION_FULL_SCORES="sometimes")
    assert "SEARCHSVC_FUSION_FULL_SCORES:" in message and "valid boolean" in message


@pytest.mark.parametrize("value", ["RRF ", "linear", "", "rrf,dbsf"])
def test_an_unknown_fusion_is_refused_naming_the_choices(monkeypatch, value):
    message = problems(monkeypatch, SEARCHSVC_FUSION=value)
    assert "SEARCHSVC_FUSION:" in message and "'rrf'" in message and "'dbsf'" in message


@pytest.mark.parametrize("lane", ["DENSE", "KEYWORD"])
@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("-1", "greater than or equal to 0"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("1000", "less than or equal to 100"),
        ("heavy", "valid number"),
    ],
)
def test_a_bad_lane_weight_is_refused_naming_the_variable(monkeypatch, lane, value, says):
    message = problems(monkeypatch, **{f"SEARCHSVC_FUSION_{lane}_WEIGHT": value})
    assert f"SEARCHSVC_FUSION_{lane}_WEIGHT:" in message and says in message


def test_one_lane_may_be_switched_off_but_not_both(monkeypatch):
    assert Settings(fusion_dense_weight=0).search.fusion_keyword_weight == 1.0
    message = problems(monkeypatch, SEARCHSVC_FUSION_DENSE_WEIGHT="0", SEARCHSVC_FUSION_KEYWORD_WEIGHT="0")
    assert "both 0" in message and "SEARCHSVC_FUSION_DENSE_WEIGHT" in message


@pytest.mark.parametrize("value", ["0", "-2", "x"])
def test_a_bad_rrf_k_is_refused(monkeypatch, value):
    assert "SEARCHSVC_RRF_K:" in problems(monkeypatch, SEARCHSVC_RRF_K=value)


def test_search_turns_default_to_two_per_usable_cpu_and_at_least_four():
    assert Settings(max_concurrent_searches=3).search.search_slots == 3
    assert Settings().search.search_slots == max(4, 2 * len(os.sched_getaffinity(0)))
    with pytest.raises(ValidationError):
        Settings(max_searches_per_caller=0)
