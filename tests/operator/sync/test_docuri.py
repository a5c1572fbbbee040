"""Document URIs per host: the right web shape, https for ssh, no credentials, encoded paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from kboperator.errors import InvalidSpecError
from kboperator.repourl import parse_repo_url
from kboperator.sync.docuri import detect_provider, document_uri


def uri(url: str, ref: str = "main", path: str = "docs/guide.md", **kwargs: object) -> str:
    return document_uri(parse_repo_url(url, allow_local=True), ref, path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/org/repo", "https://github.com/org/repo/blob/main/docs/guide.md"),
        ("https://github.com/org/repo.git", "https://github.com/org/repo/blob/main/docs/guide.md"),
        ("git@github.com:org/repo.git", "https://github.com/org/repo/blob/main/docs/guide.md"),
        ("ssh://git@github.com/org/repo", "https://github.com/org/repo/blob/main/docs/guide.md"),
        ("https://gitlab.com/group/sub/repo.git", "https://gitlab.com/group/sub/repo/-/blob/main/docs/guide.md"),
        ("git@gitlab.example.org:g/r.git", "https://gitlab.example.org/g/r/-/blob/main/docs/guide.md"),
        ("https://bitbucket.org/team/repo.git", "https://bitbucket.org/team/repo/src/main/docs/guide.md"),
        ("https://codeberg.org/org/repo.git", "https://codeberg.org/org/repo/src/branch/main/docs/guide.md"),
        ("https://gitea.internal/org/repo", "https://gitea.internal/org/repo/src/branch/main/docs/guide.md"),
        # unknown hosts take GitHub's shape (GitHub Enterprise is the common case)
        ("https://git.example.com/org/repo", "https://git.example.com/org/repo/blob/main/docs/guide.md"),
        # an https port is the web port too; an ssh port is not
        ("https://github.example.com:8443/o/r", "https://github.example.com:8443/o/r/blob/main/docs/guide.md"),
        ("ssh://git@gitlab.com:2222/o/r.git", "https://gitlab.com/o/r/-/blob/main/docs/guide.md"),
    ],
)
def test_web_uri_per_host(url: str, expected: str) -> None:
    assert uri(url) == expected


def test_gitea_tags_use_the_tag_path() -> None:
    assert uri("https://codeberg.org/o/r", "v1.0", is_tag=True) == "https://codeberg.org/o/r/src/tag/v1.0/docs/guide.md"


def test_full_ref_names_are_shortened_and_refs_encoded() -> None:
    assert (
        uri("https://github.com/o/r", "refs/heads/release/1.x")
        == "https://github.com/o/r/blob/release/1.x/docs/guide.md"
    )
    assert uri("https://github.com/o/r", "feat%x") == "https://github.com/o/r/blob/feat%25x/docs/guide.md"


def test_paths_are_percent_encoded() -> None:
    got = uri("https://github.com/o/r", path="docs/a b#1?x=%.md")
    assert got == "https://github.com/o/r/blob/main/docs/a%20b%231%3Fx%3D%25.md"
    assert uri("https://github.com/o/r", path="é.md").endswith("/%C3%A9.md")


def test_explicit_provider_overrides_detection() -> None:
    assert uri("https://git.corp/o/r", provider="gitlab") == "https://git.corp/o/r/-/blob/main/docs/guide.md"
    with pytest.raises(ValueError, match="unknown provider 'svn'"):
        uri("https://git.corp/o/r", provider="svn")


def test_local_repositories_get_file_uris(tmp_path: Path) -> None:
    folder = tmp_path / "my repo"
    folder.mkdir()
    assert uri(str(folder), path="a b.md") == "file://" + str(folder).replace(" ", "%20") + "/a%20b.md"
    assert uri(folder.as_uri(), path="x.md") == "file://" + str(folder).replace(" ", "%20") + "/x.md"


@pytest.mark.parametrize("url", ["https://user:pass@github.com/o/r", "https://token@github.com/o/r"])
def test_credentials_in_urls_are_refused_so_never_reach_a_uri(url: str) -> None:
    with pytest.raises(InvalidSpecError, match="Secret"):
        uri(url)


def test_provider_detection() -> None:
    assert detect_provider("GitHub.com") == "github"
    assert detect_provider("gitlab.acme.io") == "gitlab"
    assert detect_provider("bitbucket.acme.io") == "bitbucket"
    assert detect_provider("forgejo.acme.io") == "gitea"
    assert detect_provider("code.acme.io") == "github"
