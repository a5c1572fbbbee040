"""`knowledge-sync` as a CI job runs it: in a shallow (depth 1) checkout, with the links set to the forge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest

from kboperator.repourl import parse_repo_url
from kboperator.sync.docuri import check_web_url, document_uri
from tests.operator.cli_support import SOURCE, Server, run
from tests.operator.search_service import sha256
from tests.support.git import WorkRepo, git

WEB = "https://github.com/acme/handbook"


@pytest.fixture
def upstream(tmp_path: Path) -> WorkRepo:
    """The forge's repository: three commits, five documents."""
    work = WorkRepo(tmp_path / "upstream")
    for n in range(3):
        work.write(f"page{n}.md", f"# Page {n}\n")
        work.commit(f"page {n}")
    work.write("guide/a.md", "# A\n")
    work.write("guide/b.md", "# B\n")
    work.commit("guide")
    return work


def checkout(upstream: WorkRepo, folder: Path, *, detach: bool = False) -> Path:
    """What a CI runner does: a fresh clone of depth 1 (the folder is emptied first)."""
    shutil.rmtree(folder, ignore_errors=True)
    git(upstream.path.parent, "clone", "--quiet", "--depth", "1", upstream.path.resolve().as_uri(), str(folder))
    assert git(folder, "rev-parse", "--is-shallow-repository") == "true"
    if detach:
        git(folder, "checkout", "--quiet", "--detach")
    return folder


def args(server: Server, repo: Path, cache: Path, *extra: str) -> list[str]:
    return ["--repo", str(repo), "--source-id", SOURCE, "--service", server.url, "--cache-dir", str(cache), *extra]


def web_uri(path: str, base: str = WEB, middle: str = "blob/main") -> str:
    return f"{base}/{middle}/{quote(path)}"


def expected(upstream: WorkRepo, **uri: str) -> dict[str, str]:
    return {web_uri(p, **uri): sha256(d) for p, d in upstream.files().items() if p.endswith(".md")}


@pytest.mark.parametrize("keep_cache", [False, True], ids=["fresh-cache", "kept-cache"])
def test_a_shallow_checkout_syncs_and_a_later_one_falls_back_to_a_full_reconcile_of_the_changes(
    server: Server,
    upstream: WorkRepo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keep_cache: bool,
) -> None:
    work, state = tmp_path / "runner" / "handbook", tmp_path / "state.json"
    extra = ("--state", str(state), "--web-url", WEB, "--json")
    code, out, err = run(capsys, *args(server, checkout(upstream, work), tmp_path / "cache-1", *extra))
    assert code == 0, err
    first = json.loads(out)
    assert (first["full"], first["added"], first["documents"]) == (True, 5, 5)
    assert server.listing() == expected(upstream)

    # Two pushes later, the next job's checkout holds only the newest commit: the state's commit
    # is not in its history, so the sync is a full reconcile that sends only what changed.
    upstream.write("page1.md", "# Page 1, edited\n")
    upstream.commit("edit")
    upstream.write("guide/c.md", "# C\n")
    upstream.commit("add")
    cache = tmp_path / ("cache-1" if keep_cache else "cache-2")
    code, out, err = run(capsys, *args(server, checkout(upstream, work), cache, *extra))
    assert code == 0, err
    second = json.loads(out)
    assert second["commit"] == upstream.head()
    assert (second["full"], second["added"], second["modified"], second["unchanged"]) == (True, 1, 1, 4)
    assert server.listing() == expected(upstream)
    assert json.loads(state.read_text())["commit"] == upstream.head()

    # One push on top of the synced commit: a depth-1 checkout still cuts the history above its
    # own commit (git marks it shallow, also in a kept cache), so again only the change is sent.
    upstream.write("page0.md", "# Page 0, edited\n")
    upstream.commit("edit again")
    code, out, err = run(capsys, *args(server, checkout(upstream, work), cache, *extra))
    assert code == 0, err
    third = json.loads(out)
    assert (third["full"], third["modified"], third["unchanged"]) == (True, 1, 5)
    assert server.listing() == expected(upstream)


