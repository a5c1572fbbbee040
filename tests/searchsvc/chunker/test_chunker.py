"""Markdown chunker: sizes, headings, front matter, embed text and hostile input."""

from __future__ import annotations

import itertools
import random
import re
import time

import pytest

from kbsearch.chunker import MarkdownChunker, markdown
from kbsearch.chunker.embedtext import (
    MAX_CONTEXT_CHARS,
    MAX_HEADING_CHARS,
    MAX_TAGS_CHARS,
    embed_text,
)
from kbsearch.models import ParsedDocument
from tests.searchsvc.chunker.support import BAD_INPUT, HOSTILE, check_offsets, in_child, prose


def chunk_with(text: str, needle: str, doc: ParsedDocument):
    matches = [c for c in doc.chunks if needle in c.text]
    assert matches, f"no chunk contains {needle!r}"
    return matches[0]


# --- headings and code ---------------------------------------------------------------------


def test_headings_stay_with_their_text():
    # "# Guide" cannot share a chunk with the 790-char section after it; a heading alone is
    # not left behind as a chunk of its own.
    body = "# Guide\n\n## Setup\n\n" + "setup " * 131 + "\n\n## Usage\n\n" + prose(6)
    doc = MarkdownChunker(500, 800).chunk(body)
    check_offsets(doc)
    heading_line = re.compile(r"^ {0,3}#{1,6}(?:[ \t].*)?$")
    for c in doc.chunks:
        lines = [line for line in c.text.splitlines() if line.strip()]
        assert not heading_line.match(lines[-1]), f"chunk ends with a heading: {c.text[-60:]!r}"
    setup = chunk_with(body, "## Setup", doc)
    assert setup.text.startswith("## Setup\n\nsetup")
    assert setup.headings == ["Guide", "Setup"]
    assert "Guide" in setup.embed_text.splitlines()[0]


def test_a_trailing_heading_without_text_is_kept():
    doc = MarkdownChunker(50, 80).chunk("# Notes\n\n" + "word " * 15 + "\n\n## Still to write")
    assert doc.chunks[-1].text.endswith("## Still to write") or any(c.text == "## Still to write" for c in doc.chunks)


def test_code_fence_is_not_cut_when_it_fits():
    fence = "```python\n" + "\n".join(f"value_{i} = compute({i})  # step {i}" for i in range(20)) + "\n```"
    assert 600 < len(fence) < 800
    body = "## Code\n\n" + prose(3, lo=120, hi=140) + "\n\n" + fence + "\n\n" + prose(4)
    doc = MarkdownChunker(500, 800).chunk(body)
    check_offsets(doc)
    assert sum(fence in c.text for c in doc.chunks) == 1
    assert all(len(c.text) <= 800 for c in doc.chunks)


def test_a_fence_longer_than_max_is_split_within_bounds():
    fence = "```\n" + "\n".join(f"line {i} of a long listing" for i in range(100)) + "\n```"
    doc = MarkdownChunker(500, 800).chunk(fence)
    check_offsets(doc)
    assert len(doc.chunks) > 1 and all(len(c.text) <= 800 for c in doc.chunks)


GUIDE = """# Install

Install intro text.

## Helm

Helm intro text.

### Values

Values text.

## Kubectl

Kubectl text.

# Upgrade

Upgrade text.
"""


def test_heading_paths():
    doc = MarkdownChunker(10, 40).chunk(GUIDE)
    check_offsets(doc)
    paths = {
        needle: chunk_with(GUIDE, needle, doc).headings
        for needle in ("Install intro", "Helm intro", "Values text", "Kubectl text", "Upgrade text")
    }
    assert paths == {
        "Install intro": ["Install"],
        "Helm intro": ["Install", "Helm"],
        "Values text": ["Install", "Helm", "Values"],
        "Kubectl text": ["Install", "Kubectl"],
        "Upgrade text": ["Upgrade"],
    }


