"""A document's markdown as its console page shows it: rendered by markdown-it-py, sanitised by nh3.

The body is untrusted (anyone who can push to a synced repository writes it). markdown-it renders
CommonMark with GFM tables and strikethrough, raw HTML passed through, mkdocs-style admonitions
(`!!! note`) and GitHub alerts (`> [!NOTE]`); then nh3 (the ammonia sanitiser) keeps only an allow
list of tags, attributes and classes: no script, style, event handler, form, frame or image, and
links only to http(s) and mailto, with rel="noopener noreferrer nofollow". Images are shown as
links to them: the console's CSP loads no remote image, and a document's relative ones are not
served here. Relative links resolve against the document's web address when it has one.

The hit's passage is the run of top-level blocks that its chunk's lines fall in: each of the three
runs (before, passage, after) is rendered and sanitised on its own, and the passage is wrapped in
the page's own markup, which no document can forge (the sanitiser drops ids and unknown classes).

Bounds: markdown nesting is capped at MAX_NESTING. Raw HTML is what could nest without bound, and
html5ever (under nh3) is superlinear in nesting depth: a body with more than MAX_RAW_TAGS tags of
raw HTML is rendered with its HTML shown as text. markdown-it's inline pass is superlinear on some
hostile text (runs of brackets): the page runs the render under a CPU budget (pages.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml as escape_html
from markdown_it.token import Token
from markupsafe import Markup
from mdit_py_plugins.admon import admon_plugin

__all__ = ["Passage", "RenderedDocument", "render_document"]

MAX_NESTING = 20
MAX_RAW_TAGS = 2000  # nh3 sanitises 2,000 nested raw tags in about 20 ms
_ALERT = re.compile(r"\[!(NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*(?:\n|$)", re.IGNORECASE)
_LINE_END = re.compile(r"\r\n|\r|\n")
_ALIGN = re.compile(r"text-align:(left|right|center)")
# mkdocs-material's kinds and their aliases, and GitHub's alerts.
ADMONITION_KINDS = frozenset(
    """
    note abstract summary tldr info todo tip hint important success check done question help faq warning
    caution attention failure fail missing danger error bug example quote cite seealso
    """.split()  # noqa: SIM905 - read better as text than as a list literal
)
_TAGS = nh3.ALLOWED_TAGS - {"img", "map", "area"}
_CLASSES = {
    "div": {"admonition", "is-collapsible", "collapsible-open", *ADMONITION_KINDS},
    "p": {"admonition-title"},
    "th": {"align-left", "align-right", "align-center"},
    "td": {"align-left", "align-right", "align-center"},
    "a": {"image-link"},
}
_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "ol": {"start"},
    "th": {"colspan", "rowspan", "scope"},
    "td": {"colspan", "rowspan"},
    "details": {"open"},
}


@dataclass(frozen=True, slots=True)
class Passage:
    """Where the hit's chunk lies in the body: character offsets [start, end)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RenderedDocument:
    html: Markup
    has_passage: bool  # False when no passage was asked for, or its lines are not in the body


def _alerts(state: Any) -> None:
    """GitHub's `> [!NOTE]` quotes become admonitions, as mkdocs' `!!! note` blocks are."""
    tokens: list[Token] = state.tokens
    for i, token in enumerate(tokens):
        if token.type != "blockquote_open" or i + 2 >= len(tokens) or tokens[i + 2].type != "inline":
            continue
        inline = tokens[i + 2]
        match = _ALERT.match(inline.content)
        if match is None:
            continue
        kind = match.group(1).lower()
        inline.content = inline.content[match.end() :]
        token.tag, token.attrs = "div", {"class": f"admonition {kind}"}
        closing = next(t for t in tokens[i:] if t.type == "blockquote_close" and t.level == token.level)
        closing.tag = "div"
        title = Token("inline", "", 0, content=kind.capitalize(), level=token.level + 2, children=[])
        heading = [Token("paragraph_open", "p", 1, attrs={"class": "admonition-title"}), title]
        tokens[i + 1 : i + 1] = [*heading, Token("paragraph_close", "p", -1)]


def _alignment(state: Any) -> None:
    """A table cell's alignment as a class: the CSP allows no style attribute."""
    for token in state.tokens:
        if token.type in ("th_open", "td_open"):
            match = _ALIGN.search(str(token.attrs.get("style", "")))
            token.attrs = {"class": f"align-{match.group(1)}"} if match else {}


