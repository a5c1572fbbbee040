"""The docs stay findable and true: every page is on the README's map, every relative link lands,
and the configuration page documents every environment variable both programs read, with its default."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "operations" / "configuration.md").read_text()
DOC_PAGES = sorted((REPO / "docs").rglob("*.md"))
# Every markdown file whose relative links are checked: the front page, the docs, the bench notes, the chart's.
LINKED_FILES = [
    REPO / "README.md",
    *DOC_PAGES,
    *sorted((REPO / "bench").glob("*.md")),
    REPO / "charts/knowledge-base/README.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def settings_classes():
    from kboperator.settings import OperatorSettings
    from kbsearch.settings import Settings

    return [(Settings, "SEARCHSVC_"), (OperatorSettings, "KBOPERATOR_")]


def documented_default(variable: str) -> str | None:
    row = re.search(rf"^\| `{variable}` \| ([^|]*) \|", CONFIGURATION, re.MULTILINE)
    return row.group(1).strip() if row else None


def expected_default(field) -> str:
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None or value == []:
        return "—"
    return f"`{value}`"


@pytest.mark.parametrize(("settings_class", "prefix"), settings_classes())
def test_every_setting_is_documented_with_its_default(settings_class, prefix):
    wrong = {}
    # The service's settings come in sections; its variables stay flat (Settings.variables()).
    fields = settings_class.variables() if hasattr(settings_class, "variables") else settings_class.model_fields
    for name, field in fields.items():
        variable = f"{prefix}{name.upper()}"
        if documented_default(variable) != expected_default(field):
            wrong[variable] = (documented_default(variable), expected_default(field))
    assert wrong == {}


def test_every_setting_is_documented_once():
    rows = re.findall(r"^\| `((?:SEARCHSVC|KBOPERATOR)_[A-Z0-9_]+)` \|", CONFIGURATION, re.MULTILINE)
    assert sorted({r for r in rows if rows.count(r) > 1}) == []


def test_readme_names_the_two_commands():
    assert "make run" in README and "make test" in README


def test_every_docs_page_is_on_the_readme_map():
    assert DOC_PAGES, "docs/ has pages"
    mapped = {(REPO / target).resolve() for target in LINK.findall(README)}
    missing = [str(page.relative_to(REPO)) for page in DOC_PAGES if page.resolve() not in mapped]
    assert missing == []


def anchors(page: Path) -> set[str]:
    """The fragment ids GitHub gives a page's headings (lower case, punctuation dropped, spaces to dashes)."""
    ids: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"^#{1,6} (.*)$", line)
        if heading:
            text = heading.group(1).strip().lower()
            slug = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN").replace(" ", "-")
            base, n = slug, 1
            while slug in ids:
                slug, n = f"{base}-{n}", n + 1
            ids.add(slug)
    return ids


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", LINKED_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_land(page: Path):
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        lands = resolved.exists() and not (fragment and resolved.suffix == ".md" and fragment not in anchors(resolved))
        if not lands:
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", [REPO / "README.md", *DOC_PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_tables_are_not_cut_by_blank_lines(page: Path):
    """A blank line inside a table ends it: the rows after it render as a paragraph of pipes."""
    lines = page.read_text().splitlines()
    cut = [
        i + 1
        for i in range(2, len(lines))
        if lines[i].startswith("|")
        and not lines[i - 1].strip()
        and lines[i - 2].startswith("|")
        and not (i + 1 < len(lines) and re.match(r"^\|[-| :]+\|$", lines[i + 1]))
    ]
    assert cut == []
