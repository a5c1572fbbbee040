"""AsciiDoc (Antora, asciidoctor sites, AsciiDoc.py man pages): a small line-based converter for the common subset.

No maintained pure-Python AsciiDoc reader exists (asciidoc-py is GPL and asciidoctor is Ruby), so
this module maps what documentation sites use to markdown and drops the rest:
- `= Title`, `== Section` ... (and markdown-style `#` headings) -> `#`, `##` ...;
- two-line titles, a title underlined with `=`, `-`, `~`, `^` or `+` (levels 0 to 4) of its
  length +-2 (AsciiDoc.py's rule), at the start of a block -> `#` ... `#####`;
- `----` listing and `....` literal blocks -> fenced code, with the `[source,lang]` language;
  `[listing]`/`[literal]`/`[source]` paragraphs and indented literal paragraphs too;
- `|===` tables -> markdown tables (first row the header; `cols=` or the first line gives the width);
- `*`/`-` and `.` lists (nested by repetition), `term::`/`term;;` labeled lists with their indented
  definitions, `+` list continuations (the attached paragraph stays in the item);
- `NOTE:`/`TIP:`... and `[NOTE]` blocks -> a bold label and the text; `____` quotes -> `>`;
- links `https://x[text]`, `link:x[text]`, `xref:x[text]`, `<<id,text>>` -> their text with the URL;
- `image::x[alt]` -> its alt text; attribute entries, comments, block attributes (`[verse]`,
  `[synopsis]`), anchors -> left out.

Nothing is ever read or fetched: `include::`, `sys::`, `eval::`, `template::`, `video::` and
`audio::` lines and every other block macro are dropped, inside delimited blocks too, and
conditionals (`ifdef::` ...) are dropped while their content stays.

Bound: each input line is handled once per level of block nesting, and nesting is followed to
MAX_DEPTH levels only (deeper blocks are kept as text), so the work is O(MAX_DEPTH * n); every
regular expression runs in time linear in its line. The output is at most OUTPUT_FACTOR * n + 64
characters: a line gains a bounded prefix (a fence around a one-character literal line, a list
marker, `> ` per quote level up to MAX_DEPTH), attribute references expand by at most the input's
length in all, and a table has no more columns than cells
(tests/searchsvc/convert/test_convert_bounds.py holds both with Hypothesis).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kbsearch.convert.base import Converted, decode_utf8

__all__ = ["MAX_DEPTH", "OUTPUT_FACTOR", "AsciiDocConverter", "asciidoc_to_markdown"]

MAX_DEPTH = 4
OUTPUT_FACTOR = 16

_HEADING = re.compile(r"(={1,6}|#{1,6})[ \t]+(\S.*)")
_ATTRIBUTE = re.compile(r"^:!?[\w-]+!?:(\s.*)?$")
_BLOCK_ATTRS = re.compile(r"^\[([^\[\]]*)\]$")
_ANCHOR = re.compile(r"^\[\[[^\]]*\]\]$")
# Preprocessor lines, dropped wherever they are (a listing block too): nothing is included.
_PREPROCESSOR = re.compile(r"^(?:include|ifdef|ifndef|ifeval|endif)::")
# A block macro alone on its line: `name::target[attributes]` (image::, video::, sys::, toc::...).
_BLOCK_MACRO = re.compile(r"^([A-Za-z][\w-]*)::([^\s\[]*)\[([^\]]*)\]$")
_BLOCK_TITLE = re.compile(r"^\.([^.\s].*)$")
_ADMONITION = re.compile(r"^(NOTE|TIP|IMPORTANT|WARNING|CAUTION):\s+(.*)$")
_ADMONITIONS = ("NOTE", "TIP", "IMPORTANT", "WARNING", "CAUTION")
_UNORDERED = re.compile(r"^(\*{1,5}|-)\s+(.*)$")
_ORDERED = re.compile(r"^(\.{1,5})\s+(.*)$")
# The mark after a labeled list's term (`term::`, `term:::`, `term::::`, `term;;`), then the end of the
# line or the definition after a blank.
_LABEL_MARK = re.compile(r"(?::{2,4}|;;)(?=[ \t]|$)")
_DELIMITERS = {"----": "listing", "....": "literal", "====": "example", "****": "sidebar", "____": "quote",
               "++++": "pass", "////": "comment", "--": "open"}  # fmt: skip
_DELIMITER = re.compile(r"-{4,}|\.{4,}|={4,}|\*{4,}|_{4,}|\+{4,}|/{4,}|--")
# Two-line titles: the underline characters and their section levels (AsciiDoc.py).
_UNDERLINE_LEVELS = {"=": 0, "-": 1, "~": 2, "^": 3, "+": 4}
_UNDERLINE = re.compile(r"(=+|-+|~+|\^+|\++)[ \t]*")
# Inline macros: a match takes the whole target even without its `[...]` (then it is left as it
# is), and each class stops at the next `[`, `<` or `]`, so the search resumes past every scanned
# character and a line is matched in linear time, whatever it repeats (`http:http:...`).
_URL_MACRO = re.compile(r"\b(?:link:)?((?:https?|ftp|mailto):[^\s\[\]]*+|link:[^\s\[\]]++)(?:\[([^\[\]]*+)\])?")
_XREF_MACRO = re.compile(r"\bxref:([^\s\[\]]++)(?:\[([^\[\]]*+)\])?")
_XREF = re.compile(r"<<([^,<>]++)(?:,\s*+([^<>]++))?>>")
_INLINE_MACRO = re.compile(r"\b(?:kbd|btn|menu|footnote|pass|image|icon|anchor):([^\s\[\]]*+)(?:\[([^\[\]]*+)\])?")
_ATTR_REF = re.compile(r"\{[\w-]++\}")
_BACKTICKS = re.compile(r"`{3,}")


@dataclass
class _Document:
    """What the whole document shares: attributes, the section shift, the expansion budget."""

    shift: int
    budget: int  # characters attribute references may still add
    attributes: dict[str, str] = field(default_factory=dict)

    def inline(self, text: str) -> str:
        text = _ATTR_REF.sub(self._attribute, text)
        text = _URL_MACRO.sub(_url, text)
        text = _XREF_MACRO.sub(lambda m: m.group(0) if m.group(2) is None else m.group(2) or m.group(1), text)
        text = _XREF.sub(lambda m: (m.group(2) or m.group(1)).strip(), text)
        return _INLINE_MACRO.sub(_inline_macro, text)

    def _attribute(self, match: re.Match[str]) -> str:
        value = self.attributes.get(match.group(0)[1:-1])
        if value is None or len(value) - len(match.group(0)) > self.budget:
            return match.group(0)
        self.budget -= max(0, len(value) - len(match.group(0)))
        return value


def _inline_macro(match: re.Match[str]) -> str:
    if match.group(2) is None:
        return match.group(0)
    return (match.group(2) or match.group(1)).replace(">", "-")


def _url(match: re.Match[str]) -> str:
    if match.group(2) is None:
        return match.group(0)
    return f"[{match.group(2) or match.group(1)}]({match.group(1).removeprefix('link:')})"


def _table(lines: list[str], cols: int | None, doc: _Document) -> list[str]:
    cells: list[str] = []
    width = cols
    for line in lines:
        if not line.strip():
            continue
        parts = [p.strip() for p in re.split(r"(?<!\\)\|", line)]
        if line.lstrip().startswith("|"):
            parts = parts[1:]
        else:  # a continuation of the previous cell
            if cells:
                cells[-1] = f"{cells[-1]} {line.strip()}"
            continue
        width = width or len(parts)
        cells.extend(parts)
    if not cells or not width:
        return []
    width = min(width, len(cells))  # a `cols=` larger than the table adds no empty columns
    rows = [cells[i : i + width] for i in range(0, len(cells), width)]
    rows[-1] += [""] * (width - len(rows[-1]))
    out = ["| " + " | ".join(doc.inline(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    out.insert(1, "|" + "---|" * width)
    return out


def _cols(attrs: str) -> int | None:
    match = re.search(r'cols="?([^"\]]+)"?', attrs)
    if not match:
        return None
    spec = match.group(1)
    count = re.fullmatch(r"(\d{1,9})\*.*", spec.strip())
    return int(count.group(1)) if count else len(spec.split(","))


def _underline_level(title: str, underline: str) -> int | None:
    """The section level of `title` underlined by `underline`, or None if that is no two-line title."""
    if not _UNDERLINE.fullmatch(underline) or underline.strip() == "--" or len(underline.strip()) < 2:
        return None
    stripped = title.rstrip()
    if (
        not stripped
        or stripped[0] in " \t.[/:|*-+=<>"
        or not any(c.isalnum() for c in stripped)
        or abs(len(underline.rstrip()) - len(stripped)) > 2
    ):
        return None
    return _UNDERLINE_LEVELS[underline[0]]


def _has_document_title(lines: list[str]) -> bool:
    for i, line in enumerate(lines):
        if line.startswith("= ") and line[2:].strip():
            return True
        if i + 1 < len(lines) and lines[i + 1].startswith("==") and _underline_level(line, lines[i + 1]) == 0:
            return True
    return False


def asciidoc_to_markdown(source: str) -> str:
    """Markdown for `source` (see the module docstring for what maps to what, and the bound)."""
    lines = [line for line in source.split("\n") if not _PREPROCESSOR.match(line)]
    # Without a document title (`= Title`), the top sections (`==`) are the document's top level:
    # they become H1, as docutils promotes a lone top section, so the chunker finds a title.
    doc = _Document(shift=0 if _has_document_title(lines) else 1, budget=len(source))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(_convert(lines, doc, 0))).strip() + "\n"


def _heading(level: int, text: str, doc: _Document) -> list[str]:
    """Section `level` (0: the document title) as a markdown heading."""
    return ["", "#" * max(1, min(6, level + 1 - doc.shift)) + " " + doc.inline(text.strip()), ""]


def _convert(lines: list[str], doc: _Document, depth: int) -> list[str]:
    out: list[str] = []
    pending_attrs = ""  # the [..] line before a block
    block: tuple[str, str, list[str]] | None = None  # (kind, delimiter, lines)
    block_start = True  # at the start of a block: a two-line title may begin here
    in_item = False  # after a list item: indented lines and `+` continuations belong to it
    attached = False  # after a `+`: the next paragraph is part of the list item
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if block is not None:
            kind, delimiter, body = block
            if line.strip() != delimiter:
                body.append(line)
                continue
            block = None
            out.extend(_close_block(kind, body, pending_attrs, doc, depth))
            pending_attrs, block_start, in_item = "", True, False
            continue
        stripped = line.strip()
        if not stripped:
            out.append("")
            block_start, attached = True, False
            in_item = in_item and i < len(lines) and lines[i][:1] in (" ", "\t")
            continue
        if stripped.startswith("//") and not stripped.startswith("////"):
            continue
        if block_start and i < len(lines):
            level = _underline_level(line, lines[i])
            if level is not None:
                out.extend(_heading(level, line, doc))
                i += 1
                pending_attrs, in_item = "", False
                continue
        if _DELIMITER.fullmatch(stripped):
            key = stripped[:4] if len(stripped) >= 4 else stripped
            block = (_DELIMITERS.get(key, "open"), stripped, [])
            continue
        if stripped.startswith("|==="):
            body = []
            while i < len(lines) and not lines[i].strip().startswith("|==="):
                body.append(lines[i])
                i += 1
            i += 1
            out.extend(["", *_table(body, _cols(pending_attrs), doc), ""])
            pending_attrs, block_start = "", True
            continue
        if _ATTRIBUTE.match(stripped):
            name, _, value = stripped[1:].partition(":")
            doc.attributes[name.strip("!")] = value.strip()
            continue
        if stripped == "+":  # a list continuation: what follows stays in the item
            out.append("")
            attached = in_item
            block_start = True
            continue
        if _ANCHOR.match(stripped):
            continue
        macro = _BLOCK_MACRO.match(stripped)
        if macro:
            # Never read or fetched; an image leaves its alt text (its first attribute, if not `key=value`).
            alt = macro.group(3).split(",")[0].strip()
            if macro.group(1) == "image" and alt and "=" not in alt:
                out.append(doc.inline(alt))
            continue
        attrs = _BLOCK_ATTRS.match(stripped)
        if attrs:
            pending_attrs = attrs.group(1)
            continue
        style = pending_attrs.split(",")[0].strip().lower()
        if style in ("listing", "literal", "source"):  # a styled paragraph: code up to the blank line
            body = [line]
            while i < len(lines) and lines[i].strip():
                body.append(lines[i])
                i += 1
            out.extend(_close_block("listing", body, pending_attrs, doc, depth))
            pending_attrs = ""
            continue
        indented = line[:1] in (" ", "\t")
        if attached or (in_item and indented):  # an item's definition, attached paragraph or nested term
            out.append("  " + (_labeled(stripped, doc) or doc.inline(stripped)))
            block_start = False
            continue
        in_item = False
        if indented and block_start:  # a literal paragraph, up to the next blank line
            body = [line]
            while i < len(lines) and lines[i].strip():
                body.append(lines[i])
                i += 1
            margin = min(len(b) - len(b.lstrip()) for b in body)
            out.extend(_close_block("literal", [b[margin:].rstrip() for b in body], "", doc, depth))
            continue
        heading = _HEADING.fullmatch(line)
        if heading:
            marks, text = heading.group(1), heading.group(2).rstrip()
            closed = text.rstrip(marks[0])  # `== Title ==`, `# Title #`: the closing marks go, `C#` stays
            if closed[-1:] in (" ", "\t"):
                text = closed.rstrip()
            out.extend(_heading(len(marks) - 1, text, doc) if marks[0] == "=" else _markdown_heading(marks, text, doc))
            pending_attrs, block_start = "", True
            continue
        block_start = False
        title = _BLOCK_TITLE.match(stripped)
        if title and not _ORDERED.match(stripped):
            out.extend([f"**{doc.inline(title.group(1))}**", ""])
            block_start = True
            continue
        admonition = _ADMONITION.match(stripped)
        if admonition:
            out.append(f"**{admonition.group(1).title()}:** {doc.inline(admonition.group(2))}")
            continue
        item = _UNORDERED.match(stripped)
        if item:
            level = len(item.group(1)) if item.group(1) != "-" else 1
            out.append("  " * (level - 1) + "- " + doc.inline(item.group(2)))
            in_item = True
            continue
        item = _ORDERED.match(stripped)
        if item:
            out.append("   " * (len(item.group(1)) - 1) + "1. " + doc.inline(item.group(2)))
            in_item = True
            continue
        term = _labeled(stripped, doc)
        if term:
            out.append(term)
            in_item = True
            continue
        if style.upper() in _ADMONITIONS:
            out.append(f"**{style.title()}:** {doc.inline(stripped)}")
            pending_attrs = ""
            continue
        out.append(doc.inline(stripped))
    if block is not None:  # an unclosed block runs to the end, as asciidoctor reads it
        out.extend(_close_block(block[0], block[2], pending_attrs, doc, depth))
    return out


def _labeled(stripped: str, doc: _Document) -> str | None:
    """A labeled list's `term:: definition` line as a markdown item, or None if it is not one."""
    mark = _LABEL_MARK.search(stripped)
    label = stripped[: mark.start()] if mark else ""
    if not mark or not label.strip(" :;") or label.startswith(("http", "link:")) or "://" in label:
        return None
    definition = stripped[mark.end() :].strip()
    label = doc.inline(label.replace("*", "").strip())
    return f"- **{label}**" + (f": {doc.inline(definition)}" if definition else "")