def test_heading_path_is_the_one_open_at_the_chunk_start():
    # Small sections merge: the chunk starts at "## A", so B (inside it) is not on its path.
    body = (
        "# Doc\n\nAn introduction long enough to fill a chunk by itself, more or less.\n\n"
        "## A\n\nalpha text.\n\n## B\n\nbeta text.\n\n## C\n\n" + "gamma " * 150
    )
    doc = MarkdownChunker(40, 100).chunk(body)
    check_offsets(doc)
    merged = chunk_with(body, "beta text", doc)
    assert merged.text.startswith("## A") and merged.headings == ["Doc", "A"]
    # A chunk that continues a long section carries that section's path.
    tail = doc.chunks[-1]
    assert not tail.text.startswith("#") and tail.headings == ["Doc", "C"]


def test_setext_headings():
    # A setext "---" heading is level 2, so "### Values" nests under it.
    body = "Install\n=======\n\nIntro.\n\nHelm chart\n----------\n\nHelm text.\n\n### Values\n\nValues text.\n"
    doc = MarkdownChunker(5, 30).chunk(body)
    assert doc.title == "Install"
    assert chunk_with(body, "Helm text", doc).headings == ["Install", "Helm chart"]
    assert chunk_with(body, "Values text", doc).headings == ["Install", "Helm chart", "Values"]


def test_dashes_that_are_not_setext_underlines():
    body = "# Top\n\nIntro.\n\n---\n\nAfter a thematic break.\n\n- item\n---\n\nAfter a list.\n"
    doc = MarkdownChunker(5, 30).chunk(body)
    assert {tuple(c.headings) for c in doc.chunks} == {("Top",)}


def test_headings_inside_code_fences_are_ignored():
    body = (
        "# Real\n\nIntro.\n\n"
        "```bash\n# not a heading\necho hi\nFake setext\n---\n```\n\n"
        "~~~~\n## not one either\n```\n### nor this\n~~~~\n\n"
        "## Second\n\nSecond text.\n\n"
        "```\n# unclosed fence runs to the end\n\n## never a heading\n"
    )
    doc = MarkdownChunker(5, 40).chunk(body)
    check_offsets(doc)
    assert {h for c in doc.chunks for h in c.headings} == {"Real", "Second"}
    assert chunk_with(body, "never a heading", doc).headings == ["Real", "Second"]


def test_atx_heading_details():
    body = "#Not a heading\n\n##   Spaced   out  ##\n\nText.\n\n####### seven is not a heading\n\n    # indented code\n"
    doc = MarkdownChunker(5, 200).chunk(body)
    assert {h for c in doc.chunks for h in c.headings} == {"Spaced out"}


# --- front matter and title ----------------------------------------------------------------


def test_yaml_front_matter():
    content = "---\ntitle: Helm Guide\ntags: [helm, kubernetes, helm]\nowner: team\n---\n# Body Heading\n\nBody text.\n"
    doc = MarkdownChunker(5, 200).chunk(content)
    assert doc.title == "Helm Guide"
    assert doc.tags == ["helm", "kubernetes"]
    assert doc.body == "# Body Heading\n\nBody text.\n"
    assert all("owner" not in c.text and "title:" not in c.text and "---" not in c.text for c in doc.chunks)
    check_offsets(doc)


def test_toml_front_matter_with_comma_separated_tags():
    content = '+++\ntitle = "Kubectl"\ntags = "a, b , ,c"\n+++\nBody text.\n'
    doc = MarkdownChunker(5, 200).chunk(content)
    assert (doc.title, doc.tags) == ("Kubectl", ["a", "b", "c"])
    assert [c.text for c in doc.chunks] == ["Body text."]


def test_yaml_front_matter_closed_by_dots_and_comma_tags():
    doc = MarkdownChunker(5, 200).chunk("---\ntags: ops, oncall\n...\nText.")
    assert (doc.title, doc.tags, doc.body) == (None, ["ops", "oncall"], "Text.")


