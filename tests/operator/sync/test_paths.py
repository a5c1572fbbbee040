"""Include/exclude globs: `**`, classes, braces, exclude always wins, bad globs refused up front."""

from __future__ import annotations

import pytest

from kboperator.errors import InvalidSpecError
from kboperator.sync.paths import PathFilter, compile_glob


@pytest.mark.parametrize(
    ("glob", "path", "expected"),
    [
        ("**/*.md", "a.md", True),
        ("**/*.md", "x/y/z/a.md", True),
        ("**/*.md", "a.mdx", False),
        ("**/*.md", "a.MD", False),
        ("*.md", "a.md", True),
        ("*.md", "docs/a.md", False),  # '*' never crosses '/'
        ("docs/**", "docs/a/b.txt", True),
        ("docs/**", "other/docs/a", False),
        ("docs/", "docs/a/b.md", True),  # a trailing '/' means everything below
        ("docs/**/*.md", "docs/a.md", True),  # '**' may match zero segments
        ("docs/**/*.md", "docs/x/y/a.md", True),
        ("a/**/b/*.md", "a/b/c.md", True),
        ("a/**/b/*.md", "a/x/b/c.md", True),
        ("a/**/b/*.md", "a/x/c.md", False),
        ("?.md", "a.md", True),
        ("?.md", "ab.md", False),
        ("[abc].md", "b.md", True),
        ("[!abc].md", "b.md", False),
        ("[!abc].md", "d.md", True),
        ("[a-c]*.md", "cat.md", True),
        ("**/*.{md,mdx}", "x/a.mdx", True),
        ("**/*.{md,mdx}", "x/a.txt", False),
        ("\\*.md", "*.md", True),
        ("\\*.md", "a.md", False),
        ("**", "any/thing/at/all", True),
        ("**/.github/**", ".github/workflows/a.md", True),
        ("a+b(c).md", "a+b(c).md", True),  # regex metacharacters are literal
        ("**/ünïcode/*.md", "x/ünïcode/é.md", True),
    ],
)
def test_glob_semantics(glob: str, path: str, expected: bool) -> None:
    assert compile_glob(glob).fullmatch(path) is expected


def test_exclude_always_wins() -> None:
    paths = PathFilter(["**/*.md", "drafts/keep.md"], ["drafts/**", "**/_*"])
    assert paths.matches("guide/intro.md")
    assert not paths.matches("drafts/keep.md")  # named by an include, still excluded
    assert not paths.matches("guide/_partial.md")
    assert not paths.matches("guide/intro.txt")


@pytest.mark.parametrize(
    "glob",
    [
        "",
        "/abs/*.md",
        "a//b",
        "docs/../secret",
        "./a.md",
        "a**",
        "**b/*.md",
        "[abc",
        "[]",
        "{a,b",
        "{a,{b}}",
        "x\\",
        "a\0b",
        "x" * 2000,
        "x" * 513,  # the CRD's maxLength
        "[z-a].md",
    ],
)
def test_bad_globs_are_refused(glob: str) -> None:
    with pytest.raises(InvalidSpecError, match="invalid glob"):
        PathFilter(["**/*.md"], [glob])


def test_a_path_that_is_not_utf8_is_matched_not_a_crash() -> None:
    """Regression: git paths that are not UTF-8 arrive with surrogates, which RE2 cannot encode."""
    name = (b"caf\xe9.md").decode("utf-8", "surrogateescape")
    assert PathFilter(["**/*.md"]).matches(name) and PathFilter(["caf?.md"]).matches(name)
    assert not PathFilter(["**/*.md"], ["caf*"]).matches(name)


def test_an_include_list_is_required() -> None:
    with pytest.raises(InvalidSpecError, match="include"):
        PathFilter([], [])


def test_classes_never_match_a_slash_and_no_regex_warning() -> None:
    assert not compile_glob("a[!x]b").fullmatch("a/b")
    assert not compile_glob("a[+-0]b").fullmatch("a/b")  # a range across '/' still never matches it
    assert compile_glob("a[+-0]b").fullmatch("a.b")
    with pytest.raises(InvalidSpecError):
        compile_glob("a[/]b")  # '/' separates segments, so this class is never closed
    assert compile_glob("[[&~|]").fullmatch("&")  # would be a nested set / set operation in `re`
