"""HTML to markdown (BeautifulSoup and markdownify): web pages, and the HTML docutils and mammoth write.

A page's main content is kept; navigation, headers, footers, sidebars, scripts and forms are not.
Nothing a page points at is fetched or read: an image is its alt text, and embedded or linked
resources (iframes, objects, embeds, media, links, base and meta elements) are dropped with their URLs.
"""

from __future__ import annotations

import re
from typing import Any

from bs4 import BeautifulSoup, Tag
from markdownify import MarkdownConverter

from kbsearch.convert.base import Converted, decode_utf8

__all__ = ["HtmlConverter", "html_to_markdown"]

# Never content: scripts, styles, embedded media and resources, and the page chrome around the article.
_DROPPED = (
    "script", "style", "noscript", "template", "svg", "canvas", "iframe", "frame", "frameset", "object",
    "embed", "applet", "audio", "video", "source", "track", "link", "meta", "base", "form", "button",
)  # fmt: skip
_CHROME = ("nav", "header", "footer", "aside")
_CHROME_ROLES = ("navigation", "banner", "contentinfo", "complementary", "search")
# Permalink markers Sphinx and MkDocs put beside every heading ("¶", "#").
_PERMALINKS = ("headerlink", "anchorjs-link", "anchor-link")
_BLANK_RUNS = re.compile(r"\n{3,}")


class _Markdown(MarkdownConverter):
    """markdownify, with images reduced to their alt text (no data URIs or paths in the index)."""

    def convert_img(self, el: Tag, text: str, parent_tags: Any) -> str:
        alt = str(el.get("alt") or "").strip()
        return alt if alt and "_inline" in parent_tags else (f"{alt}\n\n" if alt else "")


_NOT_LANGUAGES = frozenset({"code", "literal-block", "highlight", "notranslate", "sourcecode", "hljs", "doctest"})


def _code_language(el: Tag) -> str:
    """The language of a <pre>: `language-x`/`lang-x` classes, or Sphinx's and docutils' bare ones."""
    code = el.find("code")
    for node in (el, code) if isinstance(code, Tag) else (el,):
        for cls in node.get("class") or []:
            name = str(cls).removeprefix("language-").removeprefix("lang-").removeprefix("highlight-")
            if name.lower() not in _NOT_LANGUAGES and name.replace("-", "").isalnum():
                return name
    return ""


def _main_content(soup: BeautifulSoup, keep_chrome: bool) -> Tag:
    for name in _DROPPED:
        for node in soup.find_all(name):
            node.decompose()
    for node in soup.find_all(class_=list(_PERMALINKS)):
        node.decompose()
    for node in soup.find_all("span", class_="literal"):  # docutils' inline literal: code, as in markdown
        node.name = "code"
    main = soup.find("main") or soup.find(lambda tag: tag.get("role") == "main")
    articles = soup.find_all("article")
    root = main if isinstance(main, Tag) else (articles[0] if len(articles) == 1 else None)
    if root is None:
        body = soup.find("body")
        root = body if isinstance(body, Tag) else soup
    if not keep_chrome:
        for node in root.find_all(list(_CHROME)):
            # An article's own <header> often holds its H1: that one stays.
            if isinstance(node, Tag) and node is not root and not node.decomposed and not node.find("h1"):
                node.decompose()
        # Plain find_all, not CSS selectors: soupsieve's first compile costs ~0.1 s in every child.
        for node in root.find_all(lambda tag: tag.get("role") in _CHROME_ROLES):
            if not node.decomposed:
                node.decompose()
    return root


def html_to_markdown(html: str, *, whole: bool = False) -> tuple[str, str | None]:
    """(markdown, the page's <title>). `whole` keeps headers and footers (our own generated HTML)."""
    soup = BeautifulSoup(html, "html.parser")
    title_tag = soup.find("title")
    title = title_tag.get_text(" ", strip=True) if isinstance(title_tag, Tag) else None
    root = _main_content(soup, keep_chrome=whole)
    converter = _Markdown(
        heading_style="ATX",
        bullets="-",
        escape_underscores=False,
        escape_asterisks=False,
        escape_misc=False,
        code_language_callback=_code_language,
        table_infer_header=True,
    )
    try:
        text = str(converter.convert_soup(root))
    except RecursionError:  # nesting deeper than markdownify's recursion: the words, without structure
        text = root.get_text("\n\n", strip=True)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", text).strip() + "\n", title or None


class HtmlConverter:
    name = "html"
    version = 2  # 2: embeds, media and links to resources dropped
    binary = False

    def convert(self, data: bytes) -> Converted:
        text, title = html_to_markdown(decode_utf8(data, "the HTML page"))
        if title and not re.search(r"^# ", text, re.MULTILINE):
            text = f"# {title}\n\n{text}"  # the chunker takes a document's title from its first H1
        return Converted(text)