@pytest.mark.parametrize(
    "front",
    [
        "---\ntitle: [unclosed\ntags: x\n---\n",  # YAML syntax error
        "---\n- a list\n- not a mapping\n---\n",  # valid YAML, not a mapping
        "+++\ntitle = \n+++\n",  # TOML syntax error
        "---\n" + "[" * 5000 + "\n---\n",  # deep nesting
    ],
)
def test_malformed_front_matter_is_kept_as_body_text(front):
    # Decision: unparseable front matter stays in the body, so its text is never lost; a leading
    # "---" is legal markdown too. The title then falls back to the first H1.
    content = front + "# Fallback Title\n\nBody text.\n"
    doc = MarkdownChunker(5, 2000).chunk(content)
    assert doc.title == "Fallback Title"
    assert doc.tags == []
    assert doc.body == content
    first_line = front.splitlines()[1][:20]
    assert any(first_line in c.text for c in doc.chunks)


def test_front_matter_after_blank_lines_or_a_bom_is_still_front_matter():
    # Hugo accepts blank lines before `+++`; a file that starts so must not lose its title.
    for content in ("\n---\ntitle: Late\n---\nText.", "\ufeff\n\n+++\ntitle = 'Late'\n+++\nText."):
        doc = MarkdownChunker(5, 200).chunk(content)
        assert (doc.title, doc.body) == ("Late", "Text.")
    # Text before the opener means it is no front matter: the block stays body text.
    doc = MarkdownChunker(5, 200).chunk("Intro.\n---\ntitle: Late\n---\nText.")
    assert "title: Late" in doc.body


def test_front_matter_without_a_closer_is_body_text():
    content = "---\ntitle: Open\n\nText."
    assert MarkdownChunker(5, 200).chunk(content).body == content


def test_empty_front_matter_and_non_string_title():
    doc = MarkdownChunker(5, 200).chunk("---\n---\n# H1 Title\n\ntext")
    assert doc.title == "H1 Title" and doc.body.startswith("# H1")
    doc = MarkdownChunker(5, 200).chunk("---\ntitle: 42\ntags: [1, ok]\n---\n# H1\n\ntext")
    assert (doc.title, doc.tags) == ("H1", ["ok"])


def test_title_falls_back_to_the_first_h1_outside_code():
    body = "Intro.\n\n## Second level\n\n```\n# In code\n```\n\n# Real Title #\n\nText.\n\n# Later H1\n"
    assert MarkdownChunker(5, 200).chunk(body).title == "Real Title"
    # No H1: the first heading of any level, then the file name made readable, never the URI.
    assert MarkdownChunker(5, 200).chunk("## Only H2\n\ntext").title == "Only H2"
    assert MarkdownChunker(5, 200).chunk("text", name="docs/operator-manual/high_availability.md").title == (
        "High availability"
    )
    assert MarkdownChunker(5, 200).chunk("text", name="https://x.test/docs/ops/_index.md").title == "Ops"
    assert MarkdownChunker(5, 200).chunk("text").title is None


def test_front_matter_only_gives_no_chunks():
    doc = MarkdownChunker().chunk("---\ntitle: Empty\n---\n\n  \n")
    assert doc.title == "Empty" and doc.chunks == []


@pytest.mark.parametrize("content", ["", "   ", "\n\n\t \n", "\r\n\r\n", "\ufeff  \n"])
def test_whitespace_only_gives_no_chunks(content):
    assert MarkdownChunker().chunk(content).chunks == []


# --- embed text ----------------------------------------------------------------------------


def test_embed_text_adds_title_path_and_tags_not_already_in_the_text():
    content = "---\ntitle: Operator Guide\ntags: [k8s, helm]\n---\n" + GUIDE
    doc = MarkdownChunker(10, 40).chunk(content)
    values = chunk_with(content, "Values text", doc)
    assert values.embed_text == "Operator Guide > Install > Helm\nTags: k8s, helm\n### Values\n\nValues text."
    helm = chunk_with(content, "Helm intro", doc)
    assert helm.embed_text.splitlines()[0] == "Operator Guide > Install"


