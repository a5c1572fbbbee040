"""The self-check's parts: what counts as one answer, how ties are ordered, when a difference is a verdict."""

from __future__ import annotations

from kbsearch.models import DocumentRecord, SearchHit
from kbsearch.services.rebuild.selfcheck import MODES, Answers, CheckResult, ModeVerdict, _order, paired_upper_bound


def record(uri: str, checksum: str, source: str = "docs", path: str | None = None) -> DocumentRecord:
    metadata: dict[str, str | int | float | bool] = {"sourceIdentifier": source}
    if path is not None:
        metadata["path"] = path
    return DocumentRecord(uri, source, checksum, 2, metadata, "t", "2026-11-27T00:00:00Z", "markdown-v2")


def hit(uri: str, score: float, source: str = "docs") -> SearchHit:
    return SearchHit(uri, score, uri, 0, 1, "text", None, [], {}, source)


def test_the_versions_of_a_page_and_identical_copies_are_one_answer_keyed_by_their_smallest_uri():
    answers = Answers(
        [
            record("d/2.12/a.md", "sha256:a3", path="content/docs/2.12/a.md"),
            record("d/2.9/a.md", "sha256:a1", path="content/docs/2.9/a.md"),
            record("d/2.10/a.md", "sha256:a2", path="content/docs/2.10/a.md"),
            record("mirror/a.md", "sha256:a3", source="mirror"),  # a copy of 2.12 in another source
            record("d/2.12/b.md", "sha256:b", path="content/docs/2.12/b.md"),
            record("other/a.md", "sha256:x", source="other", path="content/docs/2.12/a.md"),  # same path, other source
        ]
    )
    one = {answers.of(u) for u in ("d/2.12/a.md", "d/2.9/a.md", "d/2.10/a.md", "mirror/a.md")}
    assert one == {"d/2.10/a.md"}
    assert answers.of("d/2.12/b.md") == "d/2.12/b.md"
    assert answers.of("other/a.md") == "other/a.md"
    # A document written after the listing is its own page, or joins its page's versions.
    assert answers.of("d/2.13/a.md", "docs", "content/docs/*/a.md") == "d/2.10/a.md"
    assert answers.of("new.md", "docs", None) == "new.md"
    assert sorted(answers.groups()) == ["d/2.10/a.md", "d/2.12/b.md", "other/a.md"]


def test_answers_do_not_depend_on_the_order_they_are_read_in():
    records = [
        record(f"d/{v}/p{i}.md", f"sha256:{v}{i}", path=f"content/docs/{v}/p{i}.md") for v in "123" for i in range(5)
    ]
    assert Answers(records).groups().keys() == Answers(list(reversed(records))).groups().keys()


def test_equal_scores_are_ordered_by_the_answers_key_whatever_the_engine_returned_first():
    answers = Answers([record("b.md", "sha256:b"), record("a.md", "sha256:a"), record("c.md", "sha256:c")])
    one = _order([hit("b.md", 0.5), hit("a.md", 0.5), hit("c.md", 0.7)], answers)
    other = _order([hit("a.md", 0.5), hit("c.md", 0.7), hit("b.md", 0.5)], answers)
    assert one == other == ["c.md", "a.md", "b.md"]
    # Scores closer than the fourth decimal are a tie too (a rebuilt index's float noise).
    assert _order([hit("b.md", 0.50001), hit("a.md", 0.5)], answers) == ["a.md", "b.md"]


def test_no_difference_is_no_evidence_and_one_flip_in_a_hundred_is_noise():
    assert paired_upper_bound([0.0] * 100) == 0.0
    assert paired_upper_bound([]) == 0.0
    one_flip = [0.0] * 99 + [-0.5]  # rank 1 -> rank 2 once
    upper = paired_upper_bound(one_flip)
    assert upper >= 0.0
    assert not verdict(one_flip).worse(0.05)


def test_a_consistently_worse_rebuild_is_worse_with_confidence_and_beyond_the_margin():
    worse = [-1.0] * 40 + [0.0] * 60  # 40 of 100 answers lost
    assert paired_upper_bound(worse) < 0
    assert verdict(worse).worse(0.05)
    # Worse with confidence but by less than the margin: within what the setting allows.
    slightly = [-0.04] * 100
    assert paired_upper_bound(slightly) < 0 and not verdict(slightly).worse(0.05)


def test_the_bootstrap_is_repeatable():
    differences = [-1.0, 0.5, 0.0, -0.5, 0.0, 0.25, -0.75, 0.0] * 10
    assert paired_upper_bound(differences) == paired_upper_bound(list(differences))


def test_the_result_names_its_test_threshold_and_figures_per_mode():
    result = CheckResult(3, {"title": 2, "logged": 1}, {"docs": 3}, 0.05)
    for mode in MODES:
        result.modes[mode] = verdict([0.0, 0.0, 0.0])
    shown = result.as_dict()
    assert shown["queries"] == 3 and shown["margin"] == 0.05 and shown["confidence"] == 0.95
    assert "paired bootstrap" in str(shown["test"]) and shown["passed"] is True
    assert set(shown["upperBound"]) == set(MODES)  # type: ignore[arg-type]


def verdict(differences: list[float]) -> ModeVerdict:
    mean = sum(differences) / len(differences)
    return ModeVerdict(0.8, 0.8 + mean, mean, paired_upper_bound(differences), 0, 0)
