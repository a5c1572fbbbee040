"""AsciiDoc (Antora, asciidoctor sites): a small line-based converter for the common subset.

No maintained pure-Python AsciiDoc reader exists (asciidoc-py is GPL and asciidoctor is Ruby), so
this module maps what documentation sites use to markdown and drops the rest:
- `= Title`, `== Section` ... (and markdown-style `#` headings) -> `#`, `##` ...;
- `----` listing and `....` literal blocks -> fenced code, with the `[source,lang]` language;
- `|===` tables -> markdown tables (first row the header; `cols=` or the first line gives the width);
- `*`/`-` and `.` lists (nested by repetition), `term::` description lists;
- `NOTE:`/`TIP:`... and `[NOTE]` blocks -> a bold label and the text; `____` quotes -> `>`;
- links `https://x[text]`, `link:x[text]`, `xref:x[text]`, `<<id,text>>` -> their text with the URL;
- attribute entries, comments, `include::`, conditionals, anchors and block attributes -> left out.
"""

from __future__ import annotations

import re

from kbsearch.convert.base import Converted, decode_utf8

__all__ = ["AsciiDocConverter", "asciidoc_to_markdown"]

_HEADING = re.compile(r"^(={1,6}|#{1,6})\s+(.+?)\s*(?:=+)?$")
_ATTRIBUTE = re.compile(r"^:!?[\w-]+!?:(\s.*)?$")
_BLOCK_ATTRS = re.compile(r"^\[([^\[\]]*)\]$")
_ANCHOR = re.compile(r"^\[\[[^\]]*\]\]$")
_DIRECTIVE = re.compile(r"^(include|ifdef|ifndef|ifeval|endif|toc|image)::")
_BLOCK_TITLE = re.compile(r"^\.([^.\s].*)$")
_ADMONITION = re.compile(r"^(NOTE|TIP|IMPORTANT|WARNING|CAUTION):\s+(.*)$")
_UNORDERED = re.compile(r"^(\*{1,5}|-)\s+(.*)$")
_ORDERED = re.compile(r"^(\.{1,5})\s+(.*)$")
_DESCRIPTION = re.compile(r"^(.+?)(::|;;|:::)(\s+(.*))?$")
_DELIMITERS = {"----": "listing", "....": "literal", "====": "example", "****": "sidebar", "____": "quote",
               "++++": "pass", "////": "comment", "--": "open"}  # fmt: skip
_URL_MACRO = re.compile(r"\b(?:link:)?((?:https?|ftp|mailto):[^\s\[\]]*|link:[^\s\[\]]+)\[([^\]]*)\]")
_XREF_MACRO = re.compile(r"\bxref:([^\s\[\]]+)\[([^\]]*)\]")
_XREF = re.compile(r"<<([^,>]+)(?:,\s*([^>]+))?>>")
_INLINE_MACRO = re.compile(r"\b(?:kbd|btn|menu|footnote|pass|image|icon|anchor):([^\s\[\]]*)\[([^\]]*)\]")
_ATTR_REF = re.compile(r"\{[\w-]+\}")


def _inline(text: str, attributes: dict[str, str]) -> str:
    text = _ATTR_REF.sub(lambda m: attributes.get(m.group(0)[1:-1], m.group(0)), text)
    text = _URL_MACRO.sub(lambda m: f"[{m.group(2) or m.group(1)}]({m.group(1).removeprefix('link:')})", text)
    text = _XREF_MACRO.sub(lambda m: m.group(2) or m.group(1), text)
    text = _XREF.sub(lambda m: (m.group(2) or m.group(1)).strip(), text)
    return _INLINE_MACRO.sub(lambda m: (m.group(2) or m.group(1)).replace(">", "-"), text)


def _table(lines: list[str], cols: int | None, attributes: dict[str, str]) -> list[str]:
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
    rows = [cells[i : i + width] for i in range(0, len(cells), width)]
    rows[-1] += [""] * (width - len(rows[-1]))
    out = ["| " + " | ".join(_inline(c, attributes).replace("|", "\\|") for c in row) + " |" for row in rows]
    out.insert(1, "|" + "---|" * width)
    return out


def _cols(attrs: str) -> int | None:
    match = re.search(r'cols="?([^"\]]+)"?', attrs)
    if not match:
        return None
    spec = match.group(1)
    count = re.fullmatch(r"(\d+)\*.*", spec.strip())
    return int(count.group(1)) if count else len(spec.split(","))