def test_the_tags_line_costs_each_chunk_only_the_tags_it_keeps():
    # 6,500 tags (64 KB) used to be joined whole for every chunk, then clipped to one line.
    few, many = [f"tag{i:05d}" for i in range(10)], [f"tag{i:05d}" for i in range(6500)]
    line = next(x for x in embed_text(None, [], many, "Body.").splitlines() if x.startswith("Tags: "))
    assert line == "Tags: " + ", ".join(many)[: MAX_TAGS_CHARS - 7].rstrip() + "…" and len(line) == MAX_TAGS_CHARS

    def cost(tags: list[str]) -> float:
        started = time.perf_counter()
        for _ in range(200):
            embed_text(None, [], tags, "Body.")
        return time.perf_counter() - started

    assert min(cost(many) for _ in range(3)) < 3 * min(cost(few) for _ in range(3))


def test_embed_text_without_context_is_the_text():
    doc = MarkdownChunker(5, 200).chunk("Just a paragraph.")
    assert doc.chunks[0].embed_text == "Just a paragraph."


def test_embed_text_context_is_bounded():
    title = "T" * 1000
    tags = ", ".join(f"tag{i}" for i in range(100))
    headings = "".join(f"{'#' * level} {'heading ' * 40}{level}\n\n" for level in range(1, 7))
    content = f"---\ntitle: {title}\ntags: {tags}\n---\n{headings}" + "body " * 200
    doc = MarkdownChunker(500, 800).chunk(content)
    for c in doc.chunks:
        context = c.embed_text[: len(c.embed_text) - len(c.text)]
        assert len(context) <= MAX_CONTEXT_CHARS + MAX_TAGS_CHARS + 2
        assert all(len(h) <= MAX_HEADING_CHARS for h in c.headings)


# --- sizes, overlap, fingerprint -----------------------------------------------------------


def test_size_bounds_on_prose():
    chunker = MarkdownChunker(500, 800)
    text = prose(800)
    assert len(text) > 50_000
    doc = chunker.chunk(text)
    check_offsets(doc)
    sizes = [len(c.text) for c in doc.chunks]
    assert max(sizes) <= 800
    # Paragraphs are at most 250 chars, so a chunk can always be filled to the minimum, window
    # boundaries included; only the last one may be short.
    assert min(sizes[:-1]) >= 500


def test_a_fence_at_a_window_boundary_is_not_cut():
    chunker = MarkdownChunker(500, 800)
    lead = prose(400)[: 16_384 - 300].rstrip()
    fence = "```yaml\n" + "\n".join(f"key_{i}: value number {i}" for i in range(28)) + "\n```"
    assert 600 < len(fence) < 800
    doc = chunker.chunk(lead + "\n\n" + fence + "\n\n" + prose(20))
    check_offsets(doc)
    assert sum(fence in c.text for c in doc.chunks) == 1


def test_max_size_holds_on_mixed_markdown():
    rnd = random.Random(7)
    parts = []
    for i in range(60):
        parts.append(f"{'#' * rnd.randint(1, 4)} Section {i}")
        parts.append(prose(rnd.randint(1, 6), seed=i))
        if i % 3 == 0:
            parts.append("```\n" + "\n".join(f"cmd --flag {j}" for j in range(rnd.randint(1, 60))) + "\n```")
        if i % 4 == 0:
            parts.append("\n".join(f"- item {j} " + "word " * rnd.randint(1, 30) for j in range(8)))
    doc = MarkdownChunker(500, 800).chunk("\n\n".join(parts))
    check_offsets(doc)
    assert max(len(c.text) for c in doc.chunks) <= 800


def test_overlap():
    text = prose(60, lo=40, hi=90)
    plain = MarkdownChunker(200, 300, overlap=0).chunk(text).chunks
    assert all(b.start >= a.end for a, b in itertools.pairwise(plain))
    shared = MarkdownChunker(200, 300, overlap=60).chunk(text).chunks
    overlaps = [a.end - b.start for a, b in itertools.pairwise(shared)]
    # The splitter treats overlap as a maximum and uses it only where it fits the capacity.
    assert max(overlaps) > 0
    assert all(o <= 60 for o in overlaps)
    assert all(b.start > a.start for a, b in itertools.pairwise(shared))


