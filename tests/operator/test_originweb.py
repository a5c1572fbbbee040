"""A local clone's web page from its origin remote: every remote form of each host gives its page."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kboperator.originweb import current_branch, origin_url, web_url_of_remote
from kboperator.repourl import parse_repo_url
from kboperator.sync.docuri import document_uri
from tests.support.git import WorkRepo, git

PROPERTIES = settings(max_examples=200, deadline=None, derandomize=True)
names = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,20}[a-z0-9]", fullmatch=True).filter(
    lambda n: ".." not in n and not n.endswith(".git")
)
hosts = st.sampled_from(["github.com", "gitlab.com", "bitbucket.org", "codeberg.org", "git.example.com"])


@PROPERTIES
@given(host=hosts, owner=names, repo=names, suffix=st.sampled_from(["", ".git"]), form=st.integers(0, 4))
def test_every_remote_form_gives_the_https_page(host: str, owner: str, repo: str, suffix: str, form: int) -> None:
    remote = [
        f"https://{host}/{owner}/{repo}{suffix}",
        f"git@{host}:{owner}/{repo}{suffix}",
        f"ssh://git@{host}/{owner}/{repo}{suffix}",
        f"ssh://git@{host}:2222/{owner}/{repo}{suffix}",  # the ssh port is not the web port
        f"https://someone:s3cret-token@{host}/{owner}/{repo}{suffix}",  # credentials are dropped
    ][form]
    page = web_url_of_remote(remote)
    assert page == f"https://{host}/{owner}/{repo}"
    assert "s3cret" not in page and "someone" not in page


@pytest.mark.parametrize(
    ("remote", "link"),
    [
        ("git@github.com:acme/handbook.git", "https://github.com/acme/handbook/blob/main/docs/a.md"),
        ("ssh://git@ssh.github.com:443/acme/handbook.git", "https://github.com/acme/handbook/blob/main/docs/a.md"),
        ("https://gitlab.com/group/sub/handbook.git", "https://gitlab.com/group/sub/handbook/-/blob/main/docs/a.md"),
        ("https://ana@bitbucket.org/acme/handbook.git", "https://bitbucket.org/acme/handbook/src/main/docs/a.md"),
        ("git@codeberg.org:acme/handbook.git", "https://codeberg.org/acme/handbook/src/branch/main/docs/a.md"),
        (
            "https://forgejo.example.org/acme/handbook",
            "https://forgejo.example.org/acme/handbook/src/branch/main/docs/a.md",
        ),
        ("http://git.local:3000/acme/handbook.git", "http://git.local:3000/acme/handbook/blob/main/docs/a.md"),
    ],
)
def test_each_host_gets_its_own_link_shape(remote: str, link: str, tmp_path) -> None:
    page = web_url_of_remote(remote)
    local = parse_repo_url(str(tmp_path), allow_local=True)
    assert document_uri(local, "main", "docs/a.md", web_url=page) == link


@pytest.mark.parametrize("remote", ["/srv/git/handbook.git", "file:///srv/git/handbook", "../handbook", "ext::sh -c x"])
def test_a_remote_without_a_web_host_gives_none(remote: str) -> None:
    assert web_url_of_remote(remote) is None


def test_origin_and_branch_are_read_from_the_clone(tmp_path) -> None:
    repo = WorkRepo(tmp_path / "clone", branch="trunk")
    repo.write("a.md", "# A\n")
    repo.commit()
    assert origin_url(repo.path) is None
    git(repo.path, "remote", "add", "origin", "git@gitlab.example.com:team/docs.git")
    assert origin_url(repo.path) == "git@gitlab.example.com:team/docs.git"
    assert current_branch(repo.path) == "trunk"
    git(repo.path, "checkout", "--quiet", "--detach")
    assert current_branch(repo.path) is None