def _images_as_links(self: Any, tokens: list[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    href = escape_html(str(token.attrs.get("src", "")))
    return f'<a class="image-link" href="{href}">Image: {escape_html(alt)}</a>'


def _parser(html: bool) -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": html, "maxNesting": MAX_NESTING}).enable(["table", "strikethrough"])
    md.use(admon_plugin)
    md.core.ruler.after("block", "kb_alerts", _alerts)
    md.core.ruler.after("kb_alerts", "kb_alignment", _alignment)
    md.add_render_rule("image", _images_as_links)
    return md


_PARSERS: dict[bool, MarkdownIt] = {}


def _parsed(text: str, env: dict[str, Any]) -> tuple[MarkdownIt, list[Token]]:
    """The tokens, with raw HTML passed through unless it holds more than MAX_RAW_TAGS tags."""
    md = _md(html=True)
    tokens = md.parse(text, env)
    if _raw_tags(tokens) > MAX_RAW_TAGS:
        env.clear()
        md = _md(html=False)
        tokens = md.parse(text, env)
    return md, tokens


def _md(html: bool) -> MarkdownIt:
    if html not in _PARSERS:
        _PARSERS[html] = _parser(html)
    return _PARSERS[html]


def _raw_tags(tokens: list[Token]) -> int:
    count = 0
    for token in tokens:
        if token.type == "html_block":
            count += token.content.count("<")
        for child in token.children or ():
            if child.type == "html_inline":
                count += 1
    return count


def _sanitiser(base: str | None) -> nh3.Cleaner:
    relative: Any = ("rewrite_with_base", base) if base else "deny"
    return nh3.Cleaner(
        tags=_TAGS,
        clean_content_tags={"script", "style", "template", "noscript"},
        attributes=_ATTRIBUTES,
        allowed_classes=_CLASSES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        url_relative=relative,
        strip_comments=True,
    )


def _top_blocks(tokens: list[Token]) -> list[tuple[int, int, tuple[int, int] | None]]:
    """The top-level blocks as (first token, past the last token, their lines)."""
    blocks: list[tuple[int, int, tuple[int, int] | None]] = []
    i = 0
    while i < len(tokens):
        start, depth = i, 0
        while True:
            depth += tokens[i].nesting
            i += 1
            if depth <= 0 or i >= len(tokens):
                break
        lines = tokens[start].map
        blocks.append((start, i, (lines[0], lines[1]) if lines else None))
    return blocks


def render_document(body: str, *, base: str | None, passage: Passage | None, title: str | None) -> RenderedDocument:
    """The body as sanitised HTML, its passage (if any) wrapped in <div class="passage" id="passage">.

    `base` is the document's web address (relative links resolve against it; without one they are
    dropped). A first `# heading` equal to `title` is left out: the page shows the title already.
    """
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    env: dict[str, Any] = {}
    md, tokens = _parsed(text, env)
    blocks = _top_blocks(tokens)
    if blocks and title and _is_title(tokens, blocks[0], title):
        blocks = blocks[1:]
    first_line, last_line = _lines(body, passage) if passage else (-1, -1)
    runs: list[list[Token]] = [[], [], []]  # before, passage, after
    for start, end, lines in blocks:
        if lines is not None and lines[0] <= last_line and lines[1] > first_line:
            run = 1
        elif runs[1] or (lines is not None and lines[0] > last_line >= 0):
            run = 2
        else:
            run = 0
        runs[run].extend(tokens[start:end])
    cleaner = _sanitiser(base)

    def html(run: list[Token]) -> str:
        return cleaner.clean(md.renderer.render(run, md.options, env)) if run else ""

    before, inside, after = (html(run) for run in runs)
    marked = f'<div class="passage" id="passage" tabindex="-1">{inside}</div>' if inside else ""
    return RenderedDocument(Markup(before + marked + after), has_passage=bool(inside))


def _lines(body: str, passage: Passage) -> tuple[int, int]:
    """The first and last line of the passage, counted as markdown-it counts them."""
    start = max(0, min(passage.start, len(body)))
    end = max(start + 1, min(passage.end, len(body)))
    first = len(_LINE_END.findall(body, 0, start))
    return first, first + len(_LINE_END.findall(body, start, end - 1))


def _is_title(tokens: list[Token], block: tuple[int, int, tuple[int, int] | None], title: str) -> bool:
    opening = tokens[block[0]]
    if opening.type != "heading_open" or opening.tag != "h1" or block[1] - block[0] != 3:
        return False
    return " ".join(tokens[block[0] + 1].content.split()) == " ".join(title.split())
