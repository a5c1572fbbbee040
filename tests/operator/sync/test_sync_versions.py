"""Versioned copies read from the repository's own folders (kboperator/sync/versions.py), and what
search makes of them: one page per set of copies, the current copy first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kboperator.sync.versions import VersionLayout, affixed_version
from kbsearch.services.documents.versions import detect_version, newest_first_key
from tests.operator.cli_support import SOURCE, TOKEN, Server, base_args, run
from tests.support.git import WorkRepo

HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("folder", "found"),
    [
        ("v1.16-docs", ("docs", "1.16")),
        ("1.16-docs", ("docs", "1.16")),
        ("docs-2.21", ("docs", "2.21")),
        ("docs_v3.1.2", ("docs", "3.1.2")),
        ("user-guide-1.2", ("user-guide", "1.2")),
        ("v2-docs", ("docs", "2")),
        # Names: digits glued to a word, a bare number (a year, a part), or no name at all.
        ("python3-docs", None),
        ("2021-blog", None),
        ("k8s-1-docs", None),
        ("docs-2", None),
        ("1.16", None),
        ("docs", None),
        # The service's own forms, which it reads from the path alone.
        ("version-3.1", None),
        ("release-1.2", None),
    ],
)
def test_a_folder_names_a_version_beside_a_name(folder, found):
    assert affixed_version(folder) == found


def _layout(*paths: str) -> VersionLayout:
    return VersionLayout(paths)


def test_a_versioned_copy_needs_a_sibling_that_shows_the_layout():
    cert_manager = _layout("content/docs/usage/a.md", "content/v1.16-docs/usage/a.md", "content/v1.20-docs/b.md")
    assert cert_manager.version_of("content/v1.16-docs/usage/a.md") == "1.16"
    assert cert_manager.version_of("content/v1.20-docs/b.md") == "1.20"  # a page only that copy has
    assert cert_manager.version_of("content/docs/usage/a.md") is None  # the current copy
    # Two versions and no current copy are a layout too.
    assert _layout("docs-2.20/a.md", "docs-2.21/a.md").version_of("docs-2.21/a.md") == "2.21"
    # Alone, a version in a folder name says what the folder is about.
    alone = _layout("content/python-3.11/guide.md", "content/docs/a.md", "content/2021-blog/post.md")
    assert not alone and alone.version_of("content/python-3.11/guide.md") is None
    # Siblings only: a `docs` elsewhere in the tree is another folder.
    assert _layout("site/docs/a.md", "content/v1.16-docs/a.md").version_of("content/v1.16-docs/a.md") is None
    # The first versioned folder of a path is its version's.
    nested = _layout("docs/a/x.md", "docs-1.2/a/x.md", "docs-1.2/a-1.0/x.md", "docs-1.2/a-1.1/x.md")
    assert nested.version_of("docs-1.2/a-1.0/x.md") == "1.2"


_words = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True).filter(lambda w: w not in ("version", "release"))
_versions = st.lists(st.integers(0, 99), min_size=2, max_size=3).map(lambda ns: ".".join(map(str, ns)))
# Folder names as docs repositories have them, none a version beside a name: `2021-blog`, `python3-docs`,
# `k8s-1-docs`, `docs`, `2.21` (a version itself, which the service reads), `v2.x`.
_plain = st.from_regex(
    r"([0-9]{1,4}[-_])?[a-z]{1,8}[0-9]{0,4}([-_][a-z][a-z0-9]{0,6}|[-_][0-9]{1,4})*|[0-9.]{1,6}", fullmatch=True
)


@given(tree=st.lists(st.lists(_plain, min_size=1, max_size=4), min_size=1, max_size=12))
def test_folders_without_a_dotted_or_v_version_beside_a_name_are_never_versions(tree):
    paths = ["/".join([*folders, "page.md"]) for folders in tree]
    layout = VersionLayout(paths)
    assert not layout and all(layout.version_of(p) is None for p in paths)


@given(
    parent=st.lists(_words, max_size=2),
    name=_words,
    versions=st.lists(_versions, min_size=1, max_size=4, unique=True),
    current=st.booleans(),
    form=st.sampled_from(["v{v}-{n}", "{v}-{n}", "{n}-{v}", "{n}_v{v}"]),
    rest=st.lists(_words, max_size=2),
)
def test_copies_beside_the_current_one_or_each_other_are_versions(parent, name, versions, current, form, rest):
    def path(folder: str) -> str:
        return "/".join([*parent, folder, *rest, "page.md"])

    copies = {path(form.format(v=v, n=name)): v for v in versions}
    paths = [*copies, *([path(name)] if current else [])]
    layout = VersionLayout(paths)
    if current or len(versions) > 1:
        assert {p: layout.version_of(p) for p in copies} == copies
    else:  # one copy alone
        assert all(layout.version_of(p) is None for p in copies)
    if current:
        assert layout.version_of(path(name)) is None


@pytest.mark.parametrize(
    ("paths", "page", "newest"),
    [
        (["content/docs/2.21/a.md", "content/docs/2.20/a.md"], "content/docs/*/a.md", "2.21"),  # Hugo
        (["content/docs/a.md", "content/v1.16-docs/a.md", "content/v1.20-docs/a.md"], "content/docs/a.md", None),
        (["docs/a.md", "docs-2.21/a.md"], "docs/a.md", None),
        (["docs-2.20/a.md", "docs-2.21/a.md"], "docs/a.md", "2.21"),
        (["release-1.2/a.md", "release-1.10/a.md"], "*/a.md", "1.10"),
        (["docs/a.md", "versioned_docs/version-3.1/a.md", "versioned_docs/version-3.0/a.md"], "docs/a.md", None),
        (["docs/v1.4/a.md", "docs/v1.5/a.md"], "docs/*/a.md", "1.5"),
    ],
)
def test_every_common_layout_synced_as_is_is_one_page_newest_first(paths, page, newest):
    """The sync's versions (from the tree) and the service's keys (from each document) together."""
    layout = VersionLayout(paths)
    located = []
    for path in paths:
        version = layout.version_of(path)
        located.append(
            detect_version(f"file:///repo/{path}", {"path": path} | ({"version": version} if version else {}))
        )
    assert {found.page for found in located} == {page}
    assert min((found.version for found in located), key=newest_first_key) == newest


@pytest.mark.parametrize(
    "paths",
    [
        ["content/2021-blog/post.md", "content/2022-blog/post.md", "content/blog/post.md"],
        ["python3-docs/a.md", "docs/a.md", "python2-docs/a.md"],
        ["k8s-1-docs/a.md", "k8s-2-docs/a.md"],
        ["content/python-3.11/a.md", "content/docs/a.md"],
    ],
)
def test_names_with_numbers_beside_their_siblings_stay_pages_of_their_own(paths):
    layout = VersionLayout(paths)
    assert [layout.version_of(p) for p in paths] == [None] * len(paths)
    assert [detect_version("kb://x", {"path": p}) for p in paths] == [(None, p) for p in paths]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "service-data") as running:
        yield running


def _versions(server: Server) -> dict[str, str | None]:
    listed = httpx.get(f"{server.url}/api/v1/documents", params={"sourceIdentifier": SOURCE}, headers=HEADERS)
    return {doc["metadata"]["path"]: doc["metadata"].get("version") for doc in listed.json()["documents"]}


def _search(server: Server, query: str) -> list[dict]:
    body = {"query": query, "limit": 5}
    return httpx.post(f"{server.url}/api/v1/search", json=body, headers=HEADERS).json()["results"]


INGRESS = "# Securing ingresses\n\nAdd the cluster-issuer annotation to the Ingress and name a secretName.\n"


def test_a_site_with_a_copy_per_release_syncs_as_one_page_per_topic(
    server: Server, tmp_path: Path, capsys, caplog
) -> None:
    work = WorkRepo(tmp_path / "website")
    work.write("content/docs/usage/ingress.md", INGRESS)
    work.write("content/v1.17-docs/usage/ingress.md", INGRESS)  # byte-identical, as most copies are
    work.write("content/v1.16-docs/usage/ingress.md", INGRESS.replace("cluster-issuer", "issuer"))
    work.write("content/python-3.11/guide.md", "# Python\n\nInstall the interpreter before the ingress tools.\n")
    work.commit()
    args = [*base_args(server, work, tmp_path), "--include", "content/**/*.md", "--state", str(tmp_path / "state")]
    code, _, err = run(capsys, *args)
    assert code == 0, err
    assert _versions(server) == {
        "content/docs/usage/ingress.md": None,
        "content/v1.17-docs/usage/ingress.md": "1.17",
        "content/v1.16-docs/usage/ingress.md": "1.16",
        "content/python-3.11/guide.md": None,  # no sibling shows a layout: a guide, not a version
    }
    ingress = [r for r in _search(server, "ingress annotation secretName") if "ingress.md" in r["metadata"]["path"]]
    assert len(ingress) == 1  # three copies, one page: the current one, the others named
    assert ingress[0]["metadata"]["path"] == "content/docs/usage/ingress.md" and ingress[0].get("version") is None
    assert ingress[0]["otherVersions"] == ["1.17", "1.16"]

    # A page in a copy the layout already has: an incremental sync, which gives it its version.
    work.write("content/v1.17-docs/usage/gateway.md", "# Gateways\n\nAnnotate the Gateway.\n")
    work.commit()
    caplog.clear()
    code, _, err = run(capsys, *args)
    assert code == 0, err
    assert "(incremental)" in caplog.text and "full reconcile" not in caplog.text
    assert _versions(server)["content/v1.17-docs/usage/gateway.md"] == "1.17"

    # A new folder makes `python-3.11` a version of `python`: the files the commit did not touch get it too.
    work.write("content/python/guide.md", "# Python\n\nInstall the interpreter, then the ingress tools.\n")
    work.commit()
    caplog.clear()
    code, _, err = run(capsys, *args)
    assert code == 0, err
    assert "versioned folders changed" in caplog.text and "(full)" in caplog.text
    versions = _versions(server)
    assert versions["content/python-3.11/guide.md"] == "3.11" and versions["content/python/guide.md"] is None
    python = [r for r in _search(server, "install the interpreter") if "guide.md" in r["metadata"]["path"]]
    assert [(r["metadata"]["path"], r["otherVersions"]) for r in python] == [("content/python/guide.md", ["3.11"])]
