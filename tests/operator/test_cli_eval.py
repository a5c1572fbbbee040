"""`knowledge-sync --eval` and `--eval-min-hit5` against the real service served by uvicorn."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kboperator.cli import EXIT_CONFIG, EXIT_OK, EXIT_QUALITY, main
from tests.operator.cli_support import SOURCE, Server, base_args, run
from tests.operator.sync.questions_support import handbook
from tests.support.git import WorkRepo


@pytest.fixture
def repo(tmp_path: Path) -> WorkRepo:
    return handbook(tmp_path / "handbook")


def test_eval_prints_each_question_and_the_threshold_sets_the_exit_status(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    state = tmp_path / "state.json"
    args = [*base_args(server, repo, tmp_path), "--state", str(state)]
    code, out, err = run(capsys, *args, "--eval")
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].startswith("converged")
    assert lines[1].split() == ["hit@1", "hit@5", "facts", "question"]
    assert lines[2].split() == ["yes", "yes", "1/1", "How", "do", "I", "install", "the", "operator", "with", "helm?"]
    assert lines[3].split()[:3] == ["yes", "yes", "-"]
    assert lines[4].split()[:3] == ["no", "no", "0/1"]
    assert "missing: '1.21 gigawatts'" in lines[5] and "expected: docs/flux.md" in lines[6]
    assert lines[-1] == ("quality: 3 questions, hit@1 0.67, hit@5 0.67, answers with their facts 0.50 of 2; 1 failed")
    # The same figures reached the service's sources list.
    listed = httpx.get(f"{server.url}/api/v1/sources").json()["sources"]
    assert next(s for s in listed if s["sourceIdentifier"] == SOURCE)["quality"] == 0.6667

    # Under the threshold: exit 3, and the state still advances (the sync itself converged). The ref
    # did not move, so the questions are asked again of the cached clone.
    code, out, err = run(capsys, *args, "--eval-min-hit5", "0.9")
    assert code == EXIT_QUALITY
    assert "nothing to do" in out and "hit@5 0.67" in out
    assert "hit@5 is 0.67, under --eval-min-hit5 0.9" in err
    assert json.loads(state.read_text())["commit"] == repo.head()
    code, _, err = run(capsys, *args, "--eval-min-hit5", "0.6", "--json")
    assert code == EXIT_OK, err


def test_without_eval_a_sync_prints_the_figures_and_json_carries_them(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    code, out, err = run(capsys, *base_args(server, repo, tmp_path))
    assert code == EXIT_OK, err
    assert out.splitlines()[1].startswith("quality: 3 questions, hit@1 0.67")
    code, out, err = run(capsys, *base_args(server, repo, tmp_path), "--json")
    quality = json.loads(out)["quality"]
    assert (quality["questions"], quality["hitAt5"], quality["failed"]) == (3, 0.6667, 1)


def test_no_questions_file_is_under_any_threshold(server: Server, repo: WorkRepo, tmp_path: Path, capsys) -> None:
    repo.remove(".kb/questions.yaml")
    repo.commit()
    code, _, err = run(capsys, *base_args(server, repo, tmp_path), "--eval-min-hit5", "0")
    assert code == EXIT_QUALITY
    assert "has no .kb/questions.yaml" in err and "hit@5 is -" in err


def test_a_threshold_outside_zero_to_one_is_a_usage_error(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as usage:
        main([*base_args(server, repo, tmp_path), "--eval-min-hit5", "80"])
    assert usage.value.code == EXIT_CONFIG
    assert "must be a share between 0 and 1" in capsys.readouterr().err
