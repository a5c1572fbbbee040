"""Inline markdown: the one code-span pattern and the one stripper, for embedded text, answers and quotes.

Every pattern is bounded: a construct (a code span, a link's text or target, an emphasised run,
a tag) longer than MAX_SPAN characters, or crossing a line end, is left as written. A regex
engine tries each pattern at every start position, so a bound of k keeps the work on a text of
n characters at most about k * n steps, whatever the text (many openers and no closers once made
these quadratic).
"""

from __future__ import annotations

import html
import re

__all__ = ["CODE_SPAN", "COMMENT", "IMAGE", "LINK", "MAX_SPAN", "REF_DEF", "SHORTCODE", "TAG", "plain", "readable"]

MAX_SPAN = 256

CODE_SPAN = re.compile(r"(`{1,16})[^\n]{1,256}?\1")
COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)  # an unclosed comment runs to the end: one match
SHORTCODE = re.compile(r"\{\{[<%].{0,2000}?[%>]\}\}|\{%.{0,2000}?%\}|\{!.{0,2000}?!\}", re.DOTALL)
IMAGE = re.compile(r"!\[([^\]\n]{0,256})\]\([^)\n]{0,1024}\)")
# A target may hold one level of parentheses: [text](https://example.test/a_(b)).
LINK = re.compile(r"\[([^\]\n]{1,256})\]\((?:[^()\n]|\([^()\n]{0,256}\)){0,1024}\)")
REF_LINK = re.compile(r"\[([^\]\n]{1,256})\]\[[^\]\n]{0,256}\]")
REF_DEF = re.compile(r"^ {0,3}\[[^\]\n]{1,256}\]:[ \t]+\S.*$", re.MULTILINE)
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]{1,2048})>")
# Only HTML's own tags: `<namespace>` in `kubectl -n <namespace>` is a placeholder, not markup.
_HTML_TAGS = (
    "a|abbr|b|blockquote|br|button|center|code|dd|details|div|dl|dt|em|figcaption|figure|font|h[1-6]|hr|i|iframe|img|"
    "input|kbd|label|li|mark|ol|p|path|picture|pre|s|section|small|source|span|strong|sub|summary|sup|svg|table|"
    "tbody|td|th|thead|tr|u|ul|video"
)
TAG = re.compile(r"</?(?:" + _HTML_TAGS + r")\b(?:\s[^<>]{0,2000})?/?>", re.IGNORECASE)
_STRONG = re.compile(r"(\*\*|__)(?=\S)([^\n]{1,256}?)(?<=\S)\1")
_EMPHASIS_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])([^\n]{1,256}?)(?<=[^\s*])\*(?![\w*])")
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![\w_])_(?=[^\s_])([^\n]{1,256}?)(?<=[^\s_])_(?![\w_])")
_STRIKE = re.compile(r"~~([^\n]{1,256}?)~~")
_SPACES = re.compile(r"[ \t]+")
_CODE_MARK = "\x00"  # stands in for an inline code span while the text around it is cleaned
_MARKED = re.compile(f"{_CODE_MARK}(\\d+){_CODE_MARK}")


def readable(text: str) -> str:
    """What a reader reads as words: no comments, shortcodes, HTML tags, link or image targets.

    Emphasis and inline code stay as written (the embedder reads them as well as a person does).
    """
    text = COMMENT.sub("", text)
    text = SHORTCODE.sub("", text)
    text = IMAGE.sub(r"\1", text)
    text = LINK.sub(r"\1", text)
    text = REF_DEF.sub("", text)
    return TAG.sub("", text)


def plain(text: str) -> str:
    """Inline markdown as text: links and images by their text, no emphasis, tags or entities.

    Inline code is kept as written, backticks included: it is code, and what is inside it is not
    markdown. NUL characters are dropped (they mark code spans while the rest is cleaned).
    """
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"{_CODE_MARK}{len(spans) - 1}{_CODE_MARK}"

    text = CODE_SPAN.sub(keep, text.replace(_CODE_MARK, ""))
    text = readable(text)
    for _ in range(2):  # a link inside emphasis, or emphasis inside a link
        text = LINK.sub(r"\1", text)
        text = REF_LINK.sub(r"\1", text)
        text = _STRONG.sub(r"\2", text)
        text = _EMPHASIS_STAR.sub(r"\1", text)
        text = _EMPHASIS_UNDERSCORE.sub(r"\1", text)
    text = _STRIKE.sub(r"\1", text)
    text = AUTOLINK.sub(r"\1", text)
    text = html.unescape(text)
    text = _SPACES.sub(" ", text).strip()
    return _MARKED.sub(lambda m: spans[int(m.group(1))], text)
