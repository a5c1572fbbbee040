"""Versioned documentation: which version of which page a document is, and which version is newest."""

from __future__ import annotations

import pytest

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
        ("docs/release-train-7/a.md", "7", "docs/*/a.md"),
        ("docs/next/a.md", "next", "docs/*/a.md"),
        ("manual_2.21/a.md", "2.21", "*/a.md"),
        ("versioned_docs/version-3.1/intro.md", "3.1", "docs/intro.md"),
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