def test_fingerprint_changes_with_every_setting(monkeypatch):
    base = MarkdownChunker(500, 800, 0).fingerprint
    assert base == MarkdownChunker(500, 800, 0).fingerprint
    others = {
        MarkdownChunker(501, 800, 0).fingerprint,
        MarkdownChunker(500, 801, 0).fingerprint,
        MarkdownChunker(500, 800, 10).fingerprint,
    }
    monkeypatch.setattr(markdown, "ALGORITHM_VERSION", markdown.ALGORITHM_VERSION + 1)
    others.add(MarkdownChunker(500, 800, 0).fingerprint)
    assert len(others) == 4 and base not in others


@pytest.mark.parametrize("args", [(0, 10, 0), (20, 10, 0), (10, 20, 10), (10, 20, -1)])
def test_invalid_settings(args):
    with pytest.raises(ValueError, match=r"^need [01] <= "):
        MarkdownChunker(*args)


def test_lone_surrogates_do_not_crash():
    doc = MarkdownChunker(5, 200).chunk("# T\n\nbad \ud800 char")
    assert "\ufffd" in doc.chunks[0].text


# --- hostile input -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_completes(name):
    report = in_child("run_hostile", name, timeout=300)  # each case takes about a second
    assert report["max_len"] <= 800
    if name.startswith(("one_mib_single", "one_mib_line", "binaryish")):
        assert report["chunks"] > 100
    if name == "one_mib_of_newlines":
        assert report["chunks"] == 0
    if "front_matter" in name:  # kept as body text, not parsed
        assert not report["front_matter"] and report["chunks"] >= 1
    if name == "crlf_line_endings":
        assert report["same_as_lf"] and not report["has_cr"]
        assert report["headings"] == ["Setext", "Title"]


# --- chunks that keep their meaning (algorithm v2) -------------------------------------------


def test_no_fragment_chunks_unless_the_whole_section_is_short():
    # A lone fence opener, a notice or a one-line note used to become chunks of their own.
    body = (
        "# Scalers\n\n"
        + prose(3, seed=2)
        + "\n\n> **Notice:**\n> This scaler is deprecated.\n\n"
        + prose(2, seed=3)
        + "\n\n```yaml\nkind: ScaledObject\n```\n\nThat is all.\n\n## Tiny\n\nShort.\n"
    )
    doc = MarkdownChunker(500, 800).chunk(body)
    check_offsets(doc)
    short = [c for c in doc.chunks if len(c.text) < 150]
    assert [c.text for c in short] == ["## Tiny\n\nShort."]  # its whole section is that short
    notice = chunk_with(body, "> **Notice:**", doc)
    assert "This scaler is deprecated." in notice.text


def test_a_code_block_stays_with_the_sentence_that_introduces_it():
    body = (
        "# Install\n\n"
        + prose(4, seed=4, lo=150, hi=180)
        + "\n\nRun the following command:\n\n```bash\nhelm install kb ./chart\n```\n"
    )
    doc = MarkdownChunker(200, 400).chunk(body)
    check_offsets(doc)
    code = chunk_with(body, "helm install kb", doc)
    assert "Run the following command:\n\n```bash" in code.text


def test_a_long_code_block_is_split_at_lines_and_each_part_reopened_with_its_fence():
    lines = [f"  key_{i}: value number {i}" for i in range(80)]
    body = "## Values\n\nSet these values in your chart:\n\n```yaml\nvalues:\n" + "\n".join(lines) + "\n```\n"
    doc = MarkdownChunker(500, 800).chunk(body)
    check_offsets(doc)
    parts = [c for c in doc.chunks if "key_" in c.text]
    assert len(parts) >= 3 and all(len(c.text) <= 800 for c in parts)
    assert parts[0].text.startswith("## Values\n\nSet these values in your chart:\n\n```yaml\nvalues:")
    for part in parts:
        assert part.text.endswith("\n```") and "```yaml\n" in part.text
        assert part.headings == ["Values"]
        assert "Set these values in your chart" in part.embed_text  # the lead-in travels with every part
    shown = "\n".join(line for c in parts for line in c.text.splitlines())
    assert all(line in shown for line in lines)  # no line lost, none cut
    # Balanced: no scrap of a last part.
    assert min(len(c.text) for c in parts) >= 150


