"""Versioned documentation: which version of which page a document is, and which version is newest."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbsearch.services.documents.versions import detect_version, newest_first_key


@pytest.mark.parametrize(
    ("path", "version", "page"),
    [
        ("content/docs/2.21/concepts/scaling-jobs.md", "2.21", "content/docs/*/concepts/scaling-jobs.md"),
        ("content/docs/1.4.0/scalers/kafka.md", "1.4.0", "content/docs/*/scalers/kafka.md"),
        ("versioned_docs/version-3.1/intro.md", "3.1", "docs/intro.md"),  # Docusaurus: a version of docs/
        ("docs/v1.4/guide.md", "1.4", "docs/*/guide.md"),
        ("site/v2/guide.md", "2", "site/*/guide.md"),
        ("docs/2.x/guide.md", "2", "docs/*/guide.md"),
        ("docs/guide.md", None, "docs/guide.md"),
        ("docs/2024/retro.md", None, "docs/2024/retro.md"),  # a bare number is a year or a part, not a version
        ("docs/guide-2.1.md", None, "docs/guide-2.1.md"),  # the file name is never the version
        ("release-1.2/guide.md", "1.2", "*/guide.md"),
        # A version beside a name is a version only where the repository shows the layout, which one
        # path cannot: the writer says so (test_a_writer_can_name_the_version_itself; the operator reads
        # it from the siblings, tests/operator/sync/test_sync_versions.py).
        ("content/v1.16-docs/usage/ingress.md", None, "content/v1.16-docs/usage/ingress.md"),
        ("docs-2.21/guide.md", None, "docs-2.21/guide.md"),
        ("content/python-3.11/guide.md", None, "content/python-3.11/guide.md"),
        # Names with digits are names.
        ("python3-docs/guide.md", None, "python3-docs/guide.md"),
        ("content/2021-blog/post.md", None, "content/2021-blog/post.md"),
        ("k8s-1-docs/guide.md", None, "k8s-1-docs/guide.md"),
    ],
)
def test_the_common_layouts_are_recognised(path, version, page):
    assert detect_version("kb://x", {"path": path}) == (version, page)


def test_without_a_path_the_uri_says_it():
    found = detect_version("https://example.test/content/docs/2.9/deploy.md", {})
    assert found == ("2.9", "content/docs/*/deploy.md")


@pytest.mark.parametrize(
    ("path", "version", "page"),
    [
        # The first folder that names the version, in a layout the defaults do not know, is the version's.
        ("docs/next/a.md", "next", "docs/*/a.md"),
        ("docs/v2.21/a.md", "2.21", "docs/*/a.md"),
        ("versioned_docs/version-3.1/intro.md", "3.1", "docs/intro.md"),
        ("release-1.2/a.md", "1.2", "*/a.md"),
        # A version beside a name: a version of the copy in the folder of that name, which has no version.
        ("content/v1.16-docs/usage/ingress.md", "1.16", "content/docs/usage/ingress.md"),
        ("content/1.16-docs/usage/ingress.md", "1.16", "content/docs/usage/ingress.md"),
        ("docs-2.21/guide.md", "2.21", "docs/guide.md"),
        ("site/docs_v3.1.2/guide.md", "3.1.2", "site/docs/guide.md"),
        ("manual_2.21/a.md", "2.21", "manual/a.md"),
        ("docs/release-train-7/a.md", "7", "docs/release-train/a.md"),
        ("docs/user-1.2-guide/a.md", "1.2", "docs/user-guide/a.md"),
        # A folder that only contains the version's digits does not name it: the page is the path.
        ("docs/17/a.md", "7", "docs/17/a.md"),
        ("docs/2.21.1/a.md", "2.21", "docs/2.21.1/a.md"),
        ("docs/unstable/a.md", "stable", "docs/unstable/a.md"),
        ("docs/a-7.md", "7", "docs/a-7.md"),  # never the file name
    ],
)
def test_a_writer_can_name_the_version_itself(path, version, page):
    assert detect_version("kb://x", {"path": path, "version": version}) == (version, page)


def test_versions_order_as_versions_not_as_strings():
    versions = ["2.9", "2.21", "1.4.0", "2.10", None, "v3"]
    assert sorted(versions, key=newest_first_key) == [None, "v3", "2.21", "2.10", "2.9", "1.4.0"]


# Plain folder names: not `v2` (a version itself) nor `version`/`release` (`release-1.2` is a version itself).
_names = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True).filter(
    lambda n: re.fullmatch(r"v\d+", n) is None and n not in ("version", "release")
)
_versions = st.lists(st.integers(0, 99), min_size=2, max_size=3).map(lambda ns: ".".join(map(str, ns)))


@given(parent=_names, name=_names, rest=st.lists(_names, max_size=3), version=_versions, v=st.booleans())
def test_a_copy_with_its_version_given_is_a_version_of_the_current_page(parent, name, rest, version, v):
    current = "/".join([parent, name, *rest, "page.md"])
    prefix = "v" if v else ""
    for folder in (f"{prefix}{version}-{name}", f"{name}-{prefix}{version}", f"{name}_{prefix}{version}"):
        copy = "/".join([parent, folder, *rest, "page.md"])
        assert detect_version("kb://x", {"path": copy, "version": version}) == (version, current)
        assert detect_version("kb://x", {"path": copy}) == (None, copy)  # the path alone does not say
    assert detect_version("kb://x", {"path": current}) == (None, current)
    assert sorted([version, None], key=newest_first_key)[0] is None  # the current copy is the newest


# Folder names as docs repositories have them: `2021-blog`, `python3-docs`, `docs-1.2`, `k8s-1-docs`, `v2.x`.
_folders = st.from_regex(r"[0-9]{0,4}[-_]?[a-z]{1,8}[0-9]{0,4}([-_.][a-z0-9]{1,8}){0,3}", fullmatch=True)


@given(folders=st.lists(_folders, max_size=4))
def test_a_folder_is_a_version_by_its_path_only_when_its_whole_name_is_one(folders):
    path = "/".join([*folders, "page.md"])
    found = detect_version("kb://x", {"path": path})
    whole = [f for f in folders if re.fullmatch(r"(v|version-|release-)\d+(\.\d+)*(\.x)?", f, re.IGNORECASE)]
    assert found == (None, path) if not whole else found.version is not None
