"""Snippets: escaped first, then marked."""

from __future__ import annotations

import re

from kbsearch.console.highlight import highlight, query_terms, snippet


def test_terms_are_marked_at_word_starts_case_insensitively() -> None:
    assert (
        str(highlight("Logging and the catalog log", "LOG")) == "<mark>Logging</mark> and the catalog <mark>log</mark>"
    )


def test_markup_in_the_text_and_the_query_is_escaped_before_marking() -> None:
    marked = str(highlight("<b>script</b> & <script>x</script>", "<script>"))
    assert marked == (
        "&lt;b&gt;<mark>script</mark>&lt;/b&gt; &amp; &lt;<mark>script</mark>&gt;x&lt;/<mark>script</mark>&gt;"
    )
    assert "<b>" not in marked and "<script" not in marked


def test_a_snippet_is_a_window_around_the_first_match() -> None:
    text = " ".join(f"word{i}" for i in range(200)) + " needle " + " ".join(f"tail{i}" for i in range(200))
    cut = str(snippet(text, "needle"))
    assert cut.startswith("… ") and cut.endswith(" …") and "<mark>needle</mark>" in cut
    assert len(cut) < 340


def test_short_words_stop_words_and_duplicates_are_not_terms() -> None:
    assert query_terms("a Deploy deploy of k8s") == ["deploy", "k8s"]
    assert query_terms("How do I roll back with kubectl") == ["kubectl", "back", "roll"]


CHUNK = """## Rolling back

Use **`kubectl rollout undo`** as the [runbook](https://git.example.com/ops/runbook.md "Runbook") says,
with <b>care</b> &amp; patience.

```yaml
strategy:
  rollingUpdate:
    maxSurge: 25%
```

- first [item](a.md)
- second

| Setting | Value |
|---|---|
| maxSurge | 25% |
"""


def test_a_snippet_is_plain_text_links_by_their_text_code_with_its_lines() -> None:
    cut = str(snippet(CHUNK, "how to roll back with maxSurge"))
    assert "](" not in cut and "https://" not in cut and "**" not in cut and "&lt;b&gt;" not in cut
    assert "the runbook says" in cut and "care &amp; patience" in cut
    assert "<code>kubectl <mark>rollout</mark> undo</code>" in cut  # inline code without its backticks
    code = "strategy:\n  <mark>rollingUpdate</mark>:\n    <mark>maxSurge</mark>: 25%"
    assert f'<code class="snippet-code">{code}</code>' in cut
    assert "• first item" in cut and "<mark>maxSurge</mark> · 25%" in cut
    assert "## Rolling" not in cut  # the heading path is shown apart


def test_stop_words_are_never_marked() -> None:
    cut = str(snippet("How to roll back with the tool, and how it works.", "How to roll back with the tool"))
    assert re.findall(r"<mark>(\w+)</mark>", cut) == ["roll", "back", "tool"]