def test_a_long_table_is_split_by_rows_repeating_its_header():
    header = "| Name | Default | Description |\n|---|---|---|"
    rows = [f"| option{i} | {i} | what option {i} is for, in a few words |" for i in range(60)]
    body = "## Options\n\n" + header + "\n" + "\n".join(rows) + "\n"
    doc = MarkdownChunker(500, 800).chunk(body)
    check_offsets(doc)
    parts = [c for c in doc.chunks if "option" in c.text]
    assert len(parts) >= 3
    for part in parts:
        assert header in part.text and len(part.text) <= 800
    assert sum(c.text.count("| option") for c in parts) == len(rows)


def test_admonitions_stay_whole():
    admonition = '!!! warning "Before you upgrade"\n    Back up the store first.\n    Then run the upgrade.'
    body = "# Upgrade\n\n" + prose(2, seed=5) + "\n\n" + admonition + "\n\n" + prose(6, seed=6)
    doc = MarkdownChunker(300, 500).chunk(body)
    check_offsets(doc)
    assert sum(admonition in c.text for c in doc.chunks) == 1


def test_front_matter_in_json_and_toml_after_a_bom_or_blank_lines():
    doc = MarkdownChunker(5, 200).chunk('{\n  "title": "From JSON",\n  "tags": ["a", "b"]\n}\n\nBody.')
    assert (doc.title, doc.tags, doc.body) == ("From JSON", ["a", "b"], "\nBody.")
    doc = MarkdownChunker(5, 200).chunk("\n\n+++\ntitle = 'Kafka'\n+++\n\n> **Notice:**\n>\n\nText of the page.")
    assert doc.title == "Kafka" and not any(c.text.startswith("+++") for c in doc.chunks)
    # Not front matter: an object that does not close on its own line stays body text.
    doc = MarkdownChunker(5, 200).chunk('{"a": 1} trailing\n\nBody.')
    assert doc.title is None and doc.body.startswith('{"a": 1}')


def test_shortcodes_comments_and_raw_html_stay_out_of_the_embedded_text():
    body = (
        '# Page\n\n<!-- an editor\'s note -->\n{{< tabs >}}\n<div class="note">Keep the '
        "[Helm chart](https://example.test/chart) values</div>\n{{% /tabs %}}\n{!docs/snippet.md!}\n\n"
        "Use `kubectl -n <namespace> get pods` to list them. ![diagram](img/arch.png)"
    )
    doc = MarkdownChunker(5, 800).chunk(body)
    embedded = "\n".join(c.embed_text for c in doc.chunks)
    for gone in ("editor's note", "{{<", "{{%", "{!", "<div", "https://example.test", "img/arch.png"):
        assert gone not in embedded
    for kept in ("Keep the", "Helm chart", "values", "<namespace>", "diagram"):
        assert kept in embedded
    assert "<!-- an editor's note -->" in doc.chunks[0].text  # shown as written


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_chunks_without_fragments_in_bounded_time(name):
    report = in_child("run_bad_input", name, timeout=120)  # the bound; each takes about a second here
    assert report["chunks"] > 0 and report["empty"] == 0
    assert report["max_len"] <= 800
    assert report["min_len"] >= 100


@pytest.mark.parametrize("width", [900, 5000])
def test_a_table_whose_header_is_wider_than_a_chunk_is_split_without_repeating_it(width):
    # It used to loop forever (negative room), each part carrying the whole header, until OOM.
    report = in_child("run_wide_table", str(width), timeout=120)  # takes milliseconds: a hang detector
    assert report["header_width"] >= width - 3
    assert report["max_len"] <= 800
    assert report["rows"] == 40 and report["headers"] == 1  # every row, the header once
    assert report["total"] <= 2 * report["input"]


def test_a_header_of_half_a_chunk_or_less_is_still_repeated():
    header = "| " + "x" * 180 + " |\n|" + "-" * 184 + "|"  # 371 characters
    rows = "\n".join(f"| row {i} value |" for i in range(80))
    doc = MarkdownChunker(500, 800).chunk(header + "\n" + rows + "\n")
    check_offsets(doc)
    assert len(doc.chunks) >= 3 and all(c.text.startswith(header) and len(c.text) <= 800 for c in doc.chunks)