def asciidoc_to_markdown(source: str) -> str:
    # Without a document title (`= Title`), the top sections (`==`) are the document's top level:
    # they become H1, as docutils promotes a lone top section, so the chunker finds a title.
    shift = 0 if re.search(r"^=\s+\S", source, re.MULTILINE) else 1
    out: list[str] = []
    attributes: dict[str, str] = {}
    lines = source.split("\n")
    pending_attrs = ""  # the [..] line before a block
    block: tuple[str, str, list[str]] | None = None  # (kind, delimiter, lines)
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
            out.extend(_close_block(kind, body, pending_attrs, attributes))
            pending_attrs = ""
            continue
        stripped = line.strip()
        if stripped.startswith("//") and not stripped.startswith("////"):
            continue
        if stripped in _DELIMITERS or re.fullmatch(r"(-{4,}|\.{4,}|={4,}|\*{4,}|_{4,}|\+{4,}|/{4,})", stripped):
            key = stripped[:4] if len(stripped) >= 4 else stripped
            block = (_DELIMITERS.get(key, "open"), stripped, [])
            continue
        if stripped == "|===" or stripped.startswith("|==="):
            body = []
            while i < len(lines) and not lines[i].strip().startswith("|==="):
                body.append(lines[i])
                i += 1
            i += 1
            out.extend(["", *_table(body, _cols(pending_attrs), attributes), ""])
            pending_attrs = ""
            continue
        attribute = _ATTRIBUTE.match(stripped)
        if attribute:
            name, _, value = stripped[1:].partition(":")
            attributes[name.strip("!")] = value.strip()
            continue
        if _ANCHOR.match(stripped) or _DIRECTIVE.match(stripped) or stripped == "+":
            if stripped == "+":
                out.append("")
            continue
        attrs = _BLOCK_ATTRS.match(stripped)
        if attrs:
            pending_attrs = attrs.group(1)
            continue
        heading = _HEADING.match(line)
        if heading:
            level = max(1, len(heading.group(1)) - (shift if heading.group(1)[0] == "=" else 0))
            out.extend(["", "#" * level + " " + _inline(heading.group(2), attributes), ""])
            pending_attrs = ""
            continue
        title = _BLOCK_TITLE.match(stripped)
        if title and not _ORDERED.match(stripped):
            out.append(f"**{_inline(title.group(1), attributes)}**")
            out.append("")
            continue
        admonition = _ADMONITION.match(stripped)
        if admonition:
            out.append(f"**{admonition.group(1).title()}:** {_inline(admonition.group(2), attributes)}")
            continue
        item = _UNORDERED.match(stripped)
        if item:
            level = len(item.group(1)) if item.group(1) != "-" else 1
            out.append("  " * (level - 1) + "- " + _inline(item.group(2), attributes))
            continue
        item = _ORDERED.match(stripped)
        if item:
            out.append("   " * (len(item.group(1)) - 1) + "1. " + _inline(item.group(2), attributes))
            continue
        term = _DESCRIPTION.match(stripped)
        if term and not stripped.startswith(("http", "link:")) and "://" not in term.group(1):
            definition = term.group(4) or ""
            out.append(f"- **{_inline(term.group(1), attributes)}**" + (f": {_inline(definition, attributes)}"))
            continue
        if pending_attrs.split(",")[0].strip().upper() in ("NOTE", "TIP", "IMPORTANT", "WARNING", "CAUTION"):
            out.append(f"**{pending_attrs.split(',')[0].strip().title()}:** {_inline(stripped, attributes)}")
            pending_attrs = ""
            continue
        if line.startswith((" ", "\t")) and stripped:  # a literal paragraph
            out.extend(["```", stripped, "```"])
            continue
        out.append(_inline(line.rstrip(), attributes))
    if block is not None:  # an unclosed block runs to the end, as asciidoctor reads it
        out.extend(_close_block(block[0], block[2], pending_attrs, attributes))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _close_block(kind: str, body: list[str], attrs: str, attributes: dict[str, str]) -> list[str]:
    style = attrs.split(",")[0].strip().lower()
    if kind == "comment":
        return []
    if kind in ("listing", "literal") or style in ("source", "listing", "literal"):
        parts = [p.strip() for p in attrs.split(",")]
        lang = parts[1] if len(parts) > 1 and parts[0].lower() == "source" else ""
        ticks = "```"
        while any(ticks in line for line in body):
            ticks += "`"
        return ["", ticks + lang, *body, ticks, ""]
    inner = asciidoc_to_markdown("\n".join(body)).rstrip("\n").split("\n")
    if kind == "quote" or style == "quote":
        return ["", *[f"> {line}" if line else ">" for line in inner], ""]
    if style.upper() in ("NOTE", "TIP", "IMPORTANT", "WARNING", "CAUTION"):
        return ["", f"**{style.title()}:**", "", *inner, ""]
    if kind == "pass":
        return []
    return ["", *inner, ""]


class AsciiDocConverter:
    name = "adoc"
    version = 1
    binary = False

    def convert(self, data: bytes) -> Converted:
        return Converted(asciidoc_to_markdown(decode_utf8(data, "the AsciiDoc file")))
