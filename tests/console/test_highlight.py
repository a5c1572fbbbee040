"""Snippets: escaped first, then marked."""

from __future__ import annotations

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


def test_short_words_and_duplicates_are_not_terms() -> None:
    assert query_terms("a Deploy deploy of k8s") == ["deploy", "k8s", "of"]