def test_ci_variables_set_the_links_of_the_jobs_own_checkout(
    server: Server,
    upstream: WorkRepo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GitLab checks out a detached HEAD; the branch comes from its variables.
    work = checkout(upstream, tmp_path / "builds" / "handbook", detach=True)
    monkeypatch.setenv("CI_PROJECT_DIR", str(work))
    monkeypatch.setenv("CI_PROJECT_URL", "https://gitlab.example.com/acme/handbook")
    monkeypatch.setenv("CI_COMMIT_REF_NAME", "main")
    code, _, err = run(capsys, *args(server, work, tmp_path / "cache", "--ref", "HEAD"))
    assert code == 0, err
    assert server.listing() == expected(upstream, base="https://gitlab.example.com/acme/handbook", middle="-/blob/main")

    # GitHub Actions: the variables name the workspace; another folder keeps its file:// links.
    for name in ("CI_PROJECT_DIR", "CI_PROJECT_URL", "CI_COMMIT_REF_NAME"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(work))
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/handbook")
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    code, _, err = run(capsys, *args(server, work, tmp_path / "cache", "--ref", "HEAD"))
    assert code == 0, err
    assert server.listing() == expected(upstream)
    other = checkout(upstream, tmp_path / "elsewhere")
    code, _, err = run(capsys, *args(server, other, tmp_path / "cache", "--full"))
    assert code == 0, err
    assert all(uri.startswith(other.resolve().as_uri() + "/") for uri in server.listing())


@pytest.mark.parametrize(
    ("extra", "git_says"),
    [
        (("--ref", "no-such-branch"), "couldn't find remote ref no-such-branch"),
        (("--web-url", "https://user:pw@github.com/acme/handbook"), "must not carry credentials"),
    ],
)
def test_failures_show_what_went_wrong(
    server: Server,
    upstream: WorkRepo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    git_says: str,
) -> None:
    work = checkout(upstream, tmp_path / "checkout")
    code, _, err = run(capsys, *args(server, work, tmp_path / "cache", *extra))
    assert code == 2
    assert git_says in err


def test_a_folder_that_is_not_a_repository_shows_gits_message(
    server: Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "plain").mkdir()
    code, _, err = run(capsys, *args(server, tmp_path / "plain", tmp_path / "cache"))
    assert code == 2
    assert "is not a git repository (git: fatal:" in err


@pytest.mark.parametrize(
    ("web_url", "normalised"),
    [
        ("https://github.com/acme/handbook/", "https://github.com/acme/handbook"),
        (
            "https://gitlab.example.com:8443/group/sub/handbook.git",
            "https://gitlab.example.com:8443/group/sub/handbook",
        ),
    ],
)
def test_a_web_url_is_normalised(web_url: str, normalised: str) -> None:
    assert check_web_url(web_url) == normalised


@pytest.mark.parametrize(
    "web_url", ["ftp://github.com/acme/x", "https://github.com", "https://github.com/a/b?x=1", "/home/runner/work/x"]
)
def test_an_unusable_web_url_is_refused(web_url: str) -> None:
    with pytest.raises(ValueError, match="web URL"):
        check_web_url(web_url)


def test_the_web_urls_host_decides_the_links_shape(tmp_path: Path) -> None:
    local = parse_repo_url(str(tmp_path), allow_local=True)
    assert document_uri(local, "main", "a b.md", web_url="https://codeberg.org/acme/handbook") == (
        "https://codeberg.org/acme/handbook/src/branch/main/a%20b.md"
    )
    assert document_uri(local, "v1", "a.md", is_tag=True, web_url="https://gitea.example.com/acme/handbook") == (
        "https://gitea.example.com/acme/handbook/src/tag/v1/a.md"
    )
    assert document_uri(local, "main", "a.md") == local.display_url + "/a.md"