def _markdown_heading(marks: str, text: str, doc: _Document) -> list[str]:
    return ["", marks + " " + doc.inline(text), ""]


def _close_block(kind: str, body: list[str], attrs: str, doc: _Document, depth: int) -> list[str]:
    style = attrs.split(",")[0].strip().lower()
    if kind == "comment":
        return []
    if kind in ("listing", "literal") or style in ("source", "listing", "literal"):
        parts = [p.strip() for p in attrs.split(",")]
        lang = parts[1] if len(parts) > 1 and parts[0].lower() == "source" else ""
        longest = max((len(m) for line in body for m in _BACKTICKS.findall(line)), default=2)
        ticks = "`" * (longest + 1)
        return ["", ticks + lang, *body, ticks, ""]
    if kind == "pass":
        return []
    # Nesting beyond MAX_DEPTH is kept as text: each level costs a pass over its lines.
    inner = _convert(body, doc, depth + 1) if depth < MAX_DEPTH else [line.strip() for line in body]
    if kind == "quote" or style == "quote":
        return ["", *[f"> {line}" if line else ">" for line in inner], ""]
    if style.upper() in _ADMONITIONS:
        return ["", f"**{style.title()}:**", "", *inner, ""]
    return ["", *inner, ""]


class AsciiDocConverter:
    name = "adoc"
    version = 2  # 2: two-line titles, labeled-list definitions, block macros never reach readers
    binary = False

    def convert(self, data: bytes) -> Converted:
        return Converted(asciidoc_to_markdown(decode_utf8(data, "the AsciiDoc file")))
