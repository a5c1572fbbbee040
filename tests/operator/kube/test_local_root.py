"""Local repositories, when allowed, come from one configured folder and never from the clone cache."""

from __future__ import annotations

import datetime
from contextlib import closing
from pathlib import Path

import pytest

from kboperator.errors import InvalidSpecError
from kboperator.git.repo import RepoCache
from kboperator.kube.observed import observe
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.statemachine import decide
from kboperator.models import RepoSpec
from kboperator.repourl import check_repo
from kboperator.settings import OperatorSettings
from tests.support.git import WorkRepo

NOW = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)


def repo(path: Path) -> WorkRepo:
    work = WorkRepo(path)
    work.write("a.md", f"# {path.name}\n")
    work.commit("first")
    return work


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "git"


@pytest.fixture
def cache(root: Path) -> RepoCache:
    # The cache inside the root, the worst case: only the cache rule keeps the clones apart.
    return RepoCache(root / "cache", local_root=root)


def refused(cache: RepoCache, url: str, words: str) -> None:
    with pytest.raises(InvalidSpecError, match=words):
        cache.open("kb/intruder", check_repo(RepoSpec(url), allow_local=True))


def test_a_repository_inside_the_root_is_served(cache: RepoCache, root: Path) -> None:
    inside = repo(root / "team" / "notes")
    for url in (str(inside.path), inside.path.as_uri(), f"{root}/team/../team/notes"):
        with closing(cache.open("kb/notes", check_repo(RepoSpec(url), allow_local=True))) as checkout:
            assert checkout.head == inside.head()


def test_paths_outside_the_root_are_refused_after_resolving(cache: RepoCache, root: Path, tmp_path: Path) -> None:
    outside = repo(tmp_path / "outside")
    (root / "team").mkdir(parents=True)
    (root / "team" / "link").symlink_to(outside.path)
    for url in (
        str(outside.path),
        outside.path.as_uri(),
        f"{root}/team/../../outside",
        f"{root}/team/link",
        f"file://{root}/team/link",
    ):
        refused(cache, url, "outside the allowed folder")


def test_another_sources_clone_in_the_cache_is_refused(cache: RepoCache, root: Path) -> None:
    private = repo(root / "private")
    with closing(cache.open("kb/private", check_repo(RepoSpec(str(private.path)), allow_local=True))) as checkout:
        clone = checkout.folder  # a bare repository holding that source's documents
    assert clone.parent == cache.root
    (root / "alias").symlink_to(clone)
    for url in (str(clone), clone.as_uri(), str(root / "alias"), str(cache.root)):
        refused(cache, url, "inside the operator's clone cache")


def test_the_operator_checks_the_root_before_any_sync(tmp_path: Path) -> None:
    root = tmp_path / "git"
    inside, outside = root / "docs", tmp_path / "elsewhere"
    inside.mkdir(parents=True)
    outside.mkdir()
    settings = OperatorSettings(allow_local_repositories=True, local_repositories_root=root, cache_dir=tmp_path / "c")

    def action(url: str) -> str:
        body = {"metadata": {"name": "docs", "namespace": "kb", "generation": 1}, "spec": {"repository": {"url": url}}}
        return decide(observe(body, settings), KnowledgeSourceStatus(), settings, NOW).action.value

    assert action(str(inside)) == "announce"
    assert action(str(outside)) == action(f"{root}/../elsewhere") == action(str(tmp_path / "c")) == "invalid"


def test_the_settings_require_a_root_outside_the_cache(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="LOCAL_REPOSITORIES_ROOT is required"):
        OperatorSettings(allow_local_repositories=True)
    with pytest.raises(ValueError, match="must not be inside"):
        OperatorSettings(allow_local_repositories=True, cache_dir=tmp_path, local_repositories_root=tmp_path / "git")
    assert OperatorSettings(local_repositories_root=None).allow_local_repositories is False
